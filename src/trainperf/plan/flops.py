"""FLOPs the planner charges: per layer and per GEMM with its shard shape, forward and backward.

Model FLOPs (the MFU numerator) come from `trainperf.model.flops` (PaLM/Megatron convention, no
causal discount, no recompute). Executed FLOPs (what the time is made of) differ: causal attention
kernels skip the masked half, FlashAttention's backward runs 5 matmuls against the forward's 2,
recompute repeats the forward, and a frozen LoRA base skips its weight-gradient matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.config import ModelConfig
from trainperf.model.flops import flops_per_token, forward_breakdown, matmul_params

ATTN_BWD_OVER_FWD = 2.5  # FlashAttention backward: 5 matmuls (incl. recomputing QK^T) vs 2 forward
CAUSAL_WORK = 0.5  # causal kernels compute only the unmasked half of the score matrix


@dataclass(frozen=True)
class Gemm:
    name: str
    n: int  # output features per GPU
    k: int  # input features per GPU


def layer_gemms(cfg: ModelConfig, tp: int) -> list[Gemm]:
    """The matmuls of one transformer layer as one tensor-parallel rank runs them (Megatron split:
    column-parallel QKV and MLP-in, row-parallel O and MLP-out)."""
    h, hd = cfg.d_model, cfg.head_dim
    qkv = (cfg.n_head + 2 * cfg.kv_heads) * hd
    f = cfg.ff_dim
    mlp_in = 2 * f if cfg.gated else f  # SwiGLU's gate and up projections run fused
    return [Gemm("qkv", qkv // tp, h), Gemm("o", h, cfg.n_head * hd // tp),
            Gemm("mlp_in", mlp_in // tp, h), Gemm("mlp_out", h, f // tp)]


def attn_fwd_flops_per_token_layer(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """Executed forward attention-core FLOPs per token per layer (causal half of QK^T and PV)."""
    T = seq_len or cfg.seq_len
    return 4 * T * cfg.n_head * cfg.head_dim * CAUSAL_WORK


def megatron_flops_per_iteration(batch: int, seq: int, layers: int, hidden: int, vocab: int,
                                 recompute: bool = False) -> float:
    """Narayanan et al. 2021 (Megatron-LM at scale), eq. in sec. 5.1: 96·B·s·l·h²·(1 + s/6h + V/16lh)
    with full recompute; 72·B·s·l·h²·(1 + s/6h + V/12lh) without (GPT, 4h MLP, no causal discount)."""
    if recompute:
        return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return 72 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def six_n(cfg: ModelConfig) -> float:
    """The 6·N rule's training FLOPs per token (N = matmul parameters)."""
    return 6 * matmul_params(cfg)


__all__ = ["Gemm", "layer_gemms", "flops_per_token", "forward_breakdown", "matmul_params",
           "attn_fwd_flops_per_token_layer", "megatron_flops_per_iteration", "six_n"]
