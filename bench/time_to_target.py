"""Time for the `tiny` benchmark to reach its target: trainperf's default recipe side by side with
the same model trained other ways, several seeds each, median and spread, in one run.

    python bench/time_to_target.py --seeds 5 --out /tmp/ttt
    python bench/time_to_target.py --arms trainperf,adamw --seeds 3 --out /tmp/ttt

Arms (only recipe values differ; the data, tokenizer, evaluation cadence, target and MLPerf timing
from run_start to run_stop are the benchmark's):
  trainperf  the recipe as it ships (`trainperf run`, no flags)
  b16        the shipped recipe of 2026-12-04 morning: global batch 16, one LR (6e-3) for Muon and
             AdamW, WSD annealed by step 80 (the second evaluation) with a 0.4 cooldown, 5
             Newton-Schulz iterations
  adamw      the recipe before the time-to-target work: AdamW, cosine over 400 steps, 50 warm-up
             steps, batch 16, fp32, no QK-norm
  plain      a textbook loop: fp32, no compile, torch's AdamW defaults (lr 1e-3, betas 0.9/0.999,
             weight decay 0.01, for-loop implementation), cosine over 3000 steps
A run that has not reached the target after --max-steps is reported as not converged, never as a
time. Tokens to target are machine-independent; minutes are this machine's (named in the output).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from trainperf.config import load_recipe
from trainperf.parallel.env import init_env
from trainperf.train.trainer import RunOptions, train

BATCH16 = ["train.global_batch_size=16", "train.micro_batch_size=16"]
ADAMW = BATCH16 + ["train.optimizer=adamw", "train.schedule=cosine", "train.lr=3e-3", "train.end_lr=3e-4",
                   "train.warmup_steps=50", "train.decay_steps=400", "train.max_steps=0", "train.precision=fp32",
                   "model.qk_norm=false"]
ARMS: dict[str, list[str]] = {
    "trainperf": [],
    "b16": BATCH16 + ["train.lr=6e-3", "train.muon_lr=0", "train.end_lr=6e-4", "train.warmup_steps=10",
                      "train.decay_steps=70", "train.cooldown=0.4", "train.muon_ns_steps=5"],
    "adamw": ADAMW,
    "plain": ADAMW + ["train.fused=for-loop", "train.lr=1e-3", "train.end_lr=1e-4", "train.beta2=0.999",
                      "train.weight_decay=0.01", "train.warmup_steps=0", "train.decay_steps=3000",
                      "parallel.compile=false"],
}


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")), "?")
        flags = next((l.split(":", 1)[1].split() for l in out.splitlines() if l.startswith("Flags")), [])
        isa = "AMX" if "amx_bf16" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "?"
        return f"{model} ({isa}), {len(__import__('os').sched_getaffinity(0))} cores"
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--arms", default="trainperf,adamw")
    ap.add_argument("--max-steps", type=int, default=3000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="applied to every arm")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    env = init_env("cpu")
    print(f"machine: {machine()}", flush=True)
    results: dict[str, list[dict]] = {}
    for arm in arms:
        for seed in range(args.seeds):
            r = load_recipe("tiny", ARMS[arm] + args.overrides)
            s = train(r, env, RunOptions(out=args.out / arm / f"seed_{seed}", seed=seed, max_steps=args.max_steps,
                                         progress=False))
            row = {"seed": seed, "status": s.status, "seconds": s.time_to_train_s, "steps": s.steps,
                   "tokens_to_target": s.tokens_to_target, "tokens_per_s": s.tokens_per_s,
                   "final_eval": s.final_eval_loss, "precision": s.precision}
            results.setdefault(arm, []).append(row)
            print(f"{arm:<10} seed {seed}: {s.status:<8} {s.time_to_train_s:7.1f} s  {s.steps:5d} steps  "
                  f"{s.tokens_per_s:8,.0f} tok/s  eval {s.final_eval_loss:.4f}  {s.precision}", flush=True)
    print(f"\n{'arm':<10} {'converged':>9} {'median s':>9} {'min..max s':>15} {'median tokens':>14} {'time vs first':>14}")
    base = None
    for arm, rows in results.items():
        ok = [x for x in rows if x["status"] == "success"]
        secs = [x["seconds"] for x in ok]
        med = statistics.median(secs) if secs else float("nan")
        tok = statistics.median(x["tokens_to_target"] for x in ok) if ok else float("nan")
        base = base or med
        spread = f"{min(secs):.1f}..{max(secs):.1f}" if secs else "-"
        print(f"{arm:<10} {len(ok):>4}/{len(rows):<4} {med:>9.1f} {spread:>15} {tok:>14,.0f} {med / base:>13.2f}x")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "time_to_target.json").write_text(json.dumps({"machine": machine(), "arms": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
