"""Leave-one-group-out validation: `trainperf plan validate --holdout round|generation|submitter|benchmark`.

For each group of the catalogue's rows (an MLPerf round, a GPU generation, a submitter, a
benchmark), the megatron calibration is refitted on the other rows with the code that fits the
shipped one (fitting.fit_megatron: parameters on NVIDIA's rows, NVIDIA's spread, the band on the
band-calibration half), and the group's rows are predicted through `make_plan` under it. A row is
never predicted by a calibration that read it, so the error says how far the fit carries to a
round, a GPU generation, a submitter or a benchmark it has not seen; the shipped split (NVIDIA's
rows fitted, everyone else's held out) mixes all of those into one population.

Fitting machinery: nothing on a user's plan path imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainperf.config import ConfigError
from trainperf.plan.calibration import Calibration, parse_calibration
from trainperf.plan import fitting
from trainperf.plan.hardware import gpu_for_result
from trainperf.plan.results import Result, load_results, submitter_key
from trainperf.mlperf.rulesets import version_key
from trainperf.plan.validate import Predictor, Row, error_stats, row_dict

GROUPINGS = {  # --holdout name -> a row's group
    "round": lambda r: r.round,
    "generation": lambda r: gpu.generation if (gpu := gpu_for_result(r.accelerator)) else None,
    "submitter": lambda r: submitter_key(r.submitter),
    "benchmark": lambda r: r.benchmark,
}


@dataclass
class Fold:
    """One group's rows, predicted by the calibration refitted without them."""

    group: str
    rows: list[Row]
    calibration: Calibration | None  # None: no refit (see `reason`)
    reason: str = ""

    @property
    def predicted(self) -> list[Row]:
        return [r for r in self.rows if r.prediction is not None]

    def to_dict(self) -> dict:
        cal = self.calibration
        return {"group": self.group, **error_stats(self.predicted), "skipped": len(self.rows) - len(self.predicted),
                "reason": self.reason or None,
                "refit": None if cal is None else {
                    "fit_rows": cal.fit_rows, "gemm_eff": {k: round(v, 4) for k, v in sorted(cal.gemm_eff.items())},
                    "fp4_share": round(cal.fp4_share, 4), "software_sd": cal.software_sd,
                    "config_sd": cal.config_sd},
                "predictions": [row_dict(r) for r in self.rows]}


@dataclass
class Holdout:
    """Every group's fold, and the error over all of them (each row predicted once, by its fold)."""

    by: str
    folds: list[Fold] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [r for f in self.folds for r in f.predicted]

    def overall(self) -> dict:
        rows = self.rows
        return {"all": error_stats(rows), "NVIDIA": error_stats([r for r in rows if r.result.fit]),
                "others": error_stats([r for r in rows if not r.result.fit])}

    def to_dict(self) -> dict:
        return {"holdout": self.by, "overall": self.overall(), "groups": [f.to_dict() for f in self.folds]}


def _order(by: str, group: str):
    return version_key(group) if by == "round" else (0, 0, group)


class _Refits:
    """fit_megatron's two steps for the rest of each fold, the first (parameters and NVIDIA's
    spread, which read only the fit rows) once per set of fit rows: leaving out a submitter other
    than NVIDIA changes only the band."""

    def __init__(self):
        self.fitted: dict = {}

    def __call__(self, rest: list[Result]) -> Calibration:
        key = frozenset(r for r in rest if r.fit)
        if key not in self.fitted:
            try:
                self.fitted[key] = fitting.fit_spread(rest)
            except ConfigError as e:
                self.fitted[key] = e
        got = self.fitted[key]
        if isinstance(got, ConfigError):
            raise got
        return fitting.measure_band(parse_calibration(got.to_toml()), rest)


def holdout(by: str, results: list[Result] | None = None, log=lambda msg: None) -> Holdout:
    """Leave each `by` group out in turn: refit on the rest, predict the group as `plan` would."""
    if by not in GROUPINGS:
        raise ConfigError(f"--holdout: one of {', '.join(GROUPINGS)}, not '{by}'")
    allr = results if results is not None else load_results()
    key = GROUPINGS[by]
    # a group is formed only by rows the model can price: a submitter with TPUs or Gaudis alone is none
    groups = sorted({key(r) for r in allr if gpu_for_result(r.accelerator) is not None}, key=lambda g: _order(by, g))
    refit = _Refits()
    out = Holdout(by)
    for g in groups:
        mine = [r for r in allr if key(r) == g]
        rest = [r for r in allr if key(r) != g]
        try:
            cal = refit(rest)
        except ConfigError as e:
            out.folds.append(Fold(g, [Row(r, None, "no refit") for r in mine], None, str(e)))
            continue
        pred = Predictor(cal)
        out.folds.append(Fold(g, [pred.predict(r) for r in mine], cal))
        log(f"{by} {g}: {len(out.folds[-1].predicted)} of {len(mine)} rows predicted, refit on {cal.fit_rows} fit rows")
    return out
