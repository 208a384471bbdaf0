"""FLOPs per token, counted the standard way (PaLM appendix B): every matmul as 2·m·n·k, training as
forward + backward = 3 x forward (backward computes gradients for activations and for weights), plus
attention's two sequence-length-dependent matmuls. Norms, activations, softmax and the embedding
lookup are not counted, as in the PaLM and Megatron conventions MFU figures are quoted in.

Attention is counted without the causal-mask discount (PaLM: 12·L·H·Q·T per token for training);
kernels that skip masked blocks are credited with work they did not do, which is the convention.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.config import ModelConfig


@dataclass(frozen=True)
class FlopsBreakdown:
    """Forward FLOPs per token by component."""

    attn_proj: int  # q, k, v, o projections, all layers
    attn_sdpa: int  # QK^T and attention-weighted V, all layers
    mlp: int
    head: int  # output projection to the vocabulary

    @property
    def forward(self) -> int:
        return self.attn_proj + self.attn_sdpa + self.mlp + self.head


def forward_breakdown(cfg: ModelConfig, seq_len: int | None = None) -> FlopsBreakdown:
    T = seq_len or cfg.seq_len
    d, hd, L = cfg.d_model, cfg.head_dim, cfg.n_layer
    q_out, kv_out = cfg.n_head * hd, cfg.kv_heads * hd
    proj = 2 * d * q_out + 2 * 2 * d * kv_out + 2 * q_out * d
    sdpa = 2 * 2 * T * q_out  # scores (T x hd per query) and weighted sum, every head
    n_mats = 3 if cfg.gated else 2
    mlp = n_mats * 2 * d * cfg.ff_dim
    return FlopsBreakdown(attn_proj=L * proj, attn_sdpa=L * sdpa, mlp=L * mlp, head=2 * d * cfg.vocab_size)


def matmul_params(cfg: ModelConfig) -> int:
    """Parameters that take part in matmuls (N in 6·N): every linear layer including the head,
    excluding embeddings lookups, norms and biases."""
    b = forward_breakdown(cfg)
    return (b.attn_proj + b.mlp + b.head) // 2


def flops_per_token(cfg: ModelConfig, training: bool = True, seq_len: int | None = None) -> int:
    """Model FLOPs per token: 3 x forward for training (= 6·N + 12·L·T·H·hd), forward alone for eval.

    With LoRA (cfg.lora_rank > 0) the frozen base needs no weight gradients: its matmuls cost
    forward + activation-gradient = 2 x forward, the adapters the usual 3 x.
    """
    b = forward_breakdown(cfg, seq_len)
    if not training:
        return b.forward
    if cfg.lora_rank <= 0:
        return 3 * b.forward
    lora = lora_forward_flops(cfg)
    # attention scores have no weights: their backward is 2x forward either way
    return 2 * (b.attn_proj + b.mlp + b.head) + 3 * b.attn_sdpa + 3 * lora


def lora_forward_flops(cfg: ModelConfig) -> int:
    d, hd = cfg.d_model, cfg.head_dim
    shapes = {
        "wq": (d, cfg.n_head * hd), "wk": (d, cfg.kv_heads * hd), "wv": (d, cfg.kv_heads * hd),
        "wo": (cfg.n_head * hd, d), "w1": (d, cfg.ff_dim), "w3": (d, cfg.ff_dim), "w2": (cfg.ff_dim, d),
    }
    r = cfg.lora_rank
    per_layer = sum(2 * r * (i + o) for name, (i, o) in shapes.items()
                    if name in cfg.lora_targets and not (name == "w3" and not cfg.gated))
    return cfg.n_layer * per_layer
