"""`trainperf report` on real run directories, and its one-line errors."""

import base64
import json
import re
import shutil
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.report.page import _fmt_time, build_report
from trainperf.report.rundir import RunDirError, load_run
from trainperf.report.scaling import canonical_kind, load_plan, load_published
from trainperf.report.verdict import Verdict, compliance, score_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _copy(run_dir: Path, dst: Path) -> Path:
    shutil.copytree(run_dir, dst)
    return dst


def test_report_page_is_self_contained(run_dir, tmp_path, capsys):
    second = _copy(run_dir, tmp_path / "run0b")
    out = tmp_path / "rep"
    assert main(["report", str(run_dir), str(second), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "compliance pass" in printed and "wrote" in printed
    page = (out / "index.html").read_text()
    for name in ("loss.png", "lr.png", "throughput.png", "breakdown.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC)
    # every image is inline, and nothing on the page needs the network
    srcs = re.findall(r'src="([^"]+)"', page)
    assert len(srcs) == 4 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert base64.b64decode(srcs[0].split(",", 1)[1]) == (out / "loss.png").read_bytes()
    assert "http://" not in page and "https://" not in page
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["benchmark"] in page and ">pass<" in page
    assert _fmt_time(summary["time_to_train_s"]) in page
    # two runs of five required: no score is made up
    assert "invalid: 2 runs, the benchmark needs 5" in page


def test_folder_of_runs_stands_for_its_runs(run_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    _copy(run_dir, runs / "a")
    _copy(run_dir, runs / "b")
    (runs / "notes").mkdir()
    assert main(["report", str(runs), "--out", str(tmp_path / "rep"), "--no-check"]) == 0
    out = capsys.readouterr().out
    assert str(runs / "a") in out and str(runs / "b") in out and "notes" not in out


def test_crossing_is_first_eval_at_target(run_dir):
    run = load_run(run_dir)
    hit = run.crossing()
    assert hit is not None and hit["eval_loss"] <= run.target
    assert all(r["eval_loss"] > run.target for r in run.evals if r["step"] < hit["step"])
    assert run.eval_tokens(hit) == hit["samples"] * 32


def test_existing_report_is_not_overwritten(run_dir, tmp_path, capsys):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.html").write_text("mine")
    assert main(["report", str(run_dir), "--out", str(out), "--no-check"]) == 1
    assert "index.html" in capsys.readouterr().err
    assert (out / "index.html").read_text() == "mine"


def test_dir_without_metrics_names_the_file(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "rep")]) == 1
    err = capsys.readouterr().err
    assert "metrics.jsonl" in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "rep").exists()


def test_half_written_run_is_refused(run_dir, tmp_path, capsys):
    half = _copy(run_dir, tmp_path / "half")
    (half / "summary.json").unlink()
    rows = (half / "metrics.jsonl").read_text().splitlines()
    (half / "metrics.jsonl").write_text("\n".join(r for r in rows if '"end"' not in r) + "\n")
    assert main(["report", str(half), "--out", str(tmp_path / "rep")]) == 1
    err = capsys.readouterr().err
    assert "summary.json" in err and "half-written" in err
    # a metrics file cut mid-line names the line
    (half / "metrics.jsonl").write_text("\n".join(rows[:2]) + "\n" + rows[2][:15])
    with pytest.raises(RunDirError, match=r"metrics.jsonl:3"):
        load_run(half)


def test_failed_compliance_shows_checker_reason(run_dir, tmp_path):
    bad = _copy(run_dir, tmp_path / "bad")
    log = bad / "result_0.txt"
    log.write_text("".join(ln for ln in log.read_text().splitlines(keepends=True)
                           if '"key": "global_batch_size"' not in ln))
    v = compliance(load_run(bad))
    assert v.status == "fail" and "result_0.txt" in v.detail and v.detail.split(": ", 1)[1]


def _fake(name, minutes, status="success", runs_per_result=5):
    from trainperf.report.rundir import RunData

    return RunData(path=Path(name), summary={"benchmark": "tiny", "status": status, "device": "cpu",
                                             "world_size": 1, "time_to_train_s": minutes * 60},
                   config={"recipe": {"benchmark": {"runs_per_result": runs_per_result}}})


def test_score_follows_mlperf_rules():
    ok = [Verdict("pass", "")] * 5
    runs = [_fake(f"r{i}", m) for i, m in enumerate([5.0, 1.0, 2.0, 3.0, 100.0])]
    (sc,) = score_runs(runs, ok)
    assert sc.minutes == pytest.approx(10 / 3) and sc.runs == 5 and sc.required == 5
    # one run that missed the target stands in for the slowest; two make the set invalid
    runs[4] = _fake("r4", 1.5, status="aborted")
    assert score_runs(runs, ok)[0].minutes == pytest.approx((2 + 3 + 5) / 3)
    runs[3] = _fake("r3", 1.5, status="aborted")
    assert score_runs(runs, ok)[0].minutes is None
    # a run the checker failed counts as failed too
    runs = [_fake(f"r{i}", m) for i, m in enumerate([5.0, 1.0, 2.0, 3.0, 4.0])]
    verdicts = [Verdict("fail", "x"), Verdict("fail", "y")] + ok[:3]
    assert score_runs(runs, verdicts)[0].minutes is None
    few = score_runs(runs[:2], ok[:2])[0]
    assert few.minutes is None and "2 runs" in few.note and "5" in few.note


def test_plan_formats_and_published_points(tmp_path):
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps([{"gpu": "h100", "gpus": 512, "minutes": 60.0},
                                {"gpu": "gb200", "gpus": 512, "minutes": 20.0}]))
    bench, pts = load_plan(flat)
    assert bench is None and {(p.gpu, p.gpus) for p in pts} == {("h100", 512), ("gb200", 512)}
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"benchmark": "gpt3_175b", "sweep": {"H100": [{"num_gpus": 512, "minutes": 55.0}]}}))
    assert load_plan(nested) == ("gpt3_175b", load_plan(nested)[1])
    assert load_plan(nested)[1][0].gpu == "h100"
    assert canonical_kind("NVIDIA Blackwell GPU (GB200)") == "gb200"
    assert canonical_kind("NVIDIA Blackwell GPU (B200-SXM-180GB)") == "b200"
    csv = tmp_path / "pub.csv"
    csv.write_text("version,benchmark,submitter,system,accelerator,num_accelerators,minutes,source\n"
                   "v4.0,gpt3,A,s1,NVIDIA H100-SXM5-80GB,512,50.0,x\n"
                   "v4.0,gpt3,B,s2,NVIDIA Blackwell GPU (GB200),512,18.0,x\n"
                   "v4.0,gpt3,C,s3,NVIDIA Blackwell GPU (B200-SXM-180GB),512,25.0,x\n"
                   "v4.0,llama31_8b,D,s4,NVIDIA H100-SXM5-80GB,8,100.0,x\n")
    pub = load_published("gpt3_175b", {"h100", "gb200"}, csv)
    assert sorted((p.gpu, p.minutes) for p in pub) == [("gb200", 18.0), ("h100", 50.0)]
    out = tmp_path / "rep"
    rep = build_report([], out, plans=[nested, flat], published=csv)
    assert [p.name for p in rep.images] == ["scaling.png", "scaling2.png"]
    page = (out / "index.html").read_text()
    assert "1 published MLPerf results from pub.csv" in page  # the plan names gpt3_175b; only h100 rows
    assert "no published results for these GPU kinds" in page  # the flat plan names no benchmark


def test_bad_plan_is_one_line(tmp_path, capsys):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"nothing": [1, 2]}))
    assert main(["report", "--plan", str(p), "--out", str(tmp_path / "rep")]) == 1
    assert "plan.json" in capsys.readouterr().err


def test_report_draws_real_plan_output(tmp_path, capsys):
    """What `trainperf plan sweep --json` and `trainperf plan --json --vs` print, as the report reads it."""
    pytest.importorskip("trainperf.plan.api")
    assert main(["plan", "sweep", "llama2_70b_lora", "--gpu", "h100,h200", "--gpus", "64,512", "--json"]) == 0
    sweep = tmp_path / "sweep.json"
    sweep.write_text(capsys.readouterr().out)
    bench, pts = load_plan(sweep)
    assert bench is None and {p.gpu for p in pts} == {"h100", "h200"} and {p.gpus for p in pts} >= {64, 512}
    assert main(["plan", "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--vs", "h100", "--json"]) == 0
    single = tmp_path / "single.json"
    single.write_text(capsys.readouterr().out)
    bench, pts = load_plan(single)
    assert bench == "llama2_70b_lora" and sorted((p.gpu, p.gpus) for p in pts) == [("h100", 512), ("h200", 512)]
    rep = build_report([], tmp_path / "rep", plans=[sweep, single], benchmarks=["llama2_70b_lora"])
    page = (tmp_path / "rep" / "index.html").read_text()
    # the package's published results sit beside both curves (the CSV has H100 and H200 rows for it)
    assert page.count("published MLPerf results from mlperf_results.csv (scaling") == 2 and len(rep.images) == 2


def test_deviations_and_restarts_are_shown(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path / "smoke")
    s = json.loads((run / "summary.json").read_text())
    s.update(deviations=["max_sequence_length 32 (closed rules: 8192)", "eval_samples 4 (closed: 1024)"],
             restarts=1)
    (run / "summary.json").write_text(json.dumps(s))
    build_report([run], tmp_path / "rep", check=False)
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "success (1 restart)" in page and "2 deviations from the rules" in page
    assert "max_sequence_length 32 (closed rules: 8192)" in page


def _shifted(log_text: str, ms: int) -> str:
    """A result log with every time_ms moved by `ms`."""
    return re.sub(r'"time_ms": (\d+(?:\.\d+)?)', lambda m: f'"time_ms": {float(m.group(1)) + ms}', log_text)


def _restarted(run_dir: Path, dst: Path) -> Path:
    """The fixture run as if it had restarted once: attempt 1 (set aside in attempts/1/ the way the
    checkpointer does) logged the first steps and stopped at step 4, 60 s before the final attempt
    started again from its step-2 checkpoint."""
    run = _copy(run_dir, dst)
    a1 = run / "attempts" / "1"
    a1.mkdir(parents=True)
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    early = [r for r in rows if r["kind"] == "start" or (r["kind"] in ("train", "eval") and r["step"] <= 4)]
    (a1 / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in early))
    (a1 / "result_0.txt").write_text(_shifted((run / "result_0.txt").read_text(), -60_000))
    (a1 / "attempt.json").write_text(json.dumps({"reached_step": 4, "resumed_from_step": 2, "lost_steps": 2}))
    s = json.loads((run / "summary.json").read_text())
    # as the trainer writes it: time to train from the first attempt's run_start, the last one's beside it
    s.update(restarts=1, resumed_from_step=2, last_attempt_s=s["time_to_train_s"], time_to_train_s=s["time_to_train_s"] + 60)
    (run / "summary.json").write_text(json.dumps(s))
    return run


def test_restarted_run_draws_every_attempt(run_dir, tmp_path):
    from trainperf.report import plots

    run = load_run(_restarted(run_dir, tmp_path / "re"))
    (a,) = run.attempts
    assert (a.number, a.started_from_step, a.reached_step, a.resumed_from_step) == (1, 0, 4, 2)
    assert a.train and max(r["step"] for r in a.train) == 4
    assert run.offsets() == pytest.approx([0.0, 60.0])  # from the two logs' run_start
    segs = plots.segments(run)
    assert [(s.label, s.final, s.resumed_from_step) for s in segs] == [("attempt 1", False, 0), ("attempt 2", True, 2)]
    assert segs[1].offset_s == pytest.approx(60.0)
    parts = plots.breakdown(run)
    assert parts["restarts"] == pytest.approx(60.0)  # the time before the last attempt, not "other"
    assert sum(v for k, v in parts.items() if k != "save") == pytest.approx(run.summary["time_to_train_s"])
    # without the attempt's result log, the attempt after it starts where the one before last logged
    (run.path / "attempts" / "1" / "result_0.txt").unlink()
    again = load_run(run.path)
    assert again.offsets()[1] == pytest.approx(max(r["elapsed_s"] for r in again.attempts[0].train + again.attempts[0].evals))
    rep = build_report([run.path, run_dir], tmp_path / "rep", check=False)
    assert [p.name for p in rep.images][:2] == ["loss.png", "lr.png"]
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "success (1 restart)" in page and "1 restarted run counted as failed" in page
    assert f"last attempt {_fmt_time(run.summary['last_attempt_s'])}" in page


def test_training_loss_is_put_in_the_metric_unit(run_dir):
    from trainperf.report import plots

    run = load_run(run_dir)
    assert plots.train_loss_scale(run) == pytest.approx(1.0)  # the byte tokenizer: a token is a byte
    run.evals = [{**r, "token_loss": 2 * r["nats_per_byte"]} for r in run.evals]  # 2 bytes per token
    assert plots.train_loss_scale(run) == pytest.approx(0.5)
    run.summary = {**run.summary, "metric": "log_perplexity"}
    assert plots.train_loss_scale(run) == 1.0
