"""Every error trainperf expects to raise, under one base that carries the process exit code.

The CLI catches `TrainperfError`: it prints the one-line message and exits with `exit_code`
(2: the user asked for something invalid, 1: the data or the run could not go on). It also turns an
`OSError` that names a file (disk full, permission, not a folder) into one line through
`describe_os_error`, and SIGINT/SIGTERM into 130/143. Anything else is a bug and keeps its traceback. This module imports only `errno`, so every part (the torch-free planner
included) can raise these without loading anything else.

Each class also keeps the builtin base it had before (ValueError, RuntimeError), so code that
caught those still does.
"""

from __future__ import annotations

import errno

EXIT_DONE = 0  # the run reached its target (or a --smoke run did all it planned)
EXIT_FAIL = 1  # the data or the run could not go on
EXIT_USAGE = 2  # bad configuration or arguments
EXIT_STOPPED = 3  # the run stopped before its target (--max-steps, a smoke run cut short)
EXIT_SIGINT = 130  # Ctrl-C (128 + SIGINT), as a shell reports it
EXIT_SIGTERM = 143  # SIGTERM (128 + SIGTERM): what Slurm and Kubernetes send before killing


class TrainperfError(Exception):
    """An expected failure with a one-line message; `exit_code` is what the CLI exits with."""

    exit_code: int = EXIT_FAIL


class UsageError(TrainperfError):
    """The command line or its inputs ask for something invalid (exit 2)."""

    exit_code = EXIT_USAGE


class RunError(TrainperfError):
    """The data, a file or the run could not go on (exit 1)."""

    exit_code = EXIT_FAIL


class ConfigError(UsageError, ValueError):
    """A recipe or override is invalid; the message names the key."""


class DataError(RunError, ValueError):
    """Unreadable corpus, missing or corrupt shard: the message names the file."""


class WeightsError(RunError, ValueError):
    """A weights file (start checkpoint, adapters, Hugging Face import) that is missing, unreadable or
    does not fit the model."""


class CheckpointError(RunError, RuntimeError):
    """A training checkpoint that cannot be used (missing, partial, corrupt, or from another recipe)."""


class TrainError(RunError, RuntimeError):
    """A run that cannot go on (NaN loss, bad batch layout, output exists)."""


class PlanError(RunError, ValueError):
    """Nothing can be planned (no layout fits, GBS cannot be split) or a plan JSON file is unusable."""


class ScoreError(RunError, ValueError):
    """Results that cannot be scored together (none, mixed benchmarks, duplicated seeds)."""


class RulesError(ScoreError):
    """A run's compliance.yaml that is not the rules trainperf wrote (mlperf.score._run_rules)."""


class RunDirError(RunError, ValueError):
    """A run directory that cannot be read (missing, half-written or malformed file)."""


class ExportError(RunError, ValueError):
    """A model layout or run directory the export cannot turn into a transformers checkpoint."""


class BrowserError(RunError, RuntimeError):
    """Chromium is missing, exited, or did not answer in time (the report's page check)."""


class FileError(RunError, OSError):
    """The operating system refused a file or folder trainperf reads or writes (disk full, permission,
    a file where a folder should be, read-only file system). Raised with `file_error`, which names
    the file and the cause in one line."""


class OutError(RunError):
    """An output folder (`--out`) that trainperf may not write into: a file, or someone else's folder
    (exit 1, as every "the output exists" refusal before it)."""


class Terminated(BaseException):
    """SIGTERM arrived (Slurm or Kubernetes stopping the job). Like KeyboardInterrupt it is not an
    Exception, so the same `except Exception` blocks let it through and `finally` blocks run."""

    exit_code = EXIT_SIGTERM


# The cause of an OSError, as a user reads it.
_CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f)",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a folder, not a file",
    errno.EEXIST: "it already exists",
    errno.ENOTEMPTY: "the folder is not empty",
    errno.ENOENT: "no such file or folder",
    errno.EIO: "input/output error",
    errno.ENAMETOOLONG: "the file name is too long",
}
# errno values only a write meets
_WRITES = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def describe_os_error(err: OSError, doing: str = "", path: object = None) -> str:
    """`<cause> while <doing> <FILE>` for an OSError, e.g. "no space left on the device while writing
    runs/x/summary.json". `doing` defaults to "writing" for the errors only writes meet and to
    "accessing" otherwise; `path` (the file the user knows) defaults to the error's own filename."""
    cause = _CAUSES.get(err.errno or 0) or (err.strerror or str(err) or type(err).__name__).lower()
    doing = doing or ("writing" if err.errno in _WRITES else "accessing")
    name = path if path is not None else err.filename
    if name is None:
        return f"{cause} while {doing}"
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    return f"{cause} while {doing} {name}"


def file_error(err: OSError, doing: str = "", path: object = None) -> FileError:
    """A FileError (exit 1) with `describe_os_error`'s line; raise it `from err`."""
    e = FileError(describe_os_error(err, doing, path))
    e.errno = err.errno  # OSError's own slot: callers can still tell ENOSPC from EACCES
    return e
