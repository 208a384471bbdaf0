"""A Hugging Face `config.json` as a trainperf ModelConfig: one reader for the trainer (`import-hf`,
a base checkpoint) and the planner (`plan --model config.json`), without torch so a plan stays fast.

The two ask different things of a model. The trainer must compute what transformers computes
(`exact`): anything it would compute differently is refused (an activation, a bias layout) or
noted (a RoPE scaling it does not implement). The planner must price it: only what changes the
cost is refused (a sliding window, experts), so Mistral
and Qwen2 configs are priced as the Llama blocks they are, their q/k/v biases aside.
"""

from __future__ import annotations

from trainperf.config import ModelConfig
from trainperf.errors import TrainperfError

LLAMA_TYPES = ("llama", "qwen3", "mistral", "qwen2")  # Llama's blocks: RMSNorm, SwiGLU, RoPE
EXACT_TYPES = ("llama", "qwen3", "gpt2")  # what trainperf loads weights from and computes alike
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def rope_of(raw: dict) -> tuple[float, str, dict]:
    """(rope_theta, rope_type, scaling parameters) from a 4.x (rope_theta, rope_scaling) or 5.x
    (rope_parameters) config."""
    params = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or {}
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    return float(theta), str(kind), {**scaling, **params}


class _Reader:
    def __init__(self, raw: dict, where: str, error: type[TrainperfError], exact: bool):
        self.raw, self.where, self.error, self.exact = raw, where, error, exact

    def fail(self, key: str, why: str) -> TrainperfError:
        return self.error(f"{self.where}: {key}={self.raw.get(key)!r}: {why}")

    def need(self, key: str, ok: bool, why: str, cost: bool = False) -> None:
        """Refuse `key` unless `ok`: always where the price depends on it (`cost`), else only when exact."""
        if not ok and (cost or self.exact):
            raise self.fail(key, why)

    def int(self, key: str, default: int, null_is_default: bool = False) -> int:
        """`key` as a positive integer, `default` where it is absent (or null, where the HF class
        reads null so: num_key_value_heads, n_inner, head_dim)."""
        v = self.raw.get(key, default)
        if v is None and null_is_default:
            v = default
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise self.fail(key, "must be a positive integer")
        return v

    def number(self, key: str, default: float) -> float:
        v = self.raw.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(key, "must be a number")
        return float(v)


def hf_model_config(raw: dict, where: str, error: type[TrainperfError],
                    exact: bool = True) -> tuple[ModelConfig, list[str]]:
    """The ModelConfig of an HF config.json's `raw` object and notes on what trainperf computes
    differently; `error` (naming `where` and the key) for what it cannot train (`exact`) or price.
    Missing keys take the HF class defaults (save_pretrained omits some of them)."""
    kind = raw.get("model_type")
    r = _Reader(raw, where, error, exact)
    for key in EXPERT_KEYS:
        r.need(key, not raw.get(key), "a mixture of experts: trainperf models dense transformers", cost=True)
    if exact and kind not in EXACT_TYPES or kind not in (*LLAMA_TYPES, "gpt2"):
        readable = "llama, qwen3 and gpt2 checkpoints" if exact else f"{', '.join(LLAMA_TYPES)} and gpt2 configs"
        raise error(f"{where}: model_type={kind!r}: trainperf reads dense {readable} only")
    if kind == "gpt2":
        return _gpt2(r), []
    return _llama(r, kind)


def _llama(r: _Reader, kind: str) -> tuple[ModelConfig, list[str]]:
    raw, notes = r.raw, []
    d, n_head = r.int("hidden_size", 4096), r.int("num_attention_heads", 32)
    head = r.int("head_dim", 0) if raw.get("head_dim") is not None else 0  # null or absent: hidden / heads
    r.need("num_attention_heads", head or d % n_head == 0, f"does not divide hidden_size={d}", cost=True)
    window_key = "use_sliding_window" if "use_sliding_window" in raw else "sliding_window"
    windowed = raw.get("use_sliding_window", kind == "mistral") and raw.get("sliding_window") is not None
    r.need(window_key, not windowed, "trainperf attends over the whole causal context", cost=True)
    r.need("hidden_act", raw.get("hidden_act", "silu") == "silu", "trainperf's llama MLP is SwiGLU (silu)")
    bias = bool(raw.get("attention_bias", False))
    if kind == "qwen2":  # only priced (not in EXACT_TYPES): its q/k/v biases, which no key states, are left out
        bias = False
    if kind == "qwen3":
        r.need("attention_bias", not bias, "trainperf has one model.bias for attention and MLP, and Qwen3's MLP "
               "has none")
    r.need("mlp_bias", bool(raw.get("mlp_bias", False)) == bias,
           f"trainperf has one model.bias for attention and MLP (attention_bias={bias})")
    try:
        theta, rope_type, rp = rope_of(raw)
    except (AttributeError, TypeError, ValueError):
        raise r.error(f"{r.where}: rope_theta must be a number, rope_scaling and rope_parameters mappings") from None
    scaling = {}
    if rope_type == "llama3":
        try:
            scaling = dict(rope_scaling_factor=float(rp["factor"]),
                           rope_low_freq_factor=float(rp.get("low_freq_factor", 1.0)),
                           rope_high_freq_factor=float(rp.get("high_freq_factor", 4.0)),
                           rope_original_context=int(rp.get("original_max_position_embeddings", 8192)))
        except (KeyError, TypeError, ValueError):
            raise r.error(f"{r.where}: rope_scaling of type 'llama3' without a numeric 'factor'") from None
    elif rope_type != "default":
        notes.append(f"{r.where}: RoPE scaling {rope_type!r} is ignored: trainperf implements only 'llama3', so "
                     "its logits differ from transformers' (most at long distances)")
    cfg = ModelConfig(family="llama", n_layer=r.int("num_hidden_layers", 32), d_model=d, n_head=n_head,
                      n_kv_head=r.int("num_key_value_heads", n_head, null_is_default=True),
                      head_size=0 if head == d // n_head else head, d_ff=r.int("intermediate_size", 11008),
                      vocab_size=r.int("vocab_size", 32000), seq_len=r.int("max_position_embeddings", 2048),
                      norm_eps=r.number("rms_norm_eps", 1e-6), rope_theta=theta, **scaling,
                      tie_embeddings=bool(raw.get("tie_word_embeddings", False)), bias=bias,
                      qk_norm=kind == "qwen3")
    r.need("num_key_value_heads", n_head % cfg.kv_heads == 0, f"does not divide num_attention_heads={n_head}",
           cost=True)
    return cfg, notes


def _gpt2(r: _Reader) -> ModelConfig:
    raw = r.raw
    d, n_head = r.int("n_embd", 768), r.int("n_head", 12)
    r.need("n_head", d % n_head == 0, f"does not divide n_embd={d}", cost=True)
    r.need("activation_function", raw.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh"),
           "trainperf's gpt MLP uses the tanh GELU (gelu_new)")
    r.need("scale_attn_weights", raw.get("scale_attn_weights", True) is True, "trainperf scales by 1/sqrt(head size)")
    r.need("scale_attn_by_inverse_layer_idx", not raw.get("scale_attn_by_inverse_layer_idx", False),
           "trainperf does not scale attention by layer")
    r.need("add_cross_attention", not raw.get("add_cross_attention", False), "trainperf is decoder-only", cost=True)
    return ModelConfig(family="gpt", n_layer=r.int("n_layer", 12), d_model=d, n_head=n_head,
                       n_kv_head=n_head, d_ff=r.int("n_inner", 4 * d, null_is_default=True),
                       vocab_size=r.int("vocab_size", 50257), seq_len=r.int("n_positions", 1024),
                       norm_eps=r.number("layer_norm_epsilon", 1e-5),
                       tie_embeddings=bool(raw.get("tie_word_embeddings", True)), bias=True)
