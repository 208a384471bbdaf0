"""Known convergence instead of the RCP mean: --samples and --samples-from MLPerf result logs."""

import json

import pytest

from trainperf.cli.main import main
from trainperf.config import ConfigError
from trainperf.plan.convergence import from_logs, given
from trainperf.plan.rcp import olympic_mean


def _log(path, samples: int, status: str = "success", gbs: int = 64, bench: str = "llama2_70b_lora") -> None:
    def line(t, key, value=None, **meta):
        return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key,
                                         "value": value, "metadata": meta})

    lines = [line(0, "submission_benchmark", bench), line(0, "global_batch_size", gbs), line(1, "run_start"),
             line(5, "eval_accuracy", 0.93, samples_count=samples - 384),
             line(9, "eval_accuracy", 0.92, samples_count=samples),
             line(10, "run_stop", status=status, samples_count=samples)]
    path.write_text("\n".join(lines) + "\n")


def test_olympic_mean_drops_one_lowest_and_one_highest():
    assert olympic_mean([1, 2, 3, 10]) == 2.5
    assert olympic_mean([4, 6]) == 5


def test_from_logs_takes_converged_runs_and_their_batch(tmp_path):
    for i, (s, st) in enumerate([(7296, "success"), (7680, "success"), (6912, "success"), (99999, "aborted")]):
        _log(tmp_path / f"result_{i}.txt", s, st)
    c = from_logs([tmp_path], "llama2_70b_lora", 8192)
    assert c.samples == 7296 and c.runs == 3 and c.gbs == 64  # the aborted run is not counted


def test_from_logs_refuses_mixed_batches_and_other_benchmarks(tmp_path):
    _log(tmp_path / "result_0.txt", 7296, gbs=64)
    _log(tmp_path / "result_1.txt", 7296, gbs=128)
    with pytest.raises(ConfigError, match="different global batches"):
        from_logs([tmp_path], "llama2_70b_lora", 8192)
    with pytest.raises(ConfigError, match="not gpt3"):
        from_logs([tmp_path], "gpt3", 2048)
    with pytest.raises(ConfigError, match="positive"):
        given(0)


def test_plan_with_samples_from_logs(tmp_path, capsys):
    for i, s in enumerate([7296, 7680, 6912]):
        _log(tmp_path / f"result_{i}.txt", s)
    argv = ["plan", "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--json"]
    assert main(argv + ["--samples-from", str(tmp_path)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["convergence"]["samples"] == 7296 and d["convergence"]["runs"] == 3
    assert d["samples_to_target"] == 7296 and d["layout"]["global_batch"] == 64  # the logs' batch
    assert main(argv + ["--gbs", "64"]) == 0
    rcp = json.loads(capsys.readouterr().out)
    assert rcp["convergence"]["source"].startswith("RCP mean")
    # same layout, fewer samples: proportionally less training time
    assert rcp["samples_to_target"] > 7296 and d["minutes"] < rcp["minutes"]
    assert main(argv + ["--samples-from", str(tmp_path), "--gbs", "128"]) == 2
    assert "converged at global batch 64" in capsys.readouterr().err
    assert main(argv + ["--samples", "7000", "--samples-from", str(tmp_path)]) == 2
    assert main(argv + ["--samples", "-1"]) == 2
    assert main(argv + ["--samples-from", str(tmp_path / "nowhere")]) == 2
