"""The optimizer, its learning-rate schedule and the autocast context of a recipe."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch

from trainperf.config import Recipe


def lr_at(step: int, r: Recipe) -> float:
    """Linear warm-up from 0 to lr, then cosine to end_lr over decay_steps, then end_lr."""
    t = r.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.decay_steps))
    return t.end_lr + (t.lr - t.end_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, r: Recipe, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not norms, biases). `fused` picks the implementation."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": r.train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    impl = r.train.fused
    if impl == "auto":
        impl = "fused" if device.type in ("cuda", "cpu") else "foreach"
    kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    return torch.optim.AdamW(groups, lr=r.train.lr, betas=(r.train.beta1, r.train.beta2), eps=r.train.eps, **kw)


def autocast_ctx(r: Recipe, device: torch.device):
    if r.train.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


class Optimizers:
    """One optimizer per model part (a rank's pipeline stages; one part without a pipeline), stepped
    together: torch's state-dict API maps an optimizer's state to the names of one module's parameters."""

    def __init__(self, parts: list[torch.nn.Module], r: Recipe, device: torch.device):
        self.parts = parts
        self.opts = [build_optimizer(p, r, device) for p in parts]

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.opts for g in o.param_groups]

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)
