"""The run metadata of an MLPerf result log: one function from recipe + benchmark hooks + layout to
the key/value pairs logged between init_start and init_stop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainperf.config import Recipe
from trainperf.mlperf.benchmarks import BenchmarkHooks
from trainperf.mlperf.logger import C
from trainperf.parallel.dims import BatchGeometry, ParallelDims
from trainperf.train.optim import SCHEDULE_NAMES
from trainperf.provenance import code_version


def precision_name(precision: str) -> str:
    return "bfloat16" if precision == "bf16" else "fp32"


def submission_metadata(r: Recipe, platform: str) -> list[tuple[str, Any]]:
    """The submission keys, logged first (right after init_start)."""
    return [(C.SUBMISSION_ORG, os.environ.get("TRAINPERF_ORG", "trainperf")),
            (C.SUBMISSION_PLATFORM, platform),
            (C.SUBMISSION_DIVISION, C.CLOSED),
            (C.SUBMISSION_STATUS, C.RESEARCH),
            (C.SUBMISSION_BENCHMARK, r.benchmark.name)]


class _Collect:
    """Stands in for the log so that the benchmark hooks' keys land in the same list."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, Any]] = []

    def event(self, key: str, value: Any = None, **metadata: Any) -> None:
        self.pairs.append((key, value))


def run_metadata(r: Recipe, hooks: BenchmarkHooks, dims: ParallelDims, geometry: BatchGeometry, *, seed: int,
                 eval_samples: int, corpus_fingerprint: str, tokenizer: str, restarts: int) -> list[tuple[str, Any]]:
    """Hyperparameters, layout, precision and provenance, in the order the log carries them.
    Keys that differ by ruleset (optimizer names, benchmark extras) come from the benchmark hooks."""
    t, e = r.train, r.eval
    optimizer, extras = _Collect(), _Collect()
    hooks.log_optimizer(optimizer)  # names and keys differ by ruleset (gpt3: "adam")
    hooks.log_hyperparameters(extras)
    precision = precision_name(t.precision)
    code = code_version()
    return [
        (C.SEED, seed),
        (C.GLOBAL_BATCH_SIZE, t.global_batch_size),
        (C.MAX_SEQUENCE_LENGTH, r.model.seq_len),
        (C.GRADIENT_ACCUMULATION_STEPS, geometry.accum),
        (C.OPT_BASE_LR, t.lr),
        (C.OPT_END_LR, t.end_lr),
        (C.OPT_LR_WARMUP_STEPS, t.warmup_steps),
        (C.OPT_LR_DECAY_STEPS, t.decay_steps),
        (C.OPT_LR_DECAY_SCHEDULE, SCHEDULE_NAMES[t.schedule]),
        *([("opt_lr_cooldown_fraction", t.cooldown)] if t.schedule == "wsd" else []),
        *optimizer.pairs,
        (C.OPT_GRADIENT_CLIP_NORM, t.grad_clip),
        ("max_steps", r.total_steps),  # the schedule's length; a run cut short says so with status aborted
        (C.EVAL_SAMPLES, eval_samples),
        (C.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, "fp8" if t.fp8_linear else precision),
        (C.LOWEST_NUMERICAL_PRECISION_IN_ATTN, precision),
        (C.LOWEST_NUMERICAL_PRECISION_IN_COMM, dims.comm_precision(t.precision)),
        (C.TENSOR_PARALLELISM, dims.tp),
        (C.PIPELINE_PARALLELISM, dims.pp),
        (C.CONTEXT_PARALLELISM, dims.cp),
        *([("pipeline_schedule", r.parallel.pp_schedule), ("virtual_pipeline_parallelism", r.parallel.vpp)]
          if dims.pp > 1 else []),
        (C.EXPERT_PARALLELISM, 1),
        (C.MICRO_BATCH_SIZE, geometry.micro),
        (C.CONFIG_FILENAME, Path(r.source).name or "recipe.toml"),
        ("world_size", dims.world_size),
        ("parallel_layout", dims.to_dict()),
        ("corpus_fingerprint", corpus_fingerprint),
        ("tokenizer", tokenizer),
        ("eval_metric", e.metric),
        ("target_accuracy", e.target),
        ("trainperf_version", code["version"]),
        ("trainperf_commit", code["commit"] or "unknown"),
        ("trainperf_dirty", "unknown" if code["dirty"] is None else code["dirty"]),
        ("restarts", restarts),  # earlier attempts: MLPerf's clock started with the first of them
        *extras.pairs,
    ]
