"""The layout a recipe's [parallel] section gives for a world size, and the launcher's command line."""

from pathlib import Path

import pytest

from trainperf.config import ConfigError, ParallelConfig, load_recipe
from trainperf.parallel.dims import ParallelDims
from trainperf.parallel.launch import torchrun_command, worker_argv


def resolve_layout(pcfg: ParallelConfig, world: int, rank: int = 0) -> ParallelDims:
    return ParallelDims.from_config(pcfg, world, rank)


def test_dp_shard_takes_the_rest():
    lay = resolve_layout(ParallelConfig(dp_replicate=2, tp=4), 32)
    assert (lay.dp_replicate, lay.dp_shard, lay.tp, lay.dp) == (2, 4, 4, 8)
    assert lay.strategy == "hsdp+tp" and lay.world_size == 32
    assert resolve_layout(ParallelConfig(), 1).strategy == "single"
    assert resolve_layout(ParallelConfig(), 2).strategy == "fsdp"
    assert resolve_layout(ParallelConfig(dp_replicate=2, dp_shard=1), 2).strategy == "ddp"
    assert resolve_layout(ParallelConfig(tp=2, dp_shard=1), 2).strategy == "tp"


@pytest.mark.parametrize("pcfg, world, msg", [
    (ParallelConfig(tp=4), 6, "not divisible"),
    (ParallelConfig(dp_shard=3), 2, "does not match the 2 processes"),
    (ParallelConfig(tp=2), 1, "not divisible"),
    (ParallelConfig(tp=2, compile=True), 2, "compile"),
])
def test_bad_layouts_name_the_section(pcfg, world, msg):
    with pytest.raises(ConfigError, match=f"parallel[.:].*{msg}"):
        resolve_layout(pcfg, world)


def test_dp_rank_skips_tensor_parallel_peers():
    pcfg = ParallelConfig(tp=2)
    dims = [resolve_layout(pcfg, 8, r) for r in range(8)]
    assert [(d.dp_rank, d.dp) for d in dims] == [(r // 2, 4) for r in range(8)]
    hsdp = [resolve_layout(ParallelConfig(dp_replicate=2, dp_shard=2, tp=2), 8, r) for r in range(8)]
    assert [d.dp_rank for d in hsdp] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert hsdp[5].coords() == {"pp": 0, "dp_replicate": 1, "dp_shard": 0, "cp": 0, "tp": 1}


def test_batch_geometry_is_checked_with_the_layout():
    from trainperf.config import TrainConfig

    g = resolve_layout(ParallelConfig(), 4).batch(TrainConfig(global_batch_size=16, micro_batch_size=2))
    assert (g.per_rank, g.micro, g.accum) == (4, 2, 2)
    with pytest.raises(ConfigError, match="train.global_batch_size=6 is not divisible by the 4"):
        resolve_layout(ParallelConfig(), 4).batch(TrainConfig(global_batch_size=6))
    with pytest.raises(ConfigError, match="train.micro_batch_size=3"):
        resolve_layout(ParallelConfig(), 2).batch(TrainConfig(global_batch_size=8, micro_batch_size=3))


def test_comm_precision_is_what_the_collectives_carry():
    assert resolve_layout(ParallelConfig(), 2).comm_precision("bf16") == "bfloat16"  # FSDP all-gathers bf16 params
    assert resolve_layout(ParallelConfig(), 2).comm_precision("fp32") == "fp32"
    ddp = resolve_layout(ParallelConfig(dp_replicate=2, dp_shard=1), 2)
    assert ddp.comm_precision("bf16") == "fp32"  # DDP: fp32 grads


def test_recipe_rejects_unimplemented_and_bad_values():
    with pytest.raises(ConfigError, match="parallel.pp"):
        load_recipe("tiny", ["parallel.pp=0"])
    with pytest.raises(ConfigError, match="parallel.tp"):
        load_recipe("tiny", ["parallel.tp=3"])
    with pytest.raises(ConfigError, match="checkpoint.keep"):
        load_recipe("tiny", ["checkpoint.keep=0"])
    with pytest.raises(ConfigError, match="parallel.activation_checkpoint"):
        load_recipe("tiny", ["parallel.activation_checkpoint=some"])


def test_worker_command_line():
    argv = ["run", "tiny", "--nproc", "2", "--max-restarts=3", "--set", "train.lr=1e-3", "--debug"]
    assert worker_argv(argv, Path("runs/x")) == ["run", "tiny", "--set", "train.lr=1e-3", "--debug", "--out", "runs/x"]
    assert worker_argv(["run", "--out", "o", "--nproc=4"], Path("p")) == ["run", "--out", "o"]
    cmd = torchrun_command(4, 2, ["run"])
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=4" in cmd and "--max-restarts=2" in cmd
    assert cmd[-3:] == ["-m", "trainperf", "run"]


def test_no_more_processes_than_gpus(monkeypatch):
    import torch

    from trainperf.parallel.launch import check_devices

    check_devices(8, "cpu")  # gloo: any number of processes
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_devices(1, "cuda")
    with pytest.raises(ConfigError, match="--nproc 2: only 1 CUDA"):
        check_devices(2, "auto")


def test_context_parallel_layout_and_chunks():
    from trainperf.parallel.context import chunk_positions

    with pytest.raises(ConfigError, match="parallel.cp.*2\\*cp = 6"):
        load_recipe("tiny", ["parallel.cp=3"])  # 256 does not split into 6 equal chunks
    dims = resolve_layout(ParallelConfig(cp=2, tp=2), 8, rank=3)
    assert (dims.dp, dims.cp_rank, dims.grad_ranks, dims.strategy) == (2, 1, 4, "fsdp+cp+tp")
    # causal balance: rank r holds chunk r and chunk 2cp-1-r, and together the ranks hold everything once
    assert chunk_positions(8, 2, 0).tolist() == [0, 1, 6, 7] and chunk_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    assert sorted(sum((chunk_positions(24, 3, r).tolist() for r in range(3)), [])) == list(range(24))


@pytest.mark.parametrize("sets, world, msg", [
    (["model.n_layer=2", "parallel.pp=2", "parallel.vpp=2", "parallel.pp_schedule=interleaved_1f1b"], 2,
     "2 layers .* cannot fill pp\\*vpp = 2\\*2 = 4 stages"),
    (["parallel.pp=2", "parallel.vpp=2"], 2, "runs one stage per rank; vpp=2 needs interleaved"),
    (["parallel.pp=4", "train.global_batch_size=2", "train.micro_batch_size=2", "model.n_layer=4"], 4,
     "the 1 micro-batches per step .* cannot fill 4 stages"),
    (["parallel.pp=2"], 3, "3 processes are not divisible"),
])
def test_pipeline_layout_errors_name_the_key(sets, world, msg):
    r = load_recipe("tiny", sets)
    with pytest.raises(ConfigError, match=msg):
        ParallelDims.for_recipe(r, world)


def test_1f1b_shrinks_the_micro_batch_to_fill_the_stages():
    r = load_recipe("tiny", ["parallel.pp=2", "train.global_batch_size=16", "train.micro_batch_size=16"])
    g = ParallelDims.for_recipe(r, 2).batch(r.train)
    assert (g.micro, g.accum) == (8, 2)


def test_pipeline_stages_balance_the_ends():
    from trainperf.parallel.dims import stage_layers

    assert [len(s) for s in stage_layers(126, 8)] == [15, 16, 16, 16, 16, 16, 16, 15]  # 405B on pp=8
    assert [list(s) for s in stage_layers(4, 2)] == [[0, 1], [2, 3]]
    assert sum(len(s) for s in stage_layers(10, 4)) == 10
