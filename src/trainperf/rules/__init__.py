"""The MLPerf LLM benchmarks' closed rules as data (`mlperf.toml` here) and what they derive from a GBS.

A leaf: it imports only the standard library and `trainperf.errors`, so the recipes' loader, the
MLPerf hooks and the torch-free planner can all read the one statement of each rule.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from trainperf.errors import ConfigError

RULES_FILE = Path(__file__).with_name("mlperf.toml")


@dataclass(frozen=True)
class BenchmarkRules:
    """One benchmark's rules; a field left at None is one the rules leave free."""

    name: str
    family: str
    seq_len: int
    eval_every_samples: int
    skip_evals: tuple[float, int] = (0.0, 0)
    eval_samples: int | None = None
    eval_documents: int | None = None
    beta1: float | None = None
    beta2: float | None = None
    eps: float | None = None
    weight_decay: float | None = None
    grad_clip: float | None = None
    lr: dict | None = None
    lr_by_gbs: tuple = ()
    warmup_samples: int | None = None
    schedule_samples: int | None = None
    schedule_steps: int | None = None
    decay_minus_warmup: bool = True
    end_lr: float | None = None
    end_lr_ratio: float | None = None
    init_checkpoint_samples: int | None = None
    gbs_range: tuple[int, int] | None = None
    lora_rank: int | None = None
    lora_alpha: float | None = None
    lora_dropout: float | None = None
    needs_init_checkpoint: bool = False

    # ---- formulas of the global batch size

    def skip(self, gbs: int) -> int:
        """Evaluations not scored at the start: FLOOR(a * GBS + b)."""
        a, b = self.skip_evals
        return math.floor(a * gbs + b)

    def lrs(self, gbs: int) -> tuple[float, ...]:
        """The base learning rates the rules allow at `gbs` (empty: any)."""
        if self.lr is not None:
            # the rules' own form, so the value is exactly what the checker computes
            return (self.lr["base"] * gbs / self.lr["at_gbs"],)
        for upto, values in self.lr_by_gbs:
            if gbs <= upto:
                return tuple(values)
        return ()

    def warmup_steps(self, gbs: int) -> int | None:
        return None if self.warmup_samples is None else math.ceil(self.warmup_samples / gbs)

    def schedule_end(self, gbs: int) -> int | None:
        """The step at which the schedule ends (its total steps)."""
        if self.schedule_samples is not None:
            return math.ceil(self.schedule_samples / gbs)
        return self.schedule_steps

    def decay_steps(self, gbs: int, warmup: int) -> int | None:
        end = self.schedule_end(gbs)
        if end is None:
            return None
        return end - warmup if self.decay_minus_warmup else end

    def end_lr_for(self, lr: float) -> float | None:
        if self.end_lr is not None:
            return self.end_lr
        return None if self.end_lr_ratio is None else self.end_lr_ratio * lr

    def init_checkpoint_step(self, gbs: int) -> int | None:
        s = self.init_checkpoint_samples
        return None if s is None else math.ceil(s / gbs)

    def derived(self, gbs: int, lr: float | None = None, warmup: int | None = None) -> dict[str, object]:
        """Recipe values (`section.key`) the rules fix at `gbs`: the LR (when one value is allowed;
        else `lr` as given), warm-up, decay, end LR and skipped evaluations. A smoke run states its
        GBS and takes these, so no hand-computed value can drift from the rule."""
        out: dict[str, object] = {"eval.skip_evals": self.skip(gbs)}
        allowed = self.lrs(gbs)
        if len(allowed) == 1:
            lr = allowed[0]
            out["train.lr"] = lr
        w = self.warmup_steps(gbs)
        if w is not None:
            out["train.warmup_steps"] = w
        warm = w if w is not None else warmup
        if warm is not None and self.decay_steps(gbs, warm) is not None:
            out["train.decay_steps"] = self.decay_steps(gbs, warm)
        if lr is not None and self.end_lr_for(lr) is not None:
            out["train.end_lr"] = self.end_lr_for(lr)
        return out


def _build(name: str, raw: dict) -> BenchmarkRules:
    known = {f.name for f in fields(BenchmarkRules)} - {"name"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{RULES_FILE}: [{name}] has unknown rule {unknown[0]!r}")
    kw = dict(raw)
    for key in ("skip_evals", "gbs_range"):
        if key in kw:
            kw[key] = tuple(kw[key])
    if "lr_by_gbs" in kw:
        kw["lr_by_gbs"] = tuple((int(upto), tuple(vals)) for upto, vals in kw["lr_by_gbs"])
    return BenchmarkRules(name=name, **kw)


@lru_cache(maxsize=1)
def all_rules() -> dict[str, BenchmarkRules]:
    with RULES_FILE.open("rb") as f:
        raw = tomllib.load(f)
    return {name: _build(name, body) for name, body in raw.items()}


def rules_for(benchmark: str) -> BenchmarkRules | None:
    """The rules of an official benchmark (`benchmark.rules` of a recipe), None for our own."""
    return all_rules().get(benchmark)
