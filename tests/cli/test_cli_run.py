"""End to end through the console entry point, the way a user runs it."""

import json
import os
import subprocess
import sys

from trainperf.mlperf.check import check_log
from trainperf.mlperf.logger import RULES_DIR

SMALL = ["--set", "data.synthetic=true", "--set", "parallel.compile=false", "--set", "data.tokenizer=byte", "--set", "data.eval_bytes=4096",
         "--set", "model.n_layer=2", "--set", "model.d_model=64", "--set", "model.seq_len=32",
         "--set", "train.global_batch_size=8", "--set", "train.micro_batch_size=8",
         "--set", "train.precision=fp32", "--set", "eval.every_samples=64", "--set", "train.warmup_steps=2"]


def _run(*args, cwd, env_cache):
    env = {**os.environ, "TRAINPERF_CACHE": str(env_cache)}
    return subprocess.run([sys.executable, "-m", "trainperf", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_run_to_target_passes_official_checker(tmp_path):
    out = tmp_path / "run"
    p = _run("run", *SMALL, "--set", "eval.target=4.0", "--out", str(out), "--no-progress",
             cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    assert "time to train" in p.stdout and "MFU" in p.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success"
    # the run's own rules (target 4.0) pass the official checker ...
    res = check_log(out / "result_0.txt", "6.1.0", out / "compliance.yaml")
    assert res.passed, res.output
    # ... and against the benchmark's real target of 1.45 only the quality check fails
    res = check_log(out / "result_0.txt", "6.1.0", RULES_DIR / "tiny.yaml")
    assert not res.passed
    assert [e for e in res.errors if "eval_accuracy" not in e] == []
    log = (out / "result_0.txt").read_text()
    assert '"corpus_fingerprint"' in log and '"status": "success"' in log


def test_bad_override_is_one_line_exit_2(tmp_path):
    p = _run("run", "--set", "model.n_head=3", cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "model.n_head" in p.stderr
    assert "Traceback" not in p.stderr


def test_unreadable_corpus_is_one_line_exit_1(tmp_path):
    p = _run("run", "--set", f"data.corpus={tmp_path / 'nope'}", cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 1 and "Traceback" not in p.stderr and "nope" in p.stderr


def test_data_prepare_then_train_on_it(tmp_path):
    (tmp_path / "c").mkdir()
    for i in range(60):
        (tmp_path / "c" / f"f{i}.txt").write_text(f"line {i} of a small corpus\n" * 40)
    p = _run("data", "prepare", str(tmp_path / "c"), "--out", str(tmp_path / "ds"), "--tokenizer", "byte",
             cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    p = _run("run", *SMALL[2:], "--set", f"data.corpus={tmp_path / 'ds'}", "--max-steps", "4",
             "--out", str(tmp_path / "r"), "--no-progress", cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 3, p.stderr  # aborted: the step budget ended before the target
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "aborted"


def test_data_prepare_samples_with_a_validation_file_then_train(tmp_path):
    rows = [json.dumps({"input": f"document {i} " * 4, "output": f"summary {i}"}) for i in range(40)]
    (tmp_path / "train.jsonl").write_text("\n".join(rows[:32]) + "\n")
    (tmp_path / "val.jsonl").write_text("\n".join(rows[32:]) + "\n")
    args = ["data", "prepare", str(tmp_path / "train.jsonl"), "--val", str(tmp_path / "val.jsonl"),
            "--kind", "samples", "--tokenizer", "byte", "--out", str(tmp_path / "ds")]
    p = _run(*args, cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 2 and "--seq-len" in p.stderr  # a row length is needed
    p = _run(*args, "--seq-len", "32", cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    assert "32 train / 8 val samples of 32 tokens" in p.stdout and "validation from the file" in p.stdout
    run = ["run", *SMALL[2:], "--set", f"data.corpus={tmp_path / 'ds'}", "--max-steps", "2", "--no-progress"]
    p = _run(*run, "--out", str(tmp_path / "r0"), cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 1 and "holds samples data, but data.kind is 'tokens'" in p.stderr
    p = _run(*run, "--set", "data.kind=samples", "--out", str(tmp_path / "r"), cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 3, p.stderr
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 2


def test_smoke_run_that_did_its_plan_exits_0(tmp_path):
    """A smoke run stops short of the target by design: exit 0 when it made its planned evaluations
    and its log is sound; 3 when --max-steps cut it short, or its log is not sound."""
    out = tmp_path / "smoke"
    p = _run("run", "tiny", "--smoke", "--out", str(out), "--no-progress", cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "aborted" and s["evals"] == 3
    p = _run("run", "tiny", "--smoke", "--max-steps", "1", "--out", str(tmp_path / "cut"), "--no-progress",
             cwd=tmp_path, env_cache=tmp_path / "cache")
    assert p.returncode == 3 and "--max-steps 1 stopped it before its planned" in p.stderr, p.stderr
    from trainperf.cli.score_cmd import smoke_incomplete
    from trainperf.config import load_recipe

    r = load_recipe("tiny", smoke=True)
    assert smoke_incomplete(r, 0, out) == ""
    log = out / "result_0.txt"
    log.write_text("".join(ln for ln in log.read_text().splitlines(keepends=True) if '"eval_accuracy"' not in ln))
    assert "0 eval_accuracy lines, the run made 3 logged evaluations" in smoke_incomplete(r, 0, out)
