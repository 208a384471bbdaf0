"""Filling a parameter from a whole tensor, whether it is plain or a shard (DTensor) of one."""

from __future__ import annotations

import torch


@torch.no_grad()
def fill_(dest: torch.Tensor, full: torch.Tensor) -> None:
    """Copy the whole tensor `full` into `dest`; a DTensor shard (FSDP2, tensor parallel) keeps only its
    own slice. Every rank must pass the same `full`: this is how any layout gets the same weights."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    full = full.to(device=dest.device, dtype=dest.dtype)
    if isinstance(dest, DTensor):
        # src_data_rank=None: every rank already holds `full`, so each slices it locally (no scatter)
        dest.to_local().copy_(distribute_tensor(full, dest.device_mesh, dest.placements, src_data_rank=None).to_local())
    else:
        dest.copy_(full)
