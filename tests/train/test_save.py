"""The final weights: every rank writes only its own shards, and a streaming conversion makes the
file from them, each rank its share, one whole tensor at a time (2 gloo processes: FSDP2, and a
pipeline with LoRA), equal to one process's weights tensor for tensor."""

import os
import socket
import weakref
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from trainperf.config import load_recipe
from trainperf.model.transformer import merge_lora
from trainperf.parallel.dims import ParallelDims
from trainperf.train import save
from trainperf.train.trainer import build_parts

MODEL = ["model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.seq_len=32", "model.vocab_size=96",
         "model.tie_embeddings=true"]
JOBS = {"fsdp": ["parallel.dp_shard=2"],
        "pp_lora": ["parallel.pp=2", "parallel.dp_shard=1", "model.lora_rank=4", "train.micro_batch_size=1"]}


def _recipe(layout: list[str]):
    return load_recipe("tiny", MODEL + layout)


def _watch(record: dict) -> None:
    """This rank's part of the conversion, watched: the shard files, the tensors it wrote, and how
    many whole tensors read before the current one are still alive when it is read (adapters aside:
    small)."""
    read, write = save._read_tensor, save.write_share
    alive: list = []

    def watched_read(shards, key, meta):
        if ".lora_" not in key:
            record["max_alive"] = max(record.get("max_alive", 0), sum(r() is not None for r in alive))
        t = read(shards, key, meta)
        if ".lora_" not in key:
            alive.append(weakref.ref(t))
        return t

    def watched_write(shards, cfg, path, rank=0, world=1):
        record["files"] = {p.name: p.stat().st_size for p in shards.glob("*.distcp")}
        record["wrote"] = write(shards, cfg, path, rank, world)
        return record["wrote"]

    save._read_tensor, save.write_share = watched_read, watched_write


def _worker(rank: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    from trainperf.parallel.env import init_env

    env = init_env("cpu")
    for name, layout in JOBS.items():
        r = _recipe(layout)
        dims = ParallelDims.from_config(r.parallel, 2, rank)
        dims.build_mesh("cpu")
        parts, _ = build_parts(r, dims, torch.device("cpu"), seed=3)
        out = Path(root) / name
        record: dict = {}
        if env.is_main:
            out.mkdir()
        _watch(record)
        save.save_final(parts, r, out, env, SimpleNamespace(path=Path(root) / "no-data"))
        torch.save(record, out / f"record{rank}.pt")
    env.close()


def test_sharded_export_equals_one_process_one_tensor_at_a_time(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    for name, layout in JOBS.items():
        r = _recipe(layout)
        r.parallel.pp, r.parallel.dp_shard = 1, 1
        (model,), _ = build_parts(r, ParallelDims.from_config(r.parallel, 1, 0), torch.device("cpu"), seed=3)
        # what the gathering export wrote: the whole state dict, adapters merged, the tied head once
        want = merge_lora(model.state_dict(), r.model) if r.model.lora_rank else dict(model.state_dict())
        want.pop("output.weight")
        got = load_file(tmp_path / name / "model.safetensors")
        assert sorted(got) == sorted(want), name
        for k in want:
            assert torch.equal(got[k], want[k]), (name, k)
        records = [torch.load(tmp_path / name / f"record{rank}.pt") for rank in (0, 1)]
        for record in records:
            assert record["max_alive"] == 0, name  # each whole tensor dropped before the next is read
        # both ranks wrote part of the file, no tensor twice
        wrote = [set(record["wrote"]) for record in records]
        assert all(wrote) and not wrote[0] & wrote[1] and wrote[0] | wrote[1] == set(want), name
        files = records[0]["files"]
        total = sum(v.numel() * v.element_size() for v in model.state_dict().values())
        assert len(files) == 2 and all(size < 0.8 * total for size in files.values()), (name, files, total)
        assert not (tmp_path / name / save.SHARDS).exists() and not (tmp_path / name / save.PARTIAL).exists()
    adapters = load_file(tmp_path / "pp_lora" / "adapters.safetensors")
    lora = {k: v for k, v in model.state_dict().items() if ".lora_" in k}
    assert sorted(adapters) == sorted(lora) and all(torch.equal(adapters[k], lora[k]) for k in lora)
