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
