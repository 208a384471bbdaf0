"""Files and folders that appear whole or not at all.

Everything trainperf writes for a reader (summaries, reports, plans, shards, checkpoints' side files)
goes through a temporary name in the same folder, is flushed to disk, and is then renamed over the
final name: a crash or a full disk leaves the old file or none, never half of a new one. The
temporary names start with '.' and are unique per process, so concurrent writers (ranks) never
share one. This module imports only the standard library.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def _tmp_name(path: Path, suffix: str = ".tmp") -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable; not every OS/filesystem lets a folder be fsynced."""
    try:
        _fsync(path)
    except OSError:
        pass


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside `path` durable, for writers that rename by hand (a file several
    processes fill before one renames it)."""
    _fsync_dir(Path(path))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically (the folder must exist)."""
    path = Path(path)
    tmp = _tmp_name(path)
    try:
        # O_EXCL: never write through a stale name; mode 0o666 lets the umask decide, as open() does
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` atomically."""
    return write_bytes(path, text.encode(encoding))


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> Path:
    """Write `obj` as JSON (with a final newline) to `path` atomically."""
    return write_text(path, json.dumps(obj, indent=indent) + "\n")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """For writers that want a file name (safetensors, matplotlib): yield a temporary path with the
    same suffix as `path` (so format detection still works); when the block succeeds, it replaces
    `path`; when it fails, it is removed."""
    path = Path(path)
    tmp = _tmp_name(path, suffix=f".tmp{path.suffix}")
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a new empty folder beside `out` (parents created); when the block succeeds, its files
    are flushed and it is renamed to `out`, replacing an empty `out`, or a full one when `overwrite`;
    when it fails, it is deleted."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(out, suffix=".tmpdir")
    os.mkdir(tmp, 0o777)  # the umask decides, as for any folder (mkdtemp would make it private)
    try:
        yield tmp
        for root, _, files in os.walk(tmp):
            for name in files:
                _fsync(Path(root, name))
            _fsync_dir(Path(root))
        if overwrite and out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)  # a folder may replace only an empty folder: a full `out` raises OSError
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(out.parent)


def sync_dir(path: str | os.PathLike) -> None:
    """Make the renames inside folder `path` durable (where the OS lets a folder be fsynced)."""
    _fsync_dir(Path(path))
