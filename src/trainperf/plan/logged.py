"""What published results' own logs say about their step and evaluation times.

A row's minutes error mixes the step time (what the performance model prices), the samples to
converge and the evaluations. `data/logged_steps.csv` holds, per results folder, the median
optimizer-step time and evaluation time its result logs record (written by
`bench/logged_steps.py` from the MLCommons results repositories), so `plan validate` can say how
much of a row's error is the step time itself. These figures are never fitted.

They also measure how fast the software moved: where NVIDIA ran the same benchmark on the same GPU
kind and count, global batch, parallel split and format in two rounds, the ratio of the two
logged steps is software alone (`software_trend`). The model has one efficiency per GPU
generation over all rounds, so a plan for a round after the newest results it was fitted on
assumes that round's software is no faster; `plan` says how far the measured trend would move it.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.plan.results import csv_rows

LOGGED = Path(__file__).parent / "data" / "logged_steps.csv"
METHODS = ("train_step_time", "throughput", "segments")
TREND_SUBMITTERS = ("NVIDIA",)  # the fit rows' software (validate.FIT_SUBMITTERS)


@dataclass(frozen=True)
class Logged:
    round: str
    benchmark: str  # MLPerf name
    submitter: str
    accelerator: str  # as the results table names it
    gpus: int
    gbs: int
    step_s: float  # median over the folder's logs of each log's median step time
    step_min_s: float
    step_max_s: float
    eval_s: float | None  # median evaluation time after the first; None where not logged
    logs: int
    method: str  # how the step time was read (bench/logged_steps.py)


def _row(d: dict, where: str) -> tuple[str, Logged]:
    try:
        lg = Logged(round=d["round"], benchmark=d["benchmark"], submitter=d["submitter"],
                    accelerator=d["accelerator"], gpus=int(d["gpus"]), gbs=int(d["global_batch_size"]),
                    step_s=float(d["step_s"]), step_min_s=float(d["step_min_s"]), step_max_s=float(d["step_max_s"]),
                    eval_s=float(d["eval_s"]) if d["eval_s"] else None, logs=int(d["logs"]), method=d["method"])
    except (KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"{where}: bad logged-steps row ({e})") from None
    if not (0 < lg.step_min_s <= lg.step_s <= lg.step_max_s) or lg.logs < 1 or lg.method not in METHODS:
        raise ConfigError(f"{where}: bad logged-steps row (step_s {lg.step_s} outside [{lg.step_min_s}, "
                          f"{lg.step_max_s}], logs {lg.logs}, method {lg.method!r})")
    if not d.get("source"):
        raise ConfigError(f"{where}: bad logged-steps row (no source)")
    return d["source"], lg


def load_logged(path: Path | None = None) -> dict[str, Logged]:
    """Logged times by the results row's `source` (its results folder); {} without the file. The
    package's own file is read once per process (plan and validate ask for it repeatedly)."""
    return _shipped() if path is None else _read(path)


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, Logged]:
    return _read(LOGGED)


def _read(p: Path) -> dict[str, Logged]:
    if not p.is_file():
        return {}
    return dict(_row(d, f"{p}:{i}") for i, d in csv_rows(p))


def relative_error(predicted: float, logged: float) -> float:
    """predicted / logged - 1: negative means the model is faster than the log."""
    return predicted / logged - 1


def round_index(round_: str) -> int:
    """MLPerf Training publishes two rounds a year, X.0 and X.1: their order as one count."""
    major, minor = (int(x) for x in round_.lstrip("v").split(".")[:2])
    return 2 * major + minor


@dataclass(frozen=True)
class SamePair:
    """One configuration NVIDIA ran in two rounds: the step times its logs record in each."""
    benchmark: str
    gpu: str
    gpus: int
    gbs: int
    shape: tuple[int, int, int]  # (tp, pp, cp)
    precision: str
    before: str
    after: str
    step_before_s: float
    step_after_s: float

    @property
    def per_round(self) -> float:
        """Step-time speed-up per round between the two (geometric)."""
        gap = round_index(self.after) - round_index(self.before)
        return (self.step_before_s / self.step_after_s) ** (1 / gap)

    def to_dict(self) -> dict:
        return {"benchmark": self.benchmark, "gpu": self.gpu, "gpus": self.gpus, "global_batch": self.gbs,
                "tp": self.shape[0], "pp": self.shape[1], "cp": self.shape[2], "precision": self.precision,
                "rounds": [self.before, self.after], "step_s": [self.step_before_s, self.step_after_s],
                "per_round": round(self.per_round, 4)}


@functools.lru_cache(maxsize=1)
def same_config_pairs() -> tuple[SamePair, ...]:
    """Consecutive rounds of each configuration (benchmark, GPU kind and count, global batch, tp, pp,
    cp and format, from the configuration names in published_layouts.csv) that NVIDIA ran in more
    than one round. A results folder whose configurations name several shapes or formats is left
    out: which one the logs ran is not known."""
    from trainperf.plan.evidence import published
    from trainperf.plan.hardware import gpu_for_result

    shapes: dict = {}
    for p in published():
        shapes.setdefault((p.round, p.submitter, p.benchmark, p.gpu, p.gpus), set()).add((p.shape, p.precision))
    runs: dict = {}
    for lg in load_logged().values():
        g = gpu_for_result(lg.accelerator)
        named = shapes.get((lg.round, lg.submitter, lg.benchmark, g.key if g else None, lg.gpus), set())
        if lg.submitter not in TREND_SUBMITTERS or len(named) != 1:
            continue
        shape, precision = next(iter(named))
        runs.setdefault((lg.benchmark, g.key, lg.gpus, lg.gbs, shape, precision), {})[lg.round] = lg.step_s
    out = []
    for (bench, gpu, gpus, gbs, shape, precision), by_round in sorted(runs.items()):
        rs = sorted(by_round, key=round_index)
        out += [SamePair(bench, gpu, gpus, gbs, shape, precision, a, b, by_round[a], by_round[b])
                for a, b in zip(rs, rs[1:])]
    return tuple(out)


@dataclass(frozen=True)
class Trend:
    """How far software moved a plan for a round after the newest logged results."""
    newest: str  # the newest round with logged NVIDIA steps
    rounds_ahead: int
    pairs: tuple[SamePair, ...]

    @property
    def per_round(self) -> tuple[float, float, float]:
        """(lowest, median, highest) step speed-up per round over the pairs."""
        f = [p.per_round for p in self.pairs]
        return min(f), statistics.median(f), max(f)

    def minutes(self, train_s: float, other_s: float) -> tuple[float, float, float]:
        """Minutes with the training time sped up by the (highest, median, lowest) per-round
        speed-up compounded over the rounds ahead; evaluations and fixed costs as they are."""
        lo, mid, hi = self.per_round
        return tuple((train_s / f ** self.rounds_ahead + other_s) / 60 for f in (hi, mid, lo))

    def to_dict(self, train_s: float, other_s: float) -> dict:
        lo, mid, hi = self.per_round
        fast, m, slow = self.minutes(train_s, other_s)
        return {"newest_logged_round": self.newest, "rounds_ahead": self.rounds_ahead,
                "per_round": {"lowest": round(lo, 4), "median": round(mid, 4), "highest": round(hi, 4)},
                "minutes_if_it_holds": round(m, 4), "minutes_if_it_holds_range": [round(fast, 4), round(slow, 4)],
                "pairs": [p.to_dict() for p in self.pairs]}


def software_trend(round_: str) -> Trend | None:
    """The measured trend, for a plan under `round_` newer than every logged NVIDIA round; None
    when the logs reach `round_` or no configuration was run twice."""
    pairs = same_config_pairs()
    rounds = [lg.round for lg in load_logged().values() if lg.submitter in TREND_SUBMITTERS]
    if not pairs or not rounds:
        return None
    newest = max(rounds, key=round_index)
    ahead = round_index(round_) - round_index(newest)
    return Trend(newest, ahead, pairs) if ahead > 0 else None


__all__ = ["LOGGED", "Logged", "SamePair", "Trend", "load_logged", "relative_error", "round_index",
           "same_config_pairs", "software_trend"]
