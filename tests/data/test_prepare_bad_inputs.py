"""`trainperf data prepare` refusals: checked before anything is written, a complete dataset in --out
kept whole until its replacement is complete, one line and the right exit code (README's table)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainperf.cli.main import main

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _jsonl(path: Path, docs: int, text: str = "document {i} ") -> Path:
    path.write_text("".join(json.dumps({"text": text.format(i=i) * 8}) + "\n" for i in range(docs)))
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(capsys, text: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trainperf: error: ") and text in err, err
    return err


@pytest.fixture
def prepared(tmp_path, capsys):
    """A complete byte dataset of three files in `out`, and its files' bytes."""
    src = tmp_path / "c"
    src.mkdir()
    for f in range(3):
        _jsonl(src / f"part{f}.jsonl", 100, f"file {f} document {{i}} ")
    out = tmp_path / "out"
    assert main(["data", "prepare", str(src), "--out", str(out), "--tokenizer", "byte", "--workers", "1"]) == 0
    capsys.readouterr()
    return src, out, _snapshot(out)


def test_a_failed_prepare_leaves_the_dataset_in_out_whole(tmp_path, capsys, prepared):
    src, out, before = prepared
    (tmp_path / "foo.csv").write_text("a,b\n1,2\n")
    _jsonl(tmp_path / "small.jsonl", 1)
    (tmp_path / "garbage.json").write_text('{"x": 1')
    late = _jsonl(tmp_path / "late.jsonl", 300)
    late.write_text(late.read_text() + "{not json\n")  # found only while tokenizing
    cases = [([str(tmp_path / "foo.csv"), "--tokenizer", "byte"], 2, "foo.csv: unsupported corpus file type"),
             ([str(tmp_path / "small.jsonl"), "--tokenizer", "byte"], 1, "small.jsonl: the validation split is empty"),
             ([str(src), "--tokenizer", str(tmp_path / "garbage.json")], 1, "garbage.json: "),
             ([str(src), "--tokenizer", "byte", "--eod", "<|eot|>"], 2, "--eod"),
             ([str(late), "--tokenizer", "byte"], 1, "late.jsonl:301: not valid JSON")]
    for args, code, text in cases:
        assert main(["data", "prepare", *args, "--out", str(out), "--workers", "1"]) == code, args
        _one_line(capsys, text)
        # the old dataset is untouched (a staging folder beside it may keep finished pieces)
        assert {k: v for k, v in _snapshot(out).items() if not k.startswith(".next-")} == before, args
        assert main(["data", "verify", str(out)]) == 0 and main(["data", "info", str(out)]) == 0
    # a prepare that succeeds replaces it and leaves no staging folder
    assert main(["data", "prepare", str(src), "--out", str(out), "--tokenizer", "bpe", "--vocab-size", "300",
                 "--workers", "1"]) == 0
    assert json.loads((out / "meta.json").read_text())["tokenizer"] == "bpe300"
    assert not [p for p in out.iterdir() if p.name.startswith(".next-")]
    assert main(["data", "verify", str(out)]) == 0


def test_a_changed_file_keeps_the_old_dataset_until_its_piece_is_made(tmp_path, capsys, prepared):
    src, out, before = prepared
    kept = {p.name: p.stat().st_ino for p in (out / "pieces").iterdir() if p.name.startswith(("t00000", "t00002"))}
    changed = src / "part1.jsonl"
    good = changed.read_text()
    changed.write_text(good + "{not json\n")
    assert main(["data", "prepare", str(src), "--out", str(out), "--tokenizer", "byte", "--workers", "1"]) == 1
    _one_line(capsys, "part1.jsonl:101: not valid JSON")
    assert {k: v for k, v in _snapshot(out).items() if not k.startswith(".next-")} == before
    changed.write_text(good + json.dumps({"text": "one more"}) + "\n")
    assert main(["data", "prepare", str(src), "--out", str(out), "--tokenizer", "byte", "--workers", "1"]) == 0
    assert main(["data", "verify", str(out)]) == 0
    assert json.loads((out / "meta.json").read_text())["documents"]["train"] + \
        json.loads((out / "meta.json").read_text())["documents"]["val"] == 301
    # the unchanged files' pieces are the same files, not made again
    assert {p.name: p.stat().st_ino for p in (out / "pieces").iterdir() if p.name in kept} == kept
    assert not [p for p in out.iterdir() if p.name.startswith(".next-")]


@pytest.mark.parametrize("args, code, text", [
    (["--tokenizer", "byte", "--eod", "<|eot|>"], 2, "--eod"),
    (["--tokenizer", "GARBAGE"], 1, "garbage.json: "),
    (["--tokenizer", "byte", "--vocab-size", "999"], 2, "--vocab-size"),
    (["--tokenizer", "byte", "--vocab-size", "4096"], 2, "--vocab-size"),  # the default's value, typed
    (["--tokenizer", "byte", "--seq-len", "64"], 2, "--seq-len"),
    (["--tokenizer", "byte", "--kind", "samples", "--seq-len", "8", "--eod", "x"], 2, "--eod"),
    (["--tokenizer", "byte", "--kind", "samples", "--seq-len", "8", "--shard", "0/2"], 2, "--shard"),
])
def test_refusals_write_nothing(tmp_path, capsys, args, code, text):
    src = _jsonl(tmp_path / "c.jsonl", 100)
    (tmp_path / "garbage.json").write_text("not json")
    args = [str(tmp_path / "garbage.json") if a == "GARBAGE" else a for a in args]
    out = tmp_path / "new" / "out"
    assert main(["data", "prepare", str(src), "--out", str(out), *args]) == code
    _one_line(capsys, text)
    assert not (tmp_path / "new").exists()


def test_an_unsupported_file_type_writes_nothing(tmp_path, capsys):
    (tmp_path / "foo.csv").write_text("text\nhello\n")
    assert main(["data", "prepare", str(tmp_path / "foo.csv"), "--out", str(tmp_path / "o"), "--tokenizer", "byte"]) == 2
    _one_line(capsys, "foo.csv: unsupported corpus file type")
    assert not (tmp_path / "o").exists()


def test_an_empty_validation_file_is_named(tmp_path, capsys):
    src = _jsonl(tmp_path / "big.jsonl", 100)
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["data", "prepare", str(src), "--val", str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "o"),
                 "--tokenizer", "byte"]) == 1
    err = _one_line(capsys, "empty.jsonl: the validation split is empty")
    assert "big.jsonl" not in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("path", ["", "   "])
def test_info_on_an_empty_path_is_one_line(capsys, path):
    assert main(["data", "info", path]) == 1
    _one_line(capsys, "names no dataset")


def test_skipped_files_of_a_folder_are_reported(tmp_path, capsys):
    src = tmp_path / "c"
    src.mkdir()
    _jsonl(src / "a.jsonl", 100)
    (src / "notes.csv").write_text("1,2")
    (src / "README").write_text("hi")
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "o"), "--tokenizer", "byte"]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 files" in err and "README" in err and "notes.csv" in err


def test_a_full_disk_is_one_line_naming_the_file(tmp_path):
    """A write refused part-way (here the file size limit, as a full disk refuses it) ends in one line
    naming the piece, exit 1, and no dataset presented as complete."""
    src = _jsonl(tmp_path / "c.jsonl", 400)
    out = tmp_path / "o"
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); from trainperf.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "data", "prepare", str(src), "--out", str(out), "--tokenizer",
                        "byte", "--workers", "1"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC}, timeout=300)
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("trainperf: error: "), p.stderr
    assert "t00000_train.bin" in p.stderr and "Traceback" not in p.stderr
    assert not (out / "meta.json").exists()
    assert not [f for f in (out / "pieces").iterdir() if f.name.startswith(".")]  # no temporary left
