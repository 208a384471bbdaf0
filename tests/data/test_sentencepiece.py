"""SentencePiece .model tokenizers (GPT-3's and Llama 2's kind), with a small model trained here."""

import io
import json

import numpy as np
import pytest

from trainperf.data.pipeline import open_dataset
from trainperf.data.prepare import prepare_corpus
from trainperf.data.tokenizer import load_tokenizer
from trainperf.errors import DataError

TEXT = "the quick brown fox jumps over the lazy dog, naïve café ✓\n"


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    import sentencepiece as spm

    buf = io.BytesIO()
    lines = [f"{TEXT} line {i} of the corpus" for i in range(300)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, vocab_size=400,
                                   model_type="bpe", byte_fallback=True, user_defined_symbols=["<eod>"], normalization_rule_name="identity",
                                   remove_extra_whitespaces=False,
                                   minloglevel=2)
    path = tmp_path_factory.mktemp("spm") / "c4_spm.model"
    path.write_bytes(buf.getvalue())
    return path


def test_round_trip_token_bytes_and_eod(spm_model):
    import sentencepiece as spm

    tok = load_tokenizer(spm_model)
    ref = spm.SentencePieceProcessor(model_file=str(spm_model))
    ids = tok.encode(TEXT + "日本")  # unseen characters: byte fallback
    assert ids == ref.encode(TEXT + "日本") and tok.decode(ids) == TEXT + "日本"
    assert tok.encode_batch([TEXT, "fox"]) == [ref.encode(TEXT), ref.encode("fox")]
    # bytes per token: the text's bytes plus the space SentencePiece puts before the first word
    assert tok.token_bytes()[ids].sum() == len((TEXT + "日本").encode()) + 1
    assert tok.token_id("<eod>") is not None and tok.token_id("no-such-piece") is None


def test_prepare_with_a_sentencepiece_model(tmp_path, spm_model):
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": f"{TEXT} number {i}"}) + "\n" for i in range(200)))
    out = prepare_corpus(tmp_path / "ds", str(src), str(spm_model), eod="<eod>")
    d = open_dataset(out)
    assert (out / "tokenizer.model").is_file() and d.meta["tokenizer"] == "file:c4_spm.model"
    eod = d.tokenizer.token_id("<eod>")
    train = np.asarray(d.train.take(0, d.train.size))
    assert int((train == eod).sum()) == d.meta["documents"]["train"]
    from trainperf.data.corpus import held_out

    texts = [f"{TEXT} number {i}" for i in range(200) if not held_out(f"c.jsonl#{i}")]
    assert [d.tokenizer.decode(d.train.document(k)[:-1]) for k in range(len(texts))] == texts


def test_a_bad_model_file_is_one_line(tmp_path):
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match="bad.model: not a valid SentencePiece model"):
        load_tokenizer(tmp_path / "bad.model")


def test_saved_under_the_name_it_loads_from(tmp_path, spm_model):
    from trainperf.data.tokenizer import tokenizer_file

    tok = load_tokenizer(spm_model)
    path = tmp_path / tokenizer_file(tok)
    tok.save(path)
    assert path.name == "tokenizer.model"
    assert load_tokenizer(path).encode("def main():") == tok.encode("def main():")
