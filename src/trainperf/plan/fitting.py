"""Fitting the calibration and measuring the band: the machinery behind `trainperf plan calibrate`,
apart from the path a user's plan takes.

- `fit`: the performance model's parameters (PARAMS) on the fit rows (NVIDIA's submissions),
  alternating the layout search per row with coordinate-wise golden-section search, layouts fixed;
- `measure_spread`: NVIDIA's own spread around the fitted model (`software_sd`);
- `measure_band`: the split-conformal configuration spread (`config_sd`) on the band-calibration
  half of the held-out rows; the evaluation half is where `plan validate` reports its coverage;
- `fit_megatron`: the three in turn on a set of results, for `plan calibrate` (the whole catalogue)
  and for `plan validate --holdout` (the catalogue less one group, plan/holdout.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.plan.calibration import Calibration, parse_calibration
from trainperf.plan.evidence import submitted as submitted_configs
from trainperf.plan.hardware import PRECISIONS, cluster, gpu_for_result, gpus
from trainperf.plan.perf import Estimate, Layout, Model
from trainperf.plan.results import FIT_SUBMITTERS, Result, csv_rows, load_results, submitter_key
from trainperf.plan.validate import Predictor, band_sd, summary, validate
from trainperf.plan.workload import max_precision, model_workload

PARAMS = {  # name -> (lower, upper) bounds for the fit
    "eff:hopper": (0.2, 0.95), "eff:blackwell": (0.2, 0.95), "eff:blackwell_ultra": (0.2, 0.95),
    "attn_ratio": (0.2, 1.0), "overlap": (0.0, 1.0), "run_overhead_s": (0.0, 300.0),
    "step_overhead_s": (0.0, 0.2), "fp4_share": (0.0, 1.0),
}


class Refit:
    """Fit rows searched once per fit round, then repriced at that layout under trial parameters."""

    def __init__(self, calib: Calibration):
        # the parameters describe the hardware at the model's own fastest layout: fitted with the
        # search unranked (with plan's published-first ranking the fit lands in a minimum whose
        # 512-H200 LoRA step is 12% under Azure's logged one; bench/results/plan_validation_record_2026-12-03_to_07.md)
        self.pred = Predictor(calib, explore=True)
        self.layouts: dict[Result, Layout] = {}

    def search(self, r: Result, cal: Calibration) -> bool:
        """Search row `r`'s layout under `cal`, in the format its own configs name; False when none
        runs."""
        row = self.pred.predict(r, cal, precision=own_precision(r))
        if row.prediction is None:
            return False
        self.layouts[r] = row.prediction.layout
        return True

    def minutes(self, r: Result, cal: Calibration) -> float:
        """Row `r` at its searched layout under `cal` (no search)."""
        m = Model(self.pred.benchmark(r), cluster(gpu_for_result(r.accelerator), r.n_gpus), cal, r.round)
        return m.estimate(self.layouts[r]).minutes


def _get(cal: Calibration, name: str) -> float:
    if name.startswith("eff:"):
        return cal.efficiency(name[4:])
    return getattr(cal, name)


def _set(cal: Calibration, name: str, v: float) -> Calibration:
    """`cal` with parameter `name` at `v`. While fitting, a generation not fitted yet is priced at
    the mean of those fitted so far (gemm_eff's "default", dropped when the fit ends): from a fixed
    0.6 instead, the first sweep pulls the fitted generations away from it and the fit settles in a
    worse of its near-equal minima (fit-row loss 0.0641 against 0.0626 after three rounds;
    bench/results/plan_validation_record_2026-12-03_to_07.md)."""
    if name.startswith("eff:"):
        eff = {g: x for g, x in cal.gemm_eff.items() if g != "default"}
        eff[name[4:]] = v
        return replace(cal, gemm_eff={**eff, "default": sum(eff.values()) / len(eff)})
    return replace(cal, **{name: v})


def _loss(refit: Refit, rows: list[Result], cal: Calibration) -> float:
    """Mean absolute log error with each row's layout held fixed (cheap: no search)."""
    errs = [abs(math.log(refit.minutes(r, cal) / r.minutes)) for r in rows if r in refit.layouts]
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
    refit = Refit(calib)
    cal = calib
    names = fitted_params(rows)
    for k in range(rounds):
        usable = [r for r in rows if refit.search(r, cal)]
        for _sweep in range(2):
            for name in names:
                lo, hi = PARAMS[name]
                best = _golden(lambda v: _loss(refit, usable, _set(cal, name, v)), lo, hi)
                cal = _set(cal, name, best)
        log(f"round {k + 1}: mean |log error| on {len(usable)} fit rows = {_loss(refit, usable, cal):.4f}")
    cal = replace(cal, gemm_eff={g: v for g, v in cal.gemm_eff.items() if g != "default"})
    return replace(cal, fitted_on=f"{len(rows)} MLPerf results submitted by {', '.join(FIT_SUBMITTERS)} "
                                  "on catalog GPUs (data/mlperf_results.csv); all other submitters held out",
                   fit_rows=len(rows), source="trainperf plan calibrate")


def own_precision(r: Result) -> str | None:
    """The one matmul format row `r`'s own configs name, where they name one its GPU has and its
    round allows; None where they name none or both (an FP8 and an FP4 variant shipped). A row that
    ran FP8 priced at the FP4 rate would pull the fitted efficiency down."""
    g = gpu_for_result(r.accelerator)
    if g is None:
        return None
    ps = {c.precision for c in submitted_configs(r.round, r.folder, r.benchmark, g.key, r.n_gpus) if c.precision}
    p = ps.pop() if len(ps) == 1 else None
    ok = p in g.precisions() and PRECISIONS.index(p) <= PRECISIONS.index(max_precision(r.round)) if p else False
    return p if ok else None


def may_run_fp4(r: Result) -> bool:
    """Whether fit row `r` may be priced in FP4: its GPU has FP4, its round allows it, and its own
    configs do not name FP8 alone."""
    g = gpu_for_result(r.accelerator)
    return (g is not None and "fp4" in g.precisions() and max_precision(r.round) == "fp4"
            and own_precision(r) in (None, "fp4"))


def fitted_params(results: list[Result]) -> list[str]:
    """The parameters the fit rows among `results` can tell: each generation's efficiency where
    there are rows of it, `fp4_share` where a row may run FP4 (else it would wander unconstrained)."""
    rows = [r for r in results if r.fit and gpu_for_result(r.accelerator) is not None]
    gens = {gpu_for_result(r.accelerator).generation for r in rows}
    fp4 = any(may_run_fp4(r) for r in rows)
    return [n for n in PARAMS if (n[4:] in gens if n.startswith("eff:") else n != "fp4_share" or fp4)]


def _log_residuals(pred: Predictor, rows: list[Result]) -> tuple[list[float], list[float], list[Result]]:
    """log(published / predicted) and the prediction's convergence spread for each row the model can
    predict, and those rows."""
    res, conv, used = [], [], []
    for r in rows:
        row = pred.predict(r)
        if row.prediction is not None:
            res.append(math.log(r.minutes / row.prediction.minutes))
            conv.append(row.prediction.band.convergence_sd)
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


def recalibrate(log=lambda msg: None) -> tuple[Calibration, dict]:
    """`plan calibrate`: fit the parameters, then measure both spreads of the band, each on the
    parameters as calibration.toml stores them (rounded), so that measuring again from the file
    gives the same figures; with the summary of the rows predicted under it."""
    cal = fit_megatron(load_results(), log=log)
    cal = fit_pytorch(parse_calibration(cal.to_toml()))
    return cal, summary(validate(cal, submitted=False))


def fit_megatron(results: list[Result], log=lambda msg: None) -> Calibration:
    """The megatron stack's calibration from `results`: the parameters and NVIDIA's spread on its
    fit rows (`fit_spread`), then the configuration spread on its band-calibration half, each step
    reading the previous one's values as calibration.toml stores them. `plan calibrate` passes the
    whole catalogue; the leave-one-group-out check (plan/holdout.py) passes it less one group."""
    return measure_band(parse_calibration(fit_spread(results, log).to_toml()), results)


def fit_spread(results: list[Result], log=lambda msg: None) -> Calibration:
    """The parameters fitted on the fit rows of `results`, and NVIDIA's spread measured around them."""
    return measure_spread(parse_calibration(fit(Calibration(), results, log=log).to_toml()), results)


# -- the pytorch stack: torchtitan's published benchmarks (H100 and A100) ------------------------

TORCHTITAN = Path(__file__).parent / "data" / "torchtitan.csv"
PYTORCH_PARAMS = {"scale": (0.3, 1.5), "overlap": (0.0, 1.0)}


@dataclass(frozen=True)
class TitanRow:
    """One row of torchtitan's benchmark tables: its GPU (hardware.toml), layout and what it measured."""

    table: int
    model: str
    gpu: str
    gpus: int
    layout: Layout
    seq_len: int
    compiled: bool | None  # None: the table does not say
    async_tp: bool
    tps_per_gpu: float
    memory_gib: float | None
    source: str

    @property
    def name(self) -> str:
        L = self.layout
        return (f"table {self.table} {self.model} {self.gpus} {self.gpu} fsdp {L.dp} tp {L.tp} pp {L.pp} cp {L.cp} "
                f"seq {self.seq_len} {L.precision}{' compiled' if self.compiled else ''}")

    @property
    def generation(self) -> str:
        return gpus()[self.gpu].generation


def load_torchtitan(path: Path | None = None) -> list[TitanRow]:
    p = path or TORCHTITAN
    out = []
    for i, r in csv_rows(p):
        try:
            lay = Layout(tp=int(r["tp"]), pp=int(r["pp"]), vpp=int(r["vpp"]), dp=int(r["fsdp"]), cp=int(r["cp"]),
                         mbs=int(r["microbatch"]), gbs=int(r["global_batch"]), recompute=r["recompute"],
                         precision="fp8" if r["float8"] == "true" else "bf16")
            compiled = {"true": True, "false": False, "": None}[r["compile"]]
            if r["gpu"] not in gpus() or r["model"] not in _shapes():
                raise ValueError(f"unknown gpu '{r['gpu']}' or model '{r['model']}'")
            out.append(TitanRow(int(r["table"]), r["model"], r["gpu"], int(r["gpus"]), lay, int(r["seq_len"]),
                                compiled, r["async_tp"] == "true", float(r["tps_per_gpu"]),
                                float(r["memory_gib"]) if r["memory_gib"] else None, r["source"]))
        except (KeyError, ValueError) as e:
            raise ConfigError(f"{p}:{i}: bad torchtitan row ({e})") from None
    return out


def fit_rows(rows: list[TitanRow]) -> list[TitanRow]:
    """The rows the pytorch stack is fitted on: all but those a table states ran eager (trainperf
    compiles; the A100 tables do not say)."""
    return [r for r in rows if r.compiled is not False]


@functools.lru_cache(maxsize=1)
def _shapes() -> dict:
    """The shapes torchtitan's rows name, from the published models' catalogue (its sources)."""
    from trainperf.plan.published import load_models

    return load_models()


def titan_estimate(row: TitanRow, cal: Calibration) -> Estimate:
    """Row `row` priced on the pytorch stack at its own layout, its model at the row's sequence."""
    s = _shapes()[row.model]
    b = model_workload(row.model, s.config(row.seq_len), row.layout.gbs, s.source)
    m = Model(b, cluster(row.gpu, row.gpus), cal, samples=float(row.layout.gbs), stack="pytorch")
    return m.estimate(row.layout)


def titan_error(row: TitanRow, cal: Calibration) -> float:
    """Signed relative error of the predicted tokens/s per GPU."""
    return titan_estimate(row, cal).tokens_per_s_per_gpu / row.tps_per_gpu - 1


def _set_pytorch(cal: Calibration, name: str, v: float) -> Calibration:
    """`name`: "overlap", or a generation whose efficiency share is set."""
    if name == "overlap":
        return replace(cal, stack_overlap={**cal.stack_overlap, "pytorch": v})
    scale = {**cal.stack_eff_scale, "pytorch": {**cal.stack_eff_scale.get("pytorch", {}), name: v}}
    return replace(cal, stack_eff_scale=scale)


def fit_pytorch(calib: Calibration, rows: list[TitanRow] | None = None) -> Calibration:
    """The pytorch stack's efficiency (a share of the megatron fit's) per GPU generation it has
    rows on, and its overlap of tp/cp/pp traffic, fitted by coordinate-wise golden-section search
    on torchtitan's rows (`fit_rows`): mean |log| error of tokens/s per GPU, each row at its own
    layout on its own GPU."""
    rows = fit_rows(rows if rows is not None else load_torchtitan())
    if not rows:
        raise ConfigError("calibrate: no torchtitan rows to fit the pytorch stack on")
    gens = sorted({r.generation for r in rows})

    def loss(cal: Calibration, on: list[TitanRow]) -> float:
        return sum(abs(math.log(1 + titan_error(r, cal))) for r in on) / len(on)

    cal = replace(calib, stack_eff_scale={**calib.stack_eff_scale, "pytorch": {g: 1.0 for g in gens}})
    cal = _set_pytorch(cal, "overlap", calib.overlap)
    # a generation's share moves only its own rows' errors; the overlap moves every row's
    params = [(g, PYTORCH_PARAMS["scale"], [r for r in rows if r.generation == g]) for g in gens]
    params.append(("overlap", PYTORCH_PARAMS["overlap"], rows))
    for _sweep in range(3):
        for name, (lo, hi), on in params:
            cal = _set_pytorch(cal, name, _golden(lambda v: loss(_set_pytorch(cal, name, v), on), lo, hi))
    by_gpu = ", ".join(f"{sum(r.gpu == g for r in rows)} on {g}" for g in sorted({r.gpu for r in rows}))
    on = (f"{len(rows)} rows of torchtitan's Llama benchmarks (data/torchtitan.csv: {by_gpu}; eager rows "
          "left out), tokens/s per GPU at each row's layout")
    return replace(cal, stack_fitted_on={**cal.stack_fitted_on, "pytorch": on})
