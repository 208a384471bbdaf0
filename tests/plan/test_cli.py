"""`trainperf plan` through the real CLI entry point."""

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


def test_validate_json(capsys):
    d = run_json(capsys, "validate", "--benchmark", "llama31_405b")
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
    (run / "summary.json").write_text("{}")
    assert main(["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--calibrate", str(run)]) == 2
    assert "not a trainperf summary" in capsys.readouterr().err
