"""Predicted vs published training throughput of runs outside MLPerf (`plan validate --published`).

`data/published_runs.csv` lists runs that vendors and projects published with their layout and
their tokens/s per GPU: NVIDIA's NeMo / Megatron-Bridge performance tables (the `megatron` stack)
and PyTorch-native runs (torchtitan, MosaicML's Composer/FSDP benchmarks: the `pytorch` stack).
`data/published_models.csv` holds the shapes they name. Each run is predicted through `make_plan`,
the path `trainperf plan --model` takes, with its own stack and its whole layout fixed, and its
tokens/s per GPU compared with the published one. Nothing here is fitted: the megatron stack is
fitted on MLPerf results only and the pytorch stack on torchtitan's H100 and A100 tables
(data/torchtitan.csv), which this catalogue does not repeat.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from trainperf.config import ConfigError, ModelConfig
from trainperf.errors import PlanError
from trainperf.plan.calibration import Calibration
from trainperf.plan.hardware import get_gpu
from trainperf.plan.prediction import Prediction
from trainperf.plan.results import csv_rows
from trainperf.plan.stack import get_stack
from trainperf.plan.validate import relative_error_stats
from trainperf.plan.workload import Benchmark, check_model, model_workload

DATA = Path(__file__).parent / "data"
RUNS = DATA / "published_runs.csv"
MODELS = DATA / "published_models.csv"
_MODEL_INTS = ("layers", "d_model", "heads", "kv_heads", "ffn", "vocab")
_RUN_INTS = ("gpus", "tp", "pp", "vpp", "cp", "dp", "mbs", "gbs", "seq_len")


@dataclass(frozen=True)
class Shape:
    """One published model shape (published_models.csv), at any sequence length."""

    name: str
    family: str
    dims: dict  # layers, d_model, heads, kv_heads, ffn, vocab
    tied: bool
    mlp_act: str
    source: str

    def config(self, seq_len: int) -> ModelConfig:
        d = self.dims
        cfg = ModelConfig(family=self.family, n_layer=d["layers"], d_model=d["d_model"], n_head=d["heads"],
                          n_kv_head=d["kv_heads"], d_ff=d["ffn"], vocab_size=d["vocab"], seq_len=seq_len,
                          tie_embeddings=self.tied, bias=self.family == "gpt", mlp_act=self.mlp_act)
        check_model(cfg, f"{MODELS.name} {self.name}")
        return cfg


@dataclass(frozen=True)
class Run:
    """One published run (published_runs.csv): what ran, on what, and its tokens/s per GPU."""

    table: str  # the source table it comes from
    model: str
    gpu: str
    gpus: int
    stack: str
    layout: dict  # tp, pp, vpp, cp, dp, mbs, gbs, recompute, precision: make_plan's --layout
    seq_len: int
    fsdp: bool  # weights, gradients and optimizer state sharded over the data-parallel ranks
    tokens_per_s_per_gpu: float
    note: str
    source: str
    # the megatron stack's software settings where the run's recipe states them (software_source):
    grad_bytes: float = 4.0  # gradient buffer per parameter: 4 (FP32, Megatron's default) or 2 (BF16)
    pp_split_embedding_loss: bool = False  # account_for_embedding/loss_in_pipeline_split

    @property
    def name(self) -> str:
        L = self.layout
        v = f" vpp={L['vpp']}" if L["vpp"] > 1 else ""
        return (f"{self.model} {self.gpus}x{self.gpu} tp={L['tp']} pp={L['pp']}{v} cp={L['cp']} dp={L['dp']}"
                f"{' fsdp' if self.fsdp else ''} mbs={L['mbs']} gbs={L['gbs']} seq={self.seq_len} {L['precision']}")


def _ints(r: dict, keys: tuple, where: str) -> dict:
    out = {}
    for k in keys:
        try:
            out[k] = int(r.get(k) or "")
        except ValueError:
            raise ConfigError(f"{where}: {k} must be an integer, got {r.get(k)!r}") from None
        if out[k] < 1:
            raise ConfigError(f"{where}: {k} must be positive, got {out[k]}")
    return out


def _bool(v: str | None, key: str, where: str) -> bool:
    if v not in ("true", "false"):
        raise ConfigError(f"{where}: {key} must be true or false, got {v!r}")
    return v == "true"


def load_models(path: Path | None = None) -> dict[str, Shape]:
    """The shapes by name; a malformed row is one ConfigError naming its file and line."""
    p = path or MODELS
    out = {}
    for line, r in csv_rows(p):
        where = f"{p.name}:{line}"
        if r.get("family") not in ("llama", "gpt"):
            raise ConfigError(f"{where}: family must be llama or gpt, got {r.get('family')!r}")
        if r.get("mlp_act") not in ("swiglu", "gelu", "relu2"):
            raise ConfigError(f"{where}: mlp_act must be swiglu, gelu or relu2, got {r.get('mlp_act')!r}")
        if not (r.get("source") or "").startswith("https://"):
            raise ConfigError(f"{where}: source must be an https URL")
        out[r["model"]] = Shape(r["model"], r["family"], _ints(r, _MODEL_INTS, where),
                                _bool(r.get("tied"), "tied", where), r["mlp_act"], r["source"])
    return out


def _run(r: dict, where: str, models: dict) -> Run:
    n = _ints(r, _RUN_INTS, where)
    if r.get("model") not in models:
        raise ConfigError(f"{where}: model {r.get('model')!r} is not in {MODELS.name}")
    try:  # an unknown GPU kind or stack: their own one-line message, with the row
        get_gpu(r.get("gpu") or "")
        get_stack(r.get("stack") or "")
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    if n["tp"] * n["pp"] * n["cp"] * n["dp"] != n["gpus"]:
        raise ConfigError(f"{where}: tp*pp*cp*dp = {n['tp'] * n['pp'] * n['cp'] * n['dp']}, not the {n['gpus']} GPUs")
    if r.get("recompute") not in ("none", "selective", "full"):
        raise ConfigError(f"{where}: recompute must be none, selective or full, got {r.get('recompute')!r}")
    if r.get("precision") not in ("bf16", "fp16", "fp8", "fp4"):
        raise ConfigError(f"{where}: precision must be bf16, fp16, fp8 or fp4, got {r.get('precision')!r}")
    try:
        tps = float(r.get("tokens_per_s_per_gpu") or "")
    except ValueError:
        raise ConfigError(f"{where}: tokens_per_s_per_gpu must be a number, got {r.get('tokens_per_s_per_gpu')!r}") from None
    if tps <= 0:
        raise ConfigError(f"{where}: tokens_per_s_per_gpu must be positive, got {tps}")
    if not (r.get("source") or "").startswith("https://"):
        raise ConfigError(f"{where}: source must be an https URL")
    if r.get("grad_bytes") not in ("2", "4"):
        raise ConfigError(f"{where}: grad_bytes must be 2 (BF16) or 4 (FP32), got {r.get('grad_bytes')!r}")
    layout = {k: n[k] for k in ("tp", "pp", "vpp", "cp", "dp", "mbs", "gbs")}
    layout.update(recompute=r["recompute"], precision=r["precision"])
    return Run(r.get("table") or "", r["model"], r["gpu"], n["gpus"], r["stack"], layout, n["seq_len"],
               _bool(r.get("fsdp"), "fsdp", where), tps, r.get("note") or "", r["source"], float(r["grad_bytes"]),
               _bool(r.get("pp_split_embedding_loss"), "pp_split_embedding_loss", where))


def load_runs(path: Path | None = None, models: dict | None = None) -> list[Run]:
    """The published runs; a malformed row is one ConfigError naming its file and line."""
    p = path or RUNS
    models = load_models() if models is None else models
    return [_run(r, f"{p.name}:{line}", models) for line, r in csv_rows(p)]


@dataclass
class Row:
    run: Run
    prediction: Prediction | None
    reason: str = ""  # why there is no prediction
    # "layout": the planner cannot be asked for this layout (a missing option, a split it refuses)
    refused: str = ""
    # priced, but the memory model says the layout does not fit, though it ran ('needs X GB of Y GB')
    over_memory: str | None = None

    @property
    def predicted(self) -> float | None:
        return None if self.prediction is None else self.prediction.estimate.tokens_per_s_per_gpu

    @property
    def error(self) -> float | None:
        """Signed relative error of the predicted tokens/s per GPU."""
        p = self.predicted
        return None if p is None else p / self.run.tokens_per_s_per_gpu - 1

    @property
    def generation(self) -> str:
        return get_gpu(self.run.gpu).generation

    def to_dict(self) -> dict:
        r, e = self.run, self.error
        d = {"table": r.table, "model": r.model, "gpu": r.gpu, "generation": self.generation, "gpus": r.gpus,
             "stack": r.stack, "layout": r.layout, "fsdp": r.fsdp, "seq_len": r.seq_len,
             "published_tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
             "predicted_tokens_per_s_per_gpu": None if e is None else round(self.predicted, 1),
             "error_pct": None if e is None else round(100 * e, 2), "source": r.source}
        if self.prediction is None:
            d["refused"], d["reason"] = self.refused, self.reason
        else:
            est = self.prediction.estimate
            d["memory_gb_per_gpu"] = round(est.memory.total / 1e9, 2)
            d["memory_capacity_gb"] = round(est.capacity / 1e9, 2)
            d["fits_memory"] = self.over_memory is None
        return d


def workload(run: Run, shapes: dict) -> Benchmark:
    """The run's model at its sequence length and global batch, as `plan --model` prices it."""
    s = shapes[run.model]
    b = model_workload(run.model, s.config(run.seq_len), run.layout["gbs"], s.source)
    return replace(b, grad_bytes=run.grad_bytes, pp_split_counts_embedding_and_loss=run.pp_split_embedding_loss)


def planner_stack(run: Run) -> str:
    """The `--stack` that prices the run: Megatron runs with Megatron-FSDP take `megatron-fsdp`."""
    return "megatron-fsdp" if run.stack == "megatron" and run.fsdp else run.stack


def predict_run(run: Run, shapes: dict, calib: Calibration) -> Row:
    """`make_plan` at the run's GPU kind and count, stack and whole layout."""
    from trainperf.plan.api import make_plan

    stack = planner_stack(run)
    if get_stack(stack).fully_sharded != run.fsdp:
        return Row(run, None, f"the {stack} stack has no {'fully sharded' if run.fsdp else 'unsharded'} mode", "layout")
    try:
        plan = make_plan(workload(run, shapes), run.gpu, run.gpus, layout=dict(run.layout), calib=calib, top=1,
                         stack=stack)
    except ConfigError as e:
        return Row(run, None, str(e), "layout")
    except PlanError as e:
        return Row(run, None, str(e), "layout")
    return Row(run, plan.best, over_memory=plan.over_memory)


def _stats(rows: list[Row]) -> dict:
    e = relative_error_stats([r.error for r in rows])
    return {"rows": len(rows), "predicted": e["rows"], "mape": e.get("mape"), "mean_signed_pct": e.get("mean_signed_pct")}


@dataclass
class Report:
    rows: list[Row]
    calibration: str  # what the calibration was fitted on

    def groups(self) -> dict:
        """Statistics by stack, and by stack and GPU generation."""
        out: dict = {}
        for stack in sorted({r.run.stack for r in self.rows}):
            sel = [r for r in self.rows if r.run.stack == stack]
            gens = sorted({r.generation for r in sel})
            out[stack] = {**_stats(sel), "by_generation": {g: _stats([r for r in sel if r.generation == g])
                                                           for g in gens}}
        return out

    def to_dict(self) -> dict:
        return {"summary": {"all": _stats(self.rows), "by_stack": self.groups()},
                "not_expressible": self.refused("layout"),
                "over_memory_model": sum(1 for r in self.rows if r.over_memory is not None),
                "calibration": self.calibration, "rows": [r.to_dict() for r in self.rows]}

    def refused(self, kind: str) -> int:
        return sum(1 for r in self.rows if r.refused == kind)


def validate_published(calib: Calibration, runs: list[Run] | None = None, shapes: dict | None = None) -> Report:
    """Every published run predicted through `make_plan` with its own stack and layout."""
    shapes = load_models() if shapes is None else shapes
    runs = load_runs(models=shapes) if runs is None else runs
    on = f"megatron: {calib.fitted_on}; pytorch: {calib.stack_fitted_on.get('pytorch', 'not fitted')}"
    return Report([predict_run(r, shapes, calib) for r in runs], on)


__all__ = ["Run", "Row", "Report", "Shape", "load_models", "load_runs", "predict_run", "validate_published"]
