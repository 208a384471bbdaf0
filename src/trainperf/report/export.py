"""`trainperf export RUNDIR --format hf`: a Hugging Face checkpoint that `transformers` loads without
custom code — `LlamaForCausalLM` for the llama family, `GPT2LMHeadModel` for the gpt family.

Weights are renamed and, where the layouts differ, rearranged so the logits are the same function:
- llama: a renaming. trainperf's RoPE uses HF Llama's rotate-half layout (dimension i paired with
  i + head_dim/2), so wq and wk rows keep their order.
- gpt: HF GPT-2 stores its projections as Conv1D (in, out) matrices with q, k and v fused, always with
  biases; bias-free layers export zero biases and grouped-query k/v heads are repeated (exact).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from trainperf.config import ModelConfig
from trainperf.model.transformer import Transformer
from trainperf.report.rundir import RunDirError
from trainperf.train.save import load_model_config


class ExportError(ValueError):
    """A model layout or run directory the export cannot turn into a transformers checkpoint."""


def load_weights(run_dir: Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The run's model config and its full state dict (the tied output head filled back in)."""
    run_dir = Path(run_dir)
    for name in ("config.json", "model.safetensors"):
        if not (run_dir / name).is_file():
            raise RunDirError(f"{run_dir / name}: missing; the run did not finish saving its model")
    try:
        cfg = load_model_config(run_dir)
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise RunDirError(f"{run_dir / 'config.json'}: not a trainperf model config ({e})") from None
    try:
        sd = load_file(str(run_dir / "model.safetensors"))
    except Exception as e:  # safetensors raises its own error types on a truncated file
        raise RunDirError(f"{run_dir / 'model.safetensors'}: unreadable ({e})") from None
    if cfg.tie_embeddings and "output.weight" not in sd and "tok_emb.weight" in sd:
        sd["output.weight"] = sd["tok_emb.weight"]
    return cfg, sd


def load_model(run_dir: Path, device: str | torch.device = "cpu") -> Transformer:
    """A trainperf Transformer with the run's final weights, in eval mode."""
    cfg, sd = load_weights(run_dir)
    model = Transformer(cfg)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise RunDirError(f"{Path(run_dir) / 'model.safetensors'}: does not match config.json ({first})") from None
    return model.to(device).eval()


def _llama(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:
    hd = cfg.head_dim
    out = {"model.embed_tokens.weight": sd["tok_emb.weight"], "model.norm.weight": sd["norm.weight"]}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["output.weight"]
    names = {"attn.wq": "self_attn.q_proj", "attn.wk": "self_attn.k_proj", "attn.wv": "self_attn.v_proj",
             "attn.wo": "self_attn.o_proj", "mlp.w1": "mlp.gate_proj", "mlp.w3": "mlp.up_proj",
             "mlp.w2": "mlp.down_proj"}
    for i in range(cfg.n_layer):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        out[dst + "input_layernorm.weight"] = sd[src + "attn_norm.weight"]
        out[dst + "post_attention_layernorm.weight"] = sd[src + "mlp_norm.weight"]
        for ours, theirs in names.items():
            for leaf in ("weight", "bias"):
                t = sd.get(f"{src}{ours}.{leaf}")
                if t is not None:
                    out[f"{dst}{theirs}.{leaf}"] = t
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "intermediate_size": cfg.ff_dim,
        "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.kv_heads, "head_dim": hd, "hidden_act": "silu",
        "max_position_embeddings": cfg.seq_len, "rms_norm_eps": cfg.norm_eps,
        # both spellings: transformers 5 reads rope_parameters, 4.x reads rope_theta
        "rope_theta": cfg.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "attention_bias": cfg.bias, "mlp_bias": cfg.bias, "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    return config, out


def _gpt2(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:
    d, hd = cfg.d_model, cfg.head_dim
    if cfg.n_head * hd != d:
        raise ExportError(f"model.n_head={cfg.n_head} does not divide model.d_model={d}; GPT-2 needs it to")

    def bias(key: str, n: int) -> torch.Tensor:
        return sd.get(key, torch.zeros(n, dtype=sd["tok_emb.weight"].dtype))

    def kv(t: torch.Tensor) -> torch.Tensor:
        # GPT-2 has no grouped-query attention: give every query head its own copy of its k/v head
        group = cfg.n_head // cfg.kv_heads
        if group == 1:
            return t
        return t.reshape(cfg.kv_heads, hd, *t.shape[1:]).repeat_interleave(group, dim=0).reshape(-1, *t.shape[1:])

    out = {"transformer.wte.weight": sd["tok_emb.weight"], "transformer.wpe.weight": sd["pos_emb.weight"],
           "transformer.ln_f.weight": sd["norm.weight"], "transformer.ln_f.bias": bias("norm.bias", d)}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["output.weight"]
    for i in range(cfg.n_layer):
        s, h = f"layers.{i}.", f"transformer.h.{i}."
        out[h + "ln_1.weight"] = sd[s + "attn_norm.weight"]
        out[h + "ln_1.bias"] = bias(s + "attn_norm.bias", d)
        out[h + "ln_2.weight"] = sd[s + "mlp_norm.weight"]
        out[h + "ln_2.bias"] = bias(s + "mlp_norm.bias", d)
        q, k, v = sd[s + "attn.wq.weight"], kv(sd[s + "attn.wk.weight"]), kv(sd[s + "attn.wv.weight"])
        out[h + "attn.c_attn.weight"] = torch.cat([q, k, v], 0).t().contiguous()
        kv_n = cfg.kv_heads * hd
        out[h + "attn.c_attn.bias"] = torch.cat([bias(s + "attn.wq.bias", d), kv(bias(s + "attn.wk.bias", kv_n)),
                                                 kv(bias(s + "attn.wv.bias", kv_n))])
        out[h + "attn.c_proj.weight"] = sd[s + "attn.wo.weight"].t().contiguous()
        out[h + "attn.c_proj.bias"] = bias(s + "attn.wo.bias", d)
        out[h + "mlp.c_fc.weight"] = sd[s + "mlp.w1.weight"].t().contiguous()
        out[h + "mlp.c_fc.bias"] = bias(s + "mlp.w1.bias", cfg.ff_dim)
        out[h + "mlp.c_proj.weight"] = sd[s + "mlp.w2.weight"].t().contiguous()
        out[h + "mlp.c_proj.bias"] = bias(s + "mlp.w2.bias", d)
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": cfg.vocab_size, "n_positions": cfg.seq_len, "n_embd": d, "n_layer": cfg.n_layer,
        "n_head": cfg.n_head, "n_inner": cfg.ff_dim, "activation_function": "gelu_new",  # tanh GELU
        "layer_norm_epsilon": cfg.norm_eps, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "scale_attn_weights": True, "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    return config, out


def hf_state_dict(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:
    """(HF config.json dict, HF state dict) for a trainperf model config and its weights."""
    if cfg.family == "llama":
        return _llama(cfg, sd)
    if cfg.family == "gpt":
        return _gpt2(cfg, sd)
    raise ExportError(f"model.family={cfg.family!r}: transformers has no class this export maps to "
                      f"(llama -> LlamaForCausalLM, gpt -> GPT2LMHeadModel)")


def _bytes_to_unicode() -> dict[int, str]:
    """The byte-level BPE alphabet: printable bytes stand for themselves, the rest shift past 255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def byte_tokenizer_json() -> str:
    """trainperf's byte tokenizer (id = byte value) as a `tokenizers` byte-level model with no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def _tokenizer_files(run_dir: Path, dst: Path, cfg: ModelConfig) -> None:
    src = run_dir / "tokenizer.json"
    if not src.is_file():
        raise RunDirError(f"{src}: missing; the export needs the run's tokenizer")
    try:
        raw = json.loads(src.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunDirError(f"{src}: not readable JSON ({e})") from None
    if raw.get("trainperf_tokenizer") == "byte":
        (dst / "tokenizer.json").write_text(byte_tokenizer_json(), encoding="utf-8")
    else:
        shutil.copyfile(src, dst / "tokenizer.json")
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.seq_len,
        "clean_up_tokenization_spaces": False}, indent=1))


def export_hf(run_dir: str | Path, out: str | Path) -> Path:
    """Write the HF checkpoint into `out`, which must not exist yet (it appears whole or not at all)."""
    run_dir, out = Path(run_dir), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: exists and is not empty; the export never overwrites")
    cfg, sd = load_weights(run_dir)
    config, hf = hf_state_dict(cfg, sd)
    dtype = next(iter(hf.values())).dtype
    config["torch_dtype"] = config["dtype"] = str(dtype).removeprefix("torch.")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_file({k: v.contiguous() for k, v in hf.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        _tokenizer_files(run_dir, tmp, cfg)
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
