"""Pipeline parallelism with torch.distributed.pipelining: stages, schedules, forward-only evaluation.

The model's layers split into pp * vpp stages, as evenly as the count allows (the first and last
stage, which also hold the embedding and the head, take one fewer where it does not divide); stage 0 keeps the embedding, the last stage
the final norm and the head. A stage is the plain model with the other layers deleted, so its
parameter names are the whole model's (a checkpoint written by pp=2 loads into pp=1 and back).
Rank p of the pipeline holds stages p, p + pp, p + 2 pp, ... (the loop placement the interleaved
schedules expect). A tied embedding and head on two stages are two copies kept equal: they start
from the same draw and their gradients are summed between the first and the last stage.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn

from trainperf.model.init import fill_
from trainperf.parallel.apply import unwrap
from trainperf.parallel.dims import MULTI_STAGE_SCHEDULES as _MULTI
from trainperf.parallel.dims import ParallelDims, stage_layers

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B",
             "zero_bubble": "ScheduleInterleavedZeroBubble"}


def stage_ids(dims: ParallelDims, vpp: int) -> list[int]:
    p = dims.coords()["pp"]
    return [p + i * dims.pp for i in range(vpp)]


def split_stage(model: nn.Module, stage: int, n_stages: int) -> nn.Module:
    """A copy of `model` (built on the meta device) with only stage `stage`'s layers."""
    part = copy.deepcopy(model)
    keep = {str(i) for i in stage_layers(len(model.layers), n_stages)[stage]}
    for name in list(part.layers.keys()):
        if name not in keep:
            del part.layers[name]
    if stage > 0:
        part.tok_emb = None
        part.pos_emb = None
    if stage < n_stages - 1:
        part.norm = None
        part.output = None
    return part


class Pipeline:
    """This rank's stages of the model and the schedule that runs them."""

    def __init__(self, parts: list[nn.Module], ids: list[int], dims: ParallelDims, schedule: str,
                 microbatches: int, device: torch.device, loss_fn):
        from torch.distributed import pipelining

        self.parts, self.ids, self.dims, self.device = parts, ids, dims, device
        self.models = [unwrap(p) for p in parts]  # the stages' own modules, for their names and attributes
        self.n_stages = dims.pp * len(parts)
        group = dims.pp_group
        self.stages = [pipelining.PipelineStage(p, s, self.n_stages, device, group=group) for p, s in zip(parts, ids)]
        cls = getattr(pipelining, SCHEDULES[schedule])
        kw = {"loss_fn": loss_fn, "scale_grads": False}  # loss_fn already scales by the micro-batch count
        self.schedule = cls(self.stages if schedule in _MULTI else self.stages[0], microbatches, **kw)
        self.first, self.last = 0 in ids, self.n_stages - 1 in ids
        self.pp_ranks = dist.get_process_group_ranks(group)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward of the whole batch through the pipeline; the sum of the micro-batch
        losses on the last stage (0 elsewhere)."""
        losses: list[torch.Tensor] = []
        args = (x,) if self.first else ()
        self.schedule.step(*args, target=y if self.last else None, losses=losses)
        if not losses:
            return torch.zeros((), device=self.device)
        return torch.stack([t.detach().reshape(()) for t in losses]).sum()

    @torch.no_grad()
    def forward_losses(self, x: torch.Tensor, y: torch.Tensor, autocast) -> torch.Tensor | None:
        """Per-token losses of one evaluation batch, passed stage to stage (forward only); on the last
        stage's ranks, None elsewhere. Every rank of the pipeline takes part."""
        hidden = None
        # hidden states between stages: (B, T, D), sequence-sharded (T / tp) under tensor parallelism
        shape = (x.shape[0], x.shape[1] // self.dims.tp, self.models[0].cfg.d_model)
        me, pp = self.dims.coords()["pp"], self.dims.pp
        for s in range(self.n_stages):
            owner, prev, nxt = s % pp, (s - 1) % pp, (s + 1) % pp
            if owner != me:
                continue
            if s > 0 and prev != owner:
                hidden = torch.empty(shape, dtype=torch.float32, device=self.device)
                dist.recv(hidden, src=self.pp_ranks[prev])
            part = self.parts[self.ids.index(s)]
            last = s == self.n_stages - 1
            with autocast():
                out = part(x if s == 0 else hidden, y if last else None)
            if last:
                return out  # the head's per-token losses
            hidden = out.float()
            if nxt != owner:
                dist.send(hidden.contiguous(), dst=self.pp_ranks[nxt])
        return None

    def sync_tied_grads(self) -> None:
        """Sum the gradients of the tied embedding (first stage) and head (last stage), so both copies
        take the same optimizer step and stay equal."""
        if not self.models[0].cfg.tie_embeddings:
            return
        grads = []
        if self.first:
            grads.append(self.models[self.ids.index(0)].tok_emb.weight.grad)
        if self.last:
            grads.append(self.models[self.ids.index(self.n_stages - 1)].output.weight.grad)
        group = self.dims.tied_group
        if group is None or not grads or grads[0] is None:  # a frozen embedding (LoRA) has nothing to sum
            return
        grad = grads[0]
        if not hasattr(grad, "full_tensor"):
            dist.all_reduce(grad, group=group)
            return
        # a sharded gradient: the embedding's and the head's shard layouts differ under tensor
        # parallelism, so the whole gradients are summed and each side keeps its own slice
        full = grad.full_tensor()
        dist.all_reduce(full, group=group)
        fill_(grad, full)

    def clip_grad_norm(self, max_norm: float) -> None:
        """Clip by the norm of the whole model's gradient: each rank's stages, summed over the
        pipeline; the tied head (a copy of the embedding) is counted once."""
        grads = [p.grad for part in self.models for n, p in part.named_parameters()
                 if p.grad is not None and not (n == "output.weight" and part.cfg.tie_embeddings)]
        norm = torch.nn.utils.get_total_norm(grads, foreach=True) if grads else torch.zeros((), device=self.device)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        sq = norm.double() ** 2
        dist.all_reduce(sq, group=self.dims.pp_group)
        coef = min(1.0, max_norm / (float(sq.sqrt()) + 1e-6))  # torch's clip_grad_norm_ rule
        if coef < 1.0:
            for part in self.parts:
                for p in part.parameters():
                    if p.grad is not None:
                        p.grad.mul_(coef)


__all__ = ["Pipeline", "SCHEDULES", "split_stage", "stage_ids"]
