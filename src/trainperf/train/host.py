"""Settings of the training process itself, beside torch's."""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Let glibc keep freed memory for the next allocation instead of handing it back to the kernel.

    torch's CPU tensors come from malloc, which by default maps each block over 128 KiB (up to a
    dynamic 32 MiB) afresh and trims the heap's free top: a training step's tensors of that size are
    new pages every step, each zero-filled on its first touch. With the thresholds raised, freed
    blocks are reused, as a caching allocator (torch's on CUDA, jemalloc or tcmalloc preloaded on a
    CPU) would: Muon's step on `tiny` 15.7-16.5 -> 12.4-13.0 ms, a whole run 16.8-21.8 -> 15.0-16.4 s
    on a 2-core Zen 5 (bench/results/tiny_records_2026-12-06_to_07.md). The
    process's resident memory stays at its peak instead of falling after it. False where the C
    library has no mallopt (not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, 1 << 30) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
