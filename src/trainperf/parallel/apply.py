"""Apply parallelism to a plain model from a DeviceMesh. The train loop calls `parallelize` and nothing else.

The mesh is (dp_replicate, dp_shard, tp), row-major over the ranks, so the ranks of one tensor-parallel
group are neighbours (on a GPU node they share NVLink) and the data-parallel rank is `rank // tp`.
Order of application, as torchtitan does it: tensor parallel -> activation checkpointing -> compile
per block -> FSDP2 (or DDP when nothing is sharded). Parameter names never change, so a checkpoint
written under one layout loads under any other.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from trainperf.config import ConfigError, ParallelConfig
from trainperf.parallel.env import DistEnv


@dataclass(frozen=True)
class Layout:
    """The mesh sizes for one world size, `dp_shard = -1` resolved."""

    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int = 1
    cp: int = 1

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def strategy(self) -> str:
        """A short name for logs: ddp, fsdp, hsdp, tp, fsdp+tp, ... or single."""
        parts = []
        if self.dp_shard > 1:
            parts.append("hsdp" if self.dp_replicate > 1 else "fsdp")
        elif self.dp_replicate > 1:
            parts.append("hsdp" if self.tp > 1 else "ddp")
        if self.tp > 1:
            parts.append("tp")
        return "+".join(parts) or "single"

    def to_dict(self) -> dict:
        return {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "dp": self.dp, "tp": self.tp,
                "pp": self.pp, "cp": self.cp, "world_size": self.world_size, "strategy": self.strategy}


def resolve_layout(pcfg: ParallelConfig, world_size: int) -> Layout:
    """The layout for `world_size` processes, or a ConfigError naming the key that does not fit."""
    if pcfg.compile and pcfg.tp > 1:
        # measured on torch 2.13 CPU/gloo: compiled blocks with DTensor TP fail in backward
        # (NestedRedistribute receives a plain tensor); FSDP2 + compile + AC works and is bit-identical
        raise ConfigError("parallel.compile: not supported with parallel.tp > 1 yet (compiled tensor-parallel "
                          "blocks fail in backward on this torch); use compile with FSDP/DDP, or tp without compile")
    fixed = pcfg.dp_replicate * pcfg.tp * pcfg.pp * pcfg.cp
    if pcfg.dp_shard == -1:
        if world_size % fixed:
            raise ConfigError(f"parallel: {world_size} processes are not divisible by dp_replicate*tp*pp*cp = "
                              f"{pcfg.dp_replicate}*{pcfg.tp}*{pcfg.pp}*{pcfg.cp}")
        shard = world_size // fixed
    else:
        shard = pcfg.dp_shard
        if fixed * shard != world_size:
            raise ConfigError(f"parallel: dp_replicate*dp_shard*tp*pp*cp = {fixed * shard} does not match the "
                              f"{world_size} processes (set parallel.dp_shard=-1 to use the rest)")
    return Layout(pcfg.dp_replicate, shard, pcfg.tp, pcfg.pp, pcfg.cp)


def dp_info(pcfg: ParallelConfig, env: DistEnv) -> tuple[int, int]:
    """(data-parallel rank, data-parallel size) of this process; validates the layout."""
    layout = resolve_layout(pcfg, env.world_size)
    return env.rank // (layout.tp * layout.pp * layout.cp), layout.dp


def comm_precision(pcfg: ParallelConfig, env: DistEnv, precision: str) -> str:
    """The lowest precision any collective carries (an MLPerf 6.1 disclosure key)."""
    layout = resolve_layout(pcfg, env.world_size)
    if precision == "bf16" and (layout.dp_shard > 1 or layout.tp > 1):
        # FSDP2 all-gathers bf16 parameters (the mixed-precision policy); TP moves autocast's bf16 activations
        return "bfloat16"
    # one process has no collectives; DDP all-reduces the fp32 gradients; FSDP reduce-scatters in fp32
    return "fp32"


def parallelize(model: nn.Module, pcfg: ParallelConfig, env: DistEnv, precision: str = "fp32",
                fp8: bool = False, seed: int = 0) -> nn.Module:
    """Move `model` to the device and apply FP8 / TP / activation checkpointing / compile / FSDP2 / DDP.

    A model built on the meta device (`parallel.meta_init`) is sharded first and then given storage
    and initial weights (seeded by `seed`) shard by shard, so no rank ever holds it whole."""
    layout = resolve_layout(pcfg, env.world_size)
    meta = next(model.parameters()).is_meta
    if not meta:
        model.to(env.device)
    if fp8:
        apply_float8(model)
    mesh = None
    if env.distributed:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(env.device.type, (layout.dp_replicate, layout.dp_shard, layout.tp),
                                mesh_dim_names=("dp_replicate", "dp_shard", "tp"))
        env.dp_group = _dp_group(layout, env)
    if layout.tp > 1:
        apply_tp(model, mesh["tp"])
    if pcfg.activation_checkpoint != "none":
        for block in model.layers.values():
            checkpoint_block(block, pcfg.activation_checkpoint)
    if pcfg.compile:
        for block in model.layers.values():
            block.compile()
    fsdp = layout.dp_shard > 1 or (layout.dp > 1 and layout.tp > 1)
    if fsdp:
        dp_mesh = mesh["dp_replicate", "dp_shard"] if layout.dp_replicate > 1 else mesh["dp_shard"]
        apply_fsdp(model, dp_mesh, precision)
    if meta:
        from trainperf.model.weights import materialize

        materialize(model, env.device, seed)  # after sharding: each rank allocates its shards only
    if not fsdp and layout.dp_replicate > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[env.local_rank] if env.device.type == "cuda" else None)
    return model


def apply_float8(model: nn.Module) -> None:
    """Swap the blocks' linear layers for torchao's Float8Linear (dynamic per-tensor scaling). The
    output head stays in bf16 (its softmax is sensitive to FP8 rounding, as in torchtitan), and so
    does any layer whose dimensions FP8 GEMMs cannot take (multiples of 16)."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise NotImplementedError("train.fp8_linear needs torchao: pip install torchao") from None

    def wanted(module: nn.Module, fqn: str) -> bool:
        return (isinstance(module, nn.Linear) and fqn.startswith("layers.")
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)

    convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=wanted)


def _dp_group(layout: Layout, env: DistEnv):
    """The process group of this rank's data-parallel peers (same tp index); None means the world."""
    if layout.tp == 1:
        return None
    mine = None
    for t in range(layout.tp):  # every rank must create every group, in the same order
        g = dist.new_group([d * layout.tp + t for d in range(layout.dp)])
        if env.rank % layout.tp == t:
            mine = g
    return mine


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
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    tied = model.output.weight is model.tok_emb.weight
    plan = {
        "tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        # the loss is computed inside the model, so the head hands every rank the full logits
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    if model.pos_emb is not None:
        # positions (T, D) sharded along T line up with the sequence-sharded token embeddings (B, T/tp, D)
        plan["pos_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
    parallelize_module(model, tp_mesh, plan)
    if tied:
        # both sides are Shard(0) over the vocabulary on the same mesh, so one DTensor can serve both
        model.output.weight = model.tok_emb.weight
    for block in model.layers.values():
        bplan = {
            "attn_norm": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "mlp_norm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.w1": ColwiseParallel(),
            "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        }
        if getattr(block.mlp, "gated", False):
            bplan["mlp.w3"] = ColwiseParallel()
        parallelize_module(block, tp_mesh, bplan)


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
