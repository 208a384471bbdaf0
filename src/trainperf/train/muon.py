"""torch.optim.Muon with the Newton-Schulz iteration in a chosen format, on sharded matrices too.

torch's Muon (since 2.9) is kept for everything it owns: the parameter groups, the hyperparameters,
the state (`momentum_buffer`, so checkpoints are the same) and its learning-rate adjustment. Only
the step is restated, for two reasons measured or forced here:
- torch iterates Newton-Schulz in bf16. A CPU without AMX has no bf16 matmul units: on a 2-core
  AVX2 EPYC the optimizer took 11.5 s per step of the `tiny` model (the forward and backward 2.8 s).
  `ns_dtype` follows the run's precision instead: bf16 where the run found bf16 fast, fp32 elsewhere.
- The iteration needs the whole matrix. Under FSDP2 or tensor parallelism a parameter is a DTensor
  shard; the update is computed on the gathered matrix (every rank the same) and each rank keeps its
  shard of it, so any layout takes the one-process step.
With `ns_dtype=torch.bfloat16` the step is torch's, operation for operation (tests/train/test_optim.py).
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Replicate

try:
    from torch.optim._muon import _adjust_lr  # torch's own RMS matching rule
except ImportError:  # a private name: should a release move it, the rule as torch 2.9-2.13 state it
    import math

    def _adjust_lr(lr: float, adjust_lr_fn: str | None, param_shape: torch.Size) -> float:
        A, B = param_shape[:2]
        if adjust_lr_fn == "match_rms_adamw":
            return lr * 0.2 * math.sqrt(max(A, B))
        return lr * math.sqrt(max(1, A / B)) if adjust_lr_fn in (None, "original") else lr


def newton_schulz(g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """The quintic Newton-Schulz iteration towards the orthogonal factor of `g`, on its wide side."""
    a, b, c = coefficients
    x = g.to(dtype)
    if g.size(0) > g.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if g.size(0) > g.size(1) else x


class Muon(torch.optim.Muon):
    def __init__(self, params, ns_dtype: torch.dtype = torch.bfloat16, **kwargs):
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                sharded = isinstance(update, DTensor)
                full = update.full_tensor() if sharded else update
                ortho = newton_schulz(full, group["ns_coefficients"], group["ns_steps"], group["eps"], self.ns_dtype)
                if sharded:  # Replicate -> the parameter's placements is a local slice, no communication
                    ortho = DTensor.from_local(ortho.to(full.dtype), update.device_mesh,
                                               [Replicate()] * update.device_mesh.ndim).redistribute(
                                                   update.device_mesh, update.placements)
                p.mul_(1 - lr * wd)
                p.add_(ortho.to(p.dtype) if not sharded else ortho, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], p.shape))
        return loss
