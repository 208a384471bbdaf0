"""Apply parallelism to a plain model from the run's `ParallelDims` (and its DeviceMesh). The trainer
calls `parallelize` to build and `grad_sync` around backward, and nothing else.

Order of application, as torchtitan does it: tensor parallel -> activation checkpointing -> compile
per block -> FSDP2 (or DDP when nothing is sharded) -> storage and init -> context parallel. Parameter names never change, so a checkpoint
written under one layout loads under any other.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
import torch.nn as nn

from trainperf.errors import ConfigError
from trainperf.parallel.context import apply_cp
from trainperf.parallel.dims import ParallelDims, unsharded_grads_fit


def parallelize(model: nn.Module, dims: ParallelDims, device: torch.device, precision: str = "fp32",
                activation_checkpoint: str = "none", compile: bool = False, fp8: bool = False,
                seed: int = 0) -> nn.Module:
    """Apply FP8 / TP / activation checkpointing / compile / FSDP2 to a model built on the meta
    device, give it storage on `device` and its own initial weights (`model.init_weights(seed)`),
    then wrap it in DDP when the data-parallel ranks replicate an unsharded model.

    Sharding comes before storage, so each rank allocates only its shards; the weights are drawn
    whole and sliced, so every layout starts from the same model."""
    if fp8:
        apply_float8(model, tp=dims.tp)
    if dims.tp > 1:
        apply_tp(model, dims.mesh["tp"])
    if activation_checkpoint != "none":
        for block in model.layers.values():
            checkpoint_block(block, activation_checkpoint)
    if compile:
        compile_model(model)
    if dims.fsdp:
        apply_fsdp(model, dims.dp_mesh, precision)
    model.to_empty(device=device)
    model.init_weights(seed)
    if dims.cp > 1:
        apply_cp(model, dims, precision)  # after init: it re-indexes the position tables init_weights builds
    if dims.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        # every rank drew the same weights: DDP's start-up broadcast only confirms them. Its group is
        # the replicas of this rank's model (one pipeline stage's peers), not the world
        group = dims.mesh["dp_replicate"].get_group() if dims.mesh is not None else None
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, process_group=group)
    return model


def compile_model(model: nn.Module) -> None:
    """torch.compile each block in place (parameter names unchanged), as torchtitan does, under every
    layout. The whole model as one graph was tried on a 2-core Zen 5: 10% less CPU time per forward
    and backward on one thread, level end to end at two threads (time to target, bench/throughput.py),
    and its cold compile, what a new machine's first run pays, took 190 s against 52 s per block
    (bench/results/tiny_records_2026-12-06_to_07.md)."""
    for block in model.layers.values():
        block.compile()


# How gradients are accumulated over the micro-batches of one step (logged as `grad_accumulation`)
ACCUM_REDUCE_EACH = "reduce-scatter every micro-batch"
ACCUM_UNSHARDED = "unsharded until the last micro-batch"
ACCUM_NO_SYNC = "all-reduce after the last micro-batch"  # DDP: its gradients are whole anyway
ACCUM_LOCAL = "local"  # nothing to reduce: one process, or one micro-batch per step


def unsharded_grad_bytes(model: nn.Module, tp: int) -> int:
    """The fp32 gradients FSDP2 keeps unsharded between micro-batches with sync off: every trainable
    parameter of this rank's part, after tensor parallelism (norms, whole on every tp rank, are few)."""
    return 4 * sum(p.numel() for p in model.parameters() if p.requires_grad) // tp


def accumulation_mode(model: nn.Module, tp: int, accum: int, device_bytes: float) -> str:
    """How this rank accumulates gradients over `accum` micro-batches: FSDP2 keeps them unsharded
    only where they fit (`parallel.dims.unsharded_grads_fit`) in the device's `device_bytes`."""
    from torch.distributed.fsdp import FSDPModule

    if accum == 1:
        return ACCUM_LOCAL
    if hasattr(model, "no_sync"):
        return ACCUM_NO_SYNC
    if not isinstance(model, FSDPModule):
        return ACCUM_LOCAL
    if unsharded_grads_fit(unsharded_grad_bytes(model, tp), device_bytes):
        return ACCUM_UNSHARDED
    return ACCUM_REDUCE_EACH


def grad_sync(model: nn.Module, enabled: bool, mode: str = ACCUM_UNSHARDED):
    """A context in which backward does (or does not) reduce gradients across data-parallel ranks.

    Gradient accumulation turns it off for all but the last micro-batch: DDP through `no_sync()`,
    FSDP2 through `set_requires_gradient_sync` when `mode` is ACCUM_UNSHARDED (it keeps the unsharded
    gradients until the last micro-batch, then reduce-scatters once); with ACCUM_REDUCE_EACH FSDP2
    reduce-scatters every micro-batch into the sharded gradients. One process has nothing to switch."""
    if enabled:
        return contextlib.nullcontext()
    if hasattr(model, "no_sync"):
        return model.no_sync()
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule) and mode == ACCUM_UNSHARDED:
        return _fsdp_no_sync(model)
    return contextlib.nullcontext()


def pipeline_accumulation(parts: list[nn.Module], tp: int, accum: int, device_bytes: float) -> str:
    """How a pipeline rank's FSDP2 stages accumulate gradients: torch.distributed.pipelining keeps
    every stage's whole gradients (fp32) and gathered parameters until the step's last backward,
    which is kept only where both fit (`parallel.dims.unsharded_grads_fit`); otherwise every
    micro-batch's backward reduce-scatters and reshards (`keep_gradient_sync`)."""
    from torch.distributed.fsdp import FSDPModule

    if accum == 1 or not any(isinstance(p, FSDPModule) for p in parts):
        return ACCUM_LOCAL
    whole = sum(unsharded_grad_bytes(p, tp) + 2 * sum(q.numel() for q in p.parameters()) // tp for p in parts)
    return ACCUM_UNSHARDED if unsharded_grads_fit(whole, device_bytes) else ACCUM_REDUCE_EACH


def keep_gradient_sync(model: nn.Module) -> None:
    """Make a pipeline schedule's switches (sync off, no resharding after backward, not the last
    backward) no-ops on this FSDP2 stage: each micro-batch's backward then reduce-scatters into the
    sharded gradients and frees the gathered parameters, as without a pipeline. The schedule's
    final reduction finds nothing left to reduce."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        return
    for name in ("set_requires_gradient_sync", "set_reshard_after_backward", "set_is_last_backward"):
        setattr(model, name, lambda *args, **kwargs: None)


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def apply_float8(model: nn.Module, tp: int = 1) -> None:
    """Swap the blocks' linear layers for torchao's Float8Linear (dynamic per-tensor scaling). The
    output head stays in bf16 (its softmax is sensitive to FP8 rounding, as in torchtitan), and so
    does any layer whose dimensions FP8 GEMMs cannot take (multiples of 16, on each of the `tp`
    ranks' shards: a column-wise layer splits its outputs, a row-wise one its inputs)."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise ConfigError("train.fp8_linear: needs torchao (pip install torchao)") from None

    def wanted(module: nn.Module, fqn: str) -> bool:
        return (isinstance(module, nn.Linear) and fqn.startswith("layers.")
                and module.in_features % (16 * tp) == 0 and module.out_features % (16 * tp) == 0)

    convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=wanted)


def apply_fsdp(model: nn.Module, dp_mesh, precision: str) -> None:
    """FSDP2: each block is its own all-gather unit; embeddings, final norm and head share the root's."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy()
    if precision == "bf16":
        # bf16 all-gathers and compute, fp32 gradient reduction (summing many bf16 shards loses bits)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    n = len(model.layers)
    for i, block in enumerate(model.layers.values()):
        # the last block's parameters are gathered again at once for backward: keep them
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=i < n - 1)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp)


def apply_tp(model: nn.Module, tp_mesh) -> None:
    """Megatron-style tensor parallelism with sequence parallel norms, on DTensor.

    Attention heads and MLP columns are split (column-wise in, row-wise out); between blocks the
    activations stay sharded along the sequence, so the norms run on 1/tp of the tokens.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    # SequenceParallel re-registers the norms' weights as new Parameters that require grad: a frozen
    # norm (every base weight under LoRA) would train under tp alone
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    # a pipeline stage holds the embedding, the head, both or neither
    tied = model.tok_emb is not None and model.output is not None and model.output.weight is model.tok_emb.weight
    plan = {}
    if model.tok_emb is not None:
        plan["tok_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if model.output is not None:
        plan["norm"] = SequenceParallel()
        # the logits stay split over the vocabulary (a DTensor): the loss is taken without gathering
        # them (loss_parallel, parallel.context), so each rank holds 1/tp of the largest activation
        plan["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
    if model.pos_emb is not None:
        # positions (T, D) sharded along T line up with the sequence-sharded token embeddings (B, T/tp, D)
        plan["pos_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
    if plan:
        parallelize_module(model, tp_mesh, plan)
    if tied:
        # both sides are Shard(0) over the vocabulary on the same mesh, so one DTensor can serve both
        model.output.weight = model.tok_emb.weight
    for block in model.layers.values():
        gated = getattr(block.mlp, "gated", False)
        attn = _tp_styles([block.attn.wq, block.attn.wk, block.attn.wv, block.attn.wo])
        mlp = _tp_styles([block.mlp.w1, block.mlp.w2] + ([block.mlp.w3] if gated else []))
        bplan = {
            "attn_norm": SequenceParallel(),
            "attn": attn.prepare(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attn.wq": attn.colwise(),
            "attn.wk": attn.colwise(),
            "attn.wv": attn.colwise(),
            "attn.wo": attn.rowwise(output_layouts=Shard(1)),
            "mlp_norm": SequenceParallel(),
            "mlp": mlp.prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.w1": mlp.colwise(),
            "mlp.w2": mlp.rowwise(output_layouts=Shard(1)),
        }
        if gated:
            bplan["mlp.w3"] = mlp.colwise()
        if block.attn.q_norm is not None:
            # q and k arrive as (B, heads/tp, T, head_dim) local shards: viewed as DTensors sharded on
            # the head dim, the norm weight becomes a replicated DTensor whose gradient (each rank's
            # heads contribute a partial sum) DTensor all-reduces over the tp group
            bplan["attn.q_norm"] = SequenceParallel(sequence_dim=1, use_local_output=True)
            bplan["attn.k_norm"] = SequenceParallel(sequence_dim=1, use_local_output=True)
        parallelize_module(block, tp_mesh, bplan)
    for name, p in model.named_parameters():
        if name in frozen:
            p.requires_grad_(False)


@dataclass(frozen=True)
class _Styles:
    """The three tensor-parallel styles of one sub-module (attention or MLP): its input's
    preparation and its column- and row-wise linears."""
    prepare: type
    colwise: type
    rowwise: type


def _tp_styles(linears: list[nn.Module]) -> _Styles:
    """torchao's float8 styles when every linear of the sub-module is a Float8Linear (as in
    torchtitan: the input is cast to FP8 once, before its all-gather, so the sequence-parallel
    all-gather moves FP8 and each linear's gradient leaves in FP8); torch's own (LoRA-aware) styles
    otherwise: a LoRA adapter or a layer too narrow for FP8 GEMMs reads the input in bf16. There a
    Float8Linear still runs its GEMM in FP8 on the bf16 DTensor input, only the all-gather is bf16."""
    from torch.distributed.tensor.parallel import PrepareModuleInput

    if all(type(m).__name__ == "Float8Linear" for m in linears):
        from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                           PrepareFloat8ModuleInput)

        return _Styles(PrepareFloat8ModuleInput, Float8ColwiseParallel, Float8RowwiseParallel)
    colwise, rowwise = _lora_styles()
    return _Styles(PrepareModuleInput, colwise, rowwise)


@functools.cache
def _lora_styles():
    """Column- and row-wise tensor-parallel styles that also take a LoRALinear (a frozen base linear
    plus adapters A: rank x in, B: out x rank), and behave as torch's own on a plain nn.Linear.

    Column-wise (y's features split): the base weight and B are split by output rows, A is whole on
    every rank (the input is replicated, so each rank computes the same A x, rank wide), and the
    rank's B shard gives its columns of the update. Row-wise (x's features split): the base weight
    and A are split by input columns, so A x is a partial sum like the base's W x; B is whole, and
    the sum of both partials is reduced once by the style's output (all-reduce or reduce-scatter).
    The adapters keep their names, so checkpoints and the exported adapters are the plain model's."""
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from trainperf.model.transformer import LoRALinear

    def partition(placements: dict[str, object]):
        def fn(name: str, module: nn.Module, mesh) -> None:
            if not isinstance(module, LoRALinear):
                return  # the base and the dropout inside it: handled with their parent
            for fqn, param in list(module.named_parameters()):
                owner, _, leaf = fqn.rpartition(".")
                holder = module.get_submodule(owner) if owner else module
                dt = distribute_tensor(param, mesh, [placements[fqn]], src_data_rank=None)
                holder.register_parameter(leaf, nn.Parameter(dt, requires_grad=param.requires_grad))
        return fn

    def wrap(self, module: nn.Module, mesh, placements: dict[str, object]) -> nn.Module:
        return distribute_module(module, mesh, partition(placements),
                                 functools.partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                                 functools.partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))

    class LoRAColwise(ColwiseParallel):
        def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
            if not isinstance(module, LoRALinear):
                return super()._apply(module, device_mesh)
            return wrap(self, module, device_mesh, {"base.weight": Shard(0), "base.bias": Shard(0),
                                                    "lora_a": Replicate(), "lora_b": Shard(0)})

    class LoRARowwise(RowwiseParallel):
        def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
            if not isinstance(module, LoRALinear):
                return super()._apply(module, device_mesh)
            self.desired_input_layouts = (Shard(-1),)
            return wrap(self, module, device_mesh, {"base.weight": Shard(1), "base.bias": Replicate(),
                                                    "lora_a": Shard(1), "lora_b": Replicate()})

    return LoRAColwise, LoRARowwise


def _sac_policy():
    """Selective checkpointing: keep what is expensive to recompute (matmuls, attention, TP
    reduce-scatters), recompute the cheap element-wise work (norms, activations, RoPE)."""
    from torch.utils.checkpoint import CheckpointPolicy

    aten = torch.ops.aten
    names = ["mm", "addmm", "bmm", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"]
    save = {getattr(aten, n).default for n in names if hasattr(aten, n)}
    c10d = getattr(torch.ops, "_c10d_functional", None)
    if c10d is not None and hasattr(c10d, "reduce_scatter_tensor"):
        save.add(c10d.reduce_scatter_tensor.default)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def checkpoint_block(block: nn.Module, mode: str) -> None:
    """Recompute the block's activations in backward ("full"), or only the cheap ones ("selective").

    The block's own forward is wrapped in place, so parameter names (and checkpoints) do not change.
    """
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    inner = block.forward
    kw: dict = {"use_reentrant": False}
    if mode == "selective":
        kw["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _sac_policy())

    def forward(*args, **kwargs):
        return checkpoint(inner, *args, **kw, **kwargs)

    block.forward = forward


def unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)
