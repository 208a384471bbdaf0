"""Predicted vs published time-to-train for every MLPerf result the catalog can model, and the fit
of the calibration parameters on a stated subset of those results.

Split: rows submitted by NVIDIA itself (the submitter whose software the others mostly run) are the
fit set; every other submitter's rows (Azure, Oracle, Dell, Lenovo, ...) are held out, including the
article's anchors (Azure's 10,752-H100 GPT-3 and 512-H200 LoRA results, Oracle's 512-H100 LoRA).
Rows on accelerators without a catalog entry (TPU, Gaudi, AMD Instinct, L40S) are listed as skipped.

The held-out rows are split again, by submitter, for the prediction band (band_half): the
band-calibration half sets the band's configuration spread (`config_sd`, measure_band), the
evaluation half is where the band's coverage is reported. The model's parameters read neither.
"""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.plan.calibration import Calibration
from trainperf.plan.hardware import cluster, gpu_for_result
from trainperf.plan.perf import Estimate, Layout, Model
from trainperf.plan.evidence import proven_precisions, proven_shapes
from trainperf.plan.evidence import submitted as submitted_configs
from trainperf.plan.hardware import PRECISIONS
from trainperf.plan.logged import Logged, load_logged, relative_error
from trainperf.plan.search import search
from trainperf.plan.workload import load_benchmark, max_precision

RESULTS = Path(__file__).parent / "data" / "mlperf_results.csv"
FIT_SUBMITTERS = ("NVIDIA",)
# one company under two names in the results repositories: the same side of the band split
SUBMITTER_ALIASES = {"qct": "quanta_cloud_technology", "smc": "supermicro"}
PARAMS = {  # name -> (lower, upper) bounds for the fit
    "eff:hopper": (0.2, 0.95), "eff:blackwell": (0.2, 0.95), "eff:blackwell_ultra": (0.2, 0.95),
    "attn_ratio": (0.2, 1.0), "overlap": (0.0, 1.0), "run_overhead_s": (0.0, 300.0),
    "step_overhead_s": (0.0, 0.2), "fp4_share": (0.0, 1.0),
}


@dataclass(frozen=True)
class Result:
    round: str
    benchmark: str
    submitter: str
    system: str
    accelerator: str
    n_gpus: int
    gbs: int
    minutes: float
    source: str

    @property
    def fit(self) -> bool:
        return self.submitter in FIT_SUBMITTERS

    @property
    def band_split(self) -> str:
        """fit (NVIDIA's rows), or the held-out half this row's submitter is in: calibration or evaluation."""
        return "fit" if self.fit else band_half(self.submitter)

    @property
    def key(self) -> str:
        return f"{self.round} {self.benchmark} {self.submitter} {self.n_gpus}x{self.accelerator}"

    @property
    def folder(self) -> str:
        """The submitter's folder name in the results repository (from `source`)."""
        return self.source.split("/results/")[0].rsplit("/", 1)[-1]


def submitter_key(name: str) -> str:
    """The company a submitter column names: lower case, a joint submission (Azure+NVIDIA,
    IBM+CoreWeave+NVIDIA) by its first-named submitter, aliases (QCT, smc) merged."""
    k = name.strip().lower().split("+")[0]
    return SUBMITTER_ALIASES.get(k, k)


def band_half(submitter: str) -> str:
    """Which half of the held-out rows a submitter's rows are in: 'calibration' when the last byte
    of the SHA-256 of its submitter_key is even, else 'evaluation'. Fixed by the name alone (not by
    any error), so all rows of one submitter are on one side, and a new submitter does not move
    the others. On the 132 held-out catalog rows of 2026-12-04: 53 rows of 9 submitters calibrate
    the band, 79 rows of 11 submitters evaluate it."""
    return "calibration" if hashlib.sha256(submitter_key(submitter).encode()).digest()[-1] % 2 == 0 else "evaluation"


def load_results(path: Path | None = None) -> list[Result]:
    p = path or RESULTS
    out = []
    with open(p, newline="", encoding="utf-8") as f:
        for i, r in enumerate(csv.DictReader(f), start=2):
            try:
                out.append(Result(round=r["round"].lstrip("v"), benchmark=r["benchmark"], submitter=r["submitter"],
                                  system=r["system"], accelerator=r["accelerator"],
                                  n_gpus=int(r["num_accelerators"]), gbs=int(r["global_batch_size"]),
                                  minutes=float(r["minutes"]), source=r["source"]))
            except (KeyError, ValueError) as e:
                raise ConfigError(f"{p}:{i}: bad results row ({e})") from None
    return out


@dataclass
class Row:
    result: Result
    estimate: Estimate | None
    reason: str = ""  # why there is no prediction
    submitted: Estimate | None = None  # at the layout the submission's config names, where it names one
    configs: tuple = ()  # evidence.Published: the submission's configs at its GPU kind and count
    logged: Logged | None = None  # the step and evaluation times its result logs record (plan/logged.py)

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.estimate.minutes / self.result.minutes - 1

    @property
    def submitted_error(self) -> float | None:
        return None if self.submitted is None else self.submitted.minutes / self.result.minutes - 1

    @property
    def step_error(self) -> float | None:
        """Predicted step time at the submitted layout against the logged one: the part of the
        error that is the performance model's, free of convergence and evaluations."""
        if self.submitted is None or self.logged is None:
            return None
        return relative_error(self.submitted.step_time_s, self.logged.step_s)

    @property
    def eval_error(self) -> float | None:
        """Predicted time of one evaluation (at the submitted layout) against the logged one."""
        e = self.submitted
        if e is None or self.logged is None or self.logged.eval_s is None or not e.evals:
            return None
        return relative_error(e.eval_s / e.evals, self.logged.eval_s)

    @property
    def config_precision(self) -> str:
        """The matmul format the submission's configs ran: fp8, fp4, fp8/fp4 (both shipped), or ''."""
        ps = sorted({c.precision for c in self.configs if c.precision}, key=PRECISIONS.index)
        return "/".join(ps)


class Predictor:
    """Predictions for published rows; keeps each row's benchmark and best layout for refits."""

    def __init__(self, calib: Calibration, explore: bool = False):
        """`explore`: rank layouts by predicted time only, as the fit does; otherwise as `plan`
        does, NVIDIA's published (tp, pp, cp) for the GPU family first."""
        self.cal = calib
        self.explore = explore
        self._bench: dict = {}
        self.layouts: dict[Result, Layout] = {}

    def _model(self, r: Result, cal: Calibration) -> Model | None:
        g = gpu_for_result(r.accelerator)
        if g is None:
            return None
        key = (r.benchmark, r.round)
        if key not in self._bench:
            self._bench[key] = load_benchmark(r.benchmark, r.round)
        return Model(self._bench[key], cluster(g, r.n_gpus), cal, r.round)

    def predict(self, r: Result, cal: Calibration | None = None, research: bool = True) -> Row:
        cal = cal or self.cal
        m = self._model(r, cal)
        if m is None:
            return Row(r, None, "no catalog entry for this accelerator")
        if not research and r in self.layouts:
            return Row(r, m.estimate(self.layouts[r]))
        res = search(m, r.n_gpus, gbs=r.gbs, ceiling=max_precision(r.round), top=1,
                     proven=None if self.explore else proven_shapes(m.b.mlperf, m.gpu.key, m.gpu.generation, m.b.round),
                     proven_precisions=None if self.explore else proven_precisions(m.b.mlperf, m.gpu.key, m.b.round))
        if not res.best:
            why = "no layout fits memory" if res.evaluated else f"no layout runs GBS {r.gbs} on {r.n_gpus} GPUs"
            return Row(r, None, why)
        self.layouts[r] = res.best[0].layout
        return Row(r, res.best[0])


    def with_submitted(self, row: Row) -> Row:
        """`row` plus the prediction at the (tp, pp, cp) the submission's configs name, in their
        precision when they name one; the rest of the layout searched. Rows whose configs name
        none, or several shapes, get none."""
        r = row.result
        g = gpu_for_result(r.accelerator)
        if row.estimate is None or g is None:
            return row
        configs = tuple(submitted_configs(r.round, r.folder, r.benchmark, g.key, r.n_gpus))
        row = replace(row, configs=configs)
        shapes = {c.shape for c in configs}
        if len(shapes) != 1:
            return row
        tp, pp, cp = shapes.pop()
        fix = {"tp": tp, "pp": pp, "cp": cp}
        prec = row.config_precision
        m = self._model(r, self.cal)
        res = search(m, r.n_gpus, gbs=r.gbs, ceiling=max_precision(r.round), top=1, fix=fix,
                     precision=prec if prec in PRECISIONS and prec in g.precisions() else None)
        return replace(row, submitted=res.best[0] if res.best else None)


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
    errs = [abs(r.error) for r in rows if r.estimate is not None]
    return 100 * sum(errs) / len(errs) if errs else None


def signed(rows: list[Row]) -> float | None:
    errs = [r.error for r in rows if r.estimate is not None]
    return 100 * sum(errs) / len(errs) if errs else None


def _inside(rows: list[Row]) -> tuple[int, int]:
    """(rows whose published minutes lie inside the predicted p10..p90 band, predicted rows)."""
    sel = [r for r in rows if r.estimate is not None]
    return sum(1 for r in sel if r.estimate.minutes_p10 <= r.result.minutes <= r.estimate.minutes_p90), len(sel)


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


def _stats(rows: list[Row], band: bool = True) -> dict:
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
            "logged_step": _errors([r.step_error for r in sel]),
            "logged_eval": _errors([r.eval_error for r in sel])}


def _errors(errs: list[float | None]) -> dict:
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
        sel = [r for r in rows if r.estimate is not None and r.result.band_split in halves]
        per = {b: {**_stats(rb, band), "named_layout": _named(rb)}
               for b in sorted({r.result.benchmark for r in sel}) for rb in [[r for r in sel if r.result.benchmark == b]]}
        out[split] = {**_stats(sel, band), "named_layout": _named(sel), "per_benchmark": per}
    if cross_sd is not None:
        cross = cross_fitted(rows, cross_sd, cross_by)
        h = out["held_out"]
        h["coverage_80_pct_cross_fitted"] = round(coverage(cross), 1) if cross else None
        h["coverage_80_ci90_cross_fitted"] = coverage_ci(cross) if cross else None
        for b, d in h["per_benchmark"].items():
            rb = [r for r in cross if r.result.benchmark == b]
            d["coverage_80_pct_cross_fitted"] = round(coverage(rb), 1)
            d["coverage_80_ci90_cross_fitted"] = coverage_ci(rb)
    out["skipped"] = sum(1 for r in rows if r.estimate is None)
    return out


def cross_fitted(rows: list[Row], other_sd: float, other_by: dict | None = None) -> list[Row]:
    """The held-out rows, each with the band calibrated on the half it is not in: evaluation-half
    rows keep the shipped band (calibrated on the band-calibration half), band-calibration-half rows
    get the configuration spread calibrated on the evaluation half: their benchmark's in
    `other_by`, else `other_sd` (two-fold cross-conformal, split by submitter)."""
    other_by = other_by or {}
    return [replace(r, estimate=replace(r.estimate, sd_config=other_by.get(r.result.benchmark, other_sd)))
            if r.result.band_split == "calibration" else r
            for r in rows if r.estimate is not None and not r.result.fit]


# -- calibration fit --------------------------------------------------------------------------

def _get(cal: Calibration, name: str) -> float:
    if name.startswith("eff:"):
        return cal.efficiency(name[4:])
    return getattr(cal, name)


def _set(cal: Calibration, name: str, v: float) -> Calibration:
    if name.startswith("eff:"):
        eff = dict(cal.gemm_eff)
        eff[name[4:]] = v
        return replace(cal, gemm_eff=eff)
    return replace(cal, **{name: v})


def _loss(pred: Predictor, rows: list[Result], cal: Calibration) -> float:
    """Mean absolute log error with each row's layout held fixed (cheap: no search)."""
    errs = []
    for r in rows:
        row = pred.predict(r, cal, research=False)
        if row.estimate is not None:
            errs.append(abs(math.log(row.estimate.minutes / r.minutes)))
    return sum(errs) / len(errs) if errs else float("inf")


def _golden(f, lo: float, hi: float, iters: int = 24) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit(calib: Calibration, results: list[Result] | None = None, rounds: int = 3,
        log=lambda msg: None) -> Calibration:
    """Fit PARAMS on the fit rows: alternate (a) the layout search per row under the current
    parameters with (b) coordinate-wise golden-section search of each parameter, layouts fixed."""
    allr = results if results is not None else load_results()
    rows = [r for r in allr if r.fit and gpu_for_result(r.accelerator) is not None]
    if not rows:
        raise ConfigError("calibrate: no fit rows (NVIDIA submissions on catalog GPUs) in the results")
    # the parameters describe the hardware at the model's own fastest layout: fitted with the search
    # unranked (with plan's published-first ranking the fit lands in a minimum whose 512-H200 LoRA
    # step is 12% under Azure's logged one; docs/plan.md)
    pred = Predictor(calib, explore=True)
    cal = calib
    names = fitted_params(rows)
    for k in range(rounds):
        usable = [r for r in rows if pred.predict(r, cal).estimate is not None]
        for _sweep in range(2):
            for name in names:
                lo, hi = PARAMS[name]
                best = _golden(lambda v: _loss(pred, usable, _set(cal, name, v)), lo, hi)
                cal = _set(cal, name, best)
        log(f"round {k + 1}: mean |log error| on {len(usable)} fit rows = {_loss(pred, usable, cal):.4f}")
    return replace(cal, fitted_on=f"{len(rows)} MLPerf results submitted by {', '.join(FIT_SUBMITTERS)} "
                                  "on catalog GPUs (data/mlperf_results.csv); all other submitters held out",
                   fit_rows=len(rows), source="trainperf plan calibrate")


def fitted_params(results: list[Result]) -> list[str]:
    gens = {gpu_for_result(r.accelerator).generation for r in results
            if r.fit and gpu_for_result(r.accelerator) is not None}
    return [n for n in PARAMS if not n.startswith("eff:") or n[4:] in gens]


def _log_residuals(pred: Predictor, rows: list[Result]) -> tuple[list[float], list[float], list[Result]]:
    """log(published / predicted) and the prediction's convergence spread for each row the model can
    predict, and those rows."""
    res, conv, used = [], [], []
    for r in rows:
        row = pred.predict(r)
        if row.estimate is not None:
            res.append(math.log(r.minutes / row.estimate.minutes))
            conv.append(row.estimate.sd_convergence)
            used.append(r)
    return res, conv, used


def measure_spread(calib: Calibration, results: list[Result] | None = None) -> Calibration:
    """`calib` with `software_sd` measured on the fit rows (plan/interval.py); held-out rows are
    not read."""
    from trainperf.plan import interval

    allr = results if results is not None else load_results()
    fit_rows = [r for r in allr if r.fit]
    res, conv, _ = _log_residuals(Predictor(replace(calib, software_sd=0.0)), fit_rows)
    try:
        sd = interval.software_sd(res, conv, len(fitted_params(allr)))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return replace(calib, software_sd=sd)


def measure_band(calib: Calibration, results: list[Result] | None = None,
                 half: str = "calibration") -> Calibration:
    """`calib` with `config_sd` calibrated split-conformally on the band-calibration half of the
    held-out rows (band_half; interval.config_sd), around `calib.software_sd`; the evaluation half
    is not read. The rows are predicted as `plan` predicts them (published layouts first).
    `half="evaluation"` calibrates on the other half instead: `plan validate`'s cross-fitted
    coverage judges the band-calibration rows by it (`cross_fitted`); it is never shipped."""
    if half not in ("calibration", "evaluation"):
        raise ValueError(f"measure_band: half must be calibration or evaluation, not {half!r}")
    allr = results if results is not None else load_results()
    pred = Predictor(replace(calib, config_sd=0.0, config_sd_by_benchmark={}))
    sd, by, used = band_sd([pred.predict(r) for r in allr if r.band_split == half], calib.software_sd, half)
    subs = {submitter_key(r.result.submitter) for r in used}
    on = (f"{len(used)} held-out results of {len(subs)} submitters, the band-calibration half (submitters whose "
          "name hashes even, validate.band_half), split-conformal, pooled and per benchmark with 4 rows or more "
          "(Mondrian); coverage is reported on the other half")
    if half == "evaluation":
        on = f"{len(used)} held-out results of {len(subs)} submitters, the evaluation half (cross-fitting only)"
    return replace(calib, config_sd=sd, config_sd_by_benchmark=by, band_calibrated_on=on)


def band_sd(rows: list[Row], software_sd: float, half: str) -> tuple[float, dict[str, float], list[Row]]:
    """(config_sd, config_sd per benchmark, the rows they were read from): the split-conformal
    configuration spread of the predicted rows in band half `half`, around `software_sd`, over all
    of them, and for each benchmark with rows enough for the 80% quantile on its own (Mondrian
    conformal: at least 4). Only the predicted minutes are read, which the band does not move, so
    rows predicted with any `config_sd` give the same figures."""
    used = [r for r in rows if r.estimate is not None and r.result.band_split == half]
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

    res = [math.log(r.result.minutes / r.estimate.minutes) for r in rows]
    sd = interval.config_sd(res, [r.estimate.sd_convergence for r in rows], software_sd)
    # rounded up to the 4 decimals calibration.toml keeps: rounded down, the row at the quantile
    # would fall just outside its band and the calibration rows would hold one fewer than conformal asks
    return math.ceil(round(sd * 1e4, 6)) / 1e4


# -- the article's checks ---------------------------------------------------------------------

ANCHORS = Path(__file__).parent / "data" / "anchors.toml"


@dataclass(frozen=True)
class AnchorCheck:
    """One published result predicted three ways: as `plan` would (layout searched, RCP-mean
    convergence), with the submitted layout, and as run (submitted layout, the submitter's own
    convergence and evaluation count read from its logs)."""

    name: str
    published: float
    searched: Estimate
    submitted: Estimate
    as_run_minutes: float | None  # None when the logs were not read
    logged_step_s: float | None
    logged_samples: float | None

    def to_dict(self) -> dict:
        err = lambda m: None if m is None else round(100 * (m / self.published - 1), 2)  # noqa: E731
        return {
            "name": self.name, "published_minutes": self.published,
            "searched": {"minutes": round(self.searched.minutes, 4), "error_pct": err(self.searched.minutes),
                         "layout": self.searched.layout.short(), "samples": round(self.searched.samples, 1)},
            "submitted_layout": {"minutes": round(self.submitted.minutes, 4), "error_pct": err(self.submitted.minutes),
                                 "layout": self.submitted.layout.short(),
                                 "step_time_s": round(self.submitted.step_time_s, 4),
                                 "logged_step_s": self.logged_step_s},
            "as_run": None if self.as_run_minutes is None else {
                "minutes": round(self.as_run_minutes, 4), "error_pct": err(self.as_run_minutes),
                "samples": self.logged_samples},
        }


def load_anchors(path: Path | None = None) -> dict:
    import tomllib

    p = path or ANCHORS
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"anchors {p}: {e}") from None


def check_anchors(calib: Calibration, path: Path | None = None) -> tuple[list[AnchorCheck], dict | None]:
    """Each anchor predicted three ways, and the speed-up between the two named in [speedup]."""
    from trainperf.plan.api import make_plan
    from trainperf.plan.search import parse_layout

    data = load_anchors(path)
    out = []
    for a in data.get("anchor", []):
        kw = dict(gbs=a["gbs"], round_=a["round"], ceiling=max_precision(a["round"]), calib=calib, top=1)
        searched = make_plan(a["benchmark"], a["gpu"], a["gpus"], **kw).best
        lay = parse_layout(a["submitted_layout"])
        submitted = make_plan(a["benchmark"], a["gpu"], a["gpus"], layout=lay, **kw).best
        as_run = None
        if "logged_samples" in a:
            # the same layout, so the same step and evaluation times: only the step count (the
            # submitter's own samples) and the evaluation count (it may evaluate before the rules'
            # skip ends) change
            e = submitted
            lo, hi = a["logged_evals"]
            as_run = (a["logged_samples"] / e.layout.gbs * e.step_time_s + (lo + hi) / 2 * e.eval_s / e.evals
                      + e.overhead_s) / 60
        out.append(AnchorCheck(a["name"], a["published_minutes"], searched, submitted, as_run,
                               a.get("logged_step_s"), a.get("logged_samples")))
    sp = data.get("speedup")
    speed = None
    if sp:
        by = {c.name: c for c in out}
        f, s = by[sp["faster"]], by[sp["slower"]]
        speed = {"name": sp["name"], "published": sp["published"],
                 "searched": round(s.searched.minutes / f.searched.minutes, 3),
                 "submitted_layout": round(s.submitted.minutes / f.submitted.minutes, 3),
                 "as_run": (round(s.as_run_minutes / f.as_run_minutes, 3)
                            if f.as_run_minutes and s.as_run_minutes else None)}
    return out, speed
