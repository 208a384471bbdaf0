"""The optimizer, its learning-rate schedule and the autocast context of a recipe."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch

from trainperf.config import Recipe
from trainperf.model.transformer import MLP, Attention
from trainperf.parallel.apply import unwrap
from trainperf.train.muon import Muon


SCHEDULE_NAMES = {"cosine": "cosine with linear warmup", "wsd": "warmup-stable-decay"}


def lr_at(step: int, r: Recipe) -> float:
    """Linear warm-up from 0 to lr, then over decay_steps to end_lr, then end_lr. The decay is a
    cosine (`schedule = "cosine"`), or for "wsd" lr held until the last `cooldown` fraction of
    decay_steps and then linear to end_lr: a long stable phase and a short anneal reach a lower loss
    at a known step than a cosine spread over the same steps (Hu et al., MiniCPM, 2024)."""
    t = r.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.decay_steps))
    if t.schedule == "wsd":
        frac = max(0.0, (progress - (1.0 - t.cooldown)) / t.cooldown)
        return t.lr + (t.end_lr - t.lr) * frac
    return t.end_lr + (t.lr - t.end_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def muon_params(model: torch.nn.Module) -> set[int]:
    """The parameters Muon updates: the blocks' linear weight matrices. The embedding and the head
    are lookups and a classifier rather than hidden transforms (and the tied pair is both), so they
    stay with AdamW, as do the 1-D norms and biases and LoRA adapters."""
    plain = unwrap(model)  # DDP's wrapper prefixes every name with "module."
    return {id(m.weight) for name, m in plain.named_modules()
            if isinstance(m, torch.nn.Linear) and name.startswith("layers.") and m.weight.requires_grad}


def attention_heads(model: torch.nn.Module) -> dict[torch.Tensor, tuple[int, int]]:
    """Each attention projection's heads as (dim, n) blocks: wq, wk, wv by rows (a head's outputs),
    wo by columns (its inputs)."""
    out: dict[torch.Tensor, tuple[int, int]] = {}
    for m in unwrap(model).modules():
        if isinstance(m, Attention):
            out |= {m.wq.weight: (0, m.n_head), m.wk.weight: (0, m.n_kv_head), m.wv.weight: (0, m.n_kv_head),
                    m.wo.weight: (1, m.n_head)}
    return out


def gate_up_pairs(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each gated MLP's gate and up weights (w1, w3), which read the same input."""
    return [(m.w1.weight, m.w3.weight) for m in unwrap(model).modules()
            if isinstance(m, MLP) and m.gated and all(isinstance(w, torch.nn.Linear) for w in (m.w1, m.w3))]


def build_optimizer(model: torch.nn.Module, r: Recipe, device: torch.device) -> list[torch.optim.Optimizer]:
    """AdamW, weight decay on matrices only (not norms, biases); `fused` picks its implementation.
    With `optimizer = "muon"`, Muon (torch's, trainperf.train.muon) takes the blocks' matrices (`muon_params`) beside it."""
    t = r.train
    params = [p for p in model.parameters() if p.requires_grad]
    to_muon = muon_params(model) if t.optimizer == "muon" else set()
    matrices = [p for p in params if id(p) in to_muon]
    decay = [p for p in params if p.dim() >= 2 and id(p) not in to_muon]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    impl = t.fused
    if impl == "auto":
        impl = "fused" if device.type in ("cuda", "cpu") else "foreach"
    kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    opts: list[torch.optim.Optimizer] = [
        torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps, **kw)]
    if matrices:
        muon_lr = t.muon_lr or t.lr
        # match_rms_adamw scales each update to AdamW's RMS (0.2 sqrt(max(rows, cols))), so one LR
        # schedule drives both optimizers; lr_scale carries muon_lr's ratio to train.lr through it
        # Newton-Schulz in the run's format: bf16 only where the run found bf16 matmuls fast
        ns_dtype = torch.bfloat16 if t.precision == "bf16" else torch.float32
        c = t.muon_ns_coefficients  # a1, b1, c1, a2, ...: one triple per iteration (torch's one triple when empty)
        schedule = [(c[i], c[i + 1], c[i + 2]) for i in range(0, len(c), 3)] or None
        blocks = attention_heads(model) if t.muon_per_head else {}
        joint = gate_up_pairs(model) if t.muon_joint_gate_up else []
        opts.append(Muon([{"params": matrices, "lr_scale": muon_lr / t.lr}], ns_dtype=ns_dtype, ns_schedule=schedule,
                         blocks={p: b for p, b in blocks.items() if id(p) in to_muon},
                         joint=[g for g in joint if all(id(p) in to_muon for p in g)],
                         lr=muon_lr, weight_decay=t.weight_decay, momentum=t.muon_momentum,
                         adjust_lr_fn="match_rms_adamw", ns_steps=t.muon_ns_steps, ns_norm=t.muon_ns_norm))
    return opts


def autocast_ctx(r: Recipe, device: torch.device):
    if r.train.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


class Optimizers:
    """One optimizer per model part (a rank's pipeline stages; one part without a pipeline), stepped
    together: torch's state-dict API maps an optimizer's state to the names of one module's parameters."""

    def __init__(self, parts: list[torch.nn.Module], r: Recipe, device: torch.device):
        self.parts = parts
        self.opts = [build_optimizer(p, r, device) for p in parts]  # per part: AdamW (and Muon)

    @property
    def param_groups(self) -> list[dict]:
        return [g for part in self.opts for o in part for g in o.param_groups]

    def set_lr(self, lr: float) -> None:
        for g in self.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)

    def step(self) -> None:
        for part in self.opts:
            for o in part:
                o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.opts:
            for o in part:
                o.zero_grad(set_to_none=set_to_none)
