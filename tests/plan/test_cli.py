"""`trainperf plan` through the real CLI entry point."""

import csv
import json

import pytest

from trainperf.cli.main import main


def run_json(capsys, *argv):
    rc = main(["plan", *argv, "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def test_plan_json_has_the_documented_fields(capsys):
    d = run_json(capsys, "gpt3_175b", "--gpu", "h100", "--gpus", "10752")
    for k in ("minutes", "step_time_s", "mfu", "memory_gb_per_gpu", "layout", "layouts"):
        assert k in d
    assert {"tp", "pp", "dp", "cp", "microbatch"} <= set(d["layout"])
    lay = d["layout"]
    assert lay["tp"] * lay["pp"] * lay["dp"] * lay["cp"] == 10752
    assert d["memory_gb_per_gpu"] <= d["memory_capacity_gb"]
    assert 0 < d["mfu"] < 1 and d["minutes"] > 0
    assert len(d["layouts"]) == 4
    assert all(e["minutes"] >= d["minutes"] for e in d["layouts"])


def test_plan_vs_reports_speedup(capsys):
    d = run_json(capsys, "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--vs", "h100", "--gbs", "64")
    assert d["speedup"] == pytest.approx(d["vs"]["minutes"] / d["minutes"], rel=1e-3)
    assert d["vs"]["gpu"] == "h100" and d["layout"]["global_batch"] == 64


def test_plan_fixed_layout(capsys):
    d = run_json(capsys, "llama31_8b", "--gpu", "h200", "--gpus", "8", "--layout", "tp=1,pp=1,dp=8,mbs=1")
    assert (d["layout"]["tp"], d["layout"]["pp"], d["layout"]["dp"], d["layout"]["microbatch"]) == (1, 1, 8, 1)


def test_plan_tables_and_explain(capsys):
    assert main(["plan", "llama31_405b", "--gpu", "gb200", "--gpus", "2048", "--explain", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "fastest layouts" in out and "pipeline bubble" in out and "memory per GPU" in out


@pytest.mark.parametrize("argv,code,msg", [
    (["plan", "gpt3_175b", "--gpu", "h900", "--gpus", "8"], 2, "unknown GPU"),
    (["plan", "gpt5", "--gpu", "h100", "--gpus", "8"], 2, "unknown benchmark"),
    (["plan", "gpt3_175b", "--gpu", "h100", "--gpus", "100", "--layout", "tp=8,pp=8"], 2, "does not divide 100"),
    (["plan", "gpt3_175b", "--gpu", "h100", "--gpus", "8"], 1, "no layout fits in memory"),
    (["plan", "llama31_8b", "--gpu", "h100", "--gpus", "8", "--layout", "tp=1,dp=8,mbs=8,recompute=none",
      "--gbs", "64"], 1, "GB over"),
    (["plan", "gpt3_175b"], 2, "--gpu and --gpus are required"),
])
def test_plan_errors_are_one_line(capsys, argv, code, msg):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_sweep_writes_plot(capsys, tmp_path):
    png = tmp_path / "scaling.png"
    assert main(["plan", "sweep", "llama2_70b_lora", "--gpu", "h100,gb200", "--gpus", "8..32", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "h100" in out and "gb200" in out


def test_validate_json(validate_405b_json):
    d = validate_405b_json
    assert d["stack"] == "megatron"  # MLPerf's results ran NVIDIA's software
    assert {r["benchmark"] for r in d["rows"]} == {"llama31_405b"}
    assert d["summary"]["fit"]["rows"] + d["summary"]["held_out"]["rows"] + d["summary"]["skipped"] == len(d["rows"])


def test_calibrate_from_a_run_dir(capsys, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({
        "tokens_per_s": 1.0e6, "mfu": 0.40, "peak_flops": 989e12, "flops_per_token": 3.96e5 * 1000,
        "device": "NVIDIA H100 80GB HBM3", "world_size": 1}))
    base = run_json(capsys, "llama31_8b", "--gpu", "h100", "--gpus", "64", "--gbs", "32")
    d = run_json(capsys, "llama31_8b", "--gpu", "h100", "--gpus", "64", "--gbs", "32", "--calibrate", str(run))
    assert d["calibration"]["gemm_efficiency"] == pytest.approx(1e6 * 3.96e8 / 989e12, rel=1e-3)
    assert d["minutes"] != base["minutes"]
    assert base["stack"] == "megatron" and d["stack"] == "pytorch"  # a trainperf run is the pytorch stack
    (run / "summary.json").write_text("{}")
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--calibrate", str(run)]) == 2
    assert "not a trainperf summary" in capsys.readouterr().err


def test_plan_round_sets_rules_and_is_in_json(capsys):
    new = run_json(capsys, "llama2_70b_lora", "--gpu", "b200", "--gpus", "8")
    old = run_json(capsys, "llama2_70b_lora", "--gpu", "b200", "--gpus", "8", "--round", "v4.1")
    assert new["round"] == "6.1" and new["rcp_ruleset"] == "6.1.0" and new["layout"]["precision"] == "fp4"
    # v4.1: its RCPs, no FP4 yet, and NeMo 24.09's measured evaluation costs
    assert old["round"] == "4.1" and old["rcp_ruleset"] == "4.1.0" and old["layout"]["precision"] == "fp8"
    assert old["minutes"] > new["minutes"]
    sw = main(["plan", "sweep", "gpt3_175b", "--gpu", "h100", "--gpus", "512", "--round", "3.1", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert sw == 0 and d[0]["round"] == "3.1" and d[0]["rcp_ruleset"] == "3.1.0"


def test_plan_and_validate_give_the_same_number_for_a_row():
    from trainperf.plan.api import make_plan
    from trainperf.plan.calibration import load_calibration
    from trainperf.plan.hardware import gpu_for_result
    from trainperf.plan.validate import Predictor, load_results

    cal = load_calibration()
    pred = Predictor(cal)
    picks = {("4.1", "llama2_70b_lora", "Azure", 512), ("5.0", "llama31_405b", "NVIDIA", 512),
             ("5.1", "llama31_8b", "NVIDIA", 8)}
    rows = [r for r in load_results() if (r.round, r.benchmark, r.submitter, r.n_gpus) in picks]
    assert len(rows) >= 3
    for r in rows:
        g = gpu_for_result(r.accelerator)
        p = make_plan(r.benchmark, g.key, r.n_gpus, gbs=r.gbs, round_=r.round, calib=cal, top=1)
        assert p.best.minutes == pytest.approx(pred.predict(r).prediction.minutes, rel=1e-12), r.key


@pytest.mark.parametrize("argv,msg", [
    (["plan", "llama2_70b_lora", "--gpu", "h100", "--gpus", "8", "--round", "3.1"], "no rules for round"),
    (["plan", "llama2_70b_lora", "--gpu", "b200", "--gpus", "8", "--round", "4.1", "--precision", "fp4"],
     "allows no fp4"),
])
def test_plan_round_errors(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_validate_and_calibrate_take_only_their_options(capsys):
    """`plan validate` predicts each published row under its own round: --round is not one of its options."""
    with pytest.raises(SystemExit) as e:
        main(["plan", "validate", "--round", "4.1"])
    assert e.value.code == 2 and "unrecognized arguments: --round" in capsys.readouterr().err


@pytest.mark.parametrize("extra, msg", [(["--published", "--holdout", "round"], "one at a time"), (["--holdout", "round", "--results", "x.csv"], "one at a time"),
                                        (["--published", "--benchmark", "gpt3"], "not in --published")])
def test_validate_sets_are_asked_one_at_a_time(capsys, extra, msg):
    assert main(["plan", "validate", *extra]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_published_layouts_rank_first_unless_explore(capsys):
    argv = ["llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--round", "4.1", "--gbs", "64"]
    d = run_json(capsys, *argv)
    x = run_json(capsys, *argv, "--explore")
    # nobody published tp 1 x cp 8 on Hopper: the model's fastest comes second to tp 4 x cp 2, which
    # NVIDIA ran in v4.1 and others in v4.0 (the evidence closest in GPU count: Dell's 512-GPU v4.0)
    assert (d["layout"]["tp"], d["layout"]["cp"]) == (4, 2)
    ev = d["evidence"]
    assert ev["round"] == "4.0" or (ev["round"] == "4.1" and ev["submitter"] == "NVIDIA")
    assert "github.com" in d["evidence"]["source"]
    assert x["evidence"] is None and x["minutes"] < d["minutes"]
    assert d["fastest_unpublished"]["minutes"] == pytest.approx(x["minutes"])
    assert x["fastest_unpublished"] is None


def test_cost_energy_and_price(capsys):
    d = run_json(capsys, "llama2_70b_lora", "--gpu", "h100", "--gpus", "64", "--price", "2.5", "--pue", "1.3")
    c = d["cost"]
    hours = d["minutes"] / 60 * 64
    assert c["gpu_hours"] == pytest.approx(hours, rel=1e-3)
    assert c["energy_kwh"] == pytest.approx(700 * hours * 1.3 / 1000, abs=0.01)  # H100 SXM TDP 700 W
    assert c["cost_usd"] == pytest.approx(2.5 * hours, rel=1e-3)
    assert c["gpu_hours_p10"] < c["gpu_hours"] < c["gpu_hours_p90"]
    assert main(["plan", "llama2_70b_lora", "--gpu", "h100", "--gpus", "64", "--price", "-1"]) == 2
    assert "--price" in capsys.readouterr().err


def test_vs_decomposes_the_speedup(capsys):
    d = run_json(capsys, "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--vs", "h100", "--gbs", "64",
                 "--round", "4.1")
    f = d["speedup_factors"]
    assert f["step_time"] * f["convergence"] * f["evaluation_and_fixed"] == pytest.approx(d["speedup"], rel=1e-3)
    assert f["convergence"] == pytest.approx(1.0)  # same batch, same RCP
    assert d["vs"]["round"] == d["round"] == "4.1"


def test_sweep_plot_with_cost_panel(capsys, tmp_path):
    png = tmp_path / "s.png"
    assert main(["plan", "sweep", "llama31_8b", "--gpu", "h100", "--gpus", "8,16", "--price", "2", "--plot", str(png),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:4] == b"\x89PNG" and all(p["cost"]["cost_usd"] > 0 for p in d)


def test_formats_nvidia_ran_on_the_gpu_kind_rank_first(capsys):
    """v5.1: NVIDIA ran the 405B in FP8 on the HGX B200 (FP4 only on GB200/GB300), so the plan for a
    B200 leads with FP8 and names the faster FP4 layout as unpublished; --explore ranks by time."""
    argv = ["llama31_405b", "--gpu", "b200", "--gpus", "512", "--round", "5.1"]
    d = run_json(capsys, *argv)
    assert d["layout"]["precision"] == "fp8" and d["formats_published"] == ["fp8"]
    assert d["fastest_unpublished"]["layout"]["precision"] == "fp4"
    x = run_json(capsys, *argv, "--explore")
    assert x["layout"]["precision"] == "fp4" and x["minutes"] < d["minutes"]
    g = run_json(capsys, "llama31_405b", "--gpu", "gb200", "--gpus", "512", "--round", "5.1")
    assert g["layout"]["precision"] == "fp4" and "fp4" in g["formats_published"]
    # no NVIDIA LoRA config on B200 in v5.1: no format is preferred
    lo = run_json(capsys, "llama2_70b_lora", "--gpu", "b200", "--gpus", "8", "--round", "5.1")
    assert lo["formats_published"] is None and lo["layout"]["precision"] == "fp4"


def _catalogue_rows(n: int) -> tuple[list[str], list[dict]]:
    """The catalogue's header and its first `n` rows of one NVIDIA and one other submitter each."""
    from trainperf.plan.results import RESULTS

    with open(RESULTS, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    nvidia = [r for r in rows if r["submitter"] == "NVIDIA"][:n]
    others = [r for r in rows if r["submitter"] != "NVIDIA"][:n]
    return reader.fieldnames, nvidia + others


def test_validate_results_predicts_that_table_only(capsys, tmp_path):
    """`--results CSV` predicts the rows of another table (results the fit never saw), not the catalogue's."""
    header, rows = _catalogue_rows(1)
    table = tmp_path / "mine.csv"
    with open(table, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    d = run_json(capsys, "validate", "--results", str(table))
    assert [(r["submitter"], r["gpus"]) for r in d["rows"]] == [(r["submitter"], int(r["num_accelerators"])) for r in rows]
    assert [r["split"] for r in d["rows"]] == ["fit", "held_out"]
    assert d["anchors"] == []  # the article's checks are the catalogue's
    assert d["results"] == str(table) and d["refitted"] is False


@pytest.mark.parametrize("content, msg", [(None, "cannot read"), ("header-only", "no result rows"),
                                          ("bad-row", ":2: bad results row")])
def test_validate_results_refuses_a_bad_table_in_one_line(capsys, tmp_path, content, msg):
    table = tmp_path / "mine.csv"
    if content is not None:
        header, rows = _catalogue_rows(1)
        with open(table, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            if content == "bad-row":
                w.writerow({**rows[0], "num_accelerators": "many"})
    assert main(["plan", "validate", "--results", str(table)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err
