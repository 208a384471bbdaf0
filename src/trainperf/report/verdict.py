"""Compliance verdict of a run (the official checker) and the MLPerf-style score of a set of runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import BenchmarkConfig
from trainperf.mlperf.check import check_log
from trainperf.mlperf.logger import RULES_DIR
from trainperf.report.rundir import RunData


@dataclass
class Verdict:
    status: str  # "pass", "fail", "n/a"
    detail: str  # the checker's first reason, or which rules were used


def rules_for(run: RunData) -> tuple[str, Path | None, str]:
    """(ruleset, config YAML or None for the official rules, words saying which)."""
    bench = run.recipe.get("benchmark") or {}
    ruleset = str(bench.get("ruleset") or BenchmarkConfig().ruleset)
    own = run.path / "compliance.yaml"
    if own.is_file():
        return ruleset, own, f"{own.name} of the run"
    name = str(bench.get("rules") or run.summary.get("benchmark", ""))
    shipped = RULES_DIR / f"{name}.yaml"
    if shipped.is_file():  # trainperf's own benchmarks have no official rules file
        return ruleset, shipped, f"trainperf rules '{name}'"
    return ruleset, None, f"official closed rules, ruleset {ruleset}"


def compliance(run: RunData) -> Verdict:
    """Check every result log of the run; pass only when each one passes."""
    logs = run.result_logs()
    if not logs:
        return Verdict("n/a", "no result_*.txt in the run directory")
    ruleset, config, which = rules_for(run)
    for log in logs:
        res = check_log(log, ruleset, config)
        if not res.passed:
            reason = res.errors[0] if res.errors else _last_line(res.output)
            return Verdict("fail", f"{log.name}: {reason}")
    return Verdict("pass", which)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "the checker printed nothing"


@dataclass
class Score:
    benchmark: str
    group: str  # device x world size
    runs: int
    required: int
    minutes: float | None  # None: not scored
    note: str


def olympic_mean(minutes: list[float]) -> float:
    """Mean after dropping the fastest and the slowest run (MLPerf's result summarizer)."""
    if len(minutes) < 3:
        raise ValueError("olympic mean needs at least 3 runs")
    kept = sorted(minutes)[1:-1]
    return sum(kept) / len(kept)


def score_runs(runs: list[RunData], verdicts: list[Verdict]) -> list[Score]:
    """One score per (benchmark, device, world size): runs that missed the target or failed the checker
    count as never finishing, so at most one of them can be dropped as the slowest."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, run in enumerate(runs):
        s = run.summary
        key = (str(s["benchmark"]), f"{s.get('world_size', '?')} x {s.get('device', '?')}")
        groups.setdefault(key, []).append(i)
    out = []
    for (bench, group), idx in groups.items():
        required = int((runs[idx[0]].recipe.get("benchmark") or {}).get(
            "runs_per_result", BenchmarkConfig().runs_per_result))
        times = []
        for i in idx:
            ok = runs[i].summary["status"] == "success" and verdicts[i].status != "fail"
            times.append(runs[i].summary["time_to_train_s"] / 60 if ok else math.inf)
        if len(idx) < max(required, 3):
            out.append(Score(bench, group, len(idx), required, None,
                             f"not scored: {len(idx)} of the {required} runs the rules ask for"))
            continue
        m = olympic_mean(times)
        if not math.isfinite(m):
            bad = sum(not math.isfinite(t) for t in times)
            out.append(Score(bench, group, len(idx), required, None,
                             f"not scored: {bad} runs missed the target or failed the checker"))
            continue
        note = "olympic mean (fastest and slowest dropped)"
        if len(idx) > required:
            note += f"; {len(idx)} runs given, the rules ask for {required}"
        out.append(Score(bench, group, len(idx), required, m, note))
    return out
