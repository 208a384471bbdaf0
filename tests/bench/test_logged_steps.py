"""bench/logged_steps.py: the step and evaluation times read from MLLOG result files."""

import csv
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ls():
    spec = importlib.util.spec_from_file_location("logged_steps", ROOT / "bench" / "logged_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ev(key, t, value=None, **md):
    return {"key": key, "time_ms": t, "value": value, "metadata": md}


def mllog(events):
    return "".join(f":::MLLOG {json.dumps(e)}\n" for e in events) + "not a log line\n"


def evals(n, samples_per, t0=0, train_ms=10_000, eval_ms=2_000, count_unit=1):
    """n evaluations, `samples_per` samples trained before each, `train_ms` of training between."""
    out, t = [], t0
    for i in range(n):
        t += train_ms
        s = (i + 1) * samples_per * count_unit
        out += [ev("eval_start", t, samples_count=s), ev("eval_stop", t + eval_ms + i, samples_count=s)]
        t += eval_ms + i
    return out


def test_step_time_key_wins_over_throughput(ls):
    events = [ev("tracked_stats", 0, {"train_step_time": x}) for x in (5.0, 1.0, 1.2, 1.1)]
    events += [ev("tracked_stats", 0, {"throughput": 100.0})] + evals(3, 80)
    step, method, ev_s = ls.log_times(events, gbs=8)
    assert (step, method) == (pytest.approx(1.15), "train_step_time")
    assert ev_s == pytest.approx(2.0015)  # evaluations after the first: 2.001 s and 2.002 s


def test_throughput_counts_samples_or_tokens(ls):
    events = [ev("tracked_stats", 0, {"throughput": 4.0})]
    assert ls.log_times(events, gbs=8)[:2] == (2.0, "throughput")
    # GPT-3 logs count tokens: throughput 4,096 tokens/s at 2,048 tokens a sample, batch 8
    assert ls.log_times(events[:0] + [ev("tracked_stats", 0, {"throughput": 4096.0})], 8, 2048)[0] == 4.0


def test_segments_between_evaluations_when_nothing_else_is_logged(ls):
    # 80 samples at batch 8 between evaluations in 10 s of training: 1 s a step
    step, method, _ = ls.log_times(evals(4, 80), gbs=8)
    assert (step, method) == (pytest.approx(1.0), "segments")
    step, _, _ = ls.log_times(evals(4, 80, count_unit=2048), gbs=8, per_sample=2048)
    assert step == pytest.approx(1.0)
    assert ls.log_times([ev("run_start", 0)], gbs=8) == (None, "segments", None)


def test_reads_a_results_checkout_into_the_table(ls, tmp_path):
    repo = tmp_path / "results"
    folder = repo / "Acme" / "results" / "box_n8" / "llama2_70b_lora"
    folder.mkdir(parents=True)
    for i, x in enumerate((3.0, 3.2, 3.1)):
        (folder / f"result_{i}.txt").write_text(mllog([ev("tracked_stats", 0, {"train_step_time": x})] + evals(3, 96)))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r"],
                   check=True)
    src = "https://github.com/mlcommons/training_results_v5.0/tree/abc/Acme/results/box_n8/llama2_70b_lora"
    results = tmp_path / "results.csv"
    with open(results, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "benchmark", "submitter", "system", "accelerator", "num_accelerators",
                    "global_batch_size", "minutes", "source", "note"])
        w.writerow(["v5.0", "llama2_70b_lora", "Acme", "box", "NVIDIA H100-SXM5-80GB", 8, 8, 20.0, src, ""])
        w.writerow(["v4.1", "llama2_70b_lora", "Acme", "box", "NVIDIA H100-SXM5-80GB", 8, 8, 20.0, src, ""])
    out = tmp_path / "logged.csv"
    assert ls.main(["--repo", f"5.0={repo}", "--results", str(results), "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 1  # the v4.1 row has no checkout named
    r = rows[0]
    assert (r["logs"], r["method"], float(r["step_s"]), float(r["step_min_s"]), float(r["step_max_s"])) == (
        "3", "train_step_time", 3.1, 3.0, 3.2)
    assert r["source"] == src and float(r["eval_s"]) == pytest.approx(2.0015, abs=1e-3)
