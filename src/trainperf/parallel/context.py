"""Context parallelism: each sequence split over the cp ranks, attention across the pieces.

Load balance under the causal mask: the sequence is cut into 2*cp equal chunks and rank r holds
chunks r and 2*cp-1-r (one from each end), so every rank attends to the same number of keys.
Positions follow the tokens: the model's position buffers (RoPE tables, GPT's position ids) are
re-indexed to the rank's own positions, so no model code knows about the split.

Attention across chunks is the all-gather-K/V scheme of the Llama 3 paper: each rank gathers the
keys and values of the whole sequence from its cp peers (autograd-aware: backward reduce-scatters
their gradients) and attends with its own queries under the causal mask of the global positions.
It runs on any backend, gloo on a CPU included. (PyTorch's ring attention, `context_parallel`,
needs CUDA SDPA kernels and is not wired in.)
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainperf.parallel.dims import ParallelDims


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


def apply_cp(model: nn.Module, dims: ParallelDims) -> None:
    """Re-index the position buffers to this rank's chunks and give every attention layer the
    all-gather-K/V attention. Call after the model is initialised (init_weights rebuilds the tables)."""
    seq_len = model.cfg.seq_len
    mine = chunk_positions(seq_len, dims.cp, dims.cp_rank)
    order = torch.cat([chunk_positions(seq_len, dims.cp, r) for r in range(dims.cp)])  # gathered keys' positions
    device = model.tok_emb.weight.device
    model.set_positions(mine.to(device))
    mask = (mine[:, None] >= order[None, :]).to(device)  # causal over global positions, (T/cp, T)
    group = dims.cp_group
    for block in model.layers.values():
        block.attn.attend = _allgather_attention(group, mask)


def _allgather_attention(group, mask: torch.Tensor):
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = _gather_seq(k, group), _gather_seq(v, group)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
    return attend
