"""The model's few efficiency parameters, per GPU generation, and where they came from.

`calibration.toml` next to this file holds the fitted values (written by `trainperf plan calibrate`,
which also records the rows it was fitted on); `--calibrate RUNDIR` refits the compute efficiency of
one generation from a measured `trainperf run` (its summary.json).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainperf import atomic
from trainperf.config import ConfigError
from trainperf.plan.hardware import GENERATIONS

CALIB_FILE = Path(__file__).with_name("calibration.toml")

# Before any fit: GEMM efficiency typical of large bf16 matmuls through cuBLAS (~75-80% of dense
# peak on H100; anchors.md measured 790/989 = 80% on an H200 for an 8192^3 bf16 matmul).
DEFAULT_EFF = 0.6


@dataclass(frozen=True)
class Calibration:
    gemm_eff: dict = field(default_factory=dict)  # generation -> achieved share of dense peak
    attn_ratio: float = 0.45  # attention kernels' FLOP/s relative to dense bf16 peak (FlashAttention-2/3: ~40-75%)
    overlap: float = 0.7  # share of tensor-, pipeline- and context-parallel traffic that compute hides
    run_overhead_s: float = 0.0  # fixed time on the clock per run (start-up beyond the allowed init)
    step_overhead_s: float = 0.0  # per optimizer step (launch gaps, synchronisation)
    fp4_share: float = 1.0  # share of GEMM FLOPs that run at the FP4 rate when FP4 is chosen (rest FP8)
    shape_half_per_tflop: float = 0.065  # GEMM dim at which a GEMM reaches half its efficiency, per dense bf16 TFLOP/s
    # sd of log(published / predicted) of NVIDIA's own results, measured on the fit rows after the
    # fit (plan/interval.py); 0 = no band
    software_sd: float = 0.0
    # the extra spread of configurations NVIDIA did not submit, calibrated split-conformally on the
    # band-calibration half of the held-out rows (validate.band_half); 0 = NVIDIA's spread only
    config_sd: float = 0.0
    # the same, per benchmark (MLPerf name), where the band-calibration half has rows enough for
    # the 80% quantile on its own (Mondrian split-conformal); other benchmarks use `config_sd`
    config_sd_by_benchmark: dict = field(default_factory=dict)
    band_calibrated_on: str = "not calibrated"
    # per software stack other than megatron (plan/stack.py): its GEMM efficiency as a share of
    # the fitted megatron one, per GPU generation it was fitted on (stack -> generation -> share),
    # and its own overlap of tp/cp/pp traffic (fitting.fit_pytorch)
    stack_eff_scale: dict = field(default_factory=dict)
    stack_overlap: dict = field(default_factory=dict)
    stack_fitted_on: dict = field(default_factory=dict)
    fitted_on: str = "not fitted"
    fit_rows: int = 0
    source: str = "defaults"

    def efficiency(self, generation: str) -> float:
        return self.gemm_eff.get(generation, self.gemm_eff.get("default", DEFAULT_EFF))

    def efficiency_for(self, generation: str, stack: str = "megatron") -> float:
        return self.efficiency(generation) * self.stack_scale(generation, stack)

    def stack_scale(self, generation: str, stack: str) -> float:
        """The stack's share of the megatron efficiency on `generation`: its own fit where it has
        rows there, else the fit of the newest generation before it that has (after it, where none
        before has): software that reaches a share of one generation's peak is assumed to reach
        that share of its successor's until measured there."""
        fitted = self.stack_eff_scale.get(stack)
        if not fitted:
            return 1.0
        if generation in fitted:
            return fitted[generation]
        i = GENERATIONS.index(generation)
        before = [g for g in GENERATIONS[:i] if g in fitted]
        after = [g for g in GENERATIONS[i + 1:] if g in fitted]
        return fitted[before[-1] if before else after[0]]

    def overlap_for(self, stack: str = "megatron") -> float:
        return self.stack_overlap.get(stack, self.overlap)

    def config_sd_for(self, benchmark: str) -> float:
        """The configuration spread of `benchmark`'s band (MLPerf name)."""
        return self.config_sd_by_benchmark.get(benchmark, self.config_sd)

    def shape_half(self, gpu) -> float:
        """Bigger GPUs need bigger matmuls to fill: the half-efficiency size grows with peak."""
        return self.shape_half_per_tflop * gpu.tflops["bf16"]

    def to_toml(self) -> str:
        lines = ["# Fitted by `trainperf plan calibrate`; see docs/plan.md. Do not edit by hand.",
                 f'fitted_on = "{self.fitted_on}"', f"fit_rows = {self.fit_rows}",
                 f'source = "{self.source}"', f"attn_ratio = {self.attn_ratio:.4f}",
                 f"overlap = {self.overlap:.4f}", f"run_overhead_s = {self.run_overhead_s:.3f}",
                 f"step_overhead_s = {self.step_overhead_s:.5f}", f"fp4_share = {self.fp4_share:.4f}",
                 f"shape_half_per_tflop = {self.shape_half_per_tflop:.4f}",
                 f"software_sd = {self.software_sd:.4f}", f"config_sd = {self.config_sd:.4f}",
                 f'band_calibrated_on = "{self.band_calibrated_on}"', "", "[gemm_eff]"]
        lines += [f"{k} = {v:.4f}" for k, v in sorted(self.gemm_eff.items())]
        if self.config_sd_by_benchmark:
            lines += ["", "[config_sd_by_benchmark]"]
            lines += [f"{k} = {v:.4f}" for k, v in sorted(self.config_sd_by_benchmark.items())]
        for stack, by_gen in sorted(self.stack_eff_scale.items()):
            lines += ["", f"[stack_eff_scale.{stack}]"] + [f"{g} = {v:.4f}" for g, v in sorted(by_gen.items())]
        for name, table, fmt in (("stack_overlap", self.stack_overlap, "{:.4f}"),
                                 ("stack_fitted_on", self.stack_fitted_on, '"{}"')):
            if table:
                lines += ["", f"[{name}]"] + [f"{k} = {fmt.format(v)}" for k, v in sorted(table.items())]
        return "\n".join(lines) + "\n"


def load_calibration(path: Path | None = None) -> Calibration:
    p = path or CALIB_FILE
    if not p.is_file():
        return Calibration()
    return parse_calibration(p.read_text(encoding="utf-8"), str(p))


def parse_calibration(text: str, where: str = "calibration") -> Calibration:
    """A calibration from its TOML text; `parse_calibration(cal.to_toml())` is `cal` as stored
    (rounded as the file rounds it)."""
    try:
        t = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"calibration {where}: not valid TOML ({e})") from None
    known = {f for f in Calibration.__dataclass_fields__}
    bad = set(t) - known
    if bad:
        raise ConfigError(f"calibration {where}: unknown keys {sorted(bad)}")
    for stack, by_gen in t.get("stack_eff_scale", {}).items():
        odd = set(by_gen) - set(GENERATIONS) if isinstance(by_gen, dict) else {"(not a table)"}
        if odd:
            raise ConfigError(f"calibration {where}: stack_eff_scale.{stack}: unknown generations {sorted(odd)}")
    return Calibration(**t)


def save_calibration(cal: Calibration, path: Path | None = None) -> Path:
    p = path or CALIB_FILE
    atomic.write_text(p, cal.to_toml())
    return p


MIN_RUN_SHARE = 0.001


@dataclass(frozen=True)
class RunMeasurement:
    """What `--calibrate RUNDIR` reads from a run's summary.json."""

    tokens_per_s: float
    mfu: float
    peak_flops: float
    flops_per_token: float
    device: str
    world_size: int


def read_run(rundir: str | Path) -> RunMeasurement:
    p = Path(rundir) / "summary.json"
    if not p.is_file():
        raise ConfigError(f"--calibrate: {p} not found (expected a `trainperf run` directory)")
    try:
        d = atomic.read_json(p, ConfigError)
    except ConfigError as e:
        raise ConfigError(f"--calibrate: {e}") from None
    numbers = ("tokens_per_s", "mfu", "peak_flops", "flops_per_token")
    # the types summary.json is written with: a hand-edited or foreign file is refused, not coerced
    bad = [k for k in numbers if not _positive_number(d.get(k))]
    if not isinstance(d.get("device"), str) or not d["device"].strip():
        bad.append("device")
    ws = d.get("world_size")
    if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
        bad.append("world_size")
    if bad:
        raise ConfigError(f"--calibrate: {p} is not a trainperf summary (missing or invalid: {', '.join(bad)})")
    return RunMeasurement(tokens_per_s=float(d["tokens_per_s"]), mfu=float(d["mfu"]), peak_flops=float(d["peak_flops"]),
                          flops_per_token=float(d["flops_per_token"]), device=d["device"], world_size=ws)


def _positive_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def refit_from_run(cal: Calibration, generation: str, run: RunMeasurement, stack: str = "megatron") -> Calibration:
    """Set this generation's compute efficiency to the MFU the run measured.

    The run's MFU is model FLOPs over its peak: the share of peak its whole step achieved, a lower
    bound on the GEMM efficiency (the run also spent time in attention, element-wise work and
    communication). It is taken as the efficiency directly, so predictions from it are on the
    conservative side for a small model and close to it for a large one.
    """
    achieved = run.tokens_per_s * run.flops_per_token / (run.peak_flops * run.world_size)
    # below 0.1% of peak the run measured something other than the GPU's matmuls (a stalled input,
    # a toy model): as an efficiency it would stretch every step a thousandfold
    if not MIN_RUN_SHARE <= achieved <= 1.0:
        raise ConfigError(f"--calibrate: the run's achieved share of peak is {achieved:.2g}, outside "
                          f"[{MIN_RUN_SHARE}, 1]: not a measurement of the GPU's compute")
    why = f"{cal.source}; {generation} {stack} refit from a run on {run.device}"
    if stack != "megatron":  # the stack's share of the fitted megatron efficiency
        scale = {k: dict(v) for k, v in cal.stack_eff_scale.items()}
        scale.setdefault(stack, {})[generation] = achieved / cal.efficiency(generation)
        return replace(cal, stack_eff_scale=scale, source=why)
    eff = dict(cal.gemm_eff)
    eff[generation] = achieved
    return replace(cal, gemm_eff=eff, source=why)
