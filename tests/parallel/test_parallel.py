"""DDP, FSDP2, tensor, context and pipeline parallel on 2 and 4 CPU processes (gloo) against one process, at the same global batch,
pre-training and LoRA fine-tuning (tp, pp, tp x cp; the adapters exported and checkpointed by name).

One torchrun launch runs every 2-process job (start-up is most of the cost); the single-process
references run in this process.

Tolerance: rtol 1e-5 on every per-step training loss and eval loss (measured: at most 1.1e-7
relative over 4-6 steps, most steps bit-identical). The runs are fp32, so the only differences are
summation order: DDP/FSDP average two half-batch gradients where one process accumulates two
micro-batches, FSDP reduce-scatters instead of all-reducing, TP splits matmul reductions over heads
and columns, CP attends with an explicit mask over gathered keys instead of the causal kernel. Adam normalises each gradient element, so such ~1e-7 differences stay ~1e-7 in the
loss over a few steps; a real bug (a missing all-reduce, a wrong shard, a loss counted twice) moves
the loss by percent. 1e-5 leaves room for other CPUs' kernels without hiding such bugs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainperf.config import load_recipe
from trainperf.parallel.env import DistEnv
from trainperf.train.trainer import RunOptions, train

HERE = Path(__file__).parent
RTOL = 1e-5
STEPS = 4


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """These models are tiny: on a busy 2-core machine a second intra-op thread only adds contention."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _base(cache: Path) -> list[str]:
    return ["data.synthetic=true", "parallel.compile=false", "data.tokenizer=byte", f"data.cache_dir={cache}",
            # 125 full windows of 32 and a last one of 11 tokens: odd, so under sequence parallelism it
            # would not split over 2 ranks (the crash evaluation once had under tp=2)
            "data.eval_bytes=4011",
            "model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.seq_len=32", "model.qk_norm=false",
            "train.global_batch_size=8", "train.micro_batch_size=4", "train.warmup_steps=2",
            "train.decay_steps=20", "train.lr=3e-3", "train.log_every=1", "train.precision=fp32",
            "eval.every_samples=32", "eval.target=0.5"]


def rows(out: Path, kind: str) -> dict[int, float]:
    key = "loss" if kind == "train" else "eval_loss"
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r[key] for r in recs if r["kind"] == kind}


# fine-tuning samples with LoRA adapters (the base frozen) on attention and MLP projections
LORA = ["data.kind=samples", "model.lora_rank=4", "model.lora_targets=wq,wv,wo,w1,w2,w3"]
QK = ["model.qk_norm=true"]

JOBS = {
    # name: (extra overrides, steps)
    "ddp": (["parallel.dp_replicate=2", "parallel.dp_shard=1", "parallel.activation_checkpoint=full"], STEPS),
    "fsdp": (["parallel.activation_checkpoint=selective", "checkpoint.every_steps=2"], STEPS),
    "tp": (["parallel.tp=2", "parallel.dp_shard=1"], STEPS),
    "gpt_tp": (["model.family=gpt", "model.bias=true", "parallel.tp=2", "parallel.dp_shard=1"], 3),
    "fsdp_bf16": (["train.precision=bf16"], 3),
    "fsdp_accum": (["train.micro_batch_size=2"], STEPS),  # 2 micro-batches per rank
    "ddp_accum": (["parallel.dp_replicate=2", "parallel.dp_shard=1", "train.micro_batch_size=2"], STEPS),  # no_sync
    # fine-tuning rows scored only on their labels: the loss must stay the global token mean
    "ddp_samples": (["data.kind=samples", "parallel.dp_replicate=2", "parallel.dp_shard=1"], 3),
    "fsdp_samples": (["data.kind=samples", "train.micro_batch_size=2"], 3),
    "fsdp_accum4": (["train.micro_batch_size=1"], STEPS),  # 4 micro-batches per rank
    # the loss in 4 chunks of 32 tokens (model/loss.py), FSDP2's root holding the head they share
    "fsdp_chunked_loss": (["model.loss_chunk_bytes=100000"], STEPS),
    # and under tensor parallelism: 2 chunks of 64 tokens over each rank's half of the vocabulary
    "tp_chunked_loss": (["parallel.tp=2", "parallel.dp_shard=1", "model.loss_chunk_bytes=100000"], STEPS),
    # context parallel: each rank holds 2 of the 4 chunks of every sequence, attention gathers K/V
    "cp": (["parallel.cp=2", "parallel.dp_shard=1"], STEPS),
    "cp_samples": (["data.kind=samples", "parallel.cp=2", "parallel.dp_shard=1"], 3),
    "gpt_cp": (["model.family=gpt", "model.bias=true", "parallel.cp=2", "parallel.dp_shard=1"], 3),
    # pipeline: 2 stages (4 with vpp=2), 2 micro-batches of 2 per step; the tied embedding and head
    # live on different stages; checkpoints keyed by the plain model's names
    "pp": (["parallel.pp=2", "parallel.dp_shard=1", "train.micro_batch_size=2", "checkpoint.every_steps=2"], STEPS),
    "pp_gpipe": (["parallel.pp=2", "parallel.dp_shard=1", "train.micro_batch_size=2", "parallel.pp_schedule=gpipe"], STEPS),
    "pp_interleaved": (["parallel.pp=2", "parallel.vpp=2", "parallel.pp_schedule=interleaved_1f1b", "model.n_layer=4",
                        "parallel.dp_shard=1", "train.micro_batch_size=2"], STEPS),
    "pp_zero_bubble": (["parallel.pp=2", "parallel.vpp=2", "parallel.pp_schedule=zero_bubble", "model.n_layer=4",
                        "parallel.dp_shard=1", "train.micro_batch_size=2"], STEPS),
    # LoRA fine-tuning (adapters on attention and MLP, column- and row-wise under tp): tensor
    # parallel, and pipeline stages holding the adapters of their own layers
    "lora_tp": (LORA + ["parallel.tp=2", "parallel.dp_shard=1", "checkpoint.every_steps=2"], 3),
    "pp_lora": (LORA + ["parallel.pp=2", "parallel.dp_shard=1", "train.micro_batch_size=2"], 3),
    # QK-norm: its weights replicated DTensors over the head-sharded queries and keys
    "qk_tp": (QK + ["parallel.tp=2", "parallel.dp_shard=1"], 3),
}
# resumed by 2 pipeline stages from the one-process reference's step-2 checkpoint
# resumed by 2 pipeline stages from the one-process reference's step-2 checkpoint, and by tensor
# parallel from the 2-stage pipeline's (run earlier in the same launch)
RESUMED = {"pp_resumed": (["parallel.pp=2", "parallel.dp_shard=1", "train.micro_batch_size=2"], STEPS, "single"),
           "tp_from_pp": (["parallel.tp=2", "parallel.dp_shard=1"], STEPS, "pp")}
# 4 processes (one more launch): context parallel composed with FSDP2 and with tensor parallel
JOBS4 = {
    # 2 stages, each replicated by DDP, blocks recomputed in backward
    "pp_ddp": (["parallel.pp=2", "parallel.dp_replicate=2", "parallel.dp_shard=1", "train.micro_batch_size=2",
                "parallel.activation_checkpoint=full"], STEPS),
    # the LoRA record layout's shape (tp x cp, FSDP2 over cp) on fine-tuning samples
    "lora_cp_tp": (LORA + ["parallel.cp=2", "parallel.tp=2", "parallel.dp_shard=1"], 3),
    "cp_fsdp": (["parallel.cp=2", "parallel.dp_shard=2"], STEPS),
    "cp_tp": (["parallel.cp=2", "parallel.tp=2", "parallel.dp_shard=1"], STEPS),
    "pp_fsdp": (["parallel.pp=2", "train.micro_batch_size=2"], STEPS),
    "pp_tp": (["parallel.pp=2", "parallel.tp=2", "parallel.dp_shard=1", "train.micro_batch_size=2"], STEPS),
    "qk_fsdp_tp": (QK + ["parallel.tp=2", "parallel.dp_shard=2"], 3),  # FSDP2 over the tp-replicated norms
}
REFERENCE = {"ddp_samples": "samples_single", "fsdp_samples": "samples_single", "cp_samples": "samples_single",
             "gpt_cp": "gpt_single", "pp_interleaved": "single4", "pp_zero_bubble": "single4",
             "lora_tp": "lora_single", "pp_lora": "lora_single", "lora_cp_tp": "lora_single",
             "qk_tp": "qk_single", "qk_fsdp_tp": "qk_single"}


def _launch(root: Path, jobs: dict, nproc: int, cache: Path) -> None:
    todo = [{"out": str(root / name), "overrides": _base(cache) + job[0], "max_steps": job[1],
             "resume": str(root / job[2] / "checkpoints" / "step_00000002") if len(job) > 2 else None}
            for name, job in jobs.items()]
    (root / f"jobs{nproc}.json").write_text(json.dumps(todo))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                        str(HERE / "dist_worker.py"), str(root / f"jobs{nproc}.json")],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    cache = root / "cache"
    # single-process references, same recipe and global batch (2 micro-batches of 4 instead of 2 ranks x 4)
    for name, extra, steps in (("single", ["checkpoint.every_steps=2"], STEPS),
                               ("single4", ["model.n_layer=4"], STEPS),
                               ("gpt_single", ["model.family=gpt", "model.bias=true"], 3),
                               ("samples_single", ["data.kind=samples"], 3),
                               ("lora_single", LORA + ["checkpoint.every_steps=2"], 3),
                               ("qk_single", QK, 3)):
        train(load_recipe("tiny", _base(cache) + extra), DistEnv(), RunOptions(out=root / name, max_steps=steps))
    _launch(root, {**JOBS, **RESUMED}, 2, cache)
    _launch(root, JOBS4, 4, cache)
    return root


@pytest.mark.parametrize("name", ["ddp", "fsdp", "tp", "fsdp_accum", "fsdp_accum4", "fsdp_chunked_loss", "ddp_accum",
                                  "tp_chunked_loss", "ddp_samples",
                                  "fsdp_samples", "cp", "cp_samples", "gpt_cp", "cp_fsdp", "cp_tp", "pp", "pp_gpipe",
                                  "pp_interleaved", "pp_zero_bubble", "pp_fsdp", "pp_tp", "pp_ddp", "lora_tp",
                                  "pp_lora", "lora_cp_tp", "qk_tp", "qk_fsdp_tp"])
def test_matches_single_process(runs, name):
    ref = REFERENCE.get(name, "single")
    ref_train, ref_eval = rows(runs / ref, "train"), rows(runs / ref, "eval")
    got_train, got_eval = rows(runs / name, "train"), rows(runs / name, "eval")
    assert sorted(got_train) == list(range(1, {**JOBS, **JOBS4}[name][1] + 1))
    assert json.loads((runs / name / "summary.json").read_text())["final_eval_loss"] == pytest.approx(
        json.loads((runs / ref / "summary.json").read_text())["final_eval_loss"], rel=RTOL)
    for step, loss in got_train.items():
        assert loss == pytest.approx(ref_train[step], rel=RTOL), (name, step)
    assert got_eval.keys() == ref_eval.keys()
    for step, loss in got_eval.items():
        assert loss == pytest.approx(ref_eval[step], rel=RTOL), (name, step)


@pytest.mark.parametrize("name, accum", [("fsdp", 1), ("fsdp_accum", 2), ("fsdp_accum4", 4)])
def test_fsdp_reduces_gradients_once_per_step(runs, name, accum):
    """FSDP2 with gradient accumulation reduce-scatters once per optimizer step, not once per
    micro-batch: 3 parameter groups (2 blocks + the root's) per step, whatever `accum` is.
    (The warm-up evaluation and the eval blocks run no backward.)"""
    got = json.loads((runs / name / "reductions.json").read_text())
    groups = 3
    assert got["reductions"] == groups * got["steps"], (name, accum, got)


def test_every_layout_evaluates_like_one_process(runs):
    """The eval set ends with a short window; every layout scores it and matches one process."""
    for name in ("tp", "gpt_tp", "fsdp", "ddp", "cp", "cp_fsdp", "cp_tp", "pp", "pp_fsdp", "pp_tp", "pp_ddp"):
        ref = rows(runs / ("gpt_single" if name == "gpt_tp" else "single"), "eval")
        got = rows(runs / name, "eval")
        assert got and got.keys() <= ref.keys()
        for step, loss in got.items():
            assert loss == pytest.approx(ref[step], rel=RTOL), (name, step)


def test_gpt_family_under_tp(runs):
    ref, got = rows(runs / "gpt_single", "train"), rows(runs / "gpt_tp", "train")
    for step, loss in got.items():
        assert loss == pytest.approx(ref[step], rel=RTOL), step


def test_fsdp_bf16_trains_and_logs_layout(runs):
    losses = rows(runs / "fsdp_bf16", "train")
    assert losses[3] < losses[1]
    log = (runs / "fsdp_bf16" / "result_0.txt").read_text()
    assert '"key": "world_size", "value": 2' in log
    assert '"key": "lowest_numerical_precision_in_comm", "value": "bfloat16"' in log
    assert '"strategy": "fsdp"' in log and '"dp_shard": 2' in log
    summary = json.loads((runs / "fsdp_bf16" / "summary.json").read_text())
    assert summary["world_size"] == 2


def test_context_parallel_says_how_it_attends(runs):
    log = (runs / "cp_fsdp" / "result_0.txt").read_text()
    assert '"key": "context_parallelism", "value": 2' in log and '"cp_attention": "allgather_kv"' in log
    summary = json.loads((runs / "cp_tp" / "summary.json").read_text())
    assert summary["layout"]["strategy"] == "fsdp+cp+tp" and summary["layout"]["cp_attention"] == "allgather_kv"


def test_pipeline_logs_its_schedule(runs):
    log = (runs / "pp_interleaved" / "result_0.txt").read_text()
    assert '"key": "pipeline_parallelism", "value": 2' in log and '"key": "virtual_pipeline_parallelism", "value": 2' in log
    assert '"key": "pipeline_schedule", "value": "interleaved_1f1b"' in log


def test_pipeline_checkpoints_cross_layouts(runs, tmp_path):
    """pp=2's step-2 checkpoint resumes in one process, and one process's resumes in pp=2: the next
    steps match the uninterrupted runs (plain parameter names; the tied head's optimizer state is
    kept under the embedding's name)."""
    ckpt = runs / "pp" / "checkpoints" / "step_00000002"
    assert json.loads((ckpt / "trainperf-checkpoint.json").read_text())["layout"]["strategy"] == "pp"
    s = train(load_recipe("tiny", _base(runs / "cache")), DistEnv(), RunOptions(out=tmp_path / "one", max_steps=STEPS,
                                                                                resume=ckpt))
    assert s.resumed_from_step == 2
    one, two = rows(tmp_path / "one", "train"), rows(runs / "pp", "train")
    resumed, single = rows(runs / "pp_resumed", "train"), rows(runs / "single", "train")
    assert sorted(one) == sorted(resumed) == [3, 4]
    for step in (3, 4):
        assert one[step] == pytest.approx(two[step], rel=RTOL)
        assert resumed[step] == pytest.approx(single[step], rel=RTOL)


def test_pipeline_checkpoint_loads_into_tensor_parallel(runs):
    """pp=2's step-2 checkpoint resumed by tp=2 (each stage's plain names, now sharded by columns
    and rows): steps 3 and 4 match the pipeline's own and one process's."""
    resumed, pp, single = rows(runs / "tp_from_pp", "train"), rows(runs / "pp", "train"), rows(runs / "single", "train")
    assert sorted(resumed) == [3, 4]
    assert json.loads((runs / "tp_from_pp" / "summary.json").read_text())["resumed_from_step"] == 2
    for step in (3, 4):
        assert resumed[step] == pytest.approx(pp[step], rel=RTOL)
        assert resumed[step] == pytest.approx(single[step], rel=RTOL)


@pytest.mark.parametrize("name", ["lora_tp", "pp_lora", "lora_cp_tp"])
def test_lora_layouts_export_the_same_adapters(runs, name):
    """The adapters saved after 3 steps, gathered from tp shards / pipeline stages by name, are one
    process's: the same names, the same values to 1e-4 (measured: ~5e-6 on values up to ~0.13; a
    step moves an element by up to lr = 3e-3, so a wrong gradient shows), and only adapters."""
    from safetensors.torch import load_file

    got, ref = load_file(runs / name / "adapters.safetensors"), load_file(runs / "lora_single" / "adapters.safetensors")
    assert sorted(got) == sorted(ref) and all(".lora_" in k for k in got)
    for k, v in ref.items():
        assert torch.allclose(got[k], v, rtol=0, atol=1e-4), (name, k, float((got[k] - v).abs().max()))
    assert any(float(v.abs().max()) > 1e-3 for k, v in got.items() if k.endswith("lora_b"))  # B left zero


def test_lora_tensor_parallel_checkpoint_loads_into_one_process(runs, tmp_path):
    """tp=2's LoRA checkpoint (sharded adapters and their AdamW state, frozen base) resumes in one
    process: step 3 is the tp run's, and the frozen norms stayed frozen under tp (unchanged weights)."""
    ckpt = runs / "lora_tp" / "checkpoints" / "step_00000002"
    s = train(load_recipe("tiny", _base(runs / "cache") + LORA), DistEnv(),
              RunOptions(out=tmp_path / "one", max_steps=3, resume=ckpt))
    assert s.resumed_from_step == 2
    assert rows(tmp_path / "one", "train")[3] == pytest.approx(rows(runs / "lora_tp", "train")[3], rel=RTOL)
    from safetensors.torch import load_file

    final = load_file(runs / "lora_tp" / "model.safetensors")
    norms = [k for k in final if k.endswith("norm.weight")]
    assert norms and all(torch.equal(final[k], torch.ones_like(final[k])) for k in norms)


def test_only_rank0_writes_logs(runs):
    for name in {**JOBS, **JOBS4, **RESUMED}:
        assert sorted(p.name for p in (runs / name).glob("result_*.txt")) == ["result_0.txt"]
        lines = (runs / name / "result_0.txt").read_text().count("run_start")
        assert lines == 1


def test_fsdp_checkpoint_loads_into_one_process(runs, tmp_path):
    """2-way FSDP checkpoint at step 2 -> 1 process: the next steps match the 2-process run."""
    ckpt = runs / "fsdp" / "checkpoints" / "step_00000002"
    meta = json.loads((ckpt / "trainperf-checkpoint.json").read_text())
    assert meta["world_size"] == 2 and meta["layout"]["strategy"] == "fsdp"
    r = load_recipe("tiny", _base(runs / "cache"))
    s = train(r, DistEnv(), RunOptions(out=tmp_path / "one", max_steps=STEPS, resume=ckpt))
    assert s.resumed_from_step == 2
    two, one = rows(runs / "fsdp", "train"), rows(tmp_path / "one", "train")
    assert sorted(one) == [3, 4]
    for step in (3, 4):
        assert one[step] == pytest.approx(two[step], rel=RTOL)


@pytest.mark.parametrize("nproc", [2, 4])
def test_ring_attention_sees_the_chunks_trainperf_holds(runs, nproc):
    """PyTorch's context_parallel (the ring attention chosen on CUDA) shards a sequence over cp
    ranks with its own load balancing; on gloo it hands each rank exactly the chunks
    shard_sequence gives it (r and 2cp-1-r), so its causal ring and trainperf's positions agree."""
    from trainperf.parallel.context import chunk_positions

    got = json.loads((runs / f"ring_layout{nproc}.json").read_text())
    assert got == [chunk_positions(32, nproc, r).tolist() for r in range(nproc)]
