import json

import numpy as np
import pytest

from trainperf.config import DataConfig
from trainperf.data.corpus import DataError, file_documents, stdlib_documents
from trainperf.data.pipeline import TrainBatches, build_eval_set, open_dataset, prepare, synthetic_documents
from trainperf.data.prepare import prepare_corpus
from trainperf.data.prepare import verify as prepared_verify
from trainperf.data.tokenizer import ByteTokenizer, load_tokenizer, train_bpe

TEXT = "def f(x):\n    return x * 2  # naïve ünïcode ✓\n"


def test_byte_tokenizer_round_trip():
    t = ByteTokenizer()
    assert t.decode(t.encode(TEXT)) == TEXT
    assert t.token_bytes().sum() == 256


def test_bpe_round_trip_and_token_bytes(tmp_path):
    docs = [d.text for d in synthetic_documents(8)] + [TEXT * 20]
    t = train_bpe(docs, 300)
    ids = t.encode(TEXT)
    assert t.decode(ids) == TEXT
    assert len(ids) < len(TEXT.encode())  # it merged something
    assert t.token_bytes()[ids].sum() == len(TEXT.encode("utf-8"))  # bytes per token are exact
    t.save(tmp_path / "tok.json")
    t2 = load_tokenizer(tmp_path / "tok.json")
    assert t2.encode(TEXT) == ids


def test_stdlib_split_is_the_documented_one():
    docs = stdlib_documents()
    val = [d for d in docs if d.is_val]
    assert 0.01 < len(val) / len(docs) < 0.08
    assert not any(d.id.startswith(("test/", "idlelib/", "lib2to3/")) for d in docs)


def test_prepared_folder_round_trip_verify_and_truncation(tmp_path):
    docs = synthetic_documents()
    out = prepare_corpus(tmp_path / "ds", "synthetic", "byte")
    data = open_dataset(out)
    assert data.train.dtype == np.uint16
    train_text = "".join(d.text for d in docs if not d.is_val)
    assert ByteTokenizer().decode(data.train.take(0, data.train.size)) == train_text
    assert prepared_verify(out) == []
    # corrupt one byte: opening stays cheap (no checksum), `data verify` names the file
    with open(out / "pieces" / "t00000_train.bin", "r+b") as f:
        f.seek(10)
        f.write(b"\xff")
    open_dataset(out)
    assert [p.split(": ")[1] for p in prepared_verify(out)] == ["checksum mismatch (corrupt file)"]
    # truncate: caught at open by size
    (out / "pieces" / "t00000_val.bin").write_bytes(b"\x00")
    with pytest.raises(DataError, match="t00000_val.bin: .*truncated"):
        open_dataset(out)


def test_user_corpora_txt_jsonl_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.txt").write_text("hello world\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "one"}) + "\n" + json.dumps({"text": "two"}) + "\n")
    pq.write_table(pa.table({"text": ["three", "four"]}), tmp_path / "c.parquet")
    docs = file_documents(tmp_path)
    assert [d.text for d in docs] == ["hello world\n", "one", "two", "three", "four"]
    (tmp_path / "d.jsonl").write_text("{bad json\n")
    with pytest.raises(DataError, match="d.jsonl:1: not valid JSON"):
        file_documents(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        file_documents(tmp_path / "missing")


def test_prepare_caches_by_fingerprint(tmp_path):
    cfg = DataConfig(synthetic=True, tokenizer="byte", cache_dir=str(tmp_path))
    a = prepare(cfg)
    b = prepare(cfg)
    assert a.path == b.path and a.fingerprint == b.fingerprint
    assert len(list(tmp_path.iterdir())) == 1


def test_batches_deterministic_and_sharded(tmp_path):
    data = prepare(DataConfig(synthetic=True, tokenizer="byte", cache_dir=str(tmp_path)))
    b = TrainBatches(data.train, 16, 8, seed=3)
    x, y = b.get(5)
    assert x.shape == (8, 16) and (x[:, 1:] == y[:, :-1]).all()
    assert (b.get(5)[0] == x).all()  # same step, same batch
    halves = [b.get(5, rank, 2)[0] for rank in (0, 1)]
    assert (np.concatenate(halves) == x.numpy()).all()  # ranks split the same global batch


def test_eval_set_counts_bytes(tmp_path):
    data = prepare(DataConfig(synthetic=True, tokenizer="byte", cache_dir=str(tmp_path)))
    ev = build_eval_set(data, 32, 1000)
    assert ev.target_bytes == ev.target_tokens  # byte tokenizer: one byte per token
    assert ev.target_bytes == 1000  # the byte tokenizer covers exactly the asked prefix
