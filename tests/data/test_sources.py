"""Token data read as it is (Megatron prefixes, folders of them, blends) and corpus files refused in one line."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainperf.config import DataConfig
from trainperf.data.blend import BlendBatches, BlendOrder
from trainperf.data.corpus import file_documents
from trainperf.data.indexed import IndexWriter
from trainperf.data.pipeline import eval_set, prepare, train_batches
from trainperf.data.samples import read_samples
from trainperf.data.tokenizer import ByteTokenizer, train_bpe
from trainperf.errors import DataError

SRC = str(Path(__file__).resolve().parents[2] / "src")
TEXTS = [f"document {i}: " + "some words of text " * (i % 7 + 1) for i in range(400)]


def _prefix(path, tok, texts=TEXTS):
    w = IndexWriter(path, np.dtype(np.uint16))
    w.add([tok.encode(t) for t in texts])
    return w.close()


def test_train_from_a_megatron_prefix_with_a_tokenizer_file(tmp_path):
    tok = train_bpe(TEXTS, 300)
    tok.save(tmp_path / "tok.json")
    _prefix(tmp_path / "c4_text_document", tok)
    _prefix(tmp_path / "val_text_document", tok, TEXTS[:20])
    cfg = DataConfig(corpus=str(tmp_path / "c4_text_document"), val=str(tmp_path / "val_text_document"),
                     tokenizer=str(tmp_path / "tok.json"), sampler="gpt")
    data = prepare(cfg)
    assert data.vocab_size == 300 and data.meta["documents"] == {"train": 400, "val": 20}
    x, y = train_batches(data, 16, 4, seed=1).get(0)
    assert x.shape == (4, 16) and (x[:, 1:] == y[:, :-1]).all()
    ev = eval_set(data, 16, eval_bytes=200)
    assert 200 <= ev.target_bytes < 260  # nats per byte: the validation tokens decoded to count bytes
    assert ev.inputs[0][0].tolist() == [t for x in TEXTS[:20] for t in tok.encode(x)][:16]  # in order
    # no data.val: documents held out by a hash of their index
    cfg.val = ""
    held = prepare(cfg)
    assert held.meta["val_source"] == "hash split"
    assert 0 < held.meta["documents"]["val"] < 40 and sum(held.meta["documents"].values()) == 400
    # without a tokenizer the vocabulary is unknown: one line, naming the fix
    cfg.tokenizer = "bpe"
    with pytest.raises(DataError, match="carries no tokenizer; set data.tokenizer"):
        prepare(cfg).vocab_size  # noqa: B018


def test_a_blend_draws_in_proportion_to_its_weights(tmp_path):
    tok = ByteTokenizer()
    _prefix(tmp_path / "a", tok, [t.upper() for t in TEXTS])
    _prefix(tmp_path / "b", tok)
    cfg = DataConfig(corpus=f"0.25 {tmp_path / 'a'} 0.75 {tmp_path / 'b'}", val=str(tmp_path / "b"), tokenizer="byte")
    data = prepare(cfg)
    batches = train_batches(data, 32, 40, seed=0)
    assert isinstance(batches, BlendBatches)
    x, _ = batches.get(0)
    upper = sum(bytes(r.tolist()).decode(errors="replace").isupper() for r in x)
    assert upper == 10  # Megatron's greedy blending: exactly 25% of 40 from the first source



def test_blending_order_equals_megatron_core(mcore):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import helpers
    weights = np.array([0.2, 0.5, 0.3])
    which, nth = np.zeros(1000, dtype=np.int16), np.zeros(1000, dtype=np.int64)
    helpers.build_blending_indices(which, nth, weights, 3, 1000, False)
    b = BlendOrder([2.0, 5.0, 3.0])  # normalised as Megatron does
    got = [b.source_of(k) for k in range(1000)]
    assert [w for w, _ in got] == which.tolist() and [n for _, n in got] == nth.tolist()


def test_cli_run_from_a_prefix(tmp_path):
    tok = ByteTokenizer()
    _prefix(tmp_path / "c", tok)
    (tmp_path / "tok.json").write_text(json.dumps({"trainperf_tokenizer": "byte"}))
    p = subprocess.run([sys.executable, "-m", "trainperf", "run", "tiny", "--max-steps", "2", "--no-progress",
                        "--out", str(tmp_path / "run"), "--set", f"data.corpus={tmp_path / 'c'}",
                        "--set", f"data.tokenizer={tmp_path / 'tok.json'}", "--set", "data.sampler=gpt",
                        "--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
                        "--set", "model.seq_len=32", "--set", "parallel.compile=false",
                        "--set", "train.precision=fp32", "--set", "data.eval_bytes=512"],
                       capture_output=True, text=True, env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}, timeout=300)
    assert p.returncode == 3, p.stderr  # stopped by --max-steps
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "aborted"
    # the run keeps the tokenizer data.tokenizer named (a prefix carries none), so sample/export find it
    assert json.loads((tmp_path / "run" / "tokenizer.json").read_text()) == {"trainperf_tokenizer": "byte"}


def test_bad_corpus_files_are_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "empty.json.gz").write_bytes(b"")
    with pytest.raises(DataError, match="empty.json.gz: empty file, not gzip data"):
        file_documents(tmp_path / "empty.json.gz")
    with gzip.open(tmp_path / "cut.json.gz", "wt") as f:
        f.write(json.dumps({"text": "x" * 5000}) + "\n")
    (tmp_path / "cut.json.gz").write_bytes((tmp_path / "cut.json.gz").read_bytes()[:30])
    with pytest.raises(DataError, match="cut.json.gz: cannot read"):
        file_documents(tmp_path / "cut.json.gz")
    pq.write_table(pa.table({"body": ["a"], **{f"c{i}": [i] for i in range(20)}}), tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"t.parquet: no 'text' column \(it has: body, c0, .*, \.\.\.\)$") as e:
        file_documents(tmp_path / "t.parquet")
    assert "\n" not in str(e.value)
    (tmp_path / "s.jsonl").write_text(json.dumps({"input_ids": ["1", "2"]}) + "\n")
    with pytest.raises(DataError, match="s.jsonl:1: 'input_ids' and 'labels' must hold integer token ids"):
        read_samples(tmp_path / "s.jsonl", None, 8)


@pytest.mark.parametrize("setting", ["data.corpus={d}/missing", "data.corpus=0.5 {d}/a 0.5 {d}/b", "data.corpus={d}/only_bin",
                                     "data.val={d}/missing", "data.tokenizer={d}/missing.json"])
def test_a_wrong_data_path_is_refused_before_the_run_folder_is_made(tmp_path, capsys, setting):
    from trainperf.cli.main import main

    (tmp_path / "only_bin.bin").write_bytes(b"")
    (tmp_path / "a.idx").write_bytes(b"")  # a prefix whose .bin is missing
    rc = main(["run", "tiny", "--no-progress", "--out", str(tmp_path / "run"), "--set", setting.format(d=tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and str(tmp_path) in err, err
    assert not (tmp_path / "run").exists()


def test_a_prepared_folder_refuses_another_tokenizer(tmp_path):
    """Its ids were written by its own tokenizer: a BPE given for byte ids trained on other text."""
    from trainperf.cli.main import main
    from trainperf.data.pipeline import open_tokens_source

    src = tmp_path / "c"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(60)))
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "ds"), "--tokenizer", "byte", "--workers", "1"]) == 0
    bpe = tmp_path / "bpe.json"
    train_bpe(TEXTS, 300).save(bpe)
    with pytest.raises(DataError, match="not the tokenizer .* was prepared with"):
        open_tokens_source(DataConfig(corpus=str(tmp_path / "ds"), tokenizer=str(bpe)))
    own = tmp_path / "ds" / "tokenizer.json"  # the folder's own, named: accepted
    assert open_tokens_source(DataConfig(corpus=str(tmp_path / "ds"), tokenizer=str(own))).tokenizer.vocab_size == 256
