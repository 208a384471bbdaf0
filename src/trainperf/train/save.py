"""Final weights of a run: `model.safetensors` + `config.json` (+ the tokenizer), written atomically."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from trainperf.config import ModelConfig, Recipe
from trainperf.model.transformer import merge_lora
from trainperf.parallel.apply import unwrap
from trainperf.parallel.env import DistEnv


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole, unsharded state dict on the CPU (gathers FSDP / DTensor shards on every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(unwrap(model), options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return sd


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def save_final(model: torch.nn.Module, r: Recipe, out: Path, env: DistEnv, data) -> None:
    sd = full_state_dict(model)
    if not env.is_main:
        return
    if r.model.lora_rank > 0:
        sd = merge_lora(sd, r.model)  # from the gathered tensors: works for sharded models too
    # safetensors refuses shared storage: the tied output head is stored once, as the embedding
    if r.model.tie_embeddings:
        sd.pop("output.weight", None)
    sd = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
    _atomic_write(out / "model.safetensors", lambda p: save_file(sd, str(p), metadata={"format": "pt"}))
    cfg = dataclasses.asdict(r.model)
    _atomic_write(out / "config.json", lambda p: p.write_text(json.dumps(
        {"trainperf_model": cfg, "recipe": r.to_dict()}, indent=1)))
    tok = data.path / "tokenizer.json"
    if tok.exists():
        _atomic_write(out / "tokenizer.json", lambda p: shutil.copyfile(tok, p))


def load_model_config(run_dir: Path) -> ModelConfig:
    raw = json.loads((run_dir / "config.json").read_text())["trainperf_model"]
    cfg = ModelConfig(**raw)
    cfg.lora_rank = 0  # exported weights have the adapters merged in
    return cfg
