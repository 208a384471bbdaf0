"""Final weights of a run: `model.safetensors` + `config.json` (+ the tokenizer, + `adapters.safetensors`
for LoRA), written atomically, without any rank ever holding the whole model.

Every rank writes the shards it holds (its FSDP/TP shards, its pipeline stages) with
`torch.distributed.checkpoint` into a hidden folder of the run. Those are then converted into one
safetensors file, one tensor at a time: the header is known from the shards' metadata, so rank 0
writes it and the file's full size, and every rank fills its share of the tensors at their offsets,
each whole tensor read from the shard files, merged (LoRA), written and dropped before the next is
read. The largest thing any process holds is one whole tensor (the embedding), never the model; a
gather of every stage through rank 0 ran out of memory at real sizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import struct
import warnings
from pathlib import Path
from typing import Iterator

import torch

from trainperf import atomic
from trainperf.data.dataset import folder_tokenizer
from trainperf.data.tokenizer import tokenizer_file
from trainperf.config import ModelConfig, Recipe
from trainperf.model.transformer import merge_lora
from trainperf.model.weights import save_adapters
from trainperf.parallel.apply import unwrap
from trainperf.parallel.env import DistEnv

SHARDS = ".final_shards"  # the run's hidden folder of per-rank shards, removed once converted
PARTIAL = ".model.safetensors.partial"  # the file while the ranks write it, renamed when complete

# torch dtype -> safetensors dtype name (the format's spec: huggingface.co/docs/safetensors)
_ST_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
              torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
              torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}


def save_final(parts: torch.nn.Module | list[torch.nn.Module], r: Recipe, out: Path, env: DistEnv, data) -> None:
    """The final weights of this rank's model parts (every rank calls; each writes only its shards)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    parts = parts if isinstance(parts, list) else [parts]
    shards = out / SHARDS
    if env.is_main and shards.exists():
        shutil.rmtree(shards)  # a crashed earlier save of this run: trainperf's own hidden folder
    env.barrier()
    sd: dict[str, torch.Tensor] = {}
    for part in parts:
        sd.update(get_model_state_dict(unwrap(part)))  # this rank's shards (DTensors) or whole tensors
    # collective (its finish waits for every rank's files); one process has no group to wait for
    with _single_process_is_meant():
        dcp.save(sd, checkpoint_id=str(shards), no_dist=not (dist.is_available() and dist.is_initialized()))
    del sd
    # the file is written by every rank at once, each its share of the tensors at their offsets: one
    # rank converting a 405B model alone would keep the others waiting past the collectives' timeout
    final, partial = out / "model.safetensors", out / PARTIAL
    if env.is_main:
        start_safetensors(shards, r.model, partial)
    env.barrier()
    write_share(shards, r.model, partial, env.rank, env.world_size)
    env.barrier()  # every share written and flushed
    if env.is_main:
        os.replace(partial, final)
        atomic.fsync_dir(out)
        if r.model.lora_rank > 0:
            save_adapters(dict(read_tensors(shards, lambda k: ".lora_" in k)), out / "adapters.safetensors")
        shutil.rmtree(shards)
        atomic.write_json(out / "config.json", {"trainperf_model": dataclasses.asdict(r.model), "recipe": r.to_dict()})
        # the tokenizer training read (a Megatron prefix's comes from data.tokenizer), whatever its kind
        tok = getattr(data, "tokenizer", None) or folder_tokenizer(data.path)
        if tok is not None:
            with atomic.atomic_path(out / tokenizer_file(tok)) as tmp:
                tok.save(tmp)
    env.barrier()  # no rank leaves before the files exist (a caller may read them next)


@contextlib.contextmanager
def _single_process_is_meant():
    """DCP warns whenever it runs without a process group; here that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _tensor_meta(shards: Path) -> dict:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    md = FileSystemReader(str(shards)).read_metadata()
    return {k: m for k, m in md.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}


def _read_tensor(shards: Path, key: str, meta) -> torch.Tensor:
    """One whole tensor, assembled by DCP from every rank's shard of it."""
    import torch.distributed.checkpoint as dcp

    t = torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
    # no_dist: each rank reads the tensors it converts on its own, no collective
    with _single_process_is_meant():
        dcp.load({key: t}, checkpoint_id=str(shards), no_dist=True)
    return t


def read_tensors(shards: Path, want=lambda key: True) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, whole tensor) for the wanted keys, one at a time, in name order."""
    meta = _tensor_meta(shards)
    for key in sorted(meta):
        if want(key):
            yield key, _read_tensor(shards, key, meta[key])


def _plan(meta: dict, cfg: ModelConfig) -> list[tuple[str, str, torch.dtype, tuple[int, ...]]]:
    """(name in the file, name in the shards, dtype, shape) of every tensor of the final file: the
    adapters merged into their base weights, and a tied output head stored once, as the embedding
    (safetensors refuses shared storage)."""
    out = []
    for key in sorted(meta):
        if ".lora_" in key or (cfg.tie_embeddings and key == "output.weight"):
            continue
        name = key.replace(".base.", ".", 1) if ".base." in key else key
        out.append((name, key, meta[key].properties.dtype, tuple(meta[key].size)))
    return out


def _final_tensor(shards: Path, meta: dict, key: str, name: str, cfg: ModelConfig) -> torch.Tensor:
    """One tensor of the final file, whole: a LoRA base weight comes merged (by the model's own
    rule) with its two small adapters."""
    t = _read_tensor(shards, key, meta[key])
    if ".base." in key and key.endswith(".weight"):
        prefix = key.rsplit(".base.", 1)[0]
        one = {key: t, **{f"{prefix}.{a}": _read_tensor(shards, f"{prefix}.{a}", meta[f"{prefix}.{a}"])
                          for a in ("lora_a", "lora_b")}}
        del t
        return merge_lora(one, cfg)[name]
    return t


def _layout(shards: Path, cfg: ModelConfig) -> tuple[bytes, list[tuple[str, str, torch.dtype, tuple, int, int]]]:
    """The file's header (names, dtypes, shapes and offsets, all known from the shards' metadata)
    and, per tensor, (name, shard key, dtype, shape, start, end) of its bytes in the file."""
    header: dict = {"__metadata__": {"format": "pt"}}
    items, offset = [], 0
    for name, key, dtype, shape in _plan(_tensor_meta(shards), cfg):
        if dtype not in _ST_DTYPES:
            raise TypeError(f"{name}: dtype {dtype} has no safetensors name")
        n = dtype.itemsize * math.prod(shape)
        header[name] = {"dtype": _ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        items.append((name, key, dtype, shape, offset, offset + n))
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(raw)) + raw, items


def start_safetensors(shards: Path, cfg: ModelConfig, path: Path) -> None:
    """The file at its final size, its header written; the tensors' bytes come from `write_share`."""
    head, items = _layout(shards, cfg)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + (items[-1][5] if items else 0))


def shares(items: list, world: int) -> list[int]:
    """The rank that writes each tensor: the largest first, each to the rank with the fewest bytes
    so far (every rank computes the same answer from the same metadata)."""
    load, owner = [0] * world, [0] * len(items)
    for i in sorted(range(len(items)), key=lambda i: (items[i][4] - items[i][5], i)):
        owner[i] = min(range(world), key=lambda r: (load[r], r))
        load[owner[i]] += items[i][5] - items[i][4]
    return owner


def write_share(shards: Path, cfg: ModelConfig, path: Path, rank: int = 0, world: int = 1) -> list[str]:
    """This rank's share of the tensors into the started file, one whole tensor at a time: each read
    from the shards (a LoRA base weight merged with its two small adapters), written at its offset
    and dropped before the next is read. Returns the names written."""
    head, items = _layout(shards, cfg)
    meta, owner, done = _tensor_meta(shards), shares(items, world), []
    with open(path, "r+b") as f:
        for (name, key, dtype, shape, start, end), who in zip(items, owner):
            if who != rank:
                continue
            t = _final_tensor(shards, meta, key, name, cfg)
            if t.dtype != dtype or tuple(t.shape) != shape:
                raise RuntimeError(f"{shards}: '{name}' is not the tensor the header announced")
            f.seek(len(head) + start)
            f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().data)
            del t
            done.append(name)
        f.flush()
        os.fsync(f.fileno())
    return done

