"""`trainperf data prepare | info | verify` through the CLI's main(): outputs, exit codes, refusals."""

import json

import numpy as np

from trainperf.cli.main import main
from trainperf.data.indexed import IndexWriter


def _corpus(root, files=3, docs=40):
    root.mkdir()
    for f in range(files):
        (root / f"part{f}.jsonl").write_text("".join(json.dumps({"text": f"file {f} document {i} " * 5}) + "\n"
                                                     for i in range(docs)))
    return root


def test_prepare_info_verify(tmp_path, capsys):
    src = _corpus(tmp_path / "c")
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "ds"), "--tokenizer", "byte", "--workers", "1"]) == 0
    assert "in 3 pieces" in capsys.readouterr().out
    assert main(["data", "info", str(tmp_path / "ds"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["pieces"] == 3 and info["documents"]["train"] + info["documents"]["val"] == 120
    assert info["dtype"] == "uint16" and info["tokenizer"] == "byte"
    assert main(["data", "verify", str(tmp_path / "ds")]) == 0
    with open(tmp_path / "ds" / "pieces" / "t00001_train.bin", "r+b") as f:
        f.write(b"\xff\xff")
    assert main(["data", "verify", str(tmp_path / "ds")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "t00001_train.bin: checksum mismatch" in err


def test_info_on_a_megatron_prefix_and_a_blend(tmp_path, capsys):
    for name, n in (("a", 5), ("b", 7)):
        w = IndexWriter(tmp_path / name, np.dtype(np.uint16))
        w.add([np.arange(10)] * n)
        w.close()
    assert main(["data", "info", str(tmp_path / "a")]) == 0
    assert "5 documents, 5 sequences, 50 tokens, uint16" in capsys.readouterr().out
    assert main(["data", "info", f"1 {tmp_path / 'a'} 3 {tmp_path / 'b'}", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["documents"] == 12 and [p["weight"] for p in d["prefixes"]] == [1.0, 3.0]


def test_data_errors_are_one_line_with_exit_codes(tmp_path, capsys):
    w = IndexWriter(tmp_path / "p", np.dtype(np.uint16))
    w.add([np.arange(10)])
    w.close()
    (tmp_path / "p.idx").unlink()
    cases = [(["data", "info", str(tmp_path / "p")], 1, "p.idx: missing"),
             (["data", "info", f"0 {tmp_path / 'p'}"], 1, "must be a positive number"),
             (["data", "prepare", "nope", "--out", str(tmp_path / "o"), "--shard", "3/2"], 2, "--shard"),
             (["data", "verify", str(tmp_path)], 1, "meta.json: missing")]
    for argv, code, text in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and text in err and err.startswith("trainperf: error: "), err


def test_out_onto_a_foreign_folder_is_refused_and_left_intact(tmp_path, capsys):
    src = _corpus(tmp_path / "c", files=1, docs=300)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (mine / "sub").mkdir()
    (mine / "sub" / "data.csv").write_text("1,2")
    before = sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*"))
    for kind in (["--tokenizer", "byte"], ["--tokenizer", "byte", "--kind", "samples", "--seq-len", "8"]):
        # exit 1, as every refused --out (atomic.check_out: one rule for all outputs)
        assert main(["data", "prepare", str(src), "--out", str(mine), *kind]) == 1
        assert "trainperf did not make it" in capsys.readouterr().err
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*")) == before
    assert (mine / "thesis.tex").read_text() == "years of work"
    # a file, too
    assert main(["data", "prepare", str(src), "--out", str(mine / "thesis.tex"), "--tokenizer", "byte"]) == 1
    # a samples folder trainperf made is made again in place; a tokens dataset's folder is not a samples one
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"input": f"q{i} ", "output": f"a{i}"}) + "\n" for i in range(64)))
    rows = tmp_path / "rows"
    for _ in range(2):
        assert main(["data", "prepare", str(pairs), "--out", str(rows), "--tokenizer", "byte", "--kind", "samples",
                     "--seq-len", "8"]) == 0
    # a folder trainperf made is prepared again in place, with other settings too
    ds = tmp_path / "ds"
    assert main(["data", "prepare", str(src), "--out", str(ds), "--tokenizer", "byte"]) == 0
    assert main(["data", "prepare", str(src), "--out", str(ds), "--tokenizer", "bpe", "--vocab-size", "300"]) == 0
    assert json.loads((ds / "meta.json").read_text())["tokenizer"] == "bpe300"
