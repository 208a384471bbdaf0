"""The process group a run lives in: rank, world size, device. One process needs no torch.distributed."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    # how many times torchrun restarted this worker group (>0: resume from the last checkpoint)
    restart_count: int = 0
    # launched by torchrun (which restarts workers that exit non-zero)
    elastic: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, t: torch.Tensor, group: object = None) -> torch.Tensor:
        """Sum `t` in place over `group` (None: every rank); one process has nothing to sum."""
        if self.distributed:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        return t

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        """Leave the process group once every rank is done. Without this the group's C++ threads
        are torn down by interpreter exit in no set order, which now and then aborts a worker
        ("terminate called without an active exception") after a finished run, and torchrun then
        restarts the whole group."""
        if self.distributed and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def init_env(device: str = "auto") -> DistEnv:
    """Join the torchrun process group if launched by torchrun (gloo on CPU, NCCL on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda: no CUDA device is visible")
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return DistEnv(rank, world, local, dev, restart_count=restarts, elastic="TORCHELASTIC_RUN_ID" in os.environ)
