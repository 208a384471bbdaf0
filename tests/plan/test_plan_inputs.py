"""`trainperf plan` refuses inputs it cannot honestly price, in one line, before planning."""

import json

import pytest

from tests.plan.test_convergence import _log
from trainperf.cli.main import main

PLAN = ["plan", "llama31_8b", "--gpu", "h100", "--gpus", "64"]


def _one_line_error(capsys, argv, code: int = 2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("trainperf: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("samples, gbs", [(-160000, 64), (160000, 0), (160000, -64), (32, 64), (10**30, 64)])
def test_samples_from_logs_that_are_no_run(capsys, tmp_path, samples, gbs):
    for i in range(3):
        _log(tmp_path / f"result_{i}.txt", samples, gbs=gbs, bench="llama31_8b")
    assert "is not a run" in _one_line_error(capsys, PLAN + ["--samples-from", str(tmp_path)])


def test_samples_from_a_file_that_is_not_a_log(capsys, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    assert "not a result log" in _one_line_error(capsys, PLAN + ["--samples-from", str(f)])


@pytest.mark.parametrize("flag, value, msg", [("--price", "1e308", "--price"), ("--samples", "1e30", "--samples")])
def test_numbers_beyond_any_run_are_refused(capsys, flag, value, msg):
    assert msg in _one_line_error(capsys, PLAN + [flag, value])


def test_token_budget_beyond_any_run_is_refused(capsys):
    err = _one_line_error(capsys, ["plan", "--model", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--tokens", "1e30"])
    assert "--tokens" in err


def test_a_budget_trains_whole_steps(capsys):
    """One token past a step's worth is a second step; an RCP mean stays the mean it is."""
    argv = ["plan", "--model", "llama31_8b", "--gpu", "h100", "--gpus", "64", "--layout", "gbs=32", "--json"]
    step_tokens = 32 * 8192
    steps = []
    for tokens in (step_tokens, step_tokens + 1, 1):
        assert main(argv + ["--tokens", str(tokens)]) == 0
        steps.append(json.loads(capsys.readouterr().out)["steps"])
    assert steps == [1, 2, 1]
    assert main(["plan", "llama2_70b_lora", "--gpu", "h100", "--gpus", "8", "--samples", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 1


def test_plot_format_is_checked_before_the_sweep(capsys, tmp_path):
    out = tmp_path / "scaling.txt"
    err = _one_line_error(capsys, ["plan", "sweep", "gpt3_175b", "--gpu", "h100", "--gpus", "64", "--plot", str(out)])
    assert "--plot" in err and "png" in err and not out.exists()


def test_layout_precision_and_precision_must_agree(capsys):
    err = _one_line_error(capsys, ["plan", "llama31_8b", "--gpu", "b200", "--gpus", "64", "--precision", "bf16",
                                   "--layout", "precision=fp8"])
    assert "disagree" in err


def _run_dir(tmp_path, name: str, **over) -> str:
    d = tmp_path / name
    d.mkdir()
    summary = {"tokens_per_s": 1.0e6, "mfu": 0.40, "peak_flops": 312e12, "flops_per_token": 3.96e7,
               "device": "NVIDIA A100-SXM4-80GB", "world_size": 1, **over}
    (d / "summary.json").write_text(json.dumps(summary))
    return str(d)


def test_calibrate_from_another_generation_is_refused(capsys, tmp_path):
    """An A100 run refits ampere's efficiency: a plan on H100 would not change, though it says calibrated."""
    run = _run_dir(tmp_path, "a100")
    assert "another generation" in _one_line_error(capsys, PLAN + ["--calibrate", run])
    assert main(["plan", "llama31_8b", "--gpu", "a100", "--gpus", "64", "--calibrate", run, "--json"]) == 0
    capsys.readouterr()
    sweep = ["plan", "sweep", "llama31_8b", "--gpu", "a100,h100", "--gpus", "64", "--calibrate", run]
    assert "another generation" in _one_line_error(capsys, sweep)


@pytest.mark.parametrize("over, key", [({"world_size": 8.7}, "world_size"), ({"device": 5}, "device"),
                                       ({"tokens_per_s": "fast"}, "tokens_per_s"), ({"mfu": True}, "mfu")])
def test_calibrate_summary_fields_keep_their_types(capsys, tmp_path, over, key):
    err = _one_line_error(capsys, PLAN + ["--calibrate", _run_dir(tmp_path, "r", **over)])
    assert "not a trainperf summary" in err and key in err


def test_calibrate_from_a_run_that_measured_nothing(capsys, tmp_path):
    run = _run_dir(tmp_path, "r", tokens_per_s=1e-9, device="NVIDIA H100 80GB HBM3")
    assert "share of peak" in _one_line_error(capsys, PLAN + ["--calibrate", run])


def test_validate_gpu_only_with_a_non_catalog_run(capsys, tmp_path):
    assert "only with --calibrate" in _one_line_error(capsys, ["plan", "validate", "--gpu", "h100"])
    run = _run_dir(tmp_path, "a100")
    assert "catalog GPU" in _one_line_error(capsys, ["plan", "validate", "--gpu", "h100", "--calibrate", run])
    assert "unknown GPU" in _one_line_error(capsys, ["plan", "validate", "--gpu", "foo", "--calibrate", run])


def test_top_is_bounded(capsys):
    with pytest.raises(SystemExit) as e:
        main(PLAN + ["--top", "100000"])
    assert e.value.code == 2 and "at most 500" in capsys.readouterr().err
