"""Final weights of a run: `model.safetensors` + `config.json` (+ the tokenizer), written atomically."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from trainperf import atomic
from trainperf.config import ModelConfig, Recipe
from trainperf.model.transformer import merge_lora
from trainperf.parallel.apply import unwrap
from trainperf.parallel.env import DistEnv


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole, unsharded state dict on the CPU (gathers FSDP / DTensor shards on every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(unwrap(model), options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return sd


def save_final(model: torch.nn.Module | dict, r: Recipe, out: Path, env: DistEnv, data) -> None:
    """The final weights, from a model (gathered here; every rank calls) or its gathered state dict."""
    sd = dict(model) if isinstance(model, dict) else full_state_dict(model)
    if not env.is_main:
        return
    if r.model.lora_rank > 0:
        sd = merge_lora(sd, r.model)  # from the gathered tensors: works for sharded models too
    # safetensors refuses shared storage: the tied output head is stored once, as the embedding
    if r.model.tie_embeddings:
        sd.pop("output.weight", None)
    sd = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
    with atomic.atomic_path(out / "model.safetensors") as tmp:
        save_file(sd, str(tmp), metadata={"format": "pt"})
    atomic.write_json(out / "config.json", {"trainperf_model": dataclasses.asdict(r.model), "recipe": r.to_dict()})
    tok = data.path / "tokenizer.json"
    if tok.exists():
        with atomic.atomic_path(out / "tokenizer.json") as tmp:
            shutil.copyfile(tok, tmp)


def load_model_config(run_dir: Path) -> ModelConfig:
    raw = json.loads((run_dir / "config.json").read_text())["trainperf_model"]
    cfg = ModelConfig(**raw)
    cfg.lora_rank = 0  # exported weights have the adapters merged in
    return cfg
