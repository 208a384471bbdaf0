"""Atomic writes: the final name holds the old content or the whole new one, never a part, and no
temporary file is left behind either way."""

import json
import os
import stat

import pytest

from trainperf import atomic


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_write_replaces_whole_and_leaves_no_temp(tmp_path):
    p = tmp_path / "summary.json"
    p.write_text("old")
    atomic.write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1} and p.read_text().endswith("\n")
    atomic.write_text(p, "näive")
    assert p.read_bytes() == "näive".encode("utf-8")
    atomic.write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert _names(tmp_path) == ["summary.json"]


def test_failed_write_keeps_old_file(tmp_path):
    p = tmp_path / "plan.json"
    p.write_text("old")
    with pytest.raises(TypeError):
        atomic.write_json(p, {"x": object()})  # fails before anything is written
    with pytest.raises(TypeError):
        atomic.write_bytes(p, "not bytes")  # fails while writing the temporary file
    assert p.read_text() == "old" and _names(tmp_path) == ["plan.json"]


def test_written_file_follows_umask(tmp_path):
    old = os.umask(0o022)
    try:
        p = atomic.write_text(tmp_path / "index.html", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644  # not private, as a plain open() would make it


def test_atomic_path_keeps_suffix_and_cleans_up(tmp_path):
    out = tmp_path / "sweep.png"
    with atomic.atomic_path(out) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and not tmp.exists()
        tmp.write_bytes(b"png")
        assert not out.exists()  # nothing under the final name until the block ends
    assert out.read_bytes() == b"png"
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(out) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("writer crashed")
    assert out.read_bytes() == b"png" and _names(tmp_path) == ["sweep.png"]


def test_atomic_dir_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "sub" / "ds"
    with pytest.raises(RuntimeError):
        with atomic.atomic_dir(out) as tmp:
            (tmp / "train.bin").write_bytes(b"x")
            raise RuntimeError("tokenizer failed")
    assert _names(tmp_path / "sub") == []
    with atomic.atomic_dir(out) as tmp:
        (tmp / "meta.json").write_text("{}")
        (tmp / "nested").mkdir()
        (tmp / "nested" / "a").write_text("a")
    assert _names(out) == ["meta.json", "nested"] and _names(tmp_path / "sub") == ["ds"]


def test_atomic_dir_replaces_only_empty_unless_overwrite(tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    with atomic.atomic_dir(out) as tmp:  # an empty folder may be replaced (the export's --out)
        (tmp / "a").write_text("1")
    with pytest.raises(OSError):
        with atomic.atomic_dir(out) as tmp:
            (tmp / "b").write_text("2")
    assert _names(out) == ["a"] and _names(tmp_path) == ["hf"]
    with atomic.atomic_dir(out, overwrite=True) as tmp:
        (tmp / "b").write_text("2")
    assert _names(out) == ["b"] and _names(tmp_path) == ["hf"]


def test_sync_dir_accepts_a_folder(tmp_path):
    (tmp_path / "a").write_text("1")
    atomic.sync_dir(tmp_path)  # no error where folders can be fsynced, and silently none where not
    assert _names(tmp_path) == ["a"]


# ---- an OS refusal names the file the user knows, not the temporary one

def _write_big_under_a_file_size_limit(tmp_path, writer: str) -> str:
    """Run `writer` (Python source using `p` and `data`) in a child whose file-size limit is 64 KiB: a
    write past it fails with EFBIG, as one past a full disk fails with ENOSPC."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from trainperf import atomic
        from trainperf.errors import FileError
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        p, data = Path(sys.argv[1]) / "model.bin", b"x" * 200_000
        try:
            {writer}
        except FileError as e:
            print(e.errno, e)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("writer", ["atomic.write_bytes(p, data)",
                                    "with atomic.atomic_path(p) as t: t.write_bytes(data)",
                                    "with atomic.atomic_dir(p) as d: (d / 'shard.bin').write_bytes(data)"])
def test_a_failed_write_names_the_final_file_and_leaves_nothing(tmp_path, writer):
    msg = _write_big_under_a_file_size_limit(tmp_path, writer)
    assert msg.startswith("27 ") and "(ulimit -f) while writing" in msg and str(tmp_path / "model.bin") in msg, msg
    assert ".tmp" not in msg and list(tmp_path.iterdir()) == []


# ---- --out: a new folder, an empty one, or one trainperf made for the same kind of output

def test_out_rule(tmp_path, monkeypatch):
    from trainperf.errors import FileError, OutError

    assert atomic.check_out(tmp_path / "new" / "deeper", "report") == tmp_path / "new" / "deeper"
    (tmp_path / "empty").mkdir()
    atomic.check_out(tmp_path / "empty", "report")
    made = atomic.mark_out(tmp_path / "made", "report")
    (made / "index.html").write_text("x")
    assert atomic.out_kind(made) == "report"
    atomic.check_out(made, "report")  # trainperf's own report folder
    with pytest.raises(OutError, match="trainperf made it for report output"):
        atomic.check_out(made, "run")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(OutError, match="trainperf did not make it"):
        atomic.check_out(theirs, "report")
    with pytest.raises(OutError, match="is a file"):
        atomic.check_out(theirs / "notes.txt", "report")
    with pytest.raises(OutError, match="notes.txt is a file"):
        atomic.check_out(theirs / "notes.txt" / "out", "report")
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # as a folder of another user's (root passes chmod)
    with pytest.raises(FileError, match=f"permission denied while creating {tmp_path / 'new'}"):
        atomic.check_out(tmp_path / "new", "report")
    assert (theirs / "notes.txt").read_text() == "mine"


def test_a_temporary_name_tells_its_writer():
    """The host and pid in a temporary name come back out, dotted host names included; a name that
    is not a temporary for that file gives None."""
    import os
    import socket
    from pathlib import Path

    from trainperf.atomic import temp_name, temp_owner

    me = (socket.gethostname(), os.getpid())
    for suffix in (".tmp", ".tmp.json", ".tmpdir"):
        assert temp_owner(temp_name(Path("d/t00001.json"), suffix).name, "t00001.json") == me
    assert temp_owner(".t00001.json.node-3.cluster.example.17.0123abcd.tmp", "t00001.json") == ("node-3.cluster.example", 17)
    assert temp_owner(".t00001.json.node.17.0123abcd.tmp", "t00002.json") is None
    assert temp_owner("t00001.json", "t00001.json") is None
