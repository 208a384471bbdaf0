"""What init measured on this machine, kept for the next run: the precision probe's verdict and the
matmul peak. A file per (kind, CPU, torch version and threads, what was measured), in the data cache
folder (`data.cache_dir`, `TRAINPERF_CACHE`); deleting it makes the next run measure again."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from trainperf import atomic


def cpu_identity() -> str:
    """This CPU as far as a timing depends on it: vendor, family, model, name, feature flags, usable cores."""
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]  # the first processor's block
    except OSError:
        info = ""
    keys = ("vendor_id", "cpu family", "model\t", "model name", "flags")
    return "\n".join([line for line in info.splitlines() if line.startswith(keys)]
                     + [f"cores {len(os.sched_getaffinity(0))}"])


def cache_file(cache: Path, kind: str, what: dict) -> Path:
    """The file for `kind` (a folder name) measured on this machine, torch and thread count for `what`."""
    key = json.dumps({"cpu": cpu_identity(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                      **what}, sort_keys=True, default=str)
    return cache / kind / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def read(path: Path) -> dict | None:
    """The kept measurement, or None when there is none or it cannot be read (then it is measured again)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def write(path: Path, obj: dict) -> None:
    """Keep `obj`; a cache that cannot be written costs the next run a measurement, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(path, obj)
    except OSError:  # FileError too
        pass
