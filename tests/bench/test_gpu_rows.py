"""bench/gpu_rows.py, the driver of bench/gpu.sh, on the CPU: what fails a row (graph breaks,
recompiles inside the timed run, attention outside the fused SDPA kernels), and one row end to end
in its own process at toy sizes (`--dry`)."""

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
import gpu_rows  # noqa: E402


def test_a_graph_break_is_counted():
    from torch._dynamo.utils import counters

    counters.clear()

    @torch.compile(backend="eager")
    def f(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    f(torch.ones(3))
    assert gpu_rows.Watch().report()["graph_breaks"] >= 1


def test_only_graphs_compiled_after_run_start_count_as_recompiles():
    from torch._dynamo.utils import counters

    from trainperf.mlperf.logger import C, MLPerfLog

    counters.clear()
    torch._dynamo.reset()

    @torch.compile(backend="eager", dynamic=False)
    def f(x):
        return x.sin() + 1

    w = gpu_rows.Watch()
    with w.timed_run_marked():
        f(torch.ones(3))  # the warm-up compile, before run_start: not counted
        MLPerfLog(None, enabled=False).start(C.RUN_START)
        f(torch.ones(3))
        assert w.report()["recompiles_in_timed_run"] == 0
        f(torch.ones(5))  # a new shape inside the timed run: a recompile
    assert w.report()["recompiles_in_timed_run"] == 1


def test_the_sdpa_spy_tells_a_fused_kernel_from_the_math_fallback():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 16, 8, requires_grad=True)

    def attn(x, y):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True).float().sum()

    fused = gpu_rows.attention_kernels(attn, q, q, torch.device("cpu"))
    assert gpu_rows.fused(fused), fused
    with sdpa_kernel([SDPBackend.MATH]):
        math = gpu_rows.attention_kernels(attn, q, q, torch.device("cpu"))
    assert not gpu_rows.fused(math), math


@pytest.mark.parametrize("row", ["llama1b_fp8"])
def test_a_dry_row_runs_in_its_own_process_and_is_written(tmp_path, capsys, row):
    from trainperf.config import DataConfig
    from trainperf.data.pipeline import prepare

    data = tmp_path / "data"
    prepare(DataConfig(synthetic=True, tokenizer="byte"), out=data / "tiny")
    out = tmp_path / "out"
    rc = gpu_rows.main(["all", "--dry", "--device", "cpu", "--rows", row, "--out", str(out), "--data", str(data),
                        "--work", str(tmp_path / "work")])
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert rc == 0 and [r["row"] for r in rows] == [row] and rows[0]["ok"], (rows, (out / "rows.log").read_text()[-3000:])
    assert rows[0]["train_losses"] and rows[0]["graph_breaks"] == 0 and rows[0]["recompiles_in_timed_run"] == 0
    assert rows[0]["attention_fused"] is None  # judged on a GPU only: a CPU writes short bf16 attention out
    assert "one GPU cannot test: every NCCL path" in printed


def test_the_rows_fit_seven_minutes_of_a_lent_gpu():
    # 15 minutes a lease, its start (a few minutes) and the setup included: the rows get 7
    assert sum(gpu_rows.BUDGET_S.values()) <= 7 * 60
    assert set(gpu_rows.BUDGET_S) == set(gpu_rows.ROWS) and gpu_rows.ROWS[0] == "tiny"
