"""One decoder-only transformer for the GPT-3 and Llama 3 families, chosen by `ModelConfig.family`.

gpt:   learned positions, LayerNorm, GELU MLP, multi-head attention.
llama: RoPE (rotate-half layout, as in HF Llama), RMSNorm, SwiGLU MLP, grouped-query attention.

The model knows nothing of parallelism: `trainperf.parallel` wraps it. Attention goes through
`F.scaled_dot_product_attention`, so each device picks its fastest kernel (flash on GPU).
"""

from __future__ import annotations

import math
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate
from torch.utils.checkpoint import checkpoint

from trainperf.config import ModelConfig
from trainperf.model.init import fill_
from trainperf.model.loss import loss_chunk


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update: y = W x + (alpha/r) * B A x."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        super().__init__()
        self.base = base
        self.dropout = nn.Dropout(dropout)  # on the adapter's input only, as PEFT does
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.empty(base.out_features, rank))
        self.scale = alpha / rank
        if not self.lora_a.is_meta:
            self.init_adapters()

    @torch.no_grad()
    def init_adapters(self, gen: torch.Generator | None = None) -> None:
        """A as nn.Linear's default (uniform, bound 1/sqrt(fan_in)), B zero: the update starts at 0."""
        bound = 1.0 / math.sqrt(self.lora_a.shape[1])
        fill_(self.lora_a, torch.empty(tuple(self.lora_a.shape)).uniform_(-bound, bound, generator=gen))
        fill_(self.lora_b, torch.zeros(tuple(self.lora_b.shape)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b) * self.scale


def llama3_scaled(inv_freq: torch.Tensor, factor: float, low: float, high: float, context: int) -> torch.Tensor:
    """Llama 3.1's frequency scaling: wavelengths longer than context/low are stretched by `factor`,
    those shorter than context/high are kept, and in between the two are blended linearly in
    context/wavelength, so the model reaches past the context it was first trained on."""
    wavelen = 2 * math.pi / inv_freq
    ratio = context / wavelen  # how many times a wavelength fits into the original context
    blend = ((ratio - low) / (high - low)).clamp(0.0, 1.0)  # 0 -> fully stretched, 1 -> kept
    return inv_freq / factor * (1 - blend) + inv_freq * blend


def precompute_rope(head_dim: int, seq_len: int, theta: float, cfg: "ModelConfig | None" = None) -> torch.Tensor:
    """cos and sin tables, shape (2, seq_len, head_dim), in the rotate-half layout (as HF Llama):
    dimension i is paired with i + head_dim/2 and both use frequency i."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    if cfg is not None and cfg.rope_scaling_factor:
        inv_freq = llama3_scaled(inv_freq, cfg.rope_scaling_factor, cfg.rope_low_freq_factor,
                                 cfg.rope_high_freq_factor, cfg.rope_original_context)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq).repeat(1, 2)
    return torch.stack([angles.cos(), angles.sin()])


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate x: (B, H, T, D) by the angles in rope: (2, T, D); x1/x2 are the two halves of D."""
    cos, sin = rope[0].to(x.dtype), rope[1].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the weight in the input's format: under bf16 autocast the query/key norms see bf16, and a
        # mixed pair falls back from the fused kernel to a composite one (with a warning every run)
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)


# bench/attention.py on a 2-core Zen 5 (AVX512-BF16), forward + backward compiled, bf16: the
# written-out form takes 0.47x / 0.59x the fused kernel's time at 128 / 256 tokens, 1.34x at 512;
# in fp32 1.03-1.08x from 128 on, so fp32 keeps the fused kernel (docs/benchmarks.md)
EXPLICIT_ATTENTION_MAX_LEN = 256


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention written out: scores, the mask, a softmax, the weighted values (grouped-query
    heads share their key/value head). What the fused kernel computes, in memory that grows with the
    square of the sequence. The softmax computes in fp32 and returns the scores' format: the values
    were multiplied by its bf16 rounding anyway, and the backward now keeps that rounding instead of
    an fp32 copy (a `tiny` block's attention, forward and backward compiled, 8.3 -> 7.5 ms on a
    2-core Zen 4; the same forward to the bit; bench/results/tiny_records_2026-12-06_to_07.md)."""
    if k.shape[1] != q.shape[1]:
        k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(q.shape[1] // k.shape[1], 1)
    scores = (q @ k.mT) * q.shape[-1] ** -0.5
    future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
    return weights.to(v.dtype) @ v


def make_norm(cfg: ModelConfig) -> nn.Module:
    if cfg.family == "gpt":
        return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
    return RMSNorm(cfg.d_model, cfg.norm_eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.kv_heads, cfg.head_dim
        self.use_rope = cfg.family == "llama"
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.wq = nn.Linear(cfg.d_model, cfg.n_head * cfg.head_dim, bias=cfg.bias)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.bias)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.bias)
        self.wo = nn.Linear(cfg.n_head * cfg.head_dim, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        B, T, _ = x.shape
        # -1 rather than n_head: under tensor parallelism each rank holds only its share of the heads.
        q = self.wq(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:  # bounds the attention logits, so a higher LR stays stable
            q, k = self.q_norm(q), self.k_norm(k)
        if self.use_rope:
            q, k = apply_rope(q, rope[:, :T]), apply_rope(k, rope[:, :T])
        y = self.attend(q, k, v)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention over the sequence this module sees (context parallelism swaps in its own).
        On a CPU in bf16, up to EXPLICIT_ATTENTION_MAX_LEN tokens, the written-out form compiles to
        faster code than torch's fused kernel (bench/attention.py); elsewhere the fused kernel."""
        if q.device.type == "cpu" and q.dtype == torch.bfloat16 and q.shape[-2] <= EXPLICIT_ATTENTION_MAX_LEN:
            return causal_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.act, self.gated = cfg.activation, cfg.gated
        self.w1 = nn.Linear(cfg.d_model, cfg.ff_dim, bias=cfg.bias)
        if self.gated:
            self.w3 = nn.Linear(cfg.d_model, cfg.ff_dim, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ff_dim, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        if self.act == "relu2":
            return self.w2(F.relu(self.w1(x)).square())
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = make_norm(cfg)
        self.attn = Attention(cfg)
        self.mlp_norm = make_norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("model.vocab_size must be set (from the tokenizer) before building the model")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model) if cfg.family == "gpt" else None
        # A ModuleDict keyed "0", "1", ... keeps FQNs stable when pipeline stages drop layers.
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layer)})
        self.norm = make_norm(cfg)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_emb.weight
        if cfg.family == "llama":
            self.register_buffer("rope", precompute_rope(cfg.head_dim, cfg.seq_len, cfg.rope_theta, cfg),
                                 persistent=False)
        else:
            self.rope = None
        # the positions of the tokens the model sees, in order (a context-parallel rank sees only its chunks)
        self.register_buffer("positions", torch.arange(cfg.seq_len), persistent=False)
        if cfg.lora_rank > 0:
            add_lora(self, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_dropout)
        if not self.tok_emb.weight.is_meta:  # on the meta device the caller shards first, then calls init_weights
            self.init_weights()

    @torch.no_grad()
    def init_weights(self, seed: int | None = None) -> None:
        """GPT-2 style init: weights N(0, 0.02), the residual projections (attn.wo, mlp.w2) scaled by
        1/sqrt(2 n_layer), norms 1, biases 0, LoRA A uniform and B zero. Every tensor is drawn whole
        and each rank keeps its shard of it. With `seed`, each tensor has its own generator, seeded
        by `seed` and the parameter's name, so a model built on any layout (a pipeline stage holding
        some layers included) starts from the same weights; without, torch's global generator draws
        them in module order."""
        if self.tok_emb is not None and self.output is not None and self.cfg.tie_embeddings:
            # to_empty gives each module its own new tensor, which unties a shared weight
            self.output.weight = self.tok_emb.weight
        std, out_std = 0.02, 0.02 / math.sqrt(2 * self.cfg.n_layer)
        residual = {id(_base(b.attn.wo)) for b in self.layers.values()} | {id(_base(b.mlp.w2)) for b in self.layers.values()}
        adapters = []
        for name, module in self.named_modules():
            gen = lambda leaf: _generator(seed, f"{name}.{leaf}".removeprefix("."))  # noqa: E731
            if isinstance(module, nn.Embedding):
                _normal_(module.weight, std, gen("weight"))
            elif isinstance(module, nn.Linear):
                if module is self.output and self.cfg.tie_embeddings:
                    if self.tok_emb is not None:
                        continue  # the embedding, drawn above
                    # a pipeline's last stage holds the tied head alone: it starts as the embedding
                    _normal_(module.weight, std, _generator(seed, "tok_emb.weight"))
                elif module is self.output and self.cfg.zero_init_head:
                    fill_(module.weight, torch.zeros(tuple(module.weight.shape)))
                else:
                    _normal_(module.weight, out_std if id(module) in residual else std, gen("weight"))
            elif isinstance(module, (RMSNorm, nn.LayerNorm)) and module.weight is not None:
                fill_(module.weight, torch.ones(tuple(module.weight.shape)))
            elif isinstance(module, LoRALinear):
                adapters.append((name, module))
            bias = getattr(module, "bias", None)
            if isinstance(bias, torch.Tensor):
                fill_(bias, torch.zeros(tuple(bias.shape)))
        for name, module in adapters:  # after every base weight: the base is the same with or without LoRA
            module.init_adapters(_generator(seed, f"{name}.lora_a"))
        self.set_positions(torch.arange(self.cfg.seq_len, device=self.positions.device))

    def set_positions(self, positions: torch.Tensor) -> None:
        """Which positions the input tokens hold (default 0..T-1); the RoPE table follows them."""
        self.positions = positions
        if self.rope is not None:
            full = precompute_rope(self.cfg.head_dim, self.cfg.seq_len, self.cfg.rope_theta, self.cfg)
            self.rope = full[:, positions.cpu()].to(positions.device)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V), or with targets the per-token cross-entropy losses (B, T) in fp32.

        A pipeline stage holds some of the layers: without the embedding it takes hidden states
        (B, T, D) instead of tokens, and without the head it returns them."""
        x = idx
        if self.tok_emb is not None:
            x = self.tok_emb(idx)
            if self.pos_emb is not None:
                x = x + self.pos_emb(self.positions[:idx.shape[1]])
        for block in self.layers.values():
            x = block(x, self.rope)
        if self.output is None:
            return x
        h = self.norm(x)
        if targets is None:
            return self._logits(h)
        # chunked where the whole loss would hold too much (model/loss.py); under tensor parallelism
        # `h` is a DTensor and each rank holds 1/tp of the vocabulary's logits (loss_parallel)
        n = targets.numel()
        tp = h.device_mesh.size() if isinstance(h, DTensor) else 1
        chunk = loss_chunk(n, self.cfg.vocab_size, self.cfg.loss_chunk_bytes, tp)
        if chunk >= n:
            return token_losses(self._logits(h), targets)
        if tp > 1:  # the sequence gathered once, as the head's own input layout would each time
            h = h.redistribute(placements=[Replicate()] * h.device_mesh.ndim)
        hs, ts = h.flatten(0, 1).split(chunk), targets.flatten().split(chunk)
        losses = [checkpoint(self._chunk_losses, hc[None], tc[None], use_reentrant=False) for hc, tc in zip(hs, ts)]
        return torch.cat(losses, dim=1).view(targets.shape).clone()  # not a view: FSDP2 warns of one

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.output(h)
        if self.cfg.logit_softcap > 0:
            cap = self.cfg.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    def _chunk_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return token_losses(self._logits(h), targets)


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy (B, T) in fp32; targets of -100 (unscored) give 0.

    Under tensor parallelism the logits are a DTensor split over the vocabulary and the losses come
    back replicated: every rank takes its whole copy."""
    losses = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    if isinstance(losses, DTensor):
        losses = losses.full_tensor()
    return losses.view_as(targets)


def _generator(seed: int | None, name: str) -> torch.Generator | None:
    """A generator for one named tensor: (seed, name) -> the same numbers on any layout."""
    if seed is None:
        return None
    return torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))


def _base(m: nn.Module) -> nn.Module:
    return m.base if isinstance(m, LoRALinear) else m


def _normal_(p: torch.Tensor, std: float, gen: torch.Generator | None) -> None:
    fill_(p, torch.randn(tuple(p.shape), generator=gen) * std)


def add_lora(model: nn.Module, rank: int, alpha: float, targets: list[str], dropout: float = 0.0) -> None:
    """Freeze every base weight and wrap the named projections (e.g. wq, wv) with LoRA adapters."""
    for p in model.parameters():
        p.requires_grad_(False)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in targets and isinstance(child, nn.Linear):
                setattr(module, name, LoRALinear(child, rank, alpha, dropout))


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Just the adapters, to save and load on their own."""
    return {k: v for k, v in model.state_dict().items() if ".lora_" in k}


@torch.no_grad()
def merge_lora(sd: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A LoRA state dict (live or gathered from shards) as a plain one: W + (alpha/r) * B A."""
    scale = cfg.lora_alpha / cfg.lora_rank
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if ".lora_" in k:
            continue
        if ".base." in k:
            prefix, leaf = k.rsplit(".base.", 1)
            if leaf == "weight":
                v = v + (sd[f"{prefix}.lora_b"] @ sd[f"{prefix}.lora_a"]).to(v.dtype) * scale
            k = f"{prefix}.{leaf}"
        out[k] = v
    return out


def merged_state_dict(model: "Transformer") -> dict[str, torch.Tensor]:
    """The plain (LoRA-free) state dict of a model with adapters merged into their base weights."""
    return merge_lora(model.state_dict(), model.cfg)
