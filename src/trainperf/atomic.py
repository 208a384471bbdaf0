"""Files and folders that appear whole or not at all.

Everything trainperf writes for a reader (summaries, reports, plans, shards, checkpoints' side files)
goes through a temporary name in the same folder, is flushed to disk, and is then renamed over the
final name: a crash or a full disk leaves the old file or none, never half of a new one. The
temporary names start with '.' and are unique per process, so concurrent writers (ranks) never
share one. An OSError on the way (disk full, permission) comes out as a `FileError` naming the final
file, not the temporary one.

It also states the rule for every output folder a user names (`--out`): `check_out` and `mark_out`;
and reads a JSON object back with a one-line error (`read_json`).
This module imports only the standard library and `trainperf.errors` (a leaf).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from trainperf.errors import FileError, OutError, TrainperfError, describe_os_error, file_error


def temp_name(path: Path, suffix: str = ".tmp") -> Path:
    """The name of a temporary file that will become `path` (in its folder, hidden)."""
    # host and pid name the writer, so a later run can tell a killed writer's leftovers from a live
    # one's on a shared filesystem (temp_owner)
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")


def temp_owner(name: str, of: str) -> tuple[str, int] | None:
    """(host, pid) of the writer whose temporary file for the file named `of` is `name`, or None
    if `name` is not one."""
    m = re.fullmatch(re.escape(f".{of}.") + r"(.+)\.(\d+)\.[0-9a-f]{8}\.tmp[.\w]*", name)
    return (m.group(1), int(m.group(2))) if m else None


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
    tmp = temp_name(path)
    try:
        # O_EXCL: never write through a stale name; mode 0o666 lets the umask decide, as open() does
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, FileError):
            raise file_error(e, "writing", path) from e
        raise
    _fsync_dir(path.parent)
    return path


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` atomically."""
    return write_bytes(path, text.encode(encoding))


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> Path:
    """Write `obj` as JSON (with a final newline) to `path` atomically."""
    return write_text(path, json.dumps(obj, indent=indent) + "\n")


def read_json(path: str | os.PathLike, error: type[TrainperfError], object_only: bool = True) -> Any:
    """The JSON in `path` (a summary, a config, a plan), or `error` in one line naming the file:
    missing, unreadable, not JSON, or (`object_only`) JSON that is not an object."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: not readable JSON ({e})") from None
    if object_only and not isinstance(raw, dict):
        raise error(f"{path}: expected a JSON object, not a JSON {type(raw).__name__}")
    return raw


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """For writers that want a file name (safetensors, matplotlib): yield a temporary path with the
    same suffix as `path` (so format detection still works); when the block succeeds, it replaces
    `path`; when it fails, it is removed."""
    path = Path(path)
    tmp = temp_name(path, suffix=f".tmp{path.suffix}")
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, FileError):
            raise file_error(e, "writing", path) from e
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a new empty folder beside `out` (parents created); when the block succeeds, its files
    are flushed and it is renamed to `out`, replacing an empty `out`, or a full one when `overwrite`;
    when it fails, it is deleted."""
    out = Path(out)
    tmp = temp_name(out, suffix=".tmpdir")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(tmp, 0o777)  # the umask decides, as for any folder (mkdtemp would make it private)
    except OSError as e:
        raise file_error(e, "creating", out) from e
    try:
        yield tmp
        for root, _, files in os.walk(tmp):
            for name in files:
                _fsync(Path(root, name))
            _fsync_dir(Path(root))
        if overwrite and out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)  # a folder may replace only an empty folder: a full `out` raises OSError
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and not isinstance(e, FileError):
            # name the file as it will be called, not its temporary folder
            name = str(e.filename or "")
            where = out / os.path.relpath(name, tmp) if name.startswith(str(tmp)) else out
            raise file_error(e, "writing", where) from e
        raise
    _fsync_dir(out.parent)


def sync_dir(path: str | os.PathLike) -> None:
    """Make the renames inside folder `path` durable (where the OS lets a folder be fsynced)."""
    _fsync_dir(Path(path))


# ---- output folders

OUT_MARKER = ".trainperf"  # in every folder trainperf makes for a user's --out: {"kind": ...}


def out_kind(folder: str | os.PathLike) -> str | None:
    """The kind of output trainperf made `folder` for ("run", "report", "dataset", ...), None when it
    holds no readable marker."""
    try:
        kind = json.loads((Path(folder) / OUT_MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def check_out(out: str | os.PathLike, kind: str, flag: str = "--out") -> Path:
    """The one rule for a folder a user names as output, checked before anything is written: `out`
    may be a new folder (its nearest existing parent a writable folder), an empty folder, or a folder
    trainperf itself made for the same `kind` of output (its `OUT_MARKER`; `mark_out` writes it).
    Anything else is someone else's and is never written into, let alone replaced: a file or a
    foreign folder is an `OutError`, an unwritable place a `FileError` (both exit 1).

    A command that replaces a folder it made (a dataset cache rebuilt, `report --force`) checks
    `out_kind(out) == kind` first and only then may call `atomic_dir(out, overwrite=True)`."""
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise OutError(f"{flag} {out}: is a file, not a folder")
        names = sorted(p.name for p in out.iterdir())
        if names and out_kind(out) != kind:
            made = out_kind(out)
            what = f"trainperf made it for {made} output" if made else "trainperf did not make it"
            held = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise OutError(f"{flag} {out}: the folder holds files ({held}) and {what}; {kind} output goes to a "
                           "new folder, an empty one, or one trainperf made for it")
        _check_writable(out, "writing into", out)
        return out
    _check_writable(existing_parent(out, flag), "creating", out)
    return out


def existing_parent(out: str | os.PathLike, flag: str = "--out") -> Path:
    """The nearest existing folder above `out`, which creating `out` would write into; an
    `OutError` where that is a file (mkdir would only say "exists")."""
    out = Path(out)
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutError(f"{flag} {out}: {parent} is a file, not a folder")
    return parent


def _check_writable(folder: Path, doing: str, name: Path) -> None:
    if os.access(folder, os.W_OK | os.X_OK):
        return
    try:  # access() says no for a read-only file system too (even to root); name the right cause
        err = errno.EROFS if os.statvfs(folder).f_flag & os.ST_RDONLY else errno.EACCES
    except (OSError, AttributeError):
        err = errno.EACCES
    raise FileError(describe_os_error(OSError(err, os.strerror(err)), doing, name))


def mark_out(out: str | os.PathLike, kind: str) -> Path:
    """Create `out` (and its parents) if needed and mark it as trainperf's `kind` output; the marker
    is what lets a later command of the same kind write there again (`check_out`)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if out_kind(out) != kind:
            write_json(out / OUT_MARKER, {"kind": kind})
    except FileError:
        raise
    except OSError as e:
        raise file_error(e, "creating", out) from e
    return out
