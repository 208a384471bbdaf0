"""Read the step time and evaluation time each published MLPerf result logged, for `plan validate`.

A published score is minutes to target; the planner's error on it mixes three things: the step time
(the hardware and software part the performance model prices), the samples to converge and the
evaluations. The result logs separate them. This script reads every row of the planner's results
table from local checkouts of the MLCommons results repositories (`git` object stores, such as the
snapshots `fetch` leaves under /work/.mirror) and writes, per row:

- `step_s`: the median over the row's result logs of each log's median optimizer-step time, from
  the first of:
  - `train_step_time` / `train_step_timing in s` in `tracked_stats` (NeMo, mlperf_common);
  - `throughput` in `tracked_stats` (samples/s; step = global batch / throughput);
  - the training time between one evaluation's end and the next one's start, over the samples
    trained between them (any MLLOG with `samples_count` on its evaluation events).
- `eval_s`: the median duration of an evaluation after the first (eval_start to eval_stop);
- `logs`, `step_min_s`, `step_max_s`, `method`: what the figure rests on.

    python bench/logged_steps.py --repo 4.1=/work/.mirror/mlcommons+training_results_v4.1/repo ...

Only the committed log files are read (`git show HEAD:path`); nothing is fetched.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainperf.plan.results import RESULTS, load_results  # noqa: E402
from trainperf.plan.workload import load_benchmark  # noqa: E402

OUT = ROOT / "src" / "trainperf" / "plan" / "data" / "logged_steps.csv"
STEP_KEYS = ("train_step_time", "train_step_timing in s")
FIELDS = ["round", "benchmark", "submitter", "accelerator", "gpus", "global_batch_size", "logs", "method", "step_s",
          "step_min_s", "step_max_s", "eval_s", "source"]


def _events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        i = line.find(":::MLLOG")
        if i < 0:
            continue
        try:
            out.append(json.loads(line[i + 8:]))
        except json.JSONDecodeError:
            continue
    return out


def _samples(e: dict) -> float | None:
    md = e.get("metadata") or {}
    v = md.get("samples_count", md.get("epoch_num"))
    return float(v) if isinstance(v, (int, float)) else None


def log_times(events: list[dict], gbs: int, per_sample: int = 1) -> tuple[float | None, str, float | None]:
    """(median step seconds, method, median evaluation seconds after the first) of one log.
    `per_sample`: how many of the log's counts make one sample (GPT-3 logs count tokens: 2,048)."""
    tracked = [e["value"] for e in events if e.get("key") == "tracked_stats" and isinstance(e.get("value"), dict)]
    steps = [float(v[k]) for v in tracked for k in STEP_KEYS if isinstance(v.get(k), (int, float))]
    method = "train_step_time"
    if not steps:
        steps = [gbs * per_sample / float(v["throughput"]) for v in tracked
                 if isinstance(v.get("throughput"), (int, float)) and v["throughput"] > 0]
        method = "throughput"
    starts = [e for e in events if e.get("key") == "eval_start"]
    stops = [e for e in events if e.get("key") == "eval_stop"]
    if not steps:
        method = "segments"
        for stop, start in zip(stops, starts[1:]):
            s0, s1 = _samples(stop), _samples(start)
            if s0 is not None and s1 is not None and s1 > s0:
                steps.append((start["time_ms"] - stop["time_ms"]) / 1000 / ((s1 - s0) / (gbs * per_sample)))
    evals = [(b["time_ms"] - a["time_ms"]) / 1000 for a, b in zip(starts, stops)][1:]
    return (statistics.median(steps) if steps else None, method,
            statistics.median(evals) if evals else None)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def row_times(repo: Path, folder: str, gbs: int, per_sample: int = 1) -> dict | None:
    """The logged times of the result folder `folder` (a path inside `repo`), or None without logs."""
    names = [n for n in _git(repo, "ls-tree", "--name-only", f"HEAD:{folder}").split()
             if n.startswith("result_") and n.endswith(".txt")]
    per_log = []
    for n in sorted(names):
        step, method, ev = log_times(_events(_git(repo, "show", f"HEAD:{folder}/{n}")), gbs, per_sample)
        if step is not None:
            per_log.append((step, method, ev))
    if not per_log:
        return None
    steps = [p[0] for p in per_log]
    evals = [p[2] for p in per_log if p[2] is not None]
    return {"logs": len(per_log), "method": per_log[0][1], "step_s": round(statistics.median(steps), 5),
            "step_min_s": round(min(steps), 5), "step_max_s": round(max(steps), 5),
            "eval_s": round(statistics.median(evals), 3) if evals else ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", default=[], metavar="ROUND=GITDIR",
                    help="a results repository checkout (or bare git dir) per round, e.g. 5.1=/path")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    repos = dict(r.split("=", 1) for r in args.repo)
    rows = []
    for r in load_results(args.results):
        repo = repos.get(r.round)
        if repo is None or "/tree/" not in r.source:
            continue
        folder = r.source.split("/tree/", 1)[1].split("/", 1)[1]
        try:
            b = load_benchmark(r.benchmark, r.round)
            t = row_times(Path(repo), folder, r.gbs, b.seq_len if b.rcp_unit == "tokens" else 1)
        except subprocess.CalledProcessError:
            print(f"not in the checkout: {folder}", file=sys.stderr)
            continue
        if t is None:
            print(f"no step time in the logs: {folder}", file=sys.stderr)
            continue
        rows.append({"round": r.round, "benchmark": r.benchmark, "submitter": r.submitter,
                     "accelerator": r.accelerator, "gpus": r.n_gpus,
                     "global_batch_size": r.gbs, **t, "source": r.source})
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
