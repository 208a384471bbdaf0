"""`trainperf run --layout ... --dry-run` and `trainperf plan ... --emit-run`, through the CLI's main()."""

import json
import shlex

import pytest
import torch

from trainperf.cli.dry_run import rank_shares
from trainperf.cli.main import main
from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.parallel.dims import ParallelDims

TINY = ["--set", "parallel.compile=false", "--set", "model.n_layer=4", "--set", "model.d_model=64",
        "--set", "model.seq_len=64", "--set", "data.tokenizer=byte", "--set", "model.qk_norm=false"]


def _dry(capsys, *argv):
    rc = main(["run", *argv, "--dry-run", "--json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


def test_layout_sets_the_mesh_batch_and_logged_keys(capsys):
    rc, d, err = _dry(capsys, "tiny", *TINY, "--nproc", "8", "--layout", "tp=2,cp=2,dp=2,mbs=2,gbs=16,recompute=full")
    assert rc == 0, err
    assert d["mesh"] == {"pp": 1, "dp_replicate": 1, "dp_shard": 2, "cp": 2, "tp": 2}
    assert d["batch"] == {"global": 16, "per_dp_rank": 8, "micro": 2, "accumulation": 4}
    k = d["mlperf_keys"]
    assert (k["tensor_parallelism"], k["context_parallelism"], k["pipeline_parallelism"]) == (2, 2, 1)
    assert (k["world_size"], k["global_batch_size"], k["micro_batch_size"], k["gradient_accumulation_steps"]) == (8, 16, 2, 4)
    assert k["corpus_fingerprint"] == "(dry run)" and k["tokenizer"] == "byte"
    # no device to ask which cp attention runs: the dry run says how the run will choose
    assert k["parallel_layout"]["cp_attention"].startswith("chosen at start: ring")
    assert d["planner"] is None  # no --gpu; tiny is not a benchmark the planner models anyway


def test_per_rank_parameters_follow_the_sharding(capsys):
    rc, d, _ = _dry(capsys, "tiny", *TINY, "--nproc", "8", "--layout", "tp=2,cp=2,dp=2,mbs=2,gbs=16")
    assert rc == 0
    r = load_recipe("tiny", TINY[1::2])
    r.model.vocab_size = 256
    with torch.device("meta"):
        m = Transformer(r.model)
    total = sum(p.numel() for p in m.parameters())
    assert d["params_total"] == total
    # every tensor of this model divides evenly, except the norms tp replicates: tp x fsdp ranks
    # together hold the model once plus (tp - 1) extra copies of each norm's FSDP shards
    norms = sum(p.numel() for n, p in m.named_parameters() if "norm" in n)
    assert d["per_rank"][0]["params"] * 2 * 4 == total + norms


def test_pipeline_stages_put_embedding_first_and_head_last():
    r = load_recipe("tiny", TINY[1::2])
    r.model.vocab_size = 256
    with torch.device("meta"):
        m = Transformer(r.model)
    dims = ParallelDims(dp_replicate=1, dp_shard=1, tp=1, pp=2, cp=1)
    shares = rank_shares(m, dims, vpp=2)
    assert [s.layers for s in shares] == [[0, 2], [1, 3]]  # interleaved: rank r holds stages r, r + pp
    assert (shares[0].first, shares[0].last, shares[1].first, shares[1].last) == (True, False, False, True)
    emb = m.tok_emb.weight.numel()
    head = m.output.weight.numel() + m.norm.weight.numel()
    block = sum(p.numel() for p in m.layers["0"].parameters())
    assert shares[0].params == emb + 2 * block and shares[1].params == head + 2 * block


@pytest.mark.parametrize("argv,msg", [
    (["--nproc", "3", "--layout", "tp=2"], "parallel: 3 processes are not divisible"),
    (["--nproc", "8", "--layout", "tp=2,dp=2"], "does not match the 8 processes"),
    (["--layout", "tp=2", "--set", "parallel.tp=4"], "--layout tp=2 and --set parallel.tp=4 both set parallel.tp"),
    (["--layout", "cp=3"], "parallel.cp: cp=3 needs model.seq_len=64"),
    (["--layout", "mbs=3,gbs=16"], "micro"),
    (["--layout", "nosuch"], "it has: none"),
    (["--layout", "tp=2,dp=1", "--gpu", "h900"], "--gpu"),
])
def test_bad_layout_fails_in_one_line_exit_2(capsys, argv, msg):
    rc = main(["run", "tiny", *TINY, *argv, "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert msg in err and err.strip().count("\n") == 0


def test_named_record_layout_with_the_planner_estimate(capsys):
    rc, d, err = _dry(capsys, "llama31_8b", "--layout", "nvidia_v5_1_512_gb300", "--no-trace")
    assert rc == 0, err
    assert d["world_size"] == 512 and d["mesh"]["cp"] == 4 and d["mesh"]["tp"] == 2
    assert d["submitted"]["source"].startswith("https://github.com/mlcommons/training_results_v5.1/")
    p = d["planner"]
    assert p["gpu"] == "gb300" and p["precision"] == "fp8" and p["fits"]
    assert p["memory_gb"]["total"] < p["capacity_gb"] and p["stack"] == "pytorch"


@pytest.mark.parametrize("bench", ["gpt3_175b", "llama2_70b_lora", "llama31_405b", "llama31_8b"])
def test_every_record_layout_passes_the_dry_run(capsys, bench):
    for name in load_recipe(bench).layouts:
        rc = main(["run", bench, "--layout", name, "--dry-run", "--json", "--no-trace"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert json.loads(out)["world_size"] == load_recipe(bench).layouts[name].gpus


def test_emit_run_prints_a_command_the_dry_run_accepts(capsys):
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "8", "--emit-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    argv = shlex.split(lines[0])
    assert argv[:3] == ["trainperf", "run", "llama31_8b"] and argv[-2:] == ["--nproc", "8"]
    rc, d, err = _dry(capsys, *argv[2:], "--gpu", "h100", "--no-trace")
    assert rc == 0, err
    assert d["world_size"] == 8 and d["planner"]["fits"]


def test_emit_run_beyond_one_node_says_how_to_start_it(capsys):
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--emit-run"]) == 0
    out = capsys.readouterr().out
    first, *rest = out.strip().splitlines()
    assert "--nproc" not in first and all(x.startswith("#") for x in rest)
    assert "sbatch --nodes=8 --gpus-per-node=8 examples/slurm/train.sbatch --layout" in out
    assert "--dry-run --nproc 64 --gpu h100" in out


def test_a_layout_that_does_not_fit_stops_before_the_run_directory(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["run", "tiny", *TINY, "--layout", "tp=2,dp=1", "--out", str(out)]) == 2
    assert "does not match the 1 processes" in capsys.readouterr().err
    assert not out.exists()
