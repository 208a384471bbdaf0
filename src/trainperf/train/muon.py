"""torch.optim.Muon with the Newton-Schulz iteration in a chosen format, on sharded matrices too.

torch's Muon (since 2.9) is kept for everything it owns: the parameter groups, the hyperparameters,
the state (`momentum_buffer`, so checkpoints are the same) and its learning-rate adjustment. Only
the step is restated, for three reasons measured or forced here:
- torch iterates Newton-Schulz in bf16. A CPU without AMX has no bf16 matmul units: on a 2-core
  AVX2 EPYC the optimizer took 11.5 s per step of the `tiny` model (the forward and backward 2.8 s).
  `ns_dtype` follows the run's precision instead: bf16 where the run found bf16 fast, fp32 elsewhere.
- The iteration needs the whole matrix. Under FSDP2 or tensor parallelism a parameter is a DTensor
  shard; the update is computed on the gathered matrix (every rank the same) and each rank keeps its
  shard of it, so any layout takes the one-process step.
- Speed at a small batch, where the step is a fixed cost beside a short forward and backward: the
  momentum updates are one foreach call each, and in bf16 the matrices of one shape go through
  Newton-Schulz as one stack, one batched matmul per product (`orthogonalize`); what is one matrix
  can be chosen too: each attention head's block (`blocks`), a gate and up projection together
  (`joint`).
With `ns_dtype=torch.bfloat16` and whole matrices the step is torch's, operation for operation
(tests/train/test_optim.py).
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
Block = tuple[int, int]  # (dim, n): a matrix orthogonalised as n equal blocks along dim
GRAM_RATIO = 1.5  # wide side over narrow side past which the Gram form takes fewer products


NORMS = ("frobenius", "schatten8")  # what X is divided by before the iteration (`newton_schulz`)


def newton_schulz(g: torch.Tensor, schedule: Schedule, eps: float, dtype: torch.dtype,
                  gram: bool | None = None, norm: str = "frobenius") -> torch.Tensor:
    """The quintic Newton-Schulz iteration towards the orthogonal factor of `g` (one matrix, or a
    stack of same-shape matrices along dim 0, each normalised and iterated on its own), worked on
    the wide side, one iteration per (a, b, c) of `schedule`: X <- a X + (b A + c A^2) X, A = X X^T.
    A stack takes one batched matmul per product instead of one per matrix.

    X is first divided by a bound on its largest singular value: its Frobenius norm (torch's), or
    with `norm="schatten8"` its Schatten-8 norm (sum of sigma^8)^(1/8), read off A^2, which the
    first iteration computes anyway. Both are >= sigma_max, but for a momentum whose spectrum one
    direction dominates (small batches) the Schatten-8 bound is the tighter: every direction enters
    the iteration larger, so fewer iterations take it as far (bench/results/tiny_records_2026-12-06_to_07.md).

    Every iterate is X_k = Q_k X_0 with Q_k a polynomial in A_0 = X_0 X_0^T, so the iteration can
    run on the m x m side alone (the Gram form): p = a I + b A + c A^2, Q <- p Q, A <- p A p, and X
    is read twice (A_0, then Q X_0); its norm is folded into A_0 and Q. For s iterations and n = r m
    that is 2r + 4s - 3 products of m^3 against s (2r + 1): fewer once r > 1.5, which `gram=None`
    picks. A tall X is read in place (X^T X, X Q^T). The same polynomial, rounded differently: in
    bf16 its error against float64 is 0.8-3.8% on `tiny`'s shapes where the direct form's is
    0.5-1.6% (bench/results/tiny_records_2026-12-06_to_07.md)."""
    mm = torch.addmm if g.dim() == 2 else torch.baddbmm
    tall = g.size(-2) > g.size(-1)
    m, n = sorted(g.shape[-2:])
    x = g.to(dtype)
    if gram if gram is not None else n > GRAM_RATIO * m:
        a_, a2, t = _normalised_gram(x.mT @ x if tall else x @ x.mT, norm, eps, dtype)
        q = None
        for k, (a, b, c) in enumerate(schedule):
            p = mm(a_, a_, a_, beta=b, alpha=c) if k or a2 is None else _first(a_, a2, b, c)
            p.diagonal(dim1=-2, dim2=-1).add_(a)
            q = p if q is None else p @ q
            if k + 1 < len(schedule):
                a_ = p @ (p @ a_)
        q = q.mul_(t.reciprocal().to(dtype))
        return x @ q.mT if tall else q @ x
    if tall:
        x = x.mT
    a2 = None
    if norm == "frobenius":
        x = x / torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral <= Frobenius <= 1
    else:
        a_, a2, t = _normalised_gram(x @ x.mT, norm, eps, dtype)
        x = x * t.reciprocal().to(dtype)
    for k, (a, b, c) in enumerate(schedule):
        if k == 0 and a2 is not None:
            x = mm(x, _first(a_, a2, b, c), x, beta=a)
            continue
        a_ = x @ x.mT
        x = mm(x, mm(a_, a_, a_, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def _first(a_: torch.Tensor, a2: torch.Tensor, b: float, c: float) -> torch.Tensor:
    """b A + c A^2 of the first iteration from the A^2 the Schatten-8 norm was read off."""
    return torch.add(a2, a_, alpha=b / c).mul_(c) if c else a_ * b


def _normalised_gram(a_: torch.Tensor, norm: str, eps: float,
                     dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """A_0 = X X^T of the X that `newton_schulz` divides by t >= sigma_max(X), scaled in place to
    (X / t)(X / t)^T; with it A_0^2 (Schatten-8, where t comes from it) or None; and t."""
    wide = torch.promote_types(dtype, torch.float32)
    if norm == "frobenius":  # |X|_F^2 = trace(A_0)
        t = a_.diagonal(dim1=-2, dim2=-1).sum(-1, dtype=wide).sqrt().clamp(min=eps)[..., None, None]
        return a_.mul_(t.square().reciprocal().to(dtype)), None, t
    if norm != "schatten8":
        raise ValueError(f"Newton-Schulz norm {norm!r}: one of {', '.join(NORMS)}")
    a2 = a_ @ a_
    # |A_0^2|_F = (sum sigma^8)^(1/2) = |X|_S8^4
    t2 = torch.linalg.vector_norm(a2, dim=(-2, -1), dtype=wide).sqrt().clamp(min=eps * eps)[..., None, None]
    return a_.mul_(t2.reciprocal().to(dtype)), a2.mul_(t2.square().reciprocal().to(dtype)), t2.sqrt()


def head_blocks(t: torch.Tensor, block: Block | None) -> torch.Tensor:
    """`t`'s blocks that Newton-Schulz orthogonalises each on its own, as a view [n, rows, cols]:
    `t` alone (n = 1), or its n equal blocks along `dim` for block = (dim, n) (an attention
    projection's heads)."""
    if block is None:
        return t.unsqueeze(0)
    dim, n = block
    return t.unflatten(dim, (n, -1)).movedim(dim, 0)


def from_blocks(blocks: torch.Tensor, block: Block | None) -> torch.Tensor:
    """The matrix whose `head_blocks` are `blocks` (a view where the layout allows, else a copy)."""
    if block is None:
        return blocks[0]
    return blocks.movedim(0, block[0]).flatten(block[0], block[0] + 1)


def orthogonalize(updates: list[torch.Tensor], schedule: Schedule, eps: float, dtype: torch.dtype,
                  stack: bool | None = None, toward: list[torch.Tensor] | None = None,
                  weight: float = 0.0, blocks: list[Block | None] | None = None,
                  gram: bool | None = None, joint: list[list[int]] | None = None,
                  norm: str = "frobenius") -> list[torch.Tensor]:
    """`newton_schulz` of each update, or of each of its `head_blocks` (`blocks[i]`), coming back
    whole. `joint` names updates orthogonalised as one matrix, their rows (or row blocks) one above
    the other (a gated MLP's gate and up projections: one fused weight, as Megatron's `linear_fc1`
    holds them); each list is one unit, and an update in none is a unit alone.

    In bf16 the units of one shape (`tiny`, per head and gate/up joint: 64 x 256, 256 x 64, 1408 x
    256, 256 x 704) are stacked into one batched call. Measured on a 2-core Zen 4 (AVX512-BF16), 2
    threads at load 1.9, 3 iterations over `tiny`'s matrices: bf16 34.7 ms stacked against 40.7 ms
    one by one, while fp32 was slower stacked (78-83 ms against 73 ms), so fp32 (the AVX2 machines'
    format) keeps one call per unit (bench/results/tiny_records_2026-12-06_to_07.md). A tall unit
    is not transposed into a wide one's stack: the strided copies cost more than the call saved
    (2026-12-07). A lone whole matrix takes torch's 2-D operations. `stack` overrides the choice
    (bench/newton_schulz.py times both); `gram` and `norm` go to `newton_schulz`.

    With `toward`, update i is lerp(updates[i], toward[i], weight) (Muon's Nesterov step), written
    straight into the stack in `dtype`: no fp32 copy of every update is made first. Stacked results
    come back in `dtype`, as views of the stack where the layout allows."""
    blocks = blocks or [None] * len(updates)
    units = _units(len(updates), joint)
    # each update's blocks [n, rows, cols], and its Nesterov target's
    views = [(head_blocks(u, b), None if toward is None else head_blocks(toward[i], b))
             for i, (u, b) in enumerate(zip(updates, blocks))]

    def shape(unit: list[int]) -> tuple[int, int, int]:  # (blocks, rows, cols) of the unit's matrices
        n, r, c = views[unit[0]][0].shape
        return n, sum(views[i][0].size(1) for i in unit), c

    out: list[torch.Tensor | None] = [None] * len(updates)
    stacked = dtype in STACKED_DTYPES if stack is None else stack
    form = {"gram": gram, "norm": norm}  # newton_schulz's choices
    for u in units:
        if len({(views[i][0].size(0), views[i][0].size(2)) for i in u}) > 1:
            raise ValueError(f"joint updates {u} differ in blocks or columns: they cannot stack as one matrix")
    shapes = {k: shape(u)[1:] for k, u in enumerate(units)}
    for key in dict.fromkeys(shapes.values()):
        ks = [k for k in range(len(units)) if shapes[k] == key]
        if len(ks) == 1 or not stacked:
            for k in ks:
                _one(units[k], views, blocks, out, schedule, eps, dtype, form, weight)
        else:
            _stacked([units[k] for k in ks], [shape(units[k])[0] for k in ks], key, views, blocks, out,
                     schedule, eps, dtype, form, weight)
    return out  # type: ignore[return-value]


def _units(n: int, joint: list[list[int]] | None) -> list[list[int]]:
    """The units `orthogonalize` takes as one matrix each: the joint lists, then every other index alone."""
    members = {i for u in joint or [] for i in u}
    return [list(u) for u in joint or []] + [[i] for i in range(n) if i not in members]


def _stacked(units: list[list[int]], sizes: list[int], shape: tuple[int, int], views: list, blocks: list[Block | None],
             out: list, schedule: Schedule, eps: float, dtype: torch.dtype, form: dict, weight: float) -> None:
    """`orthogonalize`'s one batched call for units of one matrix shape, `sizes[k]` matrices each:
    every member written into its rows of the stack in `dtype`, read back as a view."""
    at = [0]
    for n in sizes:
        at.append(at[-1] + n)
    batch = torch.empty((at[-1], *shape), dtype=dtype, device=views[units[0][0]][0].device)
    places = []
    for unit, a, b in zip(units, at, at[1:]):
        off = 0
        for i in unit:
            v, t = views[i]
            rows = slice(off, off + v.size(1))
            off = rows.stop
            if t is None:
                batch[a:b, rows].copy_(v)
            else:
                torch.lerp(v, t, weight, out=batch[a:b, rows])
            places.append((i, a, b, rows))
    ortho = newton_schulz(batch, schedule, eps, dtype, **form)
    for i, a, b, rows in places:
        out[i] = from_blocks(ortho[a:b, rows], blocks[i])


def _one(unit: list[int], views: list, blocks: list[Block | None], out: list, schedule: Schedule, eps: float,
         dtype: torch.dtype, form: dict, weight: float) -> None:
    """`orthogonalize`'s one call for one unit: a lone whole matrix in 2-D, anything else as blocks."""
    parts = [(v if t is None else torch.lerp(v, t, weight)) for v, t in (views[i] for i in unit)]
    x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
    if x.size(0) == 1 and blocks[unit[0]] is None:
        x = x[0]
    o = newton_schulz(x, schedule, eps, dtype, **form)
    o = o.unsqueeze(0) if o.dim() == 2 else o
    off = 0
    for i, p in zip(unit, parts):
        out[i] = from_blocks(o[:, off:off + p.size(1)], blocks[i])
        off += p.size(1)


class Muon(torch.optim.Muon):
    """`ns_schedule`: one coefficient triple per Newton-Schulz iteration, replacing torch's
    `ns_coefficients` x `ns_steps` (which it defaults to). `blocks`: the parameters orthogonalised
    as equal blocks, parameter -> (dim, n) (`head_blocks`); the others whole. `joint`: groups of
    parameters orthogonalised as one matrix, rows stacked (`orthogonalize`); their step size is
    the joint matrix's. `gram`: the Gram form always (True), never (False) or by shape (None,
    `newton_schulz`); `ns_norm`: the bound X is divided by first, "frobenius" (torch's) or
    "schatten8" (`newton_schulz`)."""

    def __init__(self, params, ns_dtype: torch.dtype = torch.bfloat16, ns_schedule: Schedule | None = None,
                 blocks: dict[torch.Tensor, Block] | None = None, gram: bool | None = None,
                 joint: list[tuple[torch.Tensor, ...]] | None = None, ns_norm: str = "frobenius", **kwargs):
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype
        self.ns_schedule = ns_schedule
        self.blocks = blocks or {}
        self.form = {"gram": gram, "norm": ns_norm}  # newton_schulz's choices
        self.joint = joint or []

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
        blocks = [self.blocks.get(p) for p in params]
        at = {id(p): i for i, p in enumerate(params)}
        joint = [[at[id(q)] for q in g] for g in self.joint if all(id(q) in at for q in g)]
        shapes = [p.shape for p in params]
        for unit in joint:
            rows = sum(params[i].size(0) for i in unit)
            for i in unit:
                shapes[i] = torch.Size((rows, *params[i].shape[1:]))
        if isinstance(grads[0], DTensor):
            updates = torch._foreach_lerp(grads, bufs, mu) if group["nesterov"] else bufs
            orthos = self._sharded(updates, *args, self.form, blocks=blocks, joint=joint)
        elif group["nesterov"]:  # the Nesterov update made inside, in Newton-Schulz's format
            orthos = orthogonalize(grads, *args, toward=bufs, weight=mu, blocks=blocks, joint=joint, **self.form)
        else:
            orthos = orthogonalize(bufs, *args, blocks=blocks, joint=joint, **self.form)
        torch._foreach_mul_(params, 1 - lr * wd)
        # one foreach add per step size (one per shape); a 16-bit update is widened inside the add
        by_alpha: dict[float, tuple[list, list]] = {}
        for p, o, shape in zip(params, orthos, shapes):
            ps, os_ = by_alpha.setdefault(-_adjust_lr(lr, group["adjust_lr_fn"], shape), ([], []))
            ps.append(p)
            os_.append(o)
        for alpha, (ps, os_) in by_alpha.items():
            torch._foreach_add_(ps, os_, alpha=alpha)

    @staticmethod
    def _sharded(updates: list[DTensor], schedule: Schedule, eps: float, dtype: torch.dtype,
                 form: dict, blocks: list[Block | None], joint: list[list[int]]) -> list[DTensor]:
        """Each unit (`orthogonalize`) on its gathered whole, one at a time (a model's matrices are
        never whole together), every rank keeping its shard of the result."""
        out: list[DTensor | None] = [None] * len(updates)
        for unit in _units(len(updates), joint):
            fulls = [updates[i].full_tensor() for i in unit]
            orthos = orthogonalize(fulls, schedule, eps, dtype, stack=False,
                                   blocks=[blocks[i] for i in unit], joint=[list(range(len(unit)))], **form)
            for i, full, ortho in zip(unit, fulls, orthos):
                # Replicate -> the parameter's placements is a local slice, no communication
                mesh = updates[i].device_mesh
                out[i] = DTensor.from_local(ortho.to(full.dtype), mesh, [Replicate()] * mesh.ndim).redistribute(
                    mesh, updates[i].placements)
        return out  # type: ignore[return-value]
