"""Fine-tuning samples (loss on labelled positions only) and separate validation files."""

import gzip
import json

import numpy as np
import pytest
import torch

from trainperf.config import DataConfig
from trainperf.data.corpus import DataError, file_documents
from trainperf.data.pipeline import eval_set, open_dataset, prepare, train_batches
from trainperf.data.samples import IGNORE, SampleData, pair_sample, read_samples, write_samples
from trainperf.data.prepare import prepare_corpus
from trainperf.data.prepare import verify as prepared_verify
from trainperf.data.tokenizer import ByteTokenizer
from trainperf.errors import UsageError
from trainperf.model.transformer import Transformer
from trainperf.config import ModelConfig

TOK = ByteTokenizer()


def test_pair_sample_scores_the_summary_and_cuts_the_document():
    s = pair_sample("a", TOK, "document text", "summary", row_len=10)
    assert len(s.ids) == 10
    assert TOK.decode(s.ids) == "doc" + "summary"  # the document is cut at its end
    assert s.labels == [IGNORE] * 3 + list(b"summary")
    long = pair_sample("b", TOK, "doc", "x" * 20, row_len=8)
    assert s.ids and long.labels[0] == IGNORE and len(long.ids) == 8  # one context token kept


def _jsonl(path, rows, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_read_pretokenized_and_text_pairs(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]},
                                  {"input_ids": [5, 6]}])  # no labels: every token scored
    _jsonl(tmp_path / "b.jsonl.gz", [{"input": "doc", "output": "sum"}], gz=True)
    got = read_samples(tmp_path, TOK, row_len=8)
    assert [s.id for s in got] == ["a.jsonl#0", "a.jsonl#1", "b.jsonl.gz#0"]
    assert got[0].labels == [IGNORE, IGNORE, 3, 4] and got[1].labels == [5, 6]
    assert got[2].labels == [IGNORE] * 3 + list(b"sum")


@pytest.mark.parametrize("row, msg", [
    ({"input_ids": [1, 2], "labels": [1]}, "same length"),
    ({"text": "x"}, "expected 'input_ids'"),
    ({"input_ids": list(range(9))}, "longer than the row length 8"),
])
def test_bad_rows_name_the_line(tmp_path, row, msg):
    f = _jsonl(tmp_path / "bad.jsonl", [{"input": "a", "output": "b"}, row])
    with pytest.raises(DataError, match=rf"bad.jsonl:2: .*{msg}"):
        read_samples(f, TOK, row_len=8)


def _written(tmp_path) -> SampleData:
    train = [pair_sample(f"t{i}", TOK, f"document {i} " * 3, f"summary {i}", 24) for i in range(10)]
    val = [pair_sample(f"v{i}", TOK, f"held out {i}", f"gist {i}", 24) for i in range(3)]
    write_samples(tmp_path / "ds", train, TOK, "test", 24, val)
    data = open_dataset(tmp_path / "ds")
    assert isinstance(data, SampleData)
    return data


def test_samples_folder_round_trip_and_corruption(tmp_path):
    data = _written(tmp_path)
    assert data.meta["val_source"] == "file" and data.train_ids.shape == (10, 24)
    assert TOK.decode(data.val_ids[1][:len("held out 1gist 1")]) == "held out 1gist 1"
    with open(tmp_path / "ds" / "train_labels.bin", "r+b") as f:
        f.write(b"\x01\x02")
    open_dataset(tmp_path / "ds")  # opening checks sizes only; the checksum is `data verify`'s
    assert [p.split("/")[-1] for p in prepared_verify(tmp_path / "ds")] == ["train_labels.bin: checksum mismatch (corrupt file)"]


def test_batches_cover_every_row_once_per_epoch_and_split_by_rank(tmp_path):
    data = _written(tmp_path)
    b = train_batches(data, 24, 5, seed=1)
    epoch = np.concatenate([b.rows(0), b.rows(1)])
    assert sorted(epoch) == list(range(10))
    assert not np.array_equal(np.concatenate([b.rows(2), b.rows(3)]), epoch)  # a new shuffle
    x, y = b.get(2)
    x0, y0 = b.get(2, rank=0, world=5)
    x4, _ = b.get(2, rank=4, world=5)
    assert torch.equal(x[:1], x0) and torch.equal(y[:1], y0) and torch.equal(x[4:], x4)
    # targets are the labels shifted by one; the last position is never scored
    r = b.rows(2)[0]
    assert y0[0, :-1].tolist() == data.train_labels[r, 1:].tolist() and y0[0, -1] == IGNORE
    assert b.scored_tokens(2) == int((y != IGNORE).sum())


def test_eval_set_counts_only_scored_tokens(tmp_path):
    data = _written(tmp_path)
    ev = eval_set(data, 24, eval_bytes=1, eval_samples=2)
    assert ev.samples == 2 and ev.inputs[0].shape == (2, 24)
    assert ev.target_tokens == len("gist 0") + len("gist 1")  # byte tokens: one per character
    assert ev.target_bytes == ev.target_tokens
    with pytest.raises(DataError, match="3 validation samples, fewer than eval.eval_samples=4"):
        eval_set(data, 24, 1, eval_samples=4)


def test_model_loss_ignores_unscored_positions():
    torch.manual_seed(0)
    m = Transformer(ModelConfig(n_layer=1, d_model=32, n_head=2, seq_len=8, vocab_size=256))
    x = torch.randint(0, 256, (2, 8))
    y = x.clone()
    y[:, :5] = IGNORE
    losses = m(x, y)
    assert torch.all(losses[:, :5] == 0)
    assert torch.allclose(losses[:, 5:], m(x, x)[:, 5:])


def test_prepare_samples_checks_the_kind(tmp_path):
    cfg = DataConfig(synthetic=True, tokenizer="byte", kind="samples", cache_dir=str(tmp_path))
    data = prepare(cfg, row_len=32)
    assert isinstance(data, SampleData) and data.meta["train"]["scored_tokens"] > 0
    with pytest.raises(DataError, match="holds samples data, but data.kind is 'tokens'"):
        prepare(DataConfig(corpus=str(data.path), kind="tokens"))


def test_token_corpus_with_a_separate_validation_file(tmp_path):
    (tmp_path / "train").mkdir()
    _jsonl(tmp_path / "train" / "c4-train.json.gz", [{"text": f"train doc {i}\n"} for i in range(20)], gz=True)
    _jsonl(tmp_path / "val.jsonl", [{"text": "validation one\n"}, {"text": "validation two\n"}])
    assert len(file_documents(tmp_path / "train")) == 20
    cfg = DataConfig(corpus=str(tmp_path / "train"), val=str(tmp_path / "val.jsonl"), tokenizer="byte",
                     cache_dir=str(tmp_path / "cache"))
    data = prepare(cfg)
    assert data.meta["val_source"] == "file" and data.meta["documents"] == {"train": 20, "val": 2}
    assert TOK.decode(data.val.take(0, data.val.size)) == "validation one\nvalidation two\n"  # in file order
    _jsonl(tmp_path / "h.jsonl", [{"text": "x" * 10} for i in range(400)])
    hashed = prepare_corpus(tmp_path / "h", str(tmp_path / "h.jsonl"), "byte")
    assert json.loads((hashed / "meta.json").read_text())["val_source"] == "hash split"
    # another validation file is another dataset
    _jsonl(tmp_path / "val2.jsonl", [{"text": "other\n"}])
    cfg.val = str(tmp_path / "val2.jsonl")
    assert prepare(cfg).fingerprint != data.fingerprint


def test_end_of_document_token_after_every_document(tmp_path):
    from trainperf.data.tokenizer import train_bpe

    docs = [f"text number {i}\n" for i in range(300)]
    corpus = _jsonl(tmp_path / "c.jsonl", [{"text": d} for d in docs])
    tok = train_bpe(docs, 300)
    tok.save(tmp_path / "tok.json")
    with pytest.raises(UsageError, match="'<eod>': not a token"):  # a bad argument: exit 2, nothing written
        prepare_corpus(tmp_path / "x", str(corpus), str(tmp_path / "tok.json"), eod="<eod>")
    from tokenizers import AddedToken

    tok.tok.add_special_tokens([AddedToken("<eod>", special=True)])
    tok.save(tmp_path / "tok.json")
    eod = tok.token_id("<eod>")
    data = open_dataset(prepare_corpus(tmp_path / "ds", str(corpus), str(tmp_path / "tok.json"), eod="<eod>"))
    assert int((np.asarray(data.train.take(0, data.train.size)) == eod).sum()) == data.meta["documents"]["train"]
    assert int(data.val.take(data.val.size - 1, 1)[0]) == eod and data.meta["eod"] == "<eod>"
    assert tok.token_bytes()[eod] == 0  # covers no text: nats per byte unchanged


def test_eval_documents_takes_the_whole_validation_file(tmp_path):
    (tmp_path / "train").mkdir()
    _jsonl(tmp_path / "train" / "t.jsonl", [{"text": f"train doc {i}\n"} for i in range(20)])
    val_rows = [{"text": f"validation document number {i}\n"} for i in range(5)]
    _jsonl(tmp_path / "val.jsonl", val_rows)
    data = prepare(DataConfig(corpus=str(tmp_path / "train"), val=str(tmp_path / "val.jsonl"), tokenizer="byte",
                              cache_dir=str(tmp_path / "cache")))
    ev = eval_set(data, 16, eval_bytes=1, eval_documents=5)
    total = sum(len(r["text"]) for r in val_rows)
    assert ev.samples == 5  # logged as eval_samples: documents, as the GPT-3 reference counts them
    assert ev.target_tokens == total - 1  # every token but the first (context only) is scored once
    with pytest.raises(DataError, match="holds 5 documents, eval.eval_documents=6"):
        eval_set(data, 16, 1, eval_documents=6)
