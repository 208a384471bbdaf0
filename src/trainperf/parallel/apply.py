"""Apply parallelism to a plain model. The train loop calls `parallelize` and nothing else.

This first cut covers one process and plain DDP over the data-parallel group; FSDP2, tensor
parallelism, activation checkpointing and compile are composed here, driven by a DeviceMesh.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainperf.config import ParallelConfig
from trainperf.parallel.env import DistEnv


def comm_precision(pcfg: ParallelConfig, env: DistEnv, precision: str) -> str:
    """The lowest precision any collective carries (an MLPerf 6.1 disclosure key)."""
    return "fp32"  # DDP all-reduces the fp32 gradients; one process has no collectives at all


def parallelize(model: nn.Module, pcfg: ParallelConfig, env: DistEnv) -> nn.Module:
    if pcfg.tp > 1 or pcfg.pp > 1 or pcfg.cp > 1:
        raise NotImplementedError("tensor / pipeline / context parallelism are not available yet")
    model.to(env.device)
    if pcfg.compile:
        for block in model.layers.values():
            block.compile()
    if env.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[env.local_rank] if env.device.type == "cuda" else None)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)


def dp_info(pcfg: ParallelConfig, env: DistEnv) -> tuple[int, int]:
    """(data-parallel rank, data-parallel size) of this process."""
    return env.rank, env.world_size


