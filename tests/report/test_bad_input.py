"""Bad input to `trainperf report` found by fuzzing: one line naming the file, exit 1 (2 for a flag that
does not apply), and no partial report left behind."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from trainperf.cli.main import main

PLAN = [{"gpu": "h100", "gpus": 8, "minutes": 10.0}, {"gpu": "h100", "gpus": 16, "minutes": 6.0}]


def _copy(run_dir: Path, dst: Path) -> Path:
    shutil.copytree(run_dir, dst)
    return dst


def _one_line(capsys, *names: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert all(n in err for n in names), err
    return err


def test_summary_value_that_is_not_a_number(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "time_to_train_s": "x"}))
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--no-check"]) == 1
    _one_line(capsys, str(run / "summary.json"), "'time_to_train_s' is 'x'")
    assert not (tmp_path / "rep").exists()


def test_metrics_that_are_not_utf8(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path / "run")
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b'{"kind": "x", "a": "\xff"}\n')
    n = len((run / "metrics.jsonl").read_bytes().splitlines())
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--no-check"]) == 1
    _one_line(capsys, f"{run / 'metrics.jsonl'}:{n}: not UTF-8")


def test_symlink_loop_result_log_is_a_failed_verdict(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path / "run")
    for log in run.glob("result_*.txt"):
        log.unlink()
        log.symlink_to(log.name)
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert "compliance fail" in capsys.readouterr().out


def test_empty_run_rules_fail_the_verdict(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path / "run")
    (run / "compliance.yaml").write_text("\n")
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "compliance fail" in out and "not the compliance rules trainperf writes" in out


@pytest.mark.parametrize("data,why", [(bytes(range(256)) * 4, "not UTF-8 text"),
                                      (b"a,b\n1,2\n", "no column benchmark, accelerator, minutes")],
                         ids=["random-bytes", "wrong-columns"])
def test_published_csv_that_is_not_one(tmp_path, capsys, data, why):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    csv = tmp_path / "pub.csv"
    csv.write_bytes(data)
    assert main(["report", "--plan", str(plan), "--published", str(csv), "--out", str(tmp_path / "rep")]) == 1
    _one_line(capsys, str(csv), why)
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("flags,why", [(["--benchmark", "foo"], "--benchmark"), (["--published", "x.csv"], "--published")])
def test_plan_flags_without_a_plan_are_refused(run_dir, tmp_path, capsys, flags, why):
    assert main(["report", str(run_dir), "--no-check", "--out", str(tmp_path / "rep"), *flags]) == 2
    _one_line(capsys, why, "no --plan given")
    assert not (tmp_path / "rep").exists()


def test_benchmark_that_contradicts_the_plan_is_refused(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"benchmark": "gpt3_175b", "sweep": PLAN}))
    assert main(["report", "--plan", str(plan), "--benchmark", "llama31_8b", "--out", str(tmp_path / "rep")]) == 2
    _one_line(capsys, "--benchmark llama31_8b", "gpt3_175b")


def test_full_disk_leaves_no_partial_report(run_dir, tmp_path, capsys, monkeypatch):
    real_open = open
    writes = []

    def full_on_second(file, mode="r", *a, **kw):  # the disk fills up while the second PNG is written
        if "x" in mode and "b" in mode:
            writes.append(file)
            if len(writes) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr("builtins.open", full_on_second)
    out = tmp_path / "rep"
    assert main(["report", str(run_dir), "--out", str(out), "--no-check"]) == 1
    _one_line(capsys, "no space left", str(out / "lr.png"))
    assert not out.exists()  # it made the folder, and nothing of it is left
    out.mkdir()  # an earlier report's folder: what is there stays, nothing is added
    (out / ".trainperf").write_text('{"kind": "report"}')
    (out / "notes.txt").write_text("mine")
    writes.clear()
    assert main(["report", str(run_dir), "--out", str(out), "--no-check"]) == 1
    _one_line(capsys, "no space left", str(out / "lr.png"))
    assert sorted(p.name for p in out.iterdir()) == [".trainperf", "notes.txt"]
