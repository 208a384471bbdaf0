"""`plan validate --published`: the catalogue of published runs outside MLPerf and their prediction
through make_plan (plan/published.py)."""

import csv
import json

import pytest

from trainperf.cli.main import main
from trainperf.config import ConfigError
from trainperf.plan import published
from trainperf.plan.api import make_plan
from trainperf.plan.calibration import load_calibration
from trainperf.plan.fitting import load_torchtitan


@pytest.fixture(scope="module")
def shapes():
    return published.load_models()


@pytest.fixture(scope="module")
def runs(shapes):
    return published.load_runs(models=shapes)


def test_catalogue_parses_with_sources_and_both_stacks(runs, shapes):
    assert len(runs) >= 50
    assert {r.stack for r in runs} == {"megatron", "pytorch"}
    assert all(r.source.startswith("https://github.com/") and "/blob/" in r.source for r in runs)
    assert all(s.source.startswith("https://github.com/") for s in shapes.values())
    for r in runs:
        L = r.layout
        assert L["tp"] * L["pp"] * L["cp"] * L["dp"] == r.gpus
        assert L["gbs"] % (L["dp"] * L["mbs"]) == 0, r.name


def test_pytorch_rows_are_not_the_torchtitan_fit_set(runs):
    """The pytorch stack is fitted on torchtitan's H100 tables: the held-out rows are other runs."""
    fit = {(t.gpus, t.layout.dp, t.layout.tp, t.layout.pp, t.layout.cp, t.seq_len, t.layout.gbs, round(t.tps_per_gpu))
           for t in load_torchtitan()}
    for r in runs:
        L = r.layout
        key = (r.gpus, L["dp"], L["tp"], L["pp"], L["cp"], r.seq_len, L["gbs"], round(r.tokens_per_s_per_gpu))
        assert key not in fit, r.name


def test_every_published_layout_is_priced(runs, shapes):
    """No run is refused (a missing option or a split the planner rejects): each is priced at its
    fixed layout; where the memory model says it does not fit, though it ran, the row says so and
    the report counts it apart."""
    cal = load_calibration()
    rows = [published.predict_run(r, shapes, cal) for r in runs]
    assert [r.run.name for r in rows if r.prediction is None] == []
    over = [r for r in rows if r.over_memory is not None]
    assert all("GB over" in r.over_memory and r.to_dict()["fits_memory"] is False for r in over)
    assert 0 < len(over) < len(rows) // 2


def _write(path, rows, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("key,value,says", [
    ("tp", "x", "tp must be an integer"),
    ("dp", "3", "tp*pp*cp*dp = 3"),
    ("model", "gpt5", "model 'gpt5' is not in"),
    ("recompute", "some", "recompute must be"),
    ("tokens_per_s_per_gpu", "-1", "tokens_per_s_per_gpu must be positive"),
    ("source", "here", "source must be an https URL"),
    ("stack", "jax", "unknown stack 'jax'"),
    ("gpu", "tpu9", "unknown GPU 'tpu9'"),
])
def test_a_bad_row_is_refused_in_one_line(tmp_path, shapes, key, value, says):
    with open(published.RUNS, newline="") as f:
        rd = csv.DictReader(f)
        good = next(rd)
        fields = rd.fieldnames
    bad = {**good, key: value}
    p = tmp_path / "runs.csv"
    _write(p, [good, bad], fields)
    with pytest.raises(ConfigError) as e:
        published.load_runs(p, shapes)
    msg = str(e.value)
    assert msg.startswith("runs.csv:3: ") and says in msg and "\n" not in msg


def test_error_and_mape_come_from_make_plan(runs, shapes):
    cal = load_calibration()
    sel = [r for r in runs if r.model in ("llama2_7b", "llama2_13b")] + [r for r in runs if r.model == "mpt_13b"][:1]
    rep = published.validate_published(cal, sel, shapes)
    for row in rep.rows:
        r = row.run
        plan = make_plan(published.workload(r, shapes), r.gpu, r.gpus, layout=dict(r.layout), calib=cal, top=1,
                         stack=published.planner_stack(r))
        assert row.predicted == plan.best.estimate.tokens_per_s_per_gpu
        assert row.error == pytest.approx(row.predicted / r.tokens_per_s_per_gpu - 1)
    errs = [abs(x.error) for x in rep.rows]
    d = rep.to_dict()
    assert d["summary"]["all"]["mape"] == round(100 * sum(errs) / len(errs), 2)
    assert set(d["summary"]["by_stack"]) == {"megatron", "pytorch"}


def test_cli_published_json(tmp_path, monkeypatch, capsys):
    with open(published.RUNS, newline="") as f:
        rd = csv.DictReader(f)
        rows = [r for r in rd if r["model"] in ("llama2_7b", "mpt_13b")]
        fields = rd.fieldnames
    p = tmp_path / "runs.csv"
    _write(p, rows, fields)
    monkeypatch.setattr(published, "RUNS", p)
    assert main(["plan", "validate", "--published", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["summary"]["all"]["rows"] == len(rows)
    assert {x["stack"] for x in d["rows"]} == {"megatron", "pytorch"}
    assert main(["plan", "validate", "--published"]) == 0
    assert "tokens/s per GPU" in capsys.readouterr().out
    assert main(["plan", "validate", "--published", "--benchmark", "gpt3"]) == 2


def test_megatron_fsdp_shards_weights_and_gradients(runs, shapes):
    """Megatron-FSDP: the distributed optimizer's whole weights and gradients split over dp, plus two
    gathered layers; its compute the megatron stack's."""
    from trainperf.plan.hardware import cluster
    from trainperf.plan.perf import Layout, Model

    r = next(x for x in runs if x.fsdp and x.stack == "megatron" and x.gpu == "h100")
    cal, b, cl = load_calibration(), published.workload(r, shapes), cluster(r.gpu, r.gpus)
    lay = Layout(**{k: v for k, v in r.layout.items() if k != "mbs"}, mbs=r.layout["mbs"])
    zero1 = Model(b, cl, cal, samples=1.0, stack="megatron")
    fsdp = Model(b, cl, cal, samples=1.0, stack="megatron-fsdp")
    m0, m1 = zero1.memory(lay), fsdp.memory(lay)
    dp = r.layout["dp"]
    assert m1.grads == pytest.approx(m0.grads / dp)
    assert m0.weights / dp < m1.weights < m0.weights / 2
    assert m1.optimizer == pytest.approx(m0.optimizer)
    assert m1.total < m0.total
    assert fsdp.cost(lay).t_f == pytest.approx(zero1.cost(lay).t_f)


def test_cli_plans_a_model_on_megatron_fsdp(capsys):
    assert main(["plan", "--model", "layers=32,d_model=4096,heads=32,kv_heads=8,ffn=14336,"
                 "vocab=128256,seq=8192,family=llama", "--gbs", "128", "--gpu", "h100", "--gpus", "8",
                 "--stack", "megatron-fsdp", "--layout", "tp=1,pp=1,dp=8,mbs=1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stack"] == "megatron-fsdp" and d["layout"]["dp"] == 8
