"""`trainperf run --dry-run --gpu`: the busiest rank's memory traced from the trainer's code on fake
tensors, beside the planner's price of the same stack and the GPU's memory."""

import json
import re

from trainperf.cli.main import main
from trainperf.plan.hardware import get_gpu

# a Llama 3.2 1B-shaped model with Llama 3's 128k vocabulary and 8k sequence
LLAMA_1B = ["--set", "model.n_layer=16", "--set", "model.d_model=2048", "--set", "model.n_head=32",
            "--set", "model.n_kv_head=8", "--set", "model.d_ff=8192"]


def _dry(capsys, *argv, as_json=True):
    rc = main(["run", *argv, "--dry-run", *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 and as_json else out), err


def test_traced_planned_and_gpu_memory_side_by_side(capsys):
    rc, d, err = _dry(capsys, "llama31_8b", *LLAMA_1B, "--nproc", "8", "--gpu", "h100",
                      "--layout", "tp=2,dp=4,mbs=1,gbs=16")
    assert rc == 0, err
    m = d["memory"]
    assert m["gpu_gb"] == round(get_gpu("h100").usable_bytes / 1e9, 2)
    assert 0 < m["traced_peak_gb"] < m["gpu_gb"] and m["fits"]
    assert abs(m["planned_gb"] / m["traced_peak_gb"] - 1) <= 0.15, m
    assert m["grad_accumulation"] == "reduce-scatter every micro-batch" or "unsharded" in m["grad_accumulation"]
    assert "NCCL" in m["not_counted"] and "fragmentation" in m["not_counted"]
    assert "extended to 16" in m["traced_layers"]
    # one planned memory: the planner's section prices the stack that runs (pytorch), the same sum
    p = d["planner"]
    # tp 2: 8,192 tokens over each rank's 64,128 entries at loss_parallel's 20 bytes: 10 chunks
    assert p["stack"] == "pytorch" and p["loss_chunk_tokens"] == 820
    assert {k: p["memory_gb"][k] for k in m["planned"] if k != "total"} == {k: v for k, v in m["planned"].items()
                                                                             if k != "total"}
    assert abs(p["memory_gb"]["total"] - p["memory_gb"]["reserve"] - m["planned_gb"]) <= 0.011


def test_a_large_micro_batch_with_a_128k_vocabulary_does_not_fit_and_says_what_to_change(capsys):
    # micro-batch 16 of 8k tokens: whole, the loss would hold 16 x 8192 x 128,256 x 12 bytes (202 GB);
    # in chunks (model/loss.py) about 3 GB, so what does not fit is the activations, and checkpointing
    # them fits without giving up the micro-batch
    rc, out, err = _dry(capsys, "llama31_8b", *LLAMA_1B, "--set", "train.micro_batch_size=16",
                        "--set", "train.global_batch_size=128", "--nproc", "8", "--gpu", "h100", as_json=False)
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("traced"))
    assert "does NOT fit" in line
    loss_gb = float(re.search(r"loss ([0-9.]+) GB", out).group(1))
    assert loss_gb < 5
    advice = next(x for x in out.splitlines() if "to fit:" in x)
    assert "parallel.activation_checkpoint=full" in advice and "micro_batch_size" not in advice


def test_no_trace_skips_it(capsys):
    rc, d, err = _dry(capsys, "llama31_8b", *LLAMA_1B, "--nproc", "8", "--gpu", "h100", "--no-trace")
    assert rc == 0, err
    assert d["memory"] is None and d["planner"]["gpu"] == "h100" and d["planner"]["stack"] == "pytorch"
    # one 8,192-token micro-batch over 128,256 entries is taken in 12 chunks (model/loss.py)
    assert d["planner"]["loss_chunk_tokens"] == 683


def test_full_recompute_under_tensor_parallelism_plans_what_it_traces(capsys):
    # activations dominate (a 1k vocabulary): a checkpointed block keeps only its 1/tp input shard,
    # and its backward rebuilds one layer's activations once
    rc, d, err = _dry(capsys, "llama31_8b", *LLAMA_1B, "--set", "model.vocab_size=1024",
                      "--set", "parallel.activation_checkpoint=full", "--nproc", "8", "--gpu", "h100",
                      "--layout", "tp=4,dp=2,mbs=8,gbs=16")
    assert rc == 0, err
    m = d["memory"]
    assert abs(m["planned_gb"] / m["traced_peak_gb"] - 1) <= 0.15, m
