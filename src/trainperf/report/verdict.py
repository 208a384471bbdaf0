"""Compliance verdict of a run and the MLPerf score of a set of runs, by the same rules as
`trainperf score` (`trainperf.mlperf.score`): which rules a log is checked against, how many runs a
benchmark needs, and the olympic mean all come from there."""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.errors import RulesError
from trainperf.mlperf.check import check_log
from trainperf.mlperf.score import ScoreError, checker_rules, olympic_score, read_log, required_runs
from trainperf.report.rundir import RunData


@dataclass
class Verdict:
    status: str  # "pass", "fail", "n/a"
    detail: str  # the checker's first reason, or which rules were used


def _log_benchmark(run: RunData) -> str:
    """The benchmark a run's result log names (submission_benchmark), else its summary's."""
    for log in run.result_logs():
        try:
            name = read_log(log).benchmark
        except ScoreError:
            continue
        if name:
            return name
    return str(run.summary["benchmark"])


def compliance(run: RunData) -> Verdict:
    """The official checker on every result log of the run; pass only when each one passes."""
    logs = run.result_logs()
    if not logs:
        return Verdict("n/a", "no result_*.txt in the run directory")
    try:
        ruleset, config = checker_rules(_log_benchmark(run), run.path)
    except RulesError as e:  # the run's own rules file is refused: nothing shows the run complies
        return Verdict("fail", str(e))
    except ScoreError as e:
        return Verdict("n/a", str(e))
    for log in logs:
        try:  # an unreadable log, or one with a line too long for the checker, fails before it runs
            read_log(log)
        except ScoreError as e:
            return Verdict("fail", str(e))
        res = check_log(log, ruleset, config)
        if not res.passed:
            return Verdict("fail", f"{log.name}: {res.errors[0] if res.errors else _last_line(res.output)}")
    which = f"{config.name} of the run" if config is not None and config.parent == run.path else (
        f"trainperf rules {config.stem}" if config is not None else f"official closed rules, ruleset {ruleset}")
    return Verdict("pass", which)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "the checker printed nothing"


@dataclass
class Score:
    benchmark: str
    group: str  # world size x device
    runs: int
    required: int
    minutes: float | None  # None: not a valid score
    note: str


def restarted(run: RunData) -> int:
    """Earlier attempts of the run (attempts/N/ or the summary's count)."""
    return max(len(run.attempts), int(run.summary.get("restarts") or 0))


def score_runs(runs: list[RunData], verdicts: list[Verdict]) -> list[Score]:
    """One score per (benchmark, world size, device). A run that missed the target or failed the
    checker counts as failed; MLPerf lets one failed run stand in for the slowest. A restarted run
    counts as failed too, as in `trainperf score` without --count-restarts."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, run in enumerate(runs):
        s = run.summary
        key = (_log_benchmark(run), f"{s.get('world_size', '?')} x {s.get('device', '?')}")
        groups.setdefault(key, []).append(i)
    out = []
    for (bench, group), idx in groups.items():
        required = required_runs(bench, runs[idx[0]].path)
        minutes, failed = [], 0
        for i in idx:
            if runs[i].summary["status"] == "success" and verdicts[i].status != "fail" and not restarted(runs[i]):
                minutes.append(float(runs[i].summary["time_to_train_s"]) / 60)
            else:
                failed += 1
        sc = olympic_score(minutes, failed, required)
        note = sc.message
        if any(verdicts[i].status == "n/a" for i in idx):
            note += "; some runs were not checked"
        n_re = sum(1 for i in idx if restarted(runs[i]))
        if n_re:
            note += (f"; {n_re} restarted run{'s' if n_re > 1 else ''} counted as failed (MLPerf counts the whole "
                     "wall clock; trainperf score --count-restarts scores them so)")
        out.append(Score(bench, group, len(idx), required, sc.minutes if sc.valid else None, note))
    return out
