"""Streaming prepare: pieces, resume after a failure or a kill, shards assembled, workers."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from trainperf.data.pipeline import open_dataset
from trainperf.data.prepare import prepare_corpus
from trainperf.errors import DataError

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _corpus(root: Path, files: int = 4, docs: int = 150, words: int = 40) -> Path:
    root.mkdir()
    rng = np.random.default_rng(0)
    vocab = ["alpha", "beta", "gamma", "delta", "naïve", "ünïcode", "✓", "\n"]
    for f in range(files):
        rows = ("".join(json.dumps({"text": " ".join(rng.choice(vocab, size=words))}) + "\n" for _ in range(docs)))
        (root / f"c4-train.{f:05d}.jsonl").write_text(rows)
    return root


def _tokens(path: Path) -> tuple[bytes, bytes, dict]:
    d = open_dataset(path)
    return (np.asarray(d.train.take(0, d.train.size)).tobytes(), np.asarray(d.val.take(0, d.val.size)).tobytes(),
            d.meta["documents"])


def _group_running(pgid: int) -> bool:
    for d in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _piece_files(out: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "pieces").iterdir()}


def test_every_document_once_and_workers_give_the_same_tokens(tmp_path):
    src = _corpus(tmp_path / "c")
    one = prepare_corpus(tmp_path / "one", str(src), "bpe", 300, workers=1)
    two = prepare_corpus(tmp_path / "two", str(src), "bpe", 300, workers=2)
    assert _tokens(one) == _tokens(two)
    d = open_dataset(one)
    docs = [json.loads(line)["text"] for f in sorted(src.iterdir()) for line in f.read_text().splitlines()]
    assert sum(d.meta["documents"].values()) == len(docs) == 600
    # the pieces hold exactly the corpus's text, nothing added (no --eod)
    text = d.tokenizer.decode(d.train.take(0, d.train.size)) + d.tokenizer.decode(d.val.take(0, d.val.size))
    assert sorted(text) == sorted("".join(docs))
    assert len(d.meta["pieces"]) == 4


def test_a_failed_prepare_rerun_keeps_finished_pieces_and_matches(tmp_path):
    src = _corpus(tmp_path / "c")
    ref = _tokens(prepare_corpus(tmp_path / "ref", str(src), "byte", workers=1))
    broken = src / "c4-train.00002.jsonl"
    good = broken.read_text()
    broken.write_text(good + "{not json\n")
    out = tmp_path / "out"
    with pytest.raises(DataError, match="c4-train.00002.jsonl:151: not valid JSON"):
        prepare_corpus(out, str(src), "byte", workers=1)
    assert not (out / "meta.json").exists()
    done = {k: v for k, v in _piece_files(out).items() if k.startswith(("t00000", "t00001"))}
    assert len(done) == 10 and not any(k.startswith("t00002") for k in _piece_files(out))
    broken.write_text(good)
    os.utime(broken, ns=(1, 1))  # the file changed: its piece is made again, the others kept
    assert _tokens(prepare_corpus(out, str(src), "byte", workers=1)) == ref
    assert {k: v for k, v in _piece_files(out).items() if k in done} == done


def test_killed_prepare_rerun_gives_the_uninterrupted_tokens(tmp_path):
    src = _corpus(tmp_path / "c", files=8, docs=400, words=200)
    ref = _tokens(prepare_corpus(tmp_path / "ref", str(src), "byte", workers=1))
    out = tmp_path / "out"
    # the prepare itself, without the CLI's imports (torch) that would only slow the test down
    cmd = [sys.executable, "-c", "import sys; from trainperf.data.prepare import prepare_corpus; "
           "prepare_corpus(sys.argv[1], sys.argv[2], 'byte', workers=2)", str(out), str(src)]
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and not list((out / "pieces").glob("*.json")):
        time.sleep(0.005)
    os.killpg(p.pid, signal.SIGKILL)  # the whole process group: the workers too, as a job kill does
    p.wait()
    while _group_running(p.pid):  # SIGKILL is sent; the workers take a moment to be gone
        time.sleep(0.01)
    files = _piece_files(out) if (out / "pieces").is_dir() else {}
    # a piece is finished when its record is written (its last step); a killed one may have renamed
    # its .bin/.idx into place already, and is made again
    recorded = {k[:-5] for k in files if k.endswith(".json")}
    finished = {k: v for k, v in files.items() if k.split("_")[0].split(".")[0] in recorded}
    print("pieces finished before the kill:", sorted(k for k in finished if k.endswith(".json")))
    assert _tokens(prepare_corpus(out, str(src), "byte", workers=2)) == ref
    assert {k: v for k, v in _piece_files(out).items() if k in finished} == finished  # kept, not redone
    assert not [p for p in (out / "pieces").iterdir() if p.name.startswith(".")]  # no half-written files left


def test_shards_then_assemble_without_rewriting_tokens(tmp_path):
    src = _corpus(tmp_path / "c", files=5)
    ref = _tokens(prepare_corpus(tmp_path / "ref", str(src), "byte", workers=1))
    out = tmp_path / "out"
    for i in range(3):  # e.g. a Slurm array of three tasks
        assert prepare_corpus(out, str(src), "byte", workers=1, shard=(i, 3)) is None
    made = _piece_files(out)
    assert len([k for k in made if k.endswith(".json")]) == 5 and not (out / "meta.json").exists()
    assert _tokens(prepare_corpus(out, str(src), "byte", workers=1)) == ref
    assert {k: v for k, v in _piece_files(out).items() if k in made} == made


def test_a_partial_set_of_pieces_is_not_assembled(tmp_path):
    src = _corpus(tmp_path / "c", files=2)
    out = tmp_path / "out"
    prepare_corpus(out, str(src), "byte", workers=1, shard=(0, 2))
    with pytest.raises(DataError, match="meta.json: missing"):
        open_dataset(out)


def test_a_live_writers_temporary_files_are_left_alone(tmp_path):
    """Concurrent --shard runs share pieces/: a rerun removes only dead writers' leftovers."""
    import socket

    from trainperf.data.prepare import _sweep_temp

    host = socket.gethostname()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = dead.stdout.strip()
    names = {"live": f".t00000_train.bin.{host}.{os.getpid()}.0123abcd.tmp",
             "dead": f".t00001_val.idx.{host}.{pid}.0123abcd.tmp",
             "other_host": ".t00002_train.bin.elsewhere.example.1.0123abcd.tmp", "not_ours": ".notes.txt",
             # a piece's record, written through atomic.write_json (a kill can land inside it too)
             "dead_record": f".t00003.json.{host}.{pid}.0123abcd.tmp",
             "live_record": f".t00004.json.{host}.{os.getpid()}.0123abcd.tmp",
             "other_host_record": f".t00005.json.elsewhere.example.{pid}.0123abcd.tmp"}
    for n in names.values():
        (tmp_path / n).write_bytes(b"x")
    _sweep_temp(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if not k.startswith("dead"))
