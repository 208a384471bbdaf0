"""Settings of the training process itself, beside torch's."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

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


def busy_cores_elsewhere(seconds: float = 0.25) -> float | None:
    """Cores that other work kept busy over `seconds`: the busy time /proc/stat counts on the CPUs
    this process may run on (a container's cpuset, not the whole host; stolen time included: a vCPU
    the host takes away stalls as one another process holds) less this process's own CPU time, per
    second of wall clock. None where /proc/stat cannot be read."""
    mine = {f"cpu{i}" for i in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else None

    def machine() -> tuple[int, int]:  # (all jiffies, idle + iowait jiffies) over those CPUs
        total = idle = 0
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name != "cpu" and (mine is None or name in mine):
                    vals = [int(v) for v in fields[:8]]
                    total, idle = total + sum(vals), idle + vals[3] + vals[4]
        if not total:
            raise ValueError("no cpuN lines")
        return total, idle

    try:
        (t0, i0), own0, w0 = machine(), os.times(), time.monotonic()
        time.sleep(seconds)
        (t1, i1), own1, w1 = machine(), os.times(), time.monotonic()
    except (OSError, ValueError, IndexError):
        return None
    busy = ((t1 - t0) - (i1 - i0)) / os.sysconf("SC_CLK_TCK")
    own = (own1.user + own1.system) - (own0.user + own0.system)
    return max(0.0, busy - own) / max(w1 - w0, 1e-9)


def threads_beside(threads: int, busy: float) -> int:
    """Intra-op threads to use where `busy` cores of the `threads` torch would use are taken by
    other work: one fewer per core taken (from three quarters of one), at least one. torch's CPU
    threads meet at a barrier in every operation, so one that shares its core with another process
    holds the others at each one: `tiny` trained in 61.8 s on 2 threads beside one busy process and
    in 25.3 s on 1 (15.3 s on 2 alone; 2-core Zen 5, bench/results/tiny_records_2026-12-06_to_07.md)."""
    return max(1, threads - int(busy + 0.25))


def check_vector_isas() -> list[threading.Thread]:
    """Start inductor's checks of this CPU's vector instruction sets, one thread each, all at once;
    the caller joins them.

    Before compiling its first CPU kernel, inductor asks which of AVX-512 with VNNI, AVX-512 and
    AVX2 both the CPU and the compiler support: for each, it compiles a test program (once per
    machine, kept in its cache) and loads it in a new Python process (every run), one after the
    other: 6.7 s of compiling and 1.2 s of loading on a new 2-core Zen 4, 1.6 s of loading on every
    later run (bench/results/tiny_records_2026-12-06_to_07.md). Each check is a subprocess, so
    threads run them side by side, and while the run reads its data. The answers land in
    inductor's own per-ISA cache, which its later call finds filled. None started where this torch
    has no such checks (the names are inductor's own, present in 2.11-2.13) or the CPU is not x86."""
    try:
        from torch._inductor import cpu_vec_isa
        isas, on_cpu = cpu_vec_isa.supported_vec_isa_list, cpu_vec_isa.x86_isa_checker()
    except (ImportError, AttributeError, OSError):
        return []
    wanted = [isa for isa in isas if str(isa).split() and all(f in on_cpu for f in str(isa).split())]
    checks = [threading.Thread(target=bool, args=(isa,), name=f"inductor-isa-check {isa}", daemon=True)
              for isa in wanted]
    for t in checks:
        t.start()
    return checks
