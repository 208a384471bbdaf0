"""`trainperf run --nproc N`: start torchrun on this machine with the same command line.

torchrun (torch.distributed.run) owns the processes: it sets RANK/WORLD_SIZE/LOCAL_RANK, runs the
c10d rendezvous and, with --max-restarts, restarts the whole worker group when one worker dies; the
restarted workers see TORCHELASTIC_RESTART_COUNT > 0 and resume from the run's last checkpoint.
Multi-node runs call torchrun directly (see docs/cluster.md and examples/slurm/).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from trainperf.errors import ConfigError

_LAUNCH_ONLY = {"--nproc": True, "--max-restarts": True}  # option -> takes a value


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def should_launch(nproc: int, max_restarts: int) -> bool:
    """Start torchrun ourselves? Not when we already are one of its workers."""
    return (nproc > 1 or max_restarts > 0) and not under_torchrun()


def check_devices(nproc: int, device: str) -> None:
    """One process per GPU: refuse more processes than visible GPUs before starting any."""
    if device == "cpu":
        return
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and n == 0:
        raise ConfigError("--device cuda: no CUDA device is visible")
    if n and nproc > n:
        raise ConfigError(f"--nproc {nproc}: only {n} CUDA device(s) visible, one process per GPU "
                          "(--device cpu runs N processes on gloo)")


def worker_argv(argv: list[str], out: Path) -> list[str]:
    """The workers' command line: ours without the launch-only options, with an explicit --out (every
    rank and every restart must agree on the run directory)."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in _LAUNCH_ONLY:
            skip = "=" not in a
            continue
        rest.append(a)
    if not any(a == "--out" or a.startswith("--out=") for a in rest):
        rest += ["--out", str(out)]
    return rest


def torchrun_command(nproc: int, max_restarts: int, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={max(1, nproc)}",
            f"--max-restarts={max_restarts}", "-m", "trainperf", *argv]


def torchrun_env() -> dict[str, str]:
    env = dict(os.environ)
    # Restarted workers sharing the rendezvous TCPStore can read the previous group's addresses and fail
    # to connect (pytorch/pytorch#135712); a fresh store per worker group avoids it.
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return env


def run_torchrun(nproc: int, max_restarts: int, argv: list[str]) -> int:
    """Run the workers to the end; torchrun's exit code (0 when every worker finished).

    When this process is stopped (Ctrl-C, or SIGTERM raised as `Terminated` by the CLI), torchrun gets
    the same signal from it, stops its workers the same way (each logs its stop and keeps its committed
    checkpoints) and is waited for; its own report of the signal (a traceback) is not shown, since
    this process says in one line what happened."""
    # its own session: a terminal's Ctrl-C reaches this process alone, which passes it on once (two
    # signals would cut short torchrun's own stopping of its workers)
    proc = subprocess.Popen(torchrun_command(nproc, max_restarts, argv), env=torchrun_env(), stderr=subprocess.PIPE,
                            start_new_session=True)
    stopping = threading.Event()
    copier = threading.Thread(target=_copy_stderr, args=(proc.stderr, stopping), daemon=True)
    copier.start()
    try:
        rc = proc.wait()
    except BaseException as e:
        stopping.set()
        proc.send_signal(signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM)
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()  # torchrun's own grace period is 30 s; it has had longer
            proc.wait()
        raise
    finally:
        copier.join(timeout=5)
    return rc


_STOP_TIMEOUT_S = 60


def _copy_stderr(stream, stopping: threading.Event) -> None:
    """torchrun's and the workers' stderr to ours, line by line, until this process is being stopped."""
    out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
    for line in iter(stream.readline, b""):
        if stopping.is_set():
            continue  # keep reading, so no writer blocks on a full pipe
        if out is not None:
            out.write(line)
            out.flush()
        else:
            sys.stderr.write(line.decode(errors="replace"))
    stream.close()


def finished_status(out: Path, since: float = 0.0) -> str | None:
    """The status the workers wrote to `out/summary.json` ("success", "aborted") at or after `since`
    (a time.time()), None without one."""
    try:
        f = out / "summary.json"
        if f.stat().st_mtime < since:
            return None
        return json.loads(f.read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None
