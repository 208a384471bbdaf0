"""Predicted vs published time-to-train for every MLPerf result the catalogue (plan/results.py)
can model, each predicted through `make_plan` as `trainperf plan` predicts it, and the statistics
of the errors and of the band's coverage, by split, benchmark, submitter and round.

Rows on accelerators without a catalog entry (TPU, Gaudi, AMD Instinct, L40S) are listed as skipped.
The fit of the calibration (plan/fitting.py) reads only the fit rows; the band's configuration
spread only the band-calibration half of the held-out rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.errors import PlanError
from trainperf.plan.calibration import Calibration
from trainperf.plan.evidence import submitted as submitted_configs
from trainperf.plan.hardware import PRECISIONS, gpu_for_result
from trainperf.plan.logged import Logged, load_logged, relative_error
from trainperf.plan.prediction import Prediction
from trainperf.mlperf.rulesets import version_key
from trainperf.plan.results import Result, load_results
from trainperf.plan.workload import Benchmark, load_benchmark, max_precision


@dataclass
class Row:
    result: Result
    prediction: Prediction | None
    reason: str = ""  # why there is no prediction
    submitted: Prediction | None = None  # at the layout the submission's config names, where it names one
    configs: tuple = ()  # evidence.Published: the submission's configs at its GPU kind and count
    logged: Logged | None = None  # the step and evaluation times its result logs record (plan/logged.py)

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.prediction.minutes / self.result.minutes - 1

    @property
    def submitted_error(self) -> float | None:
        return None if self.submitted is None else self.submitted.minutes / self.result.minutes - 1

    @property
    def step_error(self) -> float | None:
        """Predicted step time at the submitted layout against the logged one: the part of the
        error that is the performance model's, free of convergence and evaluations."""
        if self.submitted is None or self.logged is None:
            return None
        return relative_error(self.submitted.estimate.step_time_s, self.logged.step_s)

    @property
    def eval_error(self) -> float | None:
        """Predicted time of one evaluation (at the submitted layout) against the logged one."""
        e = None if self.submitted is None else self.submitted.estimate
        if e is None or self.logged is None or self.logged.eval_s is None or not e.evals:
            return None
        return relative_error(e.eval_s / e.evals, self.logged.eval_s)

    @property
    def config_precision(self) -> str:
        """The matmul format the submission's configs ran: fp8, fp4, fp8/fp4 (both shipped), or ''."""
        ps = sorted({c.precision for c in self.configs if c.precision}, key=PRECISIONS.index)
        return "/".join(ps)


class Predictor:
    """Predictions for published rows through `make_plan`, the path `trainperf plan` takes."""

    def __init__(self, calib: Calibration, explore: bool = False):
        """`explore`: rank layouts by predicted time only, as the fit does; otherwise as `plan`
        does, NVIDIA's published (tp, pp, cp) for the GPU family first."""
        self.cal = calib
        self.explore = explore
        self._bench: dict = {}

    def benchmark(self, r: Result) -> Benchmark:
        key = (r.benchmark, r.round)
        if key not in self._bench:
            self._bench[key] = load_benchmark(r.benchmark, r.round)
        return self._bench[key]

    def plan(self, r: Result, cal: Calibration | None = None, layout: dict | None = None,
             precision: str | None = None, explore: bool | None = None):
        """`make_plan` for row `r`: its GPU kind and count, global batch and round."""
        from trainperf.plan.api import make_plan

        return make_plan(self.benchmark(r), gpu_for_result(r.accelerator), r.n_gpus, gbs=r.gbs, round_=r.round,
                         ceiling=max_precision(r.round), calib=cal or self.cal, top=1, layout=layout,
                         precision=precision, explore=self.explore if explore is None else explore)

    def predict(self, r: Result, cal: Calibration | None = None, precision: str | None = None) -> Row:
        if gpu_for_result(r.accelerator) is None:
            return Row(r, None, "no catalog entry for this accelerator")
        try:
            return Row(r, self.plan(r, cal, precision=precision).best)
        except PlanError as e:
            why = "no layout fits memory" if e.args and "no layout fits in memory" in e.args[0] else \
                f"no layout runs GBS {r.gbs} on {r.n_gpus} GPUs"
            return Row(r, None, why)

    def with_submitted(self, row: Row) -> Row:
        """`row` plus the prediction at the (tp, pp, cp) the submission's configs name, in their
        precision when they name one; the rest of the layout searched (by predicted time). Rows
        whose configs name none, or several shapes, get none."""
        r = row.result
        g = gpu_for_result(r.accelerator)
        if row.prediction is None or g is None:
            return row
        configs = tuple(submitted_configs(r.round, r.folder, r.benchmark, g.key, r.n_gpus))
        row = replace(row, configs=configs)
        shapes = {c.shape for c in configs}
        if len(shapes) != 1:
            return row
        tp, pp, cp = shapes.pop()
        prec = row.config_precision
        try:
            best = self.plan(r, layout={"tp": tp, "pp": pp, "cp": cp}, explore=True,
                             precision=prec if prec in PRECISIONS and prec in g.precisions() else None).best
        except (PlanError, ConfigError):
            best = None
        return replace(row, submitted=best)


def validate(calib: Calibration, results: list[Result] | None = None, submitted: bool = True) -> list[Row]:
    """Every row predicted as `plan` would; with `submitted`, also at its submission's named layout
    and with the step and evaluation times its logs record."""
    p = Predictor(calib)
    rows = [p.predict(r) for r in (results if results is not None else load_results())]
    if not submitted:
        return rows
    logged = load_logged()
    return [replace(p.with_submitted(row), logged=logged.get(row.result.source)) for row in rows]


def mape(rows: list[Row]) -> float | None:
    errs = [abs(r.error) for r in rows if r.prediction is not None]
    return 100 * sum(errs) / len(errs) if errs else None


def signed(rows: list[Row]) -> float | None:
    errs = [r.error for r in rows if r.prediction is not None]
    return 100 * sum(errs) / len(errs) if errs else None


def _inside(rows: list[Row]) -> tuple[int, int]:
    """(rows whose published minutes lie inside the predicted p10..p90 band, predicted rows)."""
    sel = [r for r in rows if r.prediction is not None]
    return sum(1 for r in sel if r.prediction.minutes_p10 <= r.result.minutes <= r.prediction.minutes_p90), len(sel)


def coverage(rows: list[Row]) -> float | None:
    """Share of rows whose published minutes lie inside the predicted p10..p90 band, in %."""
    inside, n = _inside(rows)
    return 100 * inside / n if n else None


def coverage_ci(rows: list[Row]) -> list[float] | None:
    """The exact 90% interval (in %) of the coverage the rows measure (interval.coverage_interval):
    where it contains 80, these rows cannot tell the band from a calibrated one."""
    from trainperf.plan.interval import coverage_interval

    inside, n = _inside(rows)
    return [round(100 * x, 1) for x in coverage_interval(inside, n)] if n else None


def error_stats(rows: list[Row], band: bool = True) -> dict:
    d = {"rows": len(rows), "mape": round(mape(rows), 2) if rows else None,
         "mean_signed_pct": round(signed(rows), 2) if rows else None}
    if band:
        d["coverage_80_pct"] = round(coverage(rows), 1) if rows else None
        d["coverage_80_ci90"] = coverage_ci(rows) if rows else None
    return d


def _named(rows: list[Row]) -> dict:
    """Searched and submitted-layout error on the rows whose submission names its layout."""
    sel = [r for r in rows if r.submitted is not None]
    if not sel:
        return {"rows": 0}
    sub = [abs(r.submitted_error) for r in sel]
    return {"rows": len(sel), "searched_mape": round(mape(sel), 2),
            "submitted_mape": round(100 * sum(sub) / len(sub), 2),
            "submitted_mean_signed_pct": round(100 * sum(r.submitted_error for r in sel) / len(sel), 2),
            "logged_step": relative_error_stats([r.step_error for r in sel]),
            "logged_eval": relative_error_stats([r.eval_error for r in sel])}


def relative_error_stats(errs: list[float | None]) -> dict:
    """Rows, MAPE and mean signed error (in %) of the relative errors that exist."""
    e = [x for x in errs if x is not None]
    if not e:
        return {"rows": 0}
    return {"rows": len(e), "mape": round(100 * sum(map(abs, e)) / len(e), 2),
            "mean_signed_pct": round(100 * sum(e) / len(e), 2)}


SPLITS = {  # summary key -> the rows' band_split values
    "fit": ("fit",), "held_out": ("calibration", "evaluation"),
    "band_calibration": ("calibration",), "evaluation": ("evaluation",),
}


def summary(rows: list[Row], cross_sd: float | None = None, cross_by: dict | None = None) -> dict:
    """MAPE, mean signed error and 80%-band coverage per benchmark and overall, fit and held-out
    rows apart, and on the rows that name their layout the searched and submitted-layout MAPE.
    The held-out rows are also summarised per band half: `evaluation` carries the band's coverage
    (the rows it was not calibrated on), `band_calibration` the rows that set `config_sd` (their
    coverage is the calibration's own, about 80% by construction). `held_out` carries coverage only
    cross-fitted: with `cross_sd` (and `cross_by`, per benchmark), the configuration spread
    calibrated on the evaluation half (`measure_band(..., half="evaluation")`), each held-out row is
    judged by a band calibrated on the other half (`cross_fitted`), so no row is judged by a band
    fitted to it."""
    out: dict = {}
    for split, halves in SPLITS.items():
        band = split != "held_out"
        sel = [r for r in rows if r.prediction is not None and r.result.band_split in halves]
        per = {b: {**error_stats(rb, band), "named_layout": _named(rb)}
               for b in sorted({r.result.benchmark for r in sel}) for rb in [[r for r in sel if r.result.benchmark == b]]}
        out[split] = {**error_stats(sel, band), "named_layout": _named(sel), "per_benchmark": per}
    if cross_sd is not None:
        cross = cross_fitted(rows, cross_sd, cross_by)
        h = out["held_out"]
        h["coverage_80_pct_cross_fitted"] = round(coverage(cross), 1) if cross else None
        h["coverage_80_ci90_cross_fitted"] = coverage_ci(cross) if cross else None
        for b, d in h["per_benchmark"].items():
            rb = [r for r in cross if r.result.benchmark == b]
            d["coverage_80_pct_cross_fitted"] = round(coverage(rb), 1)
            d["coverage_80_ci90_cross_fitted"] = coverage_ci(rb)
    out["by_population"] = populations(rows)
    out["skipped"] = sum(1 for r in rows if r.prediction is None)
    return out


MODERN_ROUND = (5, 0)  # rounds from v5.0 on: the newest software generation the fit rows mostly come from


def populations(rows: list[Row]) -> dict:
    """The error on populations the split into fit and held-out rows mixes: NVIDIA's own results
    (the fit's) against every other submitter's, and the rounds before v5.0 against v5.0 and
    later, each also per round. Fitting and checking on one population hides how far the model
    carries to another; these show it."""
    sel = [r for r in rows if r.prediction is not None]
    groups = {
        "submitter": {"NVIDIA": [r for r in sel if r.result.fit], "others": [r for r in sel if not r.result.fit]},
        "round": {"before 5.0": [r for r in sel if version_key(r.result.round) < MODERN_ROUND],
                  "5.0 and later": [r for r in sel if version_key(r.result.round) >= MODERN_ROUND]},
        "each_round": {x: [r for r in sel if r.result.round == x]
                       for x in sorted({r.result.round for r in sel}, key=version_key)},
    }
    others_old = [r for r in groups["submitter"]["others"] if version_key(r.result.round) < MODERN_ROUND]
    groups["submitter"]["others, before 5.0"] = others_old
    return {k: {g: error_stats(rs) for g, rs in v.items() if rs} for k, v in groups.items()}


def cross_fitted(rows: list[Row], other_sd: float, other_by: dict | None = None) -> list[Row]:
    """The held-out rows, each with the band calibrated on the half it is not in: evaluation-half
    rows keep the shipped band (calibrated on the band-calibration half), band-calibration-half rows
    get the configuration spread calibrated on the evaluation half: their benchmark's in
    `other_by`, else `other_sd` (two-fold cross-conformal, split by submitter)."""
    other_by = other_by or {}
    def other(r: Row) -> Row:
        band = replace(r.prediction.band, config_sd=other_by.get(r.result.benchmark, other_sd))
        return replace(r, prediction=replace(r.prediction, band=band))

    return [other(r) if r.result.band_split == "calibration" else r
            for r in rows if r.prediction is not None and not r.result.fit]


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 2)


def row_dict(r: Row) -> dict:
    """One row of `plan validate --json`."""
    x, p, s = r.result, r.prediction, r.submitted
    return {
        "round": x.round, "benchmark": x.benchmark, "submitter": x.submitter, "accelerator": x.accelerator,
        "gpus": x.n_gpus, "global_batch_size": x.gbs, "actual_minutes": x.minutes,
        "split": "fit" if x.fit else "held_out", "band_half": None if x.fit else x.band_split,
        "predicted_minutes": round(p.minutes, 4) if p else None,
        "predicted_p10": round(p.minutes_p10, 4) if p else None,
        "predicted_p90": round(p.minutes_p90, 4) if p else None,
        "error_pct": round(100 * r.error, 2) if p else None,
        "layout": p.layout.to_dict() if p else None, "skipped": r.reason or None,
        "config_precision": r.config_precision or None,
        "configs": [c.source for c in r.configs],
        "submitted_layout": None if s is None else {
            "minutes": round(s.minutes, 4), "error_pct": round(100 * r.submitted_error, 2),
            "layout": s.layout.to_dict(), "step_s": round(s.estimate.step_time_s, 5),
            "step_error_pct": _pct(r.step_error), "eval_error_pct": _pct(r.eval_error)},
        "logged": None if r.logged is None else {"step_s": r.logged.step_s, "eval_s": r.logged.eval_s,
                                                 "logs": r.logged.logs, "method": r.logged.method},
        "source": x.source}


def picked(only: str, benchmark: str) -> bool:
    """--benchmark ONLY names this results row's benchmark: its MLPerf name ('gpt3') or a name
    containing it ('gpt3_175b')."""
    return benchmark in only


@dataclass
class Validation:
    """`plan validate`: every row, the summary, the band's calibration and the article's checks."""

    rows: list[Row]
    summary: dict
    calibration: Calibration
    cross_sd: float | None
    cross_by: dict | None
    anchors: list
    speedup: dict | None
    table: Path | None = None  # `--results`: the table predicted instead of the catalogue

    def to_dict(self) -> dict:
        cal = self.calibration
        # the catalogue's output keeps its keys; another table is named, predicted with no refit
        named = {} if self.table is None else {"results": str(self.table), "refitted": False}
        return {"stack": "megatron", **named, "summary": self.summary,
                "calibration": {"fitted_on": cal.fitted_on, "source": cal.source, "software_sd": cal.software_sd,
                                "config_sd": cal.config_sd, "config_sd_by_benchmark": cal.config_sd_by_benchmark,
                                "band_calibrated_on": cal.band_calibrated_on,
                                "config_sd_evaluation_half": self.cross_sd,
                                "config_sd_by_benchmark_evaluation_half": self.cross_by},
                "anchors": [a.to_dict() for a in self.anchors], "speedup": self.speedup,
                "rows": [row_dict(r) for r in self.rows]}


def band_sd(rows: list[Row], software_sd: float, half: str) -> tuple[float, dict[str, float], list[Row]]:
    """(config_sd, config_sd per benchmark, the rows they were read from): the split-conformal
    configuration spread of the predicted rows in band half `half`, around `software_sd`, over all
    of them, and for each benchmark with rows enough for the 80% quantile on its own (Mondrian
    conformal: at least 4). Only the predicted minutes are read, which the band does not move, so
    rows predicted with any `config_sd` give the same figures."""
    used = [r for r in rows if r.prediction is not None and r.result.band_split == half]
    by = {}
    for b in sorted({r.result.benchmark for r in used}):
        try:
            by[b] = _conformal([r for r in used if r.result.benchmark == b], software_sd)
        except ValueError:
            continue  # too few rows: this benchmark's band uses the pooled spread
    try:
        sd = _conformal(used, software_sd)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return sd, by, used


def _conformal(rows: list[Row], software_sd: float) -> float:
    from trainperf.plan import interval

    res = [math.log(r.result.minutes / r.prediction.minutes) for r in rows]
    sd = interval.config_sd(res, [r.prediction.band.convergence_sd for r in rows], software_sd)
    # rounded up to the 4 decimals calibration.toml keeps: rounded down, the row at the quantile
    # would fall just outside its band and the calibration rows would hold one fewer than conformal asks
    return math.ceil(round(sd * 1e4, 6)) / 1e4


def run_validation(cal: Calibration, only: str | None = None, results_csv: Path | None = None) -> Validation:
    """Every catalogue row predicted through `make_plan` (`only`: the rows of one benchmark), the
    cross-fitted band, and with all benchmarks the article's checks. `results_csv`: another table
    of results in the catalogue's columns instead (results the fit never saw); the article's checks
    are the catalogue's, so they are left out then."""
    from trainperf.plan.anchors import check_anchors

    results = load_results(results_csv)
    if not results:
        raise ConfigError(f"{results_csv or 'the catalogue'}: no result rows")
    if only and not any(picked(only, r.benchmark) for r in results):
        raise ConfigError(f"--benchmark: no published rows for '{only}'")
    rows = validate(cal, results)
    # the cross-fitted coverage's other band, from every benchmark's evaluation-half rows just
    # predicted, as the shipped one came from every benchmark's band-calibration half (measure_band);
    # a catalogue measurement: another table is judged by the shipped band alone
    cross = cal.config_sd > 0 and results_csv is None
    cross_sd, cross_by = band_sd(rows, cal.software_sd, "evaluation")[:2] if cross else (None, None)
    if only:
        rows = [r for r in rows if picked(only, r.result.benchmark)]
    s = summary(rows, cross_sd, cross_by)
    anchors, speedup = check_anchors(cal) if not only and results_csv is None else ([], None)
    return Validation(rows, s, cal, cross_sd, cross_by, anchors, speedup, results_csv)
