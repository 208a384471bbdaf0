"""`trainperf export RUNDIR --format hf`: a Hugging Face checkpoint that `transformers` loads without
custom code — `LlamaForCausalLM` for the llama family (`Qwen3ForCausalLM` with model.qk_norm),
`GPT2LMHeadModel` for the gpt family.

Weights are renamed and, where the layouts differ, rearranged so the logits are the same function
(the name table and its layout notes: trainperf.model.hf, which `trainperf import-hf` reads back):
- llama: a renaming. trainperf's RoPE uses HF Llama's rotate-half layout (dimension i paired with
  i + head_dim/2), so wq and wk rows keep their order.
- gpt: HF GPT-2 stores its projections as Conv1D (in, out) matrices with q, k and v fused, always with
  biases; bias-free layers export zero biases and grouped-query k/v heads are repeated (exact).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from trainperf import atomic, config
from trainperf.config import ModelConfig
from trainperf.errors import ConfigError, ExportError
from trainperf.model import hf
from trainperf.model.transformer import Transformer
from trainperf.model.weights import save_tensors
from trainperf.report.rundir import RunDirError


def run_model_config(run_dir: Path) -> ModelConfig:
    """The run's model (config.json's `trainperf_model`), held to the rules of a recipe's [model]
    (config.validate: types, choices, sizes >= 1): a hand-edited or damaged file is refused here,
    naming the key, not deep in torch or written into an export."""
    file = Path(run_dir) / "config.json"
    raw = atomic.read_json(file, RunDirError).get("trainperf_model")
    if not isinstance(raw, dict):
        raise RunDirError(f"{file}: trainperf_model: missing or not a JSON object; not a trainperf run's config")
    try:
        model = config.model_config(raw)
    except ConfigError as e:  # the file is bad data (exit 1), not a bad argument; its key is trainperf_model.*
        msg = str(e)
        raise RunDirError(f"{file}: {'trainperf_' + msg if msg.startswith('model.') else msg}") from None
    model.lora_rank = 0  # the saved weights have the adapters merged in
    return model


def _check_weights(cfg: ModelConfig, sd: dict[str, torch.Tensor], file: Path) -> None:
    """The run's weights are exactly the tensors of a `cfg` model, in its shapes, finite floats."""
    layers = {k.split(".")[1] for k in sd if k.startswith("layers.")}
    if len(layers) != cfg.n_layer:  # before a model of n_layer layers is built to compare shapes
        raise RunDirError(f"{file}: holds {len(layers)} layers, config.json's trainperf_model.n_layer={cfg.n_layer}")
    want = hf.expected_shapes(cfg)
    if sd.keys() != want.keys():
        missing, extra = sorted(want.keys() - sd.keys()), sorted(sd.keys() - want.keys())
        raise RunDirError(f"{file}: does not match config.json's trainperf_model (missing {missing[:2]}, "
                          f"extra {extra[:2]})")
    for key, shape in want.items():
        if tuple(sd[key].shape) != shape:
            raise RunDirError(f"{file}: '{key}' has shape {tuple(sd[key].shape)}, config.json's trainperf_model "
                              f"gives {shape}")
        hf.check_values(sd[key], file, key)


def load_weights(run_dir: Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The run's model config and its full state dict (the tied output head filled back in),
    checked against each other."""
    run_dir = Path(run_dir)
    for name in ("config.json", "model.safetensors"):
        if not (run_dir / name).is_file():
            raise RunDirError(f"{run_dir / name}: missing; the run did not finish saving its model")
    cfg = run_model_config(run_dir)
    file = run_dir / "model.safetensors"
    try:
        sd = load_file(str(file))
    except Exception as e:  # safetensors raises its own error types on a truncated file
        raise RunDirError(f"{file}: unreadable ({e})") from None
    if cfg.tie_embeddings and "output.weight" not in sd and "tok_emb.weight" in sd:
        sd["output.weight"] = sd["tok_emb.weight"]
    _check_weights(cfg, sd, file)
    return cfg, sd


def load_model(run_dir: Path, device: str | torch.device = "cpu") -> Transformer:
    """A trainperf Transformer with the run's final weights, in eval mode."""
    cfg, sd = load_weights(run_dir)
    model = Transformer(cfg)
    model.load_state_dict(sd, strict=True)  # load_weights checked the names and shapes
    return model.to(device).eval()


def hf_state_dict(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:
    """(HF config.json dict, HF state dict) for a trainperf model config and its weights; the name
    table and the layout changes live in trainperf.model.hf (shared with `trainperf import-hf`)."""
    # the family is one of the two (run_model_config validated it): llama -> LlamaForCausalLM or
    # Qwen3ForCausalLM, gpt -> GPT2LMHeadModel
    if cfg.family == "gpt" and cfg.n_head * cfg.head_dim != cfg.d_model:
        raise ExportError(f"model.n_head={cfg.n_head} does not divide model.d_model={cfg.d_model}; GPT-2 needs it to")
    return hf.hf_config(cfg), hf.to_hf(cfg, sd)


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
        raise ExportError(f"{out}: exists and is not empty; the export never overwrites")
    cfg, sd = load_weights(run_dir)
    hf_cfg, hf_sd = hf_state_dict(cfg, sd)
    dtype = next(iter(hf_sd.values())).dtype
    hf_cfg["torch_dtype"] = hf_cfg["dtype"] = str(dtype).removeprefix("torch.")
    with atomic.atomic_dir(out) as tmp:  # replaces an empty `out` (checked above), never a full one
        save_tensors({k: v.contiguous() for k, v in hf_sd.items()}, tmp / "model.safetensors",
                     metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_cfg, indent=1))
        _tokenizer_files(run_dir, tmp, cfg)
    return out
