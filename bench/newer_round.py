"""`trainperf plan` against results from a round newer than anything it was fitted on.

The planner is fitted on results up to MLPerf v5.1 (`plan/data/mlperf_results.csv`) and its
software trend on logs up to v5.1 (`plan/logged.py`). This script scores results of a newer round
from their raw run numbers, the way MLPerf does, and compares them with what `plan --round` of that
round predicts: the minutes, the 80% band, and the minutes if the software trend holds with its range.

    python bench/newer_round.py                       # the committed v6.0 NVIDIA rows
    python bench/newer_round.py --json /tmp/v6.json
    python bench/newer_round.py --folders bench/results/v6_0_other_405b_folders.csv \
        --runs bench/results/v6_0_other_405b_runs.csv    # other submitters' v6.0 405B rows
    python bench/newer_round.py --folders bench/results/v6_0_nvidia_folders.csv --runs bench/results/v6_0_nvidia_runs.csv \
        --folders bench/results/v6_0_other_405b_folders.csv --runs bench/results/v6_0_other_405b_runs.csv \
        --folders bench/results/v6_0_other_folders.csv --runs bench/results/v6_0_other_runs.csv \
        ... --folders bench/results/v6_0_more6_folders.csv --runs bench/results/v6_0_more6_runs.csv \
        --csv bench/results/plan_forward_v6.0_2026-12-08.csv   # all of them (more, more2 .. more6 too),
                                                               # as `plan validate --results` reads

Inputs (committed, `bench/results/`): `v6_0_nvidia_folders.csv`, one row per results folder
(system, benchmark, GPUs, global batch, the folder's `scaling.json` factor where it publishes one,
source) and `v6_0_nvidia_runs.csv`, one row per result log (run_start and run_stop time, status, the
last evaluation's accuracy and samples_count), read from a public mirror of the v6.0 results
repository. A score is the olympic mean of the run times (mlperf-logging's own averaging) times the
RCP normalization that mlperf-logging's `rcp_checker` computes for the round's ruleset; the checker
reads log files, so each run is handed to it as the four MLLOG lines it reads for these benchmarks
(benchmark, global batch, last eval_accuracy with its samples_count, run_stop with its status).
Where a folder publishes `scaling.json`, the two factors must agree.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
FOLDERS = RESULTS / "v6_0_nvidia_folders.csv"
RUNS = RESULTS / "v6_0_nvidia_runs.csv"


@dataclass
class Folder:
    submitter: str
    system: str
    benchmark: str  # MLPerf name
    accelerator: str
    gpus: int
    gbs: int
    published_scaling: float | None
    source: str
    runs: list[dict]

    @property
    def minutes(self) -> list[float]:
        """The converged runs' times, fastest first (MLPerf's clock: run_start to run_stop)."""
        return sorted((int(r["run_stop_ms"]) - int(r["run_start_ms"])) / 60000
                      for r in self.runs if r["status"] == "success")


def load(folders: Path = FOLDERS, runs: Path = RUNS) -> list[Folder]:
    by: dict[tuple[str, str], list[dict]] = {}
    for r in csv.DictReader(runs.open()):
        by.setdefault((r["system"], r["benchmark"]), []).append(r)
    out = []
    for f in csv.DictReader(folders.open()):
        rs = by.get((f["system"], f["benchmark"]), [])
        if len(rs) != int(f["files"]):
            raise SystemExit(f"newer_round: {f['system']}/{f['benchmark']} lists {f['files']} logs, "
                             f"{runs.name} has {len(rs)}")
        out.append(Folder(f["submitter"], f["system"], f["benchmark"], f["accelerator"],
                          int(f["nodes"]) * int(f["accelerators_per_node"]), int(f["global_batch_size"]),
                          float(f["scaling_factor"]) if f["scaling_factor"] else None, f["source"], rs))
    return out


def rcp_normalization(folder: Folder, ruleset: str) -> float:
    """mlperf-logging's RCP normalization factor for the folder's runs (1.0 when they converge no
    faster than the reference)."""
    from mlperf_logging.rcp_checker import rcp_checker as rc

    with tempfile.TemporaryDirectory() as tmp:
        for i, r in enumerate(folder.runs):
            lines = [{"key": "submission_benchmark", "value": folder.benchmark, "metadata": {}},
                     {"key": "global_batch_size", "value": folder.gbs, "metadata": {}},
                     {"key": "eval_accuracy", "value": float(r["last_eval_accuracy"]),
                      "metadata": {"samples_count": int(r["last_samples_count"])}},
                     {"key": "run_stop", "value": None, "metadata": {"status": r["status"]}}]
            Path(tmp, f"result_{i}.txt").write_text("".join(
                ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME", **d}) + "\n"
                for d in lines))
        level = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # the checker logs every RCP record it reads
        try:
            _passed, _msg, norm = rc.check_directory(tmp, "training", ruleset, False, False, rcp_pass="pruned_rcps")
        finally:
            logging.disable(level)
    return float(norm)


def score(folder: Folder, ruleset: str) -> tuple[float, float, float]:
    """(olympic mean of the run minutes, RCP normalization, score in minutes)."""
    from trainperf.mlperf.score import olympic_average

    failed = sum(r["status"] != "success" for r in folder.runs)
    raw = olympic_average()(folder.minutes, failed, 1)
    norm = rcp_normalization(folder, ruleset)
    return raw, norm, raw * norm


def predict(folder: Folder, round_: str) -> dict:
    """What `trainperf plan <benchmark> --gpu <kind> --gpus N --gbs G --round R` says."""
    from trainperf.plan.api import make_plan
    from trainperf.plan.hardware import gpu_for_result

    gpu = gpu_for_result(folder.accelerator)
    if gpu is None:
        raise SystemExit(f"newer_round: no catalog GPU for '{folder.accelerator}'")
    plan = make_plan(folder.benchmark, gpu.key, folder.gpus, gbs=folder.gbs, round_=round_)
    d = plan.to_dict()
    t = d["software_trend"] or {}
    return {"gpu": gpu.key, "minutes": d["minutes"], "p10": d["minutes_p10"], "p90": d["minutes_p90"],
            "trend_minutes": t.get("minutes_if_it_holds"), "trend_range": t.get("minutes_if_it_holds_range"),
            "layout": {k: d["layout"][k] for k in ("tp", "pp", "cp", "precision")}}


def summarize(rows: list[dict]) -> dict:
    """MAPE, mean signed error (%) and how many published scores fall inside the band, for the plan
    as printed and for the minutes if the software trend holds (inside its range)."""
    def errs(key: str) -> list[float]:
        return [r[key] / r["score"] - 1 for r in rows if r.get(key) is not None]

    out = {"rows": len(rows)}
    for name, key in (("plan", "minutes"), ("trend", "trend_minutes")):
        e = errs(key)
        if e:
            out[name] = {"mape_pct": round(100 * sum(map(abs, e)) / len(e), 1),
                         "signed_pct": round(100 * sum(e) / len(e), 1),
                         "geomean_ratio": round(math.exp(sum(math.log1p(x) for x in e) / len(e)), 3)}
    out["plan"]["inside_band"] = sum(r["p10"] <= r["score"] <= r["p90"] for r in rows)
    ranged = [r for r in rows if r.get("trend_range")]
    if ranged:
        out["trend"]["inside_range"] = sum(lo <= r["score"] <= hi for r in ranged for lo, hi in [r["trend_range"]])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round", dest="round_", default="6.0", help="the round the rows are from (its rules and RCPs)")
    ap.add_argument("--folders", type=Path, action="append", help="a folders CSV (repeat, paired with --runs)")
    ap.add_argument("--runs", type=Path, action="append", help="its runs CSV")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--csv", type=Path, default=None,
                    help="write the scored rows as a `trainperf plan validate --results` file")
    args = ap.parse_args(argv)
    if bool(args.folders) != bool(args.runs) or len(args.folders or []) != len(args.runs or []):
        ap.error("give one --runs per --folders (neither: the committed NVIDIA rows)")
    folders, runs = args.folders or [FOLDERS], args.runs or [RUNS]
    for path in folders + runs:
        if not path.is_file():
            ap.error(f"{path}: no such file")
    ruleset = f"{args.round_}.0"
    rows = []
    print(f"{'benchmark':16} {'GPUs':>10} {'GBS':>5} {'published':>9} {'plan':>16} {'80% band':>17} "
          f"{'if the trend holds':>19} {'trend range':>17}")
    scored = []
    for f in (f for fo, ru in zip(folders, runs) for f in load(fo, ru)):
        raw, norm, sc = score(f, ruleset)
        scored.append((f, raw, norm, sc))
        if f.published_scaling is not None and abs(norm - f.published_scaling) > 1e-9:
            raise SystemExit(f"newer_round: {f.system}/{f.benchmark}: RCP normalization {norm} differs from the "
                             f"folder's scaling.json {f.published_scaling}")
        p = predict(f, args.round_)
        row = {"system": f.system, "benchmark": f.benchmark, "gpus": f.gpus, "gbs": f.gbs, "raw_minutes": raw,
               "normalization": norm, "score": sc, "source": f.source, **p}
        rows.append(row)
        tr = p["trend_minutes"]
        trend = f"{tr:8.3f} ({100 * (tr / sc - 1):+5.1f}%)" if tr is not None else "-"
        rng = "{:.3f}-{:.3f}".format(*p["trend_range"]) if p["trend_range"] else "-"
        print(f"{f.benchmark:16} {f.gpus:>5} {p['gpu']:>4} {f.gbs:>5} {sc:9.3f} {p['minutes']:8.3f} "
              f"({100 * (p['minutes'] / sc - 1):+5.1f}%) {p['p10']:8.3f}-{p['p90']:<8.3f} {trend:>19} {rng:>17}")
    s = summarize(rows)
    print(json.dumps(s))
    if args.json:
        args.json.write_text(json.dumps({"round": args.round_, "rows": rows, "summary": s}, indent=1))
    if args.csv:
        write_results_csv(args.csv, args.round_, scored)
    return 0


def write_results_csv(path: Path, round_: str, scored: list[tuple[Folder, float, float, float]]) -> None:
    """The scored folders in `plan/data/mlperf_results.csv`'s columns, for `plan validate --results`."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["round", "benchmark", "submitter", "system", "accelerator", "num_accelerators",
                    "global_batch_size", "minutes", "source", "note"])
        for f, raw, norm, sc in scored:
            repo, _, rest = f.source.partition("@")
            sha, _, where = rest.partition(" ")
            url = f"https://github.com/{repo}/tree/{sha}/{where.split()[0].rstrip('/')}"
            ok = len(f.minutes)
            note = (f"scored by bench/newer_round.py from its runs CSV: olympic mean {raw:.4f} of {ok}/{len(f.runs)} "
                    f"converged runs x RCP normalization {norm}; runs(min)={[round(m, 3) for m in f.minutes]}; "
                    f"scaling.json={f.published_scaling if f.published_scaling is not None else 'none'}")
            w.writerow([f"v{round_}", f.benchmark, f.submitter, f.system, f.accelerator, f.gpus, f.gbs,
                        f"{sc:.3f}", url, note])


if __name__ == "__main__":
    sys.exit(main())
