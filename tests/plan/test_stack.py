"""The software stack as an input: megatron (the MLPerf fit) and pytorch (fitted on torchtitan)."""

import json
import math

import pytest

from trainperf.cli.main import main
from trainperf.plan.api import make_plan
from trainperf.plan.calibration import load_calibration, parse_calibration
from trainperf.config import ConfigError
from trainperf.plan.fitting import fit_pytorch, fit_rows, load_torchtitan, titan_error
from trainperf.plan.hardware import cluster
from trainperf.plan.perf import Layout, Model
from trainperf.plan.workload import load_benchmark


def test_every_torchtitan_row_cites_its_table():
    rows = load_torchtitan()
    h100 = [r for r in rows if r.gpu == "h100_96gb"]
    a100 = [r for r in rows if r.gpu == "a100"]
    assert len(h100) == 18 and {r.table for r in h100} == {1, 2, 3, 4, 5, 6} and len(a100) == 6
    assert all("pytorch/torchtitan/blob/31a17bf" in r.source and r.source.endswith(f"#table-{r.table}") for r in h100)
    assert all("pytorch/torchtitan/blob/0413364" in r.source and "/docs/performance.md#llama-" in r.source for r in a100)
    for r in rows:
        L = r.layout
        assert L.tp * L.pp * L.cp * L.dp == r.gpus, r.name


def test_the_shipped_pytorch_fit_is_what_fitting_gives():
    cal = load_calibration()
    refit = fit_pytorch(parse_calibration(cal.to_toml()))
    assert parse_calibration(refit.to_toml()).stack_eff_scale == cal.stack_eff_scale
    assert parse_calibration(refit.to_toml()).stack_overlap == cal.stack_overlap
    # PyTorch-native runs below Megatron's efficiency on Hopper; each generation has its own share
    assert set(cal.stack_eff_scale["pytorch"]) == {"ampere", "hopper"}
    assert 0.3 < cal.stack_eff_scale["pytorch"]["hopper"] < 1.0


def test_pytorch_stack_reproduces_torchtitan_within_20_percent():
    cal = load_calibration()
    rows = fit_rows(load_torchtitan())
    for gpu, n in (("h100_96gb", 16), ("a100", 6)):
        errs = [abs(titan_error(r, cal)) for r in rows if r.gpu == gpu]
        assert len(errs) == n and 100 * sum(errs) / len(errs) < 20, gpu


def test_a_generation_without_its_own_fit_takes_the_newest_before_it():
    cal = parse_calibration("[stack_eff_scale.pytorch]\nampere = 0.9\nhopper = 0.6\n")
    assert cal.stack_scale("blackwell", "pytorch") == 0.6 and cal.stack_scale("ampere", "pytorch") == 0.9
    assert cal.stack_scale("hopper", "megatron") == 1.0
    only_new = parse_calibration("[stack_eff_scale.pytorch]\nhopper = 0.6\n")
    assert only_new.stack_scale("ampere", "pytorch") == 0.6  # none before it: the oldest after
    with pytest.raises(ConfigError, match="stack_eff_scale.pytorch: unknown generations"):
        parse_calibration("[stack_eff_scale.pytorch]\nvolta = 0.6\n")


def test_fsdp_shards_weights_and_gradients_megatron_does_not():
    b = load_benchmark("llama31_8b")
    lay = Layout(tp=1, pp=1, dp=64, cp=1, mbs=1, gbs=64, precision="bf16")
    meg = Model(b, cluster("h100", 64), load_calibration(), stack="megatron").memory(lay)
    pt = Model(b, cluster("h100", 64), load_calibration(), stack="pytorch").memory(lay)
    assert pt.weights < meg.weights / 4 and pt.grads < meg.grads / 4
    assert pt.optimizer == pytest.approx(meg.optimizer * 8 / 12)  # Adam's moments; fp32 master is in weights


def test_every_output_names_its_stack(capsys):
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--json"]) == 0
    meg = json.loads(capsys.readouterr().out)
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--stack", "pytorch", "--json"]) == 0
    pt = json.loads(capsys.readouterr().out)
    assert meg["stack"] == "megatron" and pt["stack"] == "pytorch"
    assert meg["tokens_per_s_per_gpu"] == pytest.approx(meg["tokens_per_s"] / 64, rel=1e-3)
    assert pt["layout"]["precision"] in ("bf16", "fp8") and pt["minutes"] > meg["minutes"]
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64"]) == 0
    assert "software: megatron" in capsys.readouterr().out
    assert main(["plan", "--model", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stack"] == "pytorch"  # trainperf's own trainer by default


def test_the_pytorch_stack_trains_no_fp4(capsys):
    assert main(["plan", "llama31_8b", "--gpu", "b200", "--gpus", "8", "--stack", "pytorch", "--precision", "fp4"]) == 2
    assert "trains no fp4" in capsys.readouterr().err
    p = make_plan("llama31_8b", "b200", 8, stack="pytorch")
    assert all(x.layout.precision != "fp4" for x in p.predictions)


def test_emit_run_names_the_stack_it_priced(capsys):
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "8", "--emit-run", "--stack", "pytorch",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stack"] == "pytorch" and d["run_command"].startswith("trainperf run llama31_8b")


def test_megatron_numbers_do_not_move_with_the_pytorch_fit():
    """The pytorch stack's parameters are its own: megatron plans read none of them."""
    cal = load_calibration()
    bare = parse_calibration(cal.to_toml().split("[stack_eff_scale.")[0])
    a = make_plan("gpt3_175b", "h100", 1024, calib=cal, top=1).best.minutes
    b = make_plan("gpt3_175b", "h100", 1024, calib=bare, top=1).best.minutes
    assert a == b and not math.isnan(a)


@pytest.mark.parametrize("bench,layout,gpus", [
    ("llama31_8b", "tp=2,pp=2,dp=2,mbs=1,gbs=32,recompute=selective,precision=bf16", 8),
    ("llama31_8b", "tp=1,pp=1,dp=8,cp=1,mbs=1,gbs=32,recompute=none,precision=fp8", 8),
    ("llama2_70b_lora", "tp=1,pp=1,dp=1,cp=8,mbs=1,gbs=8,recompute=none,precision=bf16", 8),
])
def test_pytorch_stack_memory_is_the_trainers_accounting(capsys, bench, layout, gpus):
    """`plan --stack pytorch` prices memory with plan.stack_memory, the accounting `run --dry-run`
    checks against traced memory, and nothing else: term by term, plus the planner's reserve."""
    from trainperf.plan.hardware import get_gpu
    from trainperf.plan.memory import RESERVE
    from trainperf.plan.search import parse_layout
    from trainperf.plan.stack_memory import stack_memory

    assert main(["plan", bench, "--gpu", "h100", "--gpus", str(gpus), "--stack", "pytorch", "--layout", layout,
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    L = d["layout"]  # as asked, and the vpp the search chose
    assert all(L[k] == v for k, v in parse_layout(layout).items() if k in L)
    cap = get_gpu("h100").usable_bytes
    m = stack_memory(load_benchmark(bench).model, tp=L["tp"], pp=L["pp"], vpp=L["vpp"], dp=L["dp"], cp=L["cp"],
                     mbs=L["microbatch"], gbs=L["global_batch"], recompute=L["recompute"], gpu_bytes=cap)
    want = {k: v for k, v in m.as_gb().items() if k != "total"}
    got = d["memory_breakdown_gb"]
    assert {k: got[k] for k in want} == want
    assert got["reserve"] == round(RESERVE * cap / 1e9, 2)
    assert d["memory_gb_per_gpu"] == round((m.total + RESERVE * cap) / 1e9, 2)


def test_the_search_fits_by_the_trainers_accounting():
    """The search's fit check and the estimate it reports are one memory: the plan's best layout
    under pytorch fits by stack_memory + reserve, and its recorded total is that sum."""
    from trainperf.plan.memory import RESERVE
    from trainperf.plan.stack_memory import stack_memory

    p = make_plan("llama31_8b", "h100", 8, stack="pytorch", top=3)
    g = p.cluster.gpu
    for x in p.predictions:
        L, e = x.layout, x.estimate
        m = stack_memory(p.bench.model, tp=L.tp, pp=L.pp, vpp=L.vpp, cp=L.cp, dp=L.dp, mbs=L.mbs, gbs=L.gbs,
                         recompute=L.recompute, gpu_bytes=g.usable_bytes)
        assert e.memory.total == m.total + RESERVE * g.usable_bytes <= e.capacity


def test_emit_run_prices_the_pytorch_stack_by_default(capsys):
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "8", "--emit-run"]) == 0
    out = capsys.readouterr().out
    assert "# planned on the pytorch stack:" in out
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "8", "--emit-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stack"] == "pytorch"
