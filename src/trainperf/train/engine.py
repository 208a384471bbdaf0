"""How one rank's share of the model runs a step: in place (one module, micro-batches with the
gradient-sync switch) or as pipeline stages (torch.distributed.pipelining's schedule). The trainer
calls the same four methods on either, so it never branches on the layout. The final weights are
written from the parts themselves, each rank its own shards (`train.save.save_final`)."""

from __future__ import annotations

import torch
import torch.nn as nn

from trainperf.config import Recipe
from trainperf.parallel.apply import (ACCUM_REDUCE_EACH, accumulation_mode, grad_sync, keep_gradient_sync,
                                     pipeline_accumulation, unwrap)
from trainperf.parallel.context import step_context
from trainperf.parallel.dims import ParallelDims
from trainperf.model.transformer import token_losses
from trainperf.parallel.pipeline import Pipeline, stage_ids
from trainperf.train.optim import autocast_ctx


def micro_batch_loss(losses: torch.Tensor, accum: int, n_scored: int | None, grad_ranks: int) -> torch.Tensor:
    """One micro-batch's share of the step's loss, so that the gradient is the global batch's token
    mean on any layout: the micro-batch mean over the `accum` micro-batches, or, for fine-tuning
    samples that score only some targets, the sum over the global batch's scored count times the
    `grad_ranks` that average gradients (dp x cp), which their averaging divides out."""
    if n_scored is None:
        return losses.mean() / accum
    return losses.sum() * (grad_ranks / max(1, n_scored))


class LocalEngine:
    """The whole model on this rank (data, tensor and context parallel layouts)."""

    def __init__(self, model: nn.Module, r: Recipe, dims: ParallelDims, device: torch.device, accum: int = 1,
                 device_bytes: float | None = None, grad_mode: str | None = None):
        self.parts, self.r, self.dims, self.device = [model], r, dims, device
        self.grad_sync_mode = grad_mode or accumulation_mode(model, dims.tp, accum, device_bytes or device_memory(device))

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, n_scored: int | None, accum: int) -> torch.Tensor:
        """Forward and backward of this rank's batch in `accum` micro-batches, gradients reduced
        once, after the last; the loss summed over the micro-batches (on the device)."""
        model, micro = self.parts[0], x.shape[0] // accum
        total = torch.zeros((), device=self.device)
        for m in range(accum):
            xs, ys = x[m * micro:(m + 1) * micro], y[m * micro:(m + 1) * micro]
            # one context around forward and backward (DDP's no_sync cannot be entered twice)
            with grad_sync(model, m == accum - 1, self.grad_sync_mode), step_context(self.dims, self.r.model.seq_len, self.device):
                with autocast_ctx(self.r, self.device):
                    loss = micro_batch_loss(model(xs, ys), accum, n_scored, self.dims.grad_ranks)
                loss.backward()
            total += loss.detach()
        return total

    def eval_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
        with autocast_ctx(self.r, self.device), step_context(self.dims, self.r.model.seq_len, self.device):
            return self.parts[0](x, y)

    def clip_grad_norm(self, max_norm: float) -> None:
        torch.nn.utils.clip_grad_norm_(self.parts[0].parameters(), max_norm)


class PipelineEngine:
    """This rank's pipeline stages (each possibly FSDP/TP-sharded) and their schedule."""

    def __init__(self, parts: list[nn.Module], r: Recipe, dims: ParallelDims, device: torch.device, accum: int,
                 device_bytes: float | None = None, grad_mode: str | None = None):
        self.parts, self.r, self.dims, self.device = parts, r, dims, device
        self.grad_sync_mode = grad_mode or pipeline_accumulation(parts, dims.tp, accum,
                                                                 device_bytes or device_memory(device))
        if self.grad_sync_mode == ACCUM_REDUCE_EACH:
            for part in parts:
                keep_gradient_sync(part)
        self._scored: dict = {}

        def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            # the schedule hands the last stage's logits; n_scored is the step's, set before it runs
            return micro_batch_loss(token_losses(logits, target), accum, self._scored["n"], dims.grad_ranks)

        self.pipe = Pipeline(parts, stage_ids(dims, r.parallel.vpp), dims, r.parallel.pp_schedule, accum, device,
                             loss_fn)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, n_scored: int | None, accum: int) -> torch.Tensor:
        self._scored["n"] = n_scored
        # the schedule runs forward, the loss and backward inside these
        with autocast_ctx(self.r, self.device), step_context(self.dims, self.r.model.seq_len, self.device):
            total = self.pipe.step(x, y)
        self.pipe.sync_tied_grads()
        return total

    def eval_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
        with step_context(self.dims, self.r.model.seq_len, self.device):
            return self.pipe.forward_losses(x, y, lambda: autocast_ctx(self.r, self.device))

    def clip_grad_norm(self, max_norm: float) -> None:
        self.pipe.clip_grad_norm(max_norm)


def device_memory(device: torch.device) -> float:
    """The bytes the device holds: a GPU's memory, or the host's for a CPU."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    import os

    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def make_engine(parts: list[nn.Module], r: Recipe, dims: ParallelDims, device: torch.device, accum: int,
                device_bytes: float | None = None, grad_mode: str | None = None):
    """The engine of this rank's parts; `device_bytes` (default: the device's own) decides how
    FSDP2 accumulates gradients (parallel.apply.accumulation_mode), unless `grad_mode` names it."""
    if dims.pp == 1:
        return LocalEngine(parts[0], r, dims, device, accum, device_bytes, grad_mode)
    return PipelineEngine(parts, r, dims, device, accum, device_bytes, grad_mode)


def fit_warning(r: Recipe, dims: ParallelDims, device_bytes: float) -> str | None:
    """Before a run on a GPU: the planner's price of this stack (plan.stack_memory, which the traced
    memory checks) when it exceeds the device, with what to run to see the trace; else None."""
    from trainperf.plan.stack_memory import stack_memory

    g = dims.batch(r.train)
    m = stack_memory(r.model, tp=dims.tp, pp=dims.pp, vpp=r.parallel.vpp, cp=dims.cp, dp=dims.dp,
                     dp_replicate=dims.dp_replicate, mbs=g.micro, gbs=g.global_batch, schedule=r.parallel.pp_schedule,
                     recompute=r.parallel.activation_checkpoint, precision=r.train.precision,
                     optimizer=r.train.optimizer, gpu_bytes=device_bytes)
    if m.total <= device_bytes:
        return None
    return (f"this layout needs about {m.total / 1e9:.1f} GB per GPU (planned: activations "
            f"{m.activations / 1e9:.1f}, loss {m.logits / 1e9:.1f} GB) and the GPU has {device_bytes / 1e9:.1f} GB; "
            f"`trainperf run {r.benchmark.name} --dry-run --nproc {dims.world_size} --gpu KIND` traces it and says "
            f"what to change")
