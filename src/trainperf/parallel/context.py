"""Context parallelism: each sequence split over the cp ranks, attention across the pieces.

Load balance under the causal mask: the sequence is cut into 2*cp equal chunks and rank r holds
chunks r and 2*cp-1-r (one from each end), so every rank attends to the same number of keys.
Positions follow the tokens: the model's position buffers (RoPE tables, GPT's position ids) are
re-indexed to the rank's own positions, so no model code knows about the split.

Attention across chunks runs one of two ways, chosen per run by what the device can do:

- `ring`: PyTorch's ring attention (`torch.distributed.tensor.experimental.context_parallel`),
  which passes K/V chunks round the cp ranks inside the flash, memory-efficient or cuDNN SDPA
  kernels. PyTorch's default rotation all-gathers every rank's K/V after the first chunk (the whole
  sequence's keys and values on every rank); trainperf sets the rotation to "alltoall" (each step
  hands one chunk to the next rank: a ring, one chunk held at a time) for the run's forward and
  backward, and puts the previous rotation back after it. Chosen when the device is CUDA, the cp group runs NCCL, and one of those kernels accepts
  this run's heads (`torch.backends.cuda.can_use_*_attention`); the math kernel is switched off in
  it, so a shape none of them takes fails instead of attending within a chunk. Its head-tail load
  balancing must give each rank the positions above: checked when it is chosen.
- `allgather_kv`: the scheme of the Llama 3 paper. Each rank gathers the keys and values of the
  whole sequence from its cp peers (autograd-aware: backward reduce-scatters their gradients) and
  attends with its own queries under the causal mask of the global positions. It runs on any
  backend, gloo on a CPU included (the ring's kernels are CUDA-only).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainperf.parallel.dims import CP_ALLGATHER, CP_RING, ParallelDims


def chunk_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """The global positions rank `cp_rank` holds: chunks cp_rank and 2*cp-1-cp_rank, in order."""
    c = seq_len // (2 * cp)
    first = torch.arange(cp_rank * c, (cp_rank + 1) * c)
    last = torch.arange((2 * cp - 1 - cp_rank) * c, (2 * cp - cp_rank) * c)
    return torch.cat([first, last])


def shard_sequence(t: torch.Tensor, dims: ParallelDims) -> torch.Tensor:
    """This rank's share of (B, T) tokens or targets along T (the whole of it without cp)."""
    if dims.cp == 1:
        return t
    return t[:, chunk_positions(t.shape[1], dims.cp, dims.cp_rank).to(t.device)]


def _gather_seq(t: torch.Tensor, group) -> torch.Tensor:
    """All-gather along the sequence dim (2) of (B, H, T, D), differentiably."""
    import torch.distributed._functional_collectives as funcol

    gather = getattr(funcol, "all_gather_single_autograd", None) or funcol.all_gather_tensor_autograd
    # gathered along dim 0 (rank-major), then moved: the collective concatenates on dim 0 fastest
    out = gather(t.transpose(0, 2).contiguous(), 0, group)
    out = funcol.wait_tensor(out) if hasattr(funcol, "wait_tensor") else out
    return out.transpose(0, 2)


def ring_unsupported(device: torch.device, group, dtype: torch.dtype, heads: int, seq: int,
                     head_dim: int) -> str | None:
    """Why PyTorch's ring attention cannot run this layout's attention, or None when it can."""
    import torch.distributed as dist

    if device.type != "cuda":
        return f"the ring runs in CUDA SDPA kernels only (flash, memory-efficient, cuDNN), not on {device.type}"
    backend = dist.get_backend(group)
    if backend != "nccl":
        return f"the cp group's backend is {backend}, not nccl"
    try:
        from torch.distributed.tensor.experimental import context_parallel  # noqa: F401
    except ImportError:
        return "this torch has no torch.distributed.tensor.experimental.context_parallel"
    cuda = torch.backends.cuda
    q = torch.empty(1, heads, seq, head_dim, device=device, dtype=dtype)
    params = cuda.SDPAParams(q, q, q, None, 0.0, True, False)
    checks = [getattr(cuda, f"can_use_{k}_attention", None) for k in ("flash", "efficient", "cudnn")]
    if not any(check is not None and check(params) for check in checks):
        return f"no flash, memory-efficient or cuDNN SDPA kernel takes {heads} heads of {head_dim} in {dtype} here"
    return None


def ring_positions(mesh, seq_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The positions PyTorch's context_parallel gives this rank of `mesh` (its load balancing), on the CPU."""
    from torch.distributed.tensor.experimental import context_parallel

    buf = torch.arange(seq_len, device=device)
    with context_parallel(mesh, buffers=[buf], buffer_seq_dims=[0], no_restore_buffers={buf}):
        pass
    return buf.cpu()


def apply_cp(model: nn.Module, dims: ParallelDims, precision: str = "fp32") -> None:
    """Re-index the position buffers to this rank's chunks and give every attention layer the cp
    attention this device supports (recorded in `dims.cp_attention`). Call after the model is
    initialised (init_weights rebuilds the tables)."""
    cfg = model.cfg
    seq_len = cfg.seq_len
    mine = chunk_positions(seq_len, dims.cp, dims.cp_rank)
    device = model.positions.device  # a pipeline stage may hold no embedding
    model.set_positions(mine.to(device))
    group = dims.cp_group
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    why = ring_unsupported(device, group, dtype, cfg.n_head // dims.tp, seq_len // dims.cp, cfg.head_dim)
    if why is None and not torch.equal(ring_positions(dims.mesh["cp"], seq_len, device), mine):
        why = "torch's context_parallel balances the chunks differently from this layout"
    dims.cp_attention, dims.cp_attention_why = (CP_RING, None) if why is None else (CP_ALLGATHER, why)
    if dims.cp_attention == CP_RING:
        for block in model.layers.values():
            block.attn.attend = _ring_attention
        return
    order = torch.cat([chunk_positions(seq_len, dims.cp, r) for r in range(dims.cp)])  # gathered keys' positions
    mask = (mine[:, None] >= order[None, :]).to(device)  # causal over global positions, (T/cp, T)
    for block in model.layers.values():
        block.attn.attend = _allgather_attention(group, mask)


RING_ROTATION = "alltoall"  # torch's name for passing one K/V chunk to the next rank per step


@contextlib.contextmanager
def step_context(dims: ParallelDims, seq_len: int, device: torch.device):
    """The context a forward and its backward run in: torch's loss_parallel under tensor
    parallelism (cross-entropy over logits split along the vocabulary, and its backward, without
    gathering them), and for the ring attention PyTorch's context_parallel (its SDPA dispatch is on
    inside it only); the all-gather attention needs none."""
    with contextlib.ExitStack() as stack:
        if dims.tp > 1:
            from torch.distributed.tensor.parallel import loss_parallel

            stack.enter_context(loss_parallel())
        if dims.cp > 1 and dims.cp_attention == CP_RING:
            stack.enter_context(ring_context(dims.mesh["cp"], seq_len, device))
        yield


@contextlib.contextmanager
def ring_context(mesh, seq_len: int, device: torch.device):
    """torch's context_parallel with the K/V rotation set to a ring (RING_ROTATION) inside it."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method

    # the rotation is a process-wide option torch reads at every attention call (forward and
    # backward), so it is set for the context's length and the caller's choice restored after
    before = _cp_options.rotate_method
    set_rotate_method(RING_ROTATION)
    # the API shards the buffers it is given; the tokens are already this rank's chunks, so it
    # gets a throw-away position vector of the whole sequence (the only one it requires)
    buf = torch.arange(seq_len, device=device)
    try:
        with context_parallel(mesh, buffers=[buf], buffer_seq_dims=[0], no_restore_buffers={buf}):
            yield
    finally:
        _cp_options.rotate_method = before


def _ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if q.shape[1] != k.shape[1]:  # grouped-query heads repeated, as enable_gqa would (the ring takes no gqa)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
        # looked up at call time: inside step_context this is context_parallel's ring
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _allgather_attention(group, mask: torch.Tensor):
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = _gather_seq(k, group), _gather_seq(v, group)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
    return attend
