"""A Hugging Face `config.json` as a trainperf ModelConfig: one reader for the trainer (`import-hf`,
a base checkpoint) and the planner (`plan --model config.json`), without torch so a plan stays fast.

The two ask different things of a model. The trainer must compute what transformers computes
(`exact`): anything it would compute differently is refused (an activation, a bias layout) or
noted (a RoPE scaling it does not implement). The planner must price it: only what changes the
cost is refused (a sliding window shorter than the sequence, experts), so Mistral
and Qwen2 configs are priced as the Llama blocks they are, their q/k/v biases aside, and the other
dense decoders of `PRICED` as trainperf blocks holding the same matrices.

Neither takes a size the config leaves out: the HF class default it would get is a guess at another
model (LlamaConfig's 32 layers of 4096), and save_pretrained writes every size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainperf.config import ModelConfig, oversized
from trainperf.errors import TrainperfError

LLAMA_TYPES = ("llama", "qwen3", "mistral", "qwen2")  # Llama's blocks: RMSNorm, SwiGLU, RoPE
EXACT_TYPES = ("llama", "qwen3", "gpt2")  # what trainperf loads weights from and computes alike
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
# The config.json key each ModelConfig size is read from, by family (the planner names it too)
SIZE_KEYS = {
    "llama": dict(n_layer="num_hidden_layers", d_model="hidden_size", n_head="num_attention_heads",
                  n_kv_head="num_key_value_heads", head_size="head_dim", d_ff="intermediate_size",
                  vocab_size="vocab_size", seq_len="max_position_embeddings"),
    "gpt": dict(n_layer="n_layer", d_model="n_embd", n_head="n_head", n_kv_head="n_head", d_ff="n_inner",
                vocab_size="vocab_size", seq_len="n_positions"),
}


@dataclass(frozen=True)
class Priced:
    """How the planner prices a dense decoder type trainperf does not train: as trainperf's blocks
    with the same matrices. `gated`: a gate beside the up projection (SwiGLU, GeGLU: three MLP
    matrices; priced as SwiGLU), else two, priced with `act`. `family` "gpt" where the type learns
    a position table (its d x seq weights), "llama" where positions cost no weights (RoPE, ALiBi).
    `keys`: field -> config key where they differ from Llama's; `ffn_ratio`: d_ff = ratio x d_model
    where the config states none (or `ratio_key` does); `tied`: the HF class's tie_word_embeddings
    default; `kv`: how the KV heads are stated ("falcon", "multi_query" or Llama's key)."""

    gated: bool
    act: str = "swiglu"
    family: str = "llama"
    keys: dict = field(default_factory=dict)
    ffn_ratio: int = 0
    ratio_key: str = ""
    tied: bool = False
    kv: str = ""


_GPT_KEYS = dict(n_layer="n_layer", d_model="n_embd", n_head="n_head", d_ff="n_inner", seq_len="n_positions")
# Each entry checked against transformers' own model of the type (the same Linear and Embedding
# weights on the meta device): tests/model/test_hf_priced.py
PRICED: dict[str, Priced] = {
    **{t: Priced(gated=True) for t in ("phi3", "olmo", "olmo2", "olmo3", "granite", "stablelm", "exaone", "glm",
                                      "helium", "seed_oss", "smollm3", "hunyuan_v1_dense", "ministral")},
    **{t: Priced(gated=True, tied=True) for t in ("gemma", "gemma2", "gemma3_text", "cohere", "ernie4_5")},
    "nemotron": Priced(gated=False, act="relu2"),
    "arcee": Priced(gated=False, act="relu2"),
    "phi": Priced(gated=False, act="gelu"),
    "gpt_neox": Priced(gated=False, act="gelu"),
    "apertus": Priced(gated=False, act="gelu"),  # xIELU, priced as an element-wise activation like GELU
    "starcoder2": Priced(gated=False, act="gelu", tied=True),
    "falcon": Priced(gated=False, act="gelu", tied=True, ffn_ratio=4, kv="falcon", keys=dict(d_ff="ffn_hidden_size")),
    "opt": Priced(gated=False, act="gelu", family="gpt", tied=True, keys=dict(d_ff="ffn_dim")),
    "bloom": Priced(gated=False, act="gelu", tied=True, ffn_ratio=4,
                    keys=dict(n_layer="n_layer", n_head="n_head", d_ff="", seq_len="")),
    "mpt": Priced(gated=False, act="gelu", tied=True, ratio_key="expansion_ratio",
                  keys=dict(n_layer="n_layers", d_model="d_model", n_head="n_heads", d_ff="", seq_len="max_seq_len")),
    "gpt_bigcode": Priced(gated=False, act="gelu", family="gpt", tied=True, ffn_ratio=4, kv="multi_query",
                          keys=_GPT_KEYS),
    "gptj": Priced(gated=False, act="gelu", ffn_ratio=4, keys=_GPT_KEYS),
}
# layer kinds a `layer_types` list may hold that cost what the planner prices
PRICED_LAYERS = ("full_attention", "sliding_attention")


def size_keys(kind: str | None, raw: dict | None = None) -> dict[str, str]:
    """The config.json key each ModelConfig size of a `kind` config is read from (errors name it),
    for the config `raw` where given (a priced type's width may be under its older name, n_embed)."""
    if kind == "gpt2":
        return SIZE_KEYS["gpt"]
    keys = {**SIZE_KEYS["llama"], **(PRICED[kind].keys if kind in PRICED else {})}
    if kind in PRICED and raw is not None and keys["d_model"] not in raw and "n_embed" in raw:
        keys["d_model"] = "n_embed"  # BloomConfig and FalconConfig take the older name too
    return keys


# the model types with a sliding window, and its size where config.json leaves the key out, as their
# HF classes take it (null is no window)
WINDOW_TYPES, DEFAULT_WINDOW = ("mistral", "qwen2", "qwen3"), 4096


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
        self.keys = size_keys(raw.get("model_type"), raw)

    def fail(self, key: str, why: str) -> TrainperfError:
        return self.error(f"{self.where}: {key}={self.raw.get(key)!r}: {why}")

    def need(self, key: str, ok: bool, why: str, cost: bool = False) -> None:
        """Refuse `key` unless `ok`: always where the price depends on it (`cost`), else only when exact."""
        if not ok and (cost or self.exact):
            raise self.fail(key, why)

    def int(self, key: str, derived: int | None = None) -> int:
        """`key` as a positive integer. Absent or null, it is `derived` where transformers derives it
        from other keys (num_key_value_heads, head_dim, n_inner), else refused."""
        v = self.raw.get(key)
        if v is None and derived is not None:
            return derived
        if key not in self.raw:
            raise self.error(f"{self.where}: {key} is missing (trainperf takes no size from an HF class "
                             "default, a guess at another model)")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise self.fail(key, "must be a positive integer")
        return v

    def size(self, field: str, derived: int | None = None) -> int:
        """The ModelConfig `field` from its key in SIZE_KEYS."""
        return self.int(self.keys[field], derived)

    def bool(self, key: str, default: bool) -> bool:
        """`key` as a JSON boolean: transformers' configs type these bool and refuse "false", 0 or
        null, which Python's truth would read as something."""
        v = self.raw.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, "must be true or false (a JSON boolean)")
        return v

    def number(self, key: str, default: float) -> float:
        v = self.raw.get(key, default)
        # the numbers read are epsilons and RoPE's base: each a positive, finite scale
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise self.fail(key, "must be a finite number > 0")
        return float(v)


def hf_model_config(raw: dict, where: str, error: type[TrainperfError], exact: bool = True,
                    seq_len: int | None = None) -> tuple[ModelConfig, list[str]]:
    """The ModelConfig of an HF config.json's `raw` object and notes on what trainperf computes
    differently; `error` (naming `where` and the key) for what it cannot train (`exact`) or price.
    `seq_len` is the sequence the planner prices instead of max_position_embeddings (n_positions)."""
    kind = raw.get("model_type")
    r = _Reader(raw, where, error, exact)
    for key in EXPERT_KEYS:
        r.need(key, not raw.get(key), "a mixture of experts: trainperf models dense transformers", cost=True)
    priced = not exact and kind in PRICED
    if exact and kind not in EXACT_TYPES or kind not in (*LLAMA_TYPES, "gpt2") and not priced:
        readable = ("llama, qwen3 and gpt2 checkpoints" if exact else
                    f"{', '.join(sorted([*LLAMA_TYPES, 'gpt2', *PRICED]))} configs")
        raise error(f"{where}: model_type={kind!r}: trainperf reads dense {readable} only")
    if seq_len is None and not r.keys["seq_len"]:
        raise error(f"{where}: a {kind} config states no sequence length (its positions are ALiBi's): "
                    "give --seq-len")
    if seq_len is None and not exact and r.keys["seq_len"] not in raw:
        raise error(f"{where}: {r.keys['seq_len']} is missing: give --seq-len (trainperf takes no size from an "
                    "HF class default)")
    seq = seq_len or r.size("seq_len")
    if priced:
        cfg, notes = _priced(r, kind, seq), []
    else:
        cfg, notes = (_gpt2(r, seq), []) if kind == "gpt2" else _llama(r, kind, seq)
    if too_big := oversized(cfg, {**r.keys, **({"seq_len": "the sequence"} if seq_len else {})}):
        raise error(f"{where}: {too_big}")  # before anything is built from it
    return cfg, notes


def _priced(r: _Reader, kind: str, seq: int) -> ModelConfig:
    """A `PRICED` type's ModelConfig: its sizes, and what changes the cost refused by key."""
    raw, how = r.raw, PRICED[kind]
    layers = raw.get("layer_types") or []
    other = sorted({t for t in layers if t not in PRICED_LAYERS} if isinstance(layers, list) else {repr(layers)})
    if other:
        raise r.error(f"{r.where}: layer_types holds {', '.join(map(str, other))}: the planner prices full "
                      "(or sliding-window) causal attention layers only")
    _window(r, kind, seq)
    d, n_head = r.size("d_model"), r.size("n_head")
    head = r.size("head_size", 0)  # null or absent: d_model / heads
    r.need(r.keys["n_head"], head or d % n_head == 0, f"does not divide {r.keys['d_model']}={d}", cost=True)
    kv_key = "num_kv_heads" if how.kv == "falcon" else r.keys["n_kv_head"]
    if how.kv == "falcon":  # FalconConfig: grouped only in the new decoder architecture
        kv = (r.int(kv_key, n_head) if r.bool("new_decoder_architecture", False)
              else 1 if r.bool("multi_query", True) else n_head)
    elif how.kv == "multi_query":
        kv = 1 if r.bool("multi_query", True) else n_head
    else:
        kv = r.int(kv_key, n_head)
    r.need(kv_key, n_head % kv == 0, f"does not divide {r.keys['n_head']}={n_head}", cost=True)
    if how.ratio_key:
        d_ff = r.int(how.ratio_key) * d
    elif r.keys["d_ff"]:
        d_ff = r.size("d_ff", how.ffn_ratio * d or None)
    else:
        d_ff = how.ffn_ratio * d
    return ModelConfig(family=how.family, n_layer=r.size("n_layer"), d_model=d, n_head=n_head, n_kv_head=kv,
                       head_size=0 if head in (0, d // n_head) else head, d_ff=d_ff,
                       vocab_size=r.size("vocab_size"), seq_len=seq, mlp_act=how.act,
                       tie_embeddings=r.bool("tie_word_embeddings", how.tied))


def _window(r: _Reader, kind: str, seq: int) -> None:
    """A sliding window shorter than the `seq`-token sequence changes what attention computes and
    costs; one at least as long reaches back to the first token, so it is full attention and the
    planner prices it exactly. The trainer's sequence is its recipe's, unknown here: it takes none."""
    raw = r.raw
    window_key = "use_sliding_window" if "use_sliding_window" in raw else "sliding_window"
    # Mistral has no switch, nor do the PRICED types that state a window: it is on where stated
    if not r.bool("use_sliding_window", kind == "mistral" or kind in PRICED):
        return
    if raw.get("sliding_window", DEFAULT_WINDOW if kind in WINDOW_TYPES else None) is None:
        return
    layers = raw.get("layer_types")
    if not r.exact and isinstance(layers, list) and layers and "sliding_attention" not in layers:
        return  # every layer attends over the whole context: priced as full attention
    window = r.int("sliding_window", DEFAULT_WINDOW)
    if r.exact or window < seq:
        why = "trainperf attends over the whole causal context"
        if not r.exact:
            why += f"; a {window}-token window is that only for sequences of at most {window} tokens (this one: {seq})"
        raise r.error(f"{r.where}: {window_key}={raw.get(window_key, window)!r}: {why}")  # absent: the default


def _llama(r: _Reader, kind: str, seq: int) -> tuple[ModelConfig, list[str]]:
    raw, notes = r.raw, []
    d, n_head = r.size("d_model"), r.size("n_head")
    head = r.size("head_size", 0)  # null or absent: hidden / heads
    r.need("num_attention_heads", head or d % n_head == 0, f"does not divide hidden_size={d}", cost=True)
    _window(r, kind, seq)
    r.need("hidden_act", raw.get("hidden_act", "silu") == "silu", "trainperf's llama MLP is SwiGLU (silu)")
    bias = r.bool("attention_bias", False)
    if kind == "qwen2":  # only priced (not in EXACT_TYPES): its q/k/v biases, which no key states, are left out
        bias = False
    if kind == "qwen3":
        r.need("attention_bias", not bias, "trainperf has one model.bias for attention and MLP, and Qwen3's MLP "
               "has none")
    r.need("mlp_bias", r.bool("mlp_bias", False) == bias,
           f"trainperf has one model.bias for attention and MLP (attention_bias={bias})")
    try:
        theta, rope_type, rp = rope_of(raw)
    except (AttributeError, TypeError, ValueError):
        raise r.error(f"{r.where}: rope_theta must be a number, rope_scaling and rope_parameters mappings") from None
    if not (math.isfinite(theta) and theta > 0):
        raise r.error(f"{r.where}: rope_theta={theta!r}: must be a finite number > 0 (RoPE's base wavelength)")
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
    cfg = ModelConfig(family="llama", n_layer=r.size("n_layer"), d_model=d, n_head=n_head,
                      n_kv_head=r.size("n_kv_head", n_head), head_size=0 if head == d // n_head else head,
                      d_ff=r.size("d_ff"), vocab_size=r.size("vocab_size"), seq_len=seq,
                      norm_eps=r.number("rms_norm_eps", 1e-6), rope_theta=theta, **scaling,
                      tie_embeddings=r.bool("tie_word_embeddings", False), bias=bias, qk_norm=kind == "qwen3")
    r.need("num_key_value_heads", n_head % cfg.kv_heads == 0, f"does not divide num_attention_heads={n_head}",
           cost=True)
    return cfg, notes


def _gpt2(r: _Reader, seq: int) -> ModelConfig:
    raw = r.raw
    d, n_head = r.size("d_model"), r.size("n_head")
    r.need("n_head", d % n_head == 0, f"does not divide n_embd={d}", cost=True)
    r.need("activation_function", raw.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh"),
           "trainperf's gpt MLP uses the tanh GELU (gelu_new)")
    r.need("scale_attn_weights", r.bool("scale_attn_weights", True), "trainperf scales by 1/sqrt(head size)")
    r.need("scale_attn_by_inverse_layer_idx", not r.bool("scale_attn_by_inverse_layer_idx", False),
           "trainperf does not scale attention by layer")
    r.need("add_cross_attention", not r.bool("add_cross_attention", False), "trainperf is decoder-only", cost=True)
    return ModelConfig(family="gpt", n_layer=r.size("n_layer"), d_model=d, n_head=n_head,
                       n_kv_head=n_head, d_ff=r.size("d_ff", 4 * d), vocab_size=r.size("vocab_size"), seq_len=seq,
                       norm_eps=r.number("layer_norm_epsilon", 1e-5),
                       tie_embeddings=r.bool("tie_word_embeddings", True), bias=True)
