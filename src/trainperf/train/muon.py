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
- Speed at a small batch, where the step is a fixed cost beside a short forward and backward: the
  momentum updates are one foreach call each, and in bf16 the matrices of one shape (a transposed
  tall one counts as its wide shape) go through Newton-Schulz as one stack, one batched matmul per
  product (`orthogonalize`).
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


STACKED_DTYPES = (torch.bfloat16,)  # the formats whose batched matmul beat one call per matrix (below)


Schedule = list[tuple[float, float, float]]  # one (a, b, c) per Newton-Schulz iteration


def newton_schulz(g: torch.Tensor, schedule: Schedule, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """The quintic Newton-Schulz iteration towards the orthogonal factor of `g` (one matrix, or a
    stack of same-shape matrices along dim 0, each normalised and iterated on its own), worked on
    the wide side, one iteration per (a, b, c) of `schedule`: X <- a X + (b A + c A^2) X, A = X X^T.
    A stack takes one batched matmul per product instead of one per matrix."""
    mm = torch.addmm if g.dim() == 2 else torch.baddbmm
    tall = g.size(-2) > g.size(-1)
    x = g.to(dtype)
    if tall:
        x = x.mT
    x = x / torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral <= Frobenius <= 1
    for a, b, c in schedule:
        gram = x @ x.mT
        x = mm(x, mm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def orthogonalize(updates: list[torch.Tensor], schedule: Schedule, eps: float, dtype: torch.dtype,
                  stack: bool | None = None, toward: list[torch.Tensor] | None = None,
                  weight: float = 0.0) -> list[torch.Tensor]:
    """`newton_schulz` of each update; in bf16 the updates of one wide shape are stacked into one
    batched call (the `tiny` model's 28 matrices have two shapes). Measured on a 2-core Zen 4
    (AVX512-BF16), 2 threads at load 1.9, 3 iterations over `tiny`'s matrices: bf16 34.7 ms
    stacked against 40.7 ms one by one, while fp32 was slower stacked (78-83 ms against 73 ms), so
    fp32 (the AVX2 machines' format) keeps one call per matrix (docs/benchmarks.md). A lone matrix
    takes torch's 2-D operations. `stack` overrides the choice (bench/newton_schulz.py times both).

    With `toward`, update i is lerp(updates[i], toward[i], weight) (Muon's Nesterov step), written
    straight into the stack in `dtype`: no fp32 copy of every update is made first. Stacked results
    come back in `dtype`, as views of the stack."""
    def update(i: int) -> torch.Tensor:
        return updates[i] if toward is None else torch.lerp(updates[i], toward[i], weight)

    wide = [tuple(sorted(u.shape)) for u in updates]
    out: list[torch.Tensor | None] = [None] * len(updates)
    for shape in dict.fromkeys(wide):
        idx = [i for i, w in enumerate(wide) if w == shape]
        if len(idx) == 1 or not (dtype in STACKED_DTYPES if stack is None else stack):
            for i in idx:
                out[i] = newton_schulz(update(i), schedule, eps, dtype)
            continue
        # the tall ones enter transposed, so the stack is all wide and comes back in each one's shape
        batch = torch.empty((len(idx), *shape), dtype=dtype, device=updates[idx[0]].device)
        tall = [updates[i].size(0) > updates[i].size(1) for i in idx]
        for k, i in enumerate(idx):
            dst = batch[k].mT if tall[k] else batch[k]
            if toward is None:
                dst.copy_(updates[i])
            else:
                torch.lerp(updates[i], toward[i], weight, out=dst)
        ortho = newton_schulz(batch, schedule, eps, dtype)
        for k, i in enumerate(idx):
            out[i] = ortho[k].mT if tall[k] else ortho[k]
    return out  # type: ignore[return-value]


class Muon(torch.optim.Muon):
    """`ns_schedule`: one coefficient triple per Newton-Schulz iteration, replacing torch's
    `ns_coefficients` x `ns_steps` (which it defaults to)."""

    def __init__(self, params, ns_dtype: torch.dtype = torch.bfloat16, ns_schedule: Schedule | None = None, **kwargs):
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype
        self.ns_schedule = ns_schedule

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            # sharded matrices (DTensors) one by one on their gathered whole; plain ones together
            plain = [p for p in params if not isinstance(p.grad, DTensor)]
            for ps in (plain, [p for p in params if isinstance(p.grad, DTensor)]):
                if ps:
                    self._step(ps, group)
        return loss

    def _step(self, params: list[torch.Tensor], group: dict) -> None:
        lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
        grads = [p.grad for p in params]
        for p in params:
            if "momentum_buffer" not in self.state[p]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
        bufs = [self.state[p]["momentum_buffer"] for p in params]
        # torch's step, one foreach call per operation for all the matrices instead of one op per matrix
        torch._foreach_lerp_(bufs, grads, 1 - mu)
        schedule = self.ns_schedule or [tuple(group["ns_coefficients"])] * group["ns_steps"]
        args = schedule, group["eps"], self.ns_dtype
        if isinstance(grads[0], DTensor):
            updates = torch._foreach_lerp(grads, bufs, mu) if group["nesterov"] else bufs
            orthos = [self._sharded(u, *args) for u in updates]
        elif group["nesterov"]:  # the Nesterov update made inside, in Newton-Schulz's format
            orthos = orthogonalize(grads, *args, toward=bufs, weight=mu)
        else:
            orthos = orthogonalize(bufs, *args)
        torch._foreach_mul_(params, 1 - lr * wd)
        # one foreach add per step size (one per shape); a 16-bit update is widened inside the add
        by_alpha: dict[float, tuple[list, list]] = {}
        for p, o in zip(params, orthos):
            ps, os_ = by_alpha.setdefault(-_adjust_lr(lr, group["adjust_lr_fn"], p.shape), ([], []))
            ps.append(p)
            os_.append(o)
        for alpha, (ps, os_) in by_alpha.items():
            torch._foreach_add_(ps, os_, alpha=alpha)

    @staticmethod
    def _sharded(update: DTensor, schedule: Schedule, eps: float, dtype: torch.dtype) -> DTensor:
        full = update.full_tensor()
        ortho = newton_schulz(full, schedule, eps, dtype)
        # Replicate -> the parameter's placements is a local slice, no communication
        mesh = update.device_mesh
        return DTensor.from_local(ortho.to(full.dtype), mesh, [Replicate()] * mesh.ndim).redistribute(
            mesh, update.placements)
