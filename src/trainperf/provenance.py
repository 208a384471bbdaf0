"""Which code made a result: the git commit of the trainperf source and whether it had local changes.

A result log names its code (as modded-nanogpt logs its own source), so two runs are compared only
when they ran the same program. An installed wheel has no git checkout: then only the version is known.
"""

from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

import trainperf


@lru_cache(maxsize=1)
def code_version() -> dict:
    """{"version", "commit", "dirty"}: commit is None and dirty None outside a git checkout."""
    root = Path(trainperf.__file__).resolve().parents[2]
    info = {"version": trainperf.__version__, "commit": None, "dirty": None}
    if not (root / ".git").exists():
        return info
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return info
    return {**info, "commit": commit, "dirty": bool(status.strip())}
