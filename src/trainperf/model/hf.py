"""Hugging Face `transformers` checkpoints in trainperf's parameter names and back, from one name table.

- llama <-> `LlamaForCausalLM`: a renaming; with model.qk_norm, `Qwen3ForCausalLM` (Llama's blocks
  plus an RMSNorm over each head's queries and keys before RoPE, no biases), the same renaming plus
  the two norms. trainperf's RoPE uses HF Llama's rotate-half layout
  (dimension i paired with i + head_dim/2), so wq and wk rows keep their order both ways.
- gpt <-> `GPT2LMHeadModel`: GPT-2 stores its projections as Conv1D (in, out) matrices (transposed
  against nn.Linear), fuses q, k and v into `c_attn` and always has biases. Going to HF, bias-free
  layers get zero biases and grouped-query k/v heads are repeated (exact). Coming back, zero biases
  are dropped when the model has none, and repeated k/v heads are folded back when the model has
  fewer k/v heads; anything else that trainperf cannot compute is a WeightsError.

Reading goes tensor by tensor through `safetensors.safe_open`, single-file or sharded
(`model.safetensors.index.json`), so loading a big model never holds it twice. What is read is
what the folder holds: shards are files inside it, every tensor is floating point and finite, and
every tensor has a place in the model (nothing is dropped on the way).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from trainperf.atomic import read_json
from trainperf.config import ModelConfig
from trainperf.errors import WeightsError
from trainperf.model.hf_config import hf_model_config
from trainperf.model.transformer import Transformer

# trainperf name -> HF name. Layer entries are relative to `layers.<i>.` / the HF layer prefix;
# projections (no leaf) take `.weight` and, with model.bias, `.bias`.
LLAMA_TOP = {"tok_emb.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
LLAMA_LAYER_PREFIX = "model.layers.{i}."
LLAMA_NORMS = {"attn_norm.weight": "input_layernorm.weight", "mlp_norm.weight": "post_attention_layernorm.weight"}
LLAMA_PROJ = {"attn.wq": "self_attn.q_proj", "attn.wk": "self_attn.k_proj", "attn.wv": "self_attn.v_proj",
              "attn.wo": "self_attn.o_proj", "mlp.w1": "mlp.gate_proj", "mlp.w3": "mlp.up_proj",
              "mlp.w2": "mlp.down_proj"}
QWEN3_QK_NORMS = {"attn.q_norm.weight": "self_attn.q_norm.weight", "attn.k_norm.weight": "self_attn.k_norm.weight"}

GPT2_TOP = {"tok_emb.weight": "transformer.wte.weight", "pos_emb.weight": "transformer.wpe.weight",
            "norm.weight": "transformer.ln_f.weight", "norm.bias": "transformer.ln_f.bias",
            "output.weight": "lm_head.weight"}
GPT2_LAYER_PREFIX = "transformer.h.{i}."
GPT2_NORMS = {"attn_norm": "ln_1", "mlp_norm": "ln_2"}
GPT2_PROJ = {"attn.wo": "attn.c_proj", "mlp.w1": "mlp.c_fc", "mlp.w2": "mlp.c_proj"}  # Conv1D
GPT2_QKV = (("attn.wq", "attn.wk", "attn.wv"), "attn.c_attn")  # Conv1D, fused along its output

# The prefix a bare base model (LlamaModel / GPT2Model, or the original openai gpt2 upload) lacks.
_BASE_PREFIX = {"llama": "model.", "gpt": "transformer."}


def hf_class(cfg: ModelConfig) -> str:
    """The transformers class that computes `cfg`'s function."""
    if cfg.family == "gpt":
        return "GPT2LMHeadModel"
    return "Qwen3ForCausalLM" if cfg.qk_norm else "LlamaForCausalLM"


@dataclass(frozen=True)
class Rule:
    """One HF tensor and the trainperf tensors it holds (several when fused, in order)."""

    hf: str
    ours: tuple[str, ...]
    conv1d: bool = False  # stored (in, out): transposed against nn.Linear
    optional_bias: bool = False  # HF always has it; trainperf only with model.bias


def check_exportable(cfg: ModelConfig) -> None:
    """Refuse the architecture levers the Hugging Face classes cannot compute, naming the key:
    an exported model must be the same function, not a near miss."""
    cls = hf_class(cfg)
    family_act = "swiglu" if cfg.family == "llama" else "gelu"
    if cfg.activation != family_act:
        raise WeightsError(f"model.mlp_act={cfg.mlp_act!r}: {cls}'s MLP is {family_act}; this model cannot be exported")
    if cfg.qk_norm and cfg.family == "gpt":
        raise WeightsError(f"model.qk_norm=true: {cls} has no query/key norm; this model cannot be exported")
    if cfg.qk_norm and cfg.bias:
        raise WeightsError(f"model.qk_norm=true with model.bias=true: {cls}'s MLP has no biases; "
                           "this model cannot be exported")
    if cfg.logit_softcap > 0:
        raise WeightsError(f"model.logit_softcap={cfg.logit_softcap}: {cls} does not cap logits; "
                           "this model cannot be exported")
    if cfg.family == "gpt" and cfg.head_dim * cfg.n_head != cfg.d_model:
        raise WeightsError(f"model.head_size={cfg.head_size}: {cls}'s heads split n_embd={cfg.d_model}; "
                           "this model cannot be exported")


def rules(cfg: ModelConfig) -> list[Rule]:
    """Every tensor of the HF checkpoint of `cfg` (model.family llama or gpt), in a fixed order."""
    check_exportable(cfg)
    out: list[Rule] = []
    if cfg.family == "llama":
        top = dict(LLAMA_TOP)
        for i in range(cfg.n_layer):
            p, h = f"layers.{i}.", LLAMA_LAYER_PREFIX.format(i=i)
            top.update({p + ours: h + theirs for ours, theirs in LLAMA_NORMS.items()})
            if cfg.qk_norm:
                top.update({p + ours: h + theirs for ours, theirs in QWEN3_QK_NORMS.items()})
            for ours, theirs in LLAMA_PROJ.items():
                top[f"{p}{ours}.weight"] = f"{h}{theirs}.weight"
                if cfg.bias:
                    top[f"{p}{ours}.bias"] = f"{h}{theirs}.bias"
        out = [Rule(theirs, (ours,)) for ours, theirs in top.items()]
    elif cfg.family == "gpt":
        out = [Rule(theirs, (ours,), optional_bias=ours == "norm.bias") for ours, theirs in GPT2_TOP.items()]
        for i in range(cfg.n_layer):
            p, h = f"layers.{i}.", GPT2_LAYER_PREFIX.format(i=i)
            for ours, theirs in GPT2_NORMS.items():
                out.append(Rule(f"{h}{theirs}.weight", (f"{p}{ours}.weight",)))
                out.append(Rule(f"{h}{theirs}.bias", (f"{p}{ours}.bias",), optional_bias=True))
            qkv, fused = GPT2_QKV
            out.append(Rule(f"{h}{fused}.weight", tuple(f"{p}{q}.weight" for q in qkv), conv1d=True))
            out.append(Rule(f"{h}{fused}.bias", tuple(f"{p}{q}.bias" for q in qkv), optional_bias=True))
            for ours, theirs in GPT2_PROJ.items():
                out.append(Rule(f"{h}{theirs}.weight", (f"{p}{ours}.weight",), conv1d=True))
                out.append(Rule(f"{h}{theirs}.bias", (f"{p}{ours}.bias",), optional_bias=True))
    else:
        raise WeightsError(f"model.family={cfg.family!r}: no Hugging Face class maps to it "
                              "(llama -> LlamaForCausalLM or Qwen3ForCausalLM, gpt -> GPT2LMHeadModel)")
    if cfg.tie_embeddings:  # HF drops the tied head too, or keeps a copy of the embedding
        out = [r for r in out if r.ours != ("output.weight",)]
    return out


def _repeat_kv(cfg: ModelConfig, t: torch.Tensor) -> torch.Tensor:
    """GPT-2 has no grouped-query attention: every query head gets its own copy of its k/v head."""
    group = cfg.n_head // cfg.kv_heads
    if group == 1:
        return t
    hd = cfg.head_dim
    return t.reshape(cfg.kv_heads, hd, *t.shape[1:]).repeat_interleave(group, dim=0).reshape(-1, *t.shape[1:])


def to_hf(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The HF state dict of a plain (LoRA-merged) trainperf state dict; a tied head is not written."""
    out: dict[str, torch.Tensor] = {}
    for r in rules(cfg):
        parts = []
        for key in r.ours:
            t = sd.get(key)
            if t is None and r.optional_bias:
                weight = sd[key.removesuffix(".bias") + ".weight"]  # a bias-free layer: zero bias
                t = torch.zeros(weight.shape[0], dtype=weight.dtype)
            elif t is None:
                raise KeyError(key)
            if key.endswith(("wk.weight", "wk.bias", "wv.weight", "wv.bias")) and cfg.family == "gpt":
                t = _repeat_kv(cfg, t)
            parts.append(t)
        t = parts[0] if len(parts) == 1 else torch.cat(parts, 0)
        out[r.hf] = t.t().contiguous() if r.conv1d else t
    return out


def hf_config(cfg: ModelConfig) -> dict:
    """config.json of the HF model that computes the same function as `cfg`."""
    check_exportable(cfg)
    if cfg.family == "llama" and cfg.qk_norm:
        llama = hf_config(dataclasses.replace(cfg, qk_norm=False))
        del llama["mlp_bias"]  # Qwen3's MLP never has biases (check_exportable refused model.bias)
        return {**llama, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "use_sliding_window": False}
    if cfg.family == "llama":
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "intermediate_size": cfg.ff_dim,
            "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
            "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "hidden_act": "silu",
            "max_position_embeddings": cfg.seq_len, "rms_norm_eps": cfg.norm_eps,
            **_rope_hf(cfg),
            "attention_bias": cfg.bias, "mlp_bias": cfg.bias, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
        }
    if cfg.family == "gpt":
        return {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": cfg.vocab_size, "n_positions": cfg.seq_len, "n_embd": cfg.d_model, "n_layer": cfg.n_layer,
            "n_head": cfg.n_head, "n_inner": cfg.ff_dim, "activation_function": "gelu_new",  # tanh GELU
            "layer_norm_epsilon": cfg.norm_eps, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "scale_attn_weights": True, "tie_word_embeddings": cfg.tie_embeddings,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
        }
    raise WeightsError(f"model.family={cfg.family!r}: no Hugging Face class maps to it")


# ---------------------------------------------------------------- reading HF checkpoints

def is_hf_dir(path: Path) -> bool:
    """A folder with a transformers config.json (a model_type, not a trainperf run's config)."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    try:
        raw = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(raw, dict) and "model_type" in raw and "trainperf_model" not in raw


def _rope_hf(cfg: ModelConfig) -> dict:
    """The RoPE keys of an HF llama config.json for `cfg`."""
    params: dict = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling_factor:
        params = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, "factor": cfg.rope_scaling_factor,
                  "low_freq_factor": cfg.rope_low_freq_factor, "high_freq_factor": cfg.rope_high_freq_factor,
                  "original_max_position_embeddings": cfg.rope_original_context}
    # both spellings: transformers 5 reads rope_parameters, 4.x reads rope_theta and rope_scaling
    out = {"rope_theta": cfg.rope_theta, "rope_parameters": params}
    if cfg.rope_scaling_factor:
        out["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
    return out


def read_hf_config(path: str | Path) -> tuple[ModelConfig, list[str]]:
    """The trainperf model config of an HF checkpoint folder, and notes on what trainperf computes
    differently (`hf_config.hf_model_config`, exact)."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise WeightsError(f"{file}: not found (not a Hugging Face checkpoint folder)")
    return hf_model_config(read_json(file, WeightsError), str(file), WeightsError, exact=True)


class HFTensors:
    """The tensors of an HF checkpoint folder, read one at a time (never the whole file)."""

    def __init__(self, path: str | Path, family: str):
        self.path = Path(path)
        self._prefix = _BASE_PREFIX.get(family, "")
        index = self.path / "model.safetensors.index.json"
        single = self.path / "model.safetensors"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                self._file = {k: self._shard(index, k, v) for k, v in weight_map.items()}
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise WeightsError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
        elif single.is_file():
            try:
                with safe_open(str(single), framework="pt") as f:
                    self._file = {k: single for k in f.keys()}
            except (SafetensorError, OSError) as e:
                raise WeightsError(f"{single}: not a readable safetensors file ({e})") from None
        else:
            raise WeightsError(f"{self.path}: no model.safetensors or model.safetensors.index.json "
                                  "(PyTorch .bin checkpoints are not read: re-save with safe_serialization)")

    def _shard(self, index: Path, key: str, name: object) -> Path:
        """The file `index` names for tensor `key`: a plain file name inside the folder. An index is
        data (it comes with a download); a name with a separator or `..`, or a link out of the folder,
        would read any file the user can."""
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise WeightsError(f"{index}: weight_map['{key}'] = {name!r} is not a file name in {self.path}")
        file = self.path / name
        if file.is_symlink() and not _inside(file.resolve(), _link_root(self.path)):
            raise WeightsError(f"{index}: weight_map['{key}'] = {name!r} is a link out of {self.path} "
                               f"(to {file.resolve()})")
        return file

    def stored(self) -> set[str]:
        """Every tensor name the checkpoint holds, as stored."""
        return set(self._file)

    def _key(self, key: str) -> str:
        if key in self._file:
            return key
        if self._prefix and key.startswith(self._prefix) and key[len(self._prefix):] in self._file:
            return key[len(self._prefix):]
        return key

    def file_of(self, key: str) -> Path:
        return self._file.get(self._key(key), self.path / "model.safetensors")

    def __contains__(self, key: str) -> bool:
        return self._key(key) in self._file

    def get(self, key: str) -> torch.Tensor:
        stored = self._key(key)
        if stored not in self._file:
            index = self.path / "model.safetensors.index.json"
            where = index if index.is_file() else self.path / "model.safetensors"
            raise WeightsError(f"{where}: no tensor '{key}' (the weights do not match config.json)")
        file = self._file[stored]
        try:
            with safe_open(str(file), framework="pt") as f:
                t = f.get_tensor(stored)
        except (SafetensorError, OSError) as e:
            raise WeightsError(f"{file}: cannot read '{stored}' ({e})") from None
        check_values(t, file, stored)
        return t


def _link_root(folder: Path) -> Path:
    """Where a link in `folder` may point: inside it, or, for a huggingface_hub cache snapshot
    (`models--org--name/snapshots/<rev>/`, whose files are links to `../../blobs/<hash>`), inside
    that model's cache folder."""
    folder = folder.resolve()
    return folder.parent.parent if folder.parent.name == "snapshots" else folder


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_values(t: torch.Tensor, file: Path, key: str) -> None:
    """Refuse a weight no model parameter can take as it is: an integer or boolean tensor (no trained
    weight is one; copying it into a float parameter would cast it silently) or a NaN / infinity
    (every logit after it would be NaN)."""
    if not t.is_floating_point():
        raise WeightsError(f"{file}: '{key}' is {str(t.dtype).removeprefix('torch.')}, not a floating-point tensor")
    if not bool(torch.isfinite(t).all()):
        raise WeightsError(f"{file}: '{key}' holds NaN or infinite values")


def check_matches(hf: ModelConfig, model: ModelConfig, where: Path) -> None:
    """One-line WeightsError naming the first model.* field where the checkpoint is not `model`."""
    checks = [("family", hf.family, model.family), ("n_layer", hf.n_layer, model.n_layer),
              ("d_model", hf.d_model, model.d_model), ("n_head", hf.n_head, model.n_head)]
    # GPT-2 stores every k/v head; repeats fold back into fewer (iter_converted checks they are repeats)
    foldable = hf.family == "gpt" and model.kv_heads > 0 and hf.kv_heads % model.kv_heads == 0
    if not foldable:
        checks.append(("n_kv_head", hf.kv_heads, model.kv_heads))
    checks.append(("d_ff", hf.ff_dim, model.ff_dim))
    if model.vocab_size:  # 0: taken from the tokenizer later, nothing to compare yet
        checks.append(("vocab_size", hf.vocab_size, model.vocab_size))
    if hf.family == "gpt" and model.seq_len > hf.seq_len:
        checks.append(("seq_len", hf.seq_len, model.seq_len))  # learned positions: no rows past n_positions
    checks += [("tie_embeddings", hf.tie_embeddings, model.tie_embeddings), ("norm_eps", hf.norm_eps, model.norm_eps)]
    if hf.family == "llama":
        checks += [("qk_norm", hf.qk_norm, model.qk_norm),
                   ("rope_theta", hf.rope_theta, model.rope_theta), ("bias", hf.bias, model.bias),
                   ("rope_scaling_factor", hf.rope_scaling_factor, model.rope_scaling_factor)]
        if model.rope_scaling_factor:
            checks += [(k, getattr(hf, k), getattr(model, k)) for k in
                       ("rope_low_freq_factor", "rope_high_freq_factor", "rope_original_context")]
    for name, theirs, ours in checks:
        same = math.isclose(theirs, ours, rel_tol=1e-9) if isinstance(ours, float) else theirs == ours
        if not same:
            raise WeightsError(f"{where / 'config.json'}: the checkpoint has model.{name}={theirs!r}, "
                                  f"the recipe {ours!r}")


def _fold_kv(t: torch.Tensor, hf_heads: int, kv_heads: int, key: str, file: Path) -> torch.Tensor:
    """k/v rows of `hf_heads` heads -> `kv_heads` heads; only exact repeats fold (as the export writes)."""
    if hf_heads == kv_heads:
        return t
    group = hf_heads // kv_heads
    heads = t.reshape(kv_heads, group, -1, *t.shape[1:])
    if not torch.equal(heads, heads[:, :1].expand_as(heads)):
        raise WeightsError(f"{file}: '{key}' has {hf_heads} distinct k/v heads; set model.n_kv_head={hf_heads}")
    return heads[:, 0].reshape(-1, *t.shape[1:]).clone()


# Buffers some exporters save beside the weights: computed values, not learned ones, that trainperf
# computes itself: GPT-2's causal mask (`attn.bias`, `attn.masked_bias`) and Llama's RoPE frequencies.
_BUFFERS = re.compile(r"(.*\.)?(h\.\d+\.attn\.(bias|masked_bias)|layers\.\d+\.self_attn\.rotary_emb\.inv_freq)")
_EMBEDDING = {"llama": "model.embed_tokens.weight", "gpt": "transformer.wte.weight"}


def _check_all_used(tensors: HFTensors, hf_rules: list[Rule], cfg: ModelConfig) -> None:
    """Refuse a checkpoint holding tensors the conversion would not take (a layer past n_layer, a
    head beside a tied embedding): the model would silently be another one than the file. A tied
    head that is an exact copy of the embedding is what some exporters write, and is the same model."""
    extra = tensors.stored() - {tensors._key(r.hf) for r in hf_rules}
    extra = {k for k in extra if not _BUFFERS.fullmatch(k)}
    head = tensors._key("lm_head.weight")
    if cfg.tie_embeddings and head in extra:
        emb = _EMBEDDING[cfg.family]
        if not torch.equal(tensors.get(head), tensors.get(emb)):
            raise WeightsError(f"{tensors.file_of(head)}: '{head}' differs from '{tensors._key(emb)}', but "
                               "config.json ties them (tie_word_embeddings); set it to false to keep the head")
        extra.discard(head)
    if extra:
        first = sorted(extra)[0]
        raise WeightsError(f"{tensors.file_of(first)}: {len(extra)} tensor(s) config.json has no place for, "
                           f"e.g. '{first}' (the weights do not match config.json)")


def iter_converted(tensors: HFTensors, cfg: ModelConfig,
                   hf_cfg: ModelConfig) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(trainperf name, HF name, tensor) for every tensor of a plain `cfg` model, read one at a time
    from the checkpoint of `hf_cfg` and rearranged into trainperf's layout (shapes unchecked)."""
    # HF's layout: every k/v head stored, biases always there for gpt2
    hf_layout = dataclasses.replace(cfg, n_kv_head=hf_cfg.kv_heads, bias=cfg.bias or cfg.family == "gpt")
    hf_rules = rules(hf_layout)
    _check_all_used(tensors, hf_rules, cfg)
    for r in hf_rules:
        t = tensors.get(r.hf)
        if r.conv1d and t.dim() == 2:
            t = t.t()
        if r.optional_bias and not cfg.bias:
            if torch.count_nonzero(t):
                raise WeightsError(f"{tensors.file_of(r.hf)}: '{r.hf}' is not zero but model.bias=false; "
                                      "set model.bias=true to keep the biases")
            continue
        if len(r.ours) == 3:  # fused q, k, v: equal thirds (GPT-2 stores every k/v head)
            if t.shape[0] % 3:
                raise WeightsError(f"{tensors.file_of(r.hf)}: '{r.hf}' has shape {tuple(t.shape)}, "
                                      "not three equal q/k/v parts")
            parts = list(t.split(t.shape[0] // 3, 0))
            for i in (1, 2):
                parts[i] = _fold_kv(parts[i], hf_cfg.kv_heads, cfg.kv_heads, r.hf, tensors.file_of(r.hf))
            for key, part in zip(r.ours, parts):
                yield key, r.hf, part.contiguous().clone()  # own storage: safetensors refuses shared tensors
            continue
        if r.ours == ("pos_emb.weight",) and t.shape[0] > cfg.seq_len:
            t = t[:cfg.seq_len].clone()  # the model never sees positions past its seq_len
        yield r.ours[0], r.hf, t.contiguous()


def read_hf_checkpoint(path: str | Path,
                       like: ModelConfig | None = None) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(model config, state dict in trainperf's names) of an HF checkpoint folder. With `like` (a
    recipe's model), check the checkpoint is that model and convert into its layout; without it, a
    GPT-2 whose biases are all zero becomes a bias-free model (what trainperf's export writes)."""
    path = Path(path)
    hf_cfg, _ = read_hf_config(path)
    if like is not None:
        check_matches(hf_cfg, like, path)
        cfg = dataclasses.replace(like, lora_rank=0, vocab_size=like.vocab_size or hf_cfg.vocab_size)
    tensors = HFTensors(path, hf_cfg.family)
    if like is None:
        cfg = hf_cfg
        if cfg.family == "gpt":
            biases = [r.hf for r in rules(cfg) if r.optional_bias]
            cfg = dataclasses.replace(cfg, bias=any(bool(torch.count_nonzero(tensors.get(k))) for k in biases))
    shapes = expected_shapes(cfg)
    sd: dict[str, torch.Tensor] = {}
    for key, hf_key, t in iter_converted(tensors, cfg, hf_cfg):
        want = shapes.get(key)
        if want is not None and tuple(t.shape) != want:
            raise WeightsError(f"{tensors.file_of(hf_key)}: '{hf_key}' gives {key} shape {tuple(t.shape)}, "
                                  f"config.json says {want}")
        sd[key] = t
    return cfg, sd


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Parameter shapes of a plain trainperf model of `cfg`, without allocating it."""
    with torch.device("meta"):
        model = Transformer(dataclasses.replace(cfg, lora_rank=0))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}
