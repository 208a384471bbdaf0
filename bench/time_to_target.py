"""Time for the `tiny` benchmark to reach its target: trainperf's recipe vs the same model trained the
plain way (fp32, no compile, textbook AdamW: torch defaults lr 1e-3, betas 0.9/0.999, weight decay
0.01, for-loop implementation), several seeds each, median and spread, in one run.

    python bench/time_to_target.py --seeds 3 --out /tmp/ttt

Both arms run the real `trainperf run` code path (same data, tokenizer, eval and MLPerf timing
from run_start to run_stop); only the recipe values below differ. A run that has not reached the
target after --max-steps is reported as not converged, never as a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from trainperf.config import load_recipe
from trainperf.parallel.env import init_env
from trainperf.train.loop import RunOptions, train

ARMS: dict[str, list[str]] = {
    "trainperf": [],
    "plain": ["train.precision=fp32", "train.fused=for-loop", "train.lr=1e-3", "train.end_lr=1e-4",
              "train.beta2=0.999", "train.weight_decay=0.01", "parallel.compile=false"],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--arms", default="trainperf,plain")
    ap.add_argument("--max-steps", type=int, default=3000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="applied to every arm")
    args = ap.parse_args(argv)
    env = init_env("cpu")
    results: dict[str, list[dict]] = {}
    for arm in args.arms.split(","):
        for seed in range(args.seeds):
            r = load_recipe("tiny", args.overrides + ARMS[arm])
            s = train(r, env, RunOptions(out=args.out / arm / f"seed_{seed}", seed=seed, max_steps=args.max_steps))
            row = {"seed": seed, "status": s.status, "minutes": s.time_to_train_s / 60, "steps": s.steps,
                   "tokens_per_s": s.tokens_per_s, "final_eval": s.final_eval_loss}
            results.setdefault(arm, []).append(row)
            print(f"{arm:<10} seed {seed}: {row['status']:<8} {row['minutes']:6.2f} min  {s.steps:5d} steps  "
                  f"{s.tokens_per_s:8,.0f} tok/s  eval {s.final_eval_loss:.4f}", flush=True)
    print(f"\n{'arm':<10} {'converged':>9} {'median min':>11} {'min..max':>15} {'vs trainperf':>13}")
    base = None
    for arm, rows in results.items():
        ok = [x["minutes"] for x in rows if x["status"] == "success"]
        med = statistics.median(ok) if ok else float("nan")
        base = base or med
        spread = f"{min(ok):.2f}..{max(ok):.2f}" if ok else "-"
        print(f"{arm:<10} {len(ok):>4}/{len(rows):<4} {med:>11.2f} {spread:>15} {med / base:>12.2f}x")
    (args.out / "time_to_target.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
