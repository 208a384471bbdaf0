"""Plain safetensors weights in and out of a model: start checkpoints and LoRA adapters on their own.

A start checkpoint holds trainperf's parameter names without adapters (what `model.safetensors` of a
run holds: LoRA merged, a tied output head stored once as the embedding). Loading it into a LoRA
model fills the frozen base weights (`wq.weight` -> `wq.base.weight`) and leaves the adapters as
initialised. A Hugging Face Llama / GPT-2 folder works too: `trainperf.model.hf` converts it while
it loads. Adapters are saved and loaded as their own small file.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Iterator

import torch
import torch.nn as nn
from safetensors import SafetensorError
from safetensors.torch import save_file

from trainperf import atomic
from trainperf.errors import WeightsError
from trainperf.model import hf
from trainperf.model.init import fill_
from trainperf.model.transformer import lora_state_dict


class _LazyFile:
    """A safetensors file read one tensor at a time (a start checkpoint of 70B is never held whole)."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        try:
            self._f = safe_open(str(path), framework="pt")
        except (SafetensorError, OSError) as e:
            raise WeightsError(f"{path}: not a readable safetensors file ({e})") from None
        self.path = path
        self._keys = set(self._f.keys())

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._f.get_tensor(key)
        hf.check_values(t, self.path, key)
        return t

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        return ((k, self[k]) for k in sorted(self._keys))


def _read(path: Path) -> _LazyFile:
    if path.is_dir():
        path = path / "model.safetensors"
    if not path.is_file():
        raise WeightsError(f"{path}: checkpoint not found")
    return _LazyFile(path)


def _copy(path: Path, src_name: str, src: torch.Tensor, dest: torch.Tensor) -> None:
    if tuple(src.shape) != tuple(dest.shape):
        raise WeightsError(f"{path}: '{src_name}' has shape {tuple(src.shape)}, the model {tuple(dest.shape)}")
    fill_(dest, src)


@torch.no_grad()
def load_base_weights(model: nn.Module, path: str | Path) -> int:
    """Copy a start checkpoint into `model` (before it is wrapped for parallelism). Every non-adapter
    parameter must be in the file with the right shape; returns the number of tensors loaded.

    `path` is a trainperf-named .safetensors file, a run dir holding model.safetensors, or a Hugging
    Face LlamaForCausalLM / GPT2LMHeadModel folder, converted tensor by tensor as it loads."""
    path = Path(path)
    if path.is_dir() and hf.is_hf_dir(path):
        return _load_hf(model, path)
    sd = _read(path)
    own = model.state_dict()
    tied = getattr(getattr(model, "cfg", None), "tie_embeddings", False)
    loaded = 0
    for name, dest in own.items():
        if ".lora_" in name:
            continue
        src_name = name.replace(".base.", ".", 1) if name not in sd and ".base." in name else name
        if src_name not in sd and tied and name == "output.weight":
            if "tok_emb.weight" in own:
                continue  # the tied head is the embedding, loaded as tok_emb.weight
            src_name = "tok_emb.weight"  # a pipeline's last stage: its copy of the tied head starts as the embedding
        if src_name not in sd:
            if any(k.endswith(("embed_tokens.weight", "wte.weight")) for k in sd):
                raise WeightsError(f"{path}: Hugging Face tensor names, no '{src_name}'; point at the folder "
                                      "holding its config.json, or convert it with `trainperf import-hf`")
            raise WeightsError(f"{path}: no tensor '{src_name}' (the checkpoint does not match model.*)")
        _copy(path, src_name, sd[src_name], dest)
        loaded += 1
    return loaded


def _load_hf(model: nn.Module, path: Path) -> int:
    """An HF checkpoint folder into `model`, one tensor at a time (a 70B model is never held twice)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        raise WeightsError(f"{path}: a Hugging Face checkpoint loads only into a trainperf Transformer")
    hf_cfg, notes = hf.read_hf_config(path)
    hf.check_matches(hf_cfg, cfg, path)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    own = model.state_dict()
    tensors = hf.HFTensors(path, hf_cfg.family)
    loaded: set[str] = set()
    # a pipeline stage holds some layers: it takes its own tensors and passes over the rest
    stage = len(model.layers) < cfg.n_layer or model.tok_emb is None or model.output is None
    for key, hf_key, src in hf.iter_converted(tensors, cfg, hf_cfg):
        name = key
        if name == "tok_emb.weight" and name not in own and cfg.tie_embeddings and "output.weight" in own:
            name = "output.weight"  # the last stage's copy of the tied head starts as the embedding
        if name not in own:  # a LoRA model holds its frozen base weights under `.base.`
            name = key.removesuffix(".weight").removesuffix(".bias")
            name = f"{name}.base.{key.rsplit('.', 1)[1]}"
        if name not in own and stage:
            continue
        if name not in own:
            raise WeightsError(f"{tensors.file_of(hf_key)}: '{hf_key}' has no place in the model ({key})")
        _copy(tensors.file_of(hf_key), hf_key, src, own[name])
        loaded.add(name)
    tied = {"output.weight"} if cfg.tie_embeddings and "tok_emb.weight" in own else set()
    missing = sorted(n for n in own if ".lora_" not in n and n not in loaded and n not in tied)
    if missing:  # the rules cover every parameter; this catches a model layout they do not know
        raise WeightsError(f"{path}: the conversion fills no '{missing[0]}'")
    return len(loaded)


def save_tensors(sd: dict[str, torch.Tensor], file: str | Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' save_file, with an I/O failure (a full disk, permission) raised as the OSError it
    is, naming `file`: safetensors reports it as a SafetensorError carrying only "(os error N)", which
    the atomic writers and the CLI would not recognise as a refused file. Write into a temporary name
    (atomic.atomic_path, atomic_dir): on failure it is removed."""
    try:
        save_file(sd, str(file), metadata=metadata)
    except SafetensorError as e:
        code = re.search(r"\(os error (\d+)\)", str(e))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(file)) from e


def save_adapters(model: nn.Module | dict, path: Path) -> Path:
    """Just the LoRA adapters (of a model, or of its gathered state dict), written atomically."""
    own = {k: v for k, v in model.items() if ".lora_" in k} if isinstance(model, dict) else lora_state_dict(model)
    sd = {k: v.detach().to("cpu").contiguous() for k, v in own.items()}
    if not sd:
        raise WeightsError("the model has no LoRA adapters to save")
    with atomic.atomic_path(path) as tmp:
        save_tensors(sd, tmp, metadata={"format": "pt", "content": "lora_adapters"})
    return path


@torch.no_grad()
def load_adapters(model: nn.Module, path: str | Path) -> int:
    """Load adapters saved by `save_adapters` into a model with the same LoRA layout."""
    path = Path(path)
    if path.is_dir():
        path = path / "adapters.safetensors"
    sd = _read(path)
    own = lora_state_dict(model)
    if set(sd) != set(own):
        missing, extra = sorted(set(own) - set(sd)), sorted(set(sd) - set(own))
        raise WeightsError(f"{path}: adapters do not match the model (missing {missing[:2]}, extra {extra[:2]})")
    params = dict(model.named_parameters())
    for k, v in sd.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise WeightsError(f"{path}: '{k}' has shape {tuple(v.shape)}, the model {tuple(own[k].shape)}")
        params[k].copy_(v.to(params[k].dtype))
    return len(sd)
