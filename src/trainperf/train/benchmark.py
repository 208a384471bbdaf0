"""A benchmark run as MLPerf shapes it: smoke mode, a self-made start checkpoint, N seeds.

`run_benchmark` is what `trainperf run` calls. Smoke mode stops after `smoke.evals` logged evals;
a benchmark that starts from a checkpoint (gpt3, 405b, LoRA) first trains one itself for
`smoke.init_steps` steps in OUT/init_checkpoint/ and then starts from it, so what the log says
about the start (init_checkpoint_step) is what happened.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from trainperf.config import Recipe
from trainperf.mlperf.benchmarks import benchmark_hooks
from trainperf.parallel.env import DistEnv
from trainperf.train.host import busy_cores_elsewhere, threads_beside
from trainperf.train.trainer import RunOptions, Summary, TrainError, train


def smoke_max_steps(r: Recipe) -> int:
    """Steps a smoke run trains: the skipped evals plus `smoke.evals` logged ones, capped by the schedule."""
    per_eval = max(1, math.ceil(r.eval.every_samples / r.train.global_batch_size))
    return min((r.eval.skip_evals + r.smoke.evals) * per_eval, r.total_steps)


def make_start_checkpoint(r: Recipe, env: DistEnv, opts: RunOptions) -> tuple[Path, int]:
    """Train the smoke run's own start checkpoint: the same model without adapters, `init_steps`
    steps from scratch. Returns (weights path, steps trained)."""
    pre = copy.deepcopy(r)
    pre.model.lora_rank = 0
    pre.train.init_checkpoint, pre.train.init_checkpoint_step = "", 0
    out = opts.out / "init_checkpoint"
    done = out / "summary.json"
    if opts.resume is not None and done.is_file():  # a resumed smoke run starts from the same weights
        return out / "model.safetensors", int(json.loads(done.read_text())["steps"])
    s = train(pre, env, RunOptions(out=out, seed=opts.seed, max_steps=r.smoke.init_steps, progress=False))
    return out / "model.safetensors", s.steps


def run_benchmark(r: Recipe, env: DistEnv, opts: RunOptions) -> Summary:
    """One run of the recipe; in smoke mode with its start checkpoint and its eval budget."""
    if not r.smoke.enabled:
        return train(r, env, opts)
    r = copy.deepcopy(r)
    if r.smoke.init_steps > 0 and not r.train.init_checkpoint:
        path, steps = make_start_checkpoint(r, env, opts)
        r.train.init_checkpoint = str(path)
        # gpt3's schedule goes on from the checkpoint's step; the others start theirs at 0
        r.train.init_checkpoint_step = steps if benchmark_hooks(r).continues_schedule else 0
    cap = smoke_max_steps(r)
    return train(r, env, dataclasses.replace(opts, max_steps=min(opts.max_steps or cap, cap)))


def run_threads(r: Recipe, env: DistEnv, threads: int) -> int:
    """CPU intra-op threads for one run. Smoke models are so small that threads cost more than
    they give (10x slower on a busy 2-core machine, measured): one. A single process whose threads
    nobody chose (OMP_NUM_THREADS unset; torchrun sets it for several) takes one per core that
    other work leaves free (`host.threads_beside`), saying so."""
    if r.smoke.enabled:
        return 1
    if threads <= 1 or env.distributed or "OMP_NUM_THREADS" in os.environ:
        return threads  # nothing to take away, or threads somebody chose: no 0.25 s look at the load
    busy = busy_cores_elsewhere()
    n = threads if busy is None else threads_beside(threads, busy)
    if n < threads and env.is_main:
        print(f"trainperf: other work keeps {busy:.1f} of {threads} cores busy: training on {n} "
              f"thread{'s' if n > 1 else ''} (OMP_NUM_THREADS chooses)", flush=True)
    return n


def _threads(fn):
    """`fn` on `run_threads` CPU threads, the setting restored after (each seed chooses anew)."""
    def wrapped(r: Recipe, env: DistEnv, opts: RunOptions) -> Summary:
        if env.device.type != "cpu":
            return fn(r, env, opts)
        n = torch.get_num_threads()
        torch.set_num_threads(run_threads(r, env, n))
        try:
            return fn(r, env, opts)
        finally:
            torch.set_num_threads(n)
    return wrapped


run_benchmark = _threads(run_benchmark)


@dataclass
class SeedRuns:
    dirs: list[Path]
    summaries: list[Summary]


def run_seeds(r: Recipe, env: DistEnv, opts: RunOptions, n: int,
              listener_for: Callable[[Path], Callable[[dict], None]] | None = None) -> SeedRuns:
    """Seeds opts.seed .. opts.seed+n-1 into OUT/seed_<s>/; stops at the first run that fails.
    `listener_for(dir)` gives each run its own metrics listener (e.g. TensorBoard in its dir); one
    with a `close()` is closed after its run, failed or not."""
    if n < 1:
        raise TrainError("--seeds must be >= 1")
    dirs, sums = [], []
    for s in range(opts.seed, opts.seed + n):
        d = opts.out / f"seed_{s}"
        listener = listener_for(d) if listener_for is not None else opts.on_event
        try:
            sums.append(run_benchmark(r, env, dataclasses.replace(opts, out=d, seed=s, on_event=listener)))
        finally:
            if listener_for is not None and hasattr(listener, "close"):
                listener.close()
        dirs.append(d)
    return SeedRuns(dirs, sums)
