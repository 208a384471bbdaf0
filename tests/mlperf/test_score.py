"""The official checker's verdict on broken logs, the scoring rule, RCPs, and bad input to score/package."""

import json
import shutil
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.mlperf.check import check_log
from trainperf.mlperf.score import (ScoreError, find_results, olympic_score, rcp_check, read_log,
                                    score_dirs)


def _edit(src, dst, fn):
    """A copy of a result log with its MLLOG lines changed by fn(list of lines)."""
    dst.mkdir(parents=True, exist_ok=True)
    lines = src.read_text().splitlines()
    (dst / "result_0.txt").write_text("\n".join(fn(lines)) + "\n")
    return dst / "result_0.txt"


def _drop(key):
    return lambda lines: [l for l in lines if f'"key": "{key}"' not in l]


def _set(key, old, new):
    return lambda lines: [l.replace(f'"value": {old},', f'"value": {new},') if f'"key": "{key}"' in l else l
                          for l in lines]


def _stop_first(lines):
    stop = next(i for i, l in enumerate(lines) if '"key": "run_stop"' in l)
    start = next(i for i, l in enumerate(lines) if '"key": "run_start"' in l)
    return lines[:start] + [lines[stop]] + lines[start:stop] + lines[stop + 1:]


@pytest.mark.parametrize("fault,edit,reason", [
    ("missing", _drop("opt_gradient_clip_norm"), "Required EXACTLY_ONE occurrence of 'opt_gradient_clip_norm' but found 0"),
    ("wrong", _set("lora_rank", 16, 8), "CHECK for 'lora_rank' failed"),
    ("order", _stop_first, "CHECK for 'run_stop' failed"),
])
def test_broken_log_fails_and_score_says_why(lora_smoke, tmp_path, capsys, fault, edit, reason):
    log = _edit(lora_smoke / "result_0.txt", tmp_path / fault, edit)
    res = check_log(log, "6.1.0")
    assert not res.passed and any(e.startswith(reason) for e in res.errors), res.output
    assert main(["score", str(tmp_path / fault)]) == 1
    out = capsys.readouterr().out
    assert reason in out and "score: none" in out


def test_truncated_log_is_reported(lora_smoke, tmp_path, capsys):
    def cut(lines):
        return lines[:next(i for i, l in enumerate(lines) if '"key": "eval_accuracy"' in l) + 1]

    log = _edit(lora_smoke / "result_0.txt", tmp_path / "cut", cut)
    run = read_log(log)
    assert run.status is None and "truncated" in run.problem
    assert main(["score", "--json", str(tmp_path / "cut")]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["runs"][0]["problem"].startswith("truncated")
    assert any("'run_stop' but found 0" in e for e in rep["runs"][0]["checker_errors"])


def test_olympic_score_rule():
    ten = [97, 98, 99, 100, 100, 100, 101, 102, 103, 105]
    s = olympic_score(list(ten), 0, 10)
    assert s.valid and s.minutes == pytest.approx(sum(sorted(ten)[1:-1]) / 8)
    one_failed = olympic_score([97, 98, 100, 100, 100, 101, 102, 103, 105], 1, 10)
    assert one_failed.valid and one_failed.minutes == pytest.approx((98 + 100 + 100 + 100 + 101 + 102 + 103 + 105) / 8)
    assert olympic_score([240, 260, 250], 0, 3).minutes == 250  # 3 runs: the median
    assert olympic_score([240, 260], 1, 3).minutes == 260  # one failed: the slower good run
    assert "at most 1" in olympic_score([1.0] * 8, 2, 10).message
    assert not olympic_score([1.0] * 8, 2, 10).valid
    assert "needs 10" in olympic_score([1.0] * 9, 0, 10).message
    assert "exactly 3" in olympic_score([1.0] * 4, 0, 3).message


def _rule(scores, failed):
    """MLPerf's scoring rule written out: sort, drop the fastest, and drop the slowest unless a failed
    run (which counts as slowest) is the one dropped; the mean of the rest."""
    kept = sorted(scores)[1:len(scores) - (1 - failed)]
    return sum(kept) / len(kept) if kept else None


def test_package_olympic_average_is_the_rule():
    """trainperf scores with mlperf-logging's private `_compute_olympic_average`; pyproject.toml pins
    the range it was tested with. A release that moves, renames or changes it fails here."""
    from importlib.metadata import version

    from trainperf.mlperf.score import TESTED_MLPERF_LOGGING, olympic_average

    where = (f"mlperf-logging {version('mlperf-logging')}: result_summarizer._compute_olympic_average "
             f"(tested {TESTED_MLPERF_LOGGING}, see pyproject.toml)")
    try:
        fn = olympic_average()
    except ScoreError as e:
        pytest.fail(f"{where} is gone: {e}")
    cases = [([5.0, 1.0, 2.0, 3.0, 100.0], 0), ([97, 98, 100, 100, 100, 101, 102, 103, 105], 1),
             ([240, 260, 250], 0), ([240, 260], 1), ([7.5] * 10, 0), ([1.0, 2.0], 0)]
    for scores, failed in cases:
        got, want = fn(list(scores), failed, 1), _rule(scores, failed)
        assert got == (pytest.approx(want) if want is not None else None), \
            f"{where} no longer follows the rule: {scores}, {failed} failed -> {got}, the rule gives {want}"
    assert _rule([5.0, 1.0, 2.0, 3.0, 100.0], 0) == pytest.approx(10 / 3)  # the rule itself, by hand
    assert _rule([1.0, 2.0], 0) is None
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"mlperf-logging{TESTED_MLPERF_LOGGING}"' in pyproject, "pyproject.toml and score.py name other ranges"


def _mllog(path, recs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME",
                                                      "key": k, "value": v, "metadata": m}) + "\n"
                            for t, k, v, m in recs))


def _tiny_attempt(path, seed, start_ms, stop_ms, status="success", restarts=None):
    recs = [(start_ms - 500, "submission_benchmark", "tiny", {}), (start_ms - 400, "seed", seed, {})]
    if restarts is not None:
        recs.append((start_ms - 300, "restarts", restarts, {}))
    recs += [(start_ms, "run_start", None, {}), (stop_ms, "run_stop", None, {"status": status})]
    _mllog(path, recs)


def test_restarted_run_is_marked_and_not_counted(tmp_path, monkeypatch, capsys):
    """Five tiny runs, one restarted once: its log times the last attempt (1 min), the whole wall
    clock from the first attempt's run_start is 9 min. (The checker is replaced by a pass: these
    logs are hand-written and carry only the keys scoring reads; the checker has its own tests.)"""
    import trainperf.mlperf.score as score_mod
    from trainperf.mlperf.check import CheckResult

    monkeypatch.setattr(score_mod, "check_log", lambda *a, **k: CheckResult(True, [], ""))
    minute = 60_000
    for seed, minutes in enumerate([2.0, 3.0, 4.0, 5.0]):
        _tiny_attempt(tmp_path / f"r{seed}" / f"result_{seed}.txt", seed, 10 * minute, (10 + minutes) * minute)
    re = tmp_path / "r4"
    _tiny_attempt(re / "attempts" / "1" / "result_4.txt", 4, 10 * minute, 16 * minute, status="aborted")
    (re / "attempts" / "1" / "attempt.json").write_text(json.dumps({"reached_step": 7, "resumed_from_step": 4}))
    _tiny_attempt(re / "result_4.txt", 4, 18 * minute, 19 * minute, restarts=1)
    dirs = [tmp_path / f"r{i}" for i in range(5)]

    rep = score_dirs(dirs)
    (r4,) = [r for r in rep.runs if r.seed == 4]
    assert (r4.restarts, r4.minutes, r4.wall_minutes, r4.ok) == (1, 1.0, 9.0, False)
    assert "restarted 1x" in r4.problem and "whole wall clock" in r4.problem and "--count-restarts" in r4.problem
    # it counts as failed (not at its 1-minute last attempt): fastest dropped, the rest kept
    assert rep.score.valid and rep.score.failed == 1 and rep.score.minutes == pytest.approx((3 + 4 + 5) / 3)
    assert not rep.ok
    counted = score_dirs(dirs, count_restarts=True)
    assert counted.ok and counted.score.minutes == pytest.approx((3 + 4 + 5) / 3)  # 9 min: the slowest, dropped
    assert [r.score_minutes for r in counted.runs if r.seed == 4] == [9.0]

    assert main(["score", *map(str, dirs)]) == 1
    out = capsys.readouterr().out
    assert "success*" in out and "restarted 1x" in out and "9.0000 min" in out
    assert main(["score", "--json", "--count-restarts", *map(str, dirs)]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["runs"] if r["seed"] == 4)
    assert (row["restarts"], row["wall_clock_minutes"], row["scored_minutes"], row["counted"]) == (1, 9.0, 9.0, True)


def test_restart_is_seen_from_the_summary_or_the_log_alone(tmp_path):
    """Logs copied without attempts/: the summary's or the log's `restarts` still marks the run, and
    with no earlier log there is no whole wall clock to score it at."""
    from trainperf.mlperf.score import restart_info

    _tiny_attempt(tmp_path / "a" / "result_0.txt", 0, 0, 60_000, restarts=2)
    _tiny_attempt(tmp_path / "b" / "result_0.txt", 0, 0, 60_000)
    (tmp_path / "b" / "summary.json").write_text(json.dumps({"restarts": 1}))
    _tiny_attempt(tmp_path / "c" / "result_0.txt", 0, 0, 60_000)
    (tmp_path / "c" / "summary.json").write_text(json.dumps({"restarts": 0}))
    assert restart_info(read_log(tmp_path / "a" / "result_0.txt")) == (2, None)
    assert restart_info(read_log(tmp_path / "b" / "result_0.txt")) == (1, None)
    assert restart_info(read_log(tmp_path / "c" / "result_0.txt")) == (0, None)
    r = read_log(tmp_path / "a" / "result_0.txt")
    r.restarts, r.wall_minutes, r.count_restarts = 2, None, True
    assert r.score_minutes is None and "missing" in r.problem
    _mllog(tmp_path / "d" / "result_0.txt", [(0, "submission_benchmark", "tiny", {}), (1, "restarts", 1, {}),
                                             (2, "run_start", None, {})])
    cut = read_log(tmp_path / "d" / "result_0.txt")
    cut.restarts = 1
    assert "truncated" in cut.problem and "(no run_start / run_stop)" in cut.restart_note


def _rcp_log(path, samples, gbs=32, status="success"):
    recs = [("submission_benchmark", "llama31_8b", {}), ("global_batch_size", gbs, {}), ("run_start", None, {}),
            ("eval_accuracy", 3.29, {"samples_count": samples}), ("run_stop", None, {"status": status})]
    path.write_text("".join(":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1000 * i, "event_type": "POINT_IN_TIME",
                                                      "key": k, "value": v, "metadata": m}) + "\n"
                            for i, (k, v, m) in enumerate(recs)))
    return read_log(path)


def test_rcp_check_with_the_package(tmp_path):
    # llama31_8b at GBS 32: RCP olympic mean 178,859 samples; 172,032 (14 evals) is too fast
    runs = [_rcp_log(tmp_path / f"ok{i}.txt", s) for i, s in enumerate([172032] + [184320] * 8 + [196608])]
    ok = rcp_check(runs, "llama31_8b", "6.1.0")
    assert ok.ran and ok.passed and ok.numbers["submission_mean"] == 184320
    assert ok.numbers["rcp_mean"] == pytest.approx(178858.67, abs=1)
    fast = [_rcp_log(tmp_path / f"fast{i}.txt", 172032) for i in range(10)]
    bad = rcp_check(fast, "llama31_8b", "6.1.0")
    assert bad.ran and bad.passed is False and "RCP found" in bad.message
    assert not rcp_check(runs, "tiny", "6.1.0").ran


def test_score_input_errors(lora_smoke, gpt3_smoke, tmp_path):
    with pytest.raises(ScoreError, match="no result_"):
        find_results([tmp_path])
    with pytest.raises(ScoreError, match="different benchmarks"):
        score_dirs([lora_smoke, gpt3_smoke])
    shutil.copytree(lora_smoke, tmp_path / "again", ignore=shutil.ignore_patterns("init_checkpoint"))
    with pytest.raises(ScoreError, match="seed 0 appears in"):
        score_dirs([lora_smoke, tmp_path / "again"])
    assert main(["score", str(tmp_path / "empty-does-not-exist")]) == 1


def test_package_tree_and_no_overwrite(lora_smoke, tmp_path, capsys):
    out = tmp_path / "sub"
    assert main(["package", str(lora_smoke), "--system", "box1", "--out", str(out), "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert (out / "results" / "box1" / "llama2_70b_lora" / "result_0.txt").is_file()
    desc = json.loads((out / "systems" / "box1.json").read_text())
    assert desc["framework"].startswith("PyTorch ") and desc["host_processor_core_count"]
    assert "cooling" in res["to_fill"]
    # the package checker ran and says why it fails: one run, where the benchmark needs 10
    assert res["checker_ran"] and res["checker_passed"] is False
    assert any("expected 10" in e or "Incorrect number of files" in e for e in res["checker_errors"]), res
    before = (out / "systems" / "box1.json").read_text()
    assert main(["package", str(lora_smoke), "--system", "box1", "--out", str(out)]) == 1
    assert (out / "systems" / "box1.json").read_text() == before


def test_mllog_can_reopen_the_same_path_in_one_process(tmp_path):
    # a resumed attempt in the same process writes result_<seed>.txt again after the old one moved
    from trainperf.mlperf.logger import MLPerfLog

    p = tmp_path / "result_0.txt"
    first = MLPerfLog(p)
    first.event("seed", 1)
    first.close()
    p.rename(tmp_path / "old.txt")
    second = MLPerfLog(p)
    second.event("seed", 2)
    second.close()
    assert '"value": 2' in p.read_text() and '"value": 1' not in p.read_text()


def _record(msg, *args, module="rcp_checker"):
    """A log record as the package's rcp_checker makes it (`logging.info(msg, *args)` in its module)."""
    import logging

    return logging.LogRecord("root", logging.INFO, f"/site-packages/mlperf_logging/rcp_checker/{module}.py", 1,
                             msg, args, None)


def test_rcp_numbers_from_each_message_the_package_logs():
    from trainperf.mlperf.score import rcp_numbers

    record = {"Benchmark": "llama31_8b", "BS": 32, "RCP Mean": 178858.0, "Max Speedup": 1.03, "Min Epochs": 1.0}
    plain = [_record(" RCP Record: %s", record), _record(" Submission mean epochs: %.4f", 184320.123456)]
    got = rcp_numbers(plain)
    assert got["submission_mean"] == 184320.123456  # the argument, not the message's 4 decimals
    assert (got["rcp_mean"], got["rcp_min_mean"]) == (178858.0, pytest.approx(178858.0 / 1.03))
    # a normalizing set: the sentence after it names the mean too, without a colon (it crashed score)
    factor = _record(" Submission mean epochs faster than RCP mean but within max speedup range. Score should be "
                     "normalized by factor of 178858.0 / 176128.5 = 1.0155")
    normalized = [plain[0], _record(" Submission mean epochs: %.4f", 176128.5), factor]
    assert rcp_numbers(normalized)["submission_mean"] == 176128.5
    assert rcp_numbers([factor])["submission_mean"] == 176128.5
    # what cannot be read is unknown: other modules' records, odd forms, bad arguments, none at all
    odd = [_record(" Submission mean epochs: 1.0", module="elsewhere"), _record(" Submission mean epochs"),
           _record(" Submission mean epochs: %d %d", 1), _record(" Submission mean epochs: n/a"),
           _record(" RCP Record: %s", {"RCP Mean": "x", "Max Speedup": 0})]
    assert rcp_numbers(odd) == {"submission_mean": None, "rcp_mean": None, "rcp_min_mean": None}
    assert rcp_numbers([]) == {"submission_mean": None, "rcp_mean": None, "rcp_min_mean": None}


def test_rcp_check_of_a_set_the_package_normalizes(tmp_path):
    # 176,128 samples at GBS 32: faster than the RCP mean (178,859), above the lowest passing mean
    # (173,650), so the package scales the score and logs its sentence without a colon
    runs = [_rcp_log(tmp_path / f"n{i}.txt", 176128) for i in range(10)]
    res = rcp_check(runs, "llama31_8b", "6.1.0")
    assert res.passed and res.numbers["submission_mean"] == 176128
    assert res.numbers["normalization"] == pytest.approx(178858.67 / 176128, rel=1e-5)
    assert "unknown" not in res.message


def _gpt3_log(path, tokens, gbs=2048):
    recs = [("submission_benchmark", "gpt3", {}), ("global_batch_size", gbs, {}), ("run_start", None, {}),
            ("eval_accuracy", 2.69, {"epoch_num": tokens}), ("run_stop", None, {"status": "success"})]
    _mllog(path, [(1000 * i, k, v, m) for i, (k, v, m) in enumerate(recs)])


def test_ruleset_option_picks_the_rules_and_the_rcps(lora_smoke, tmp_path, capsys):
    # RCPs: gpt3 at GBS 2048 has 6 reference runs in 4.0.0 and 7 in 4.1.0 (the default)
    for i in range(3):
        _gpt3_log(tmp_path / "gpt3" / f"result_{i}.txt", 1_200_000_000)
    means = {}
    for extra in ([], ["--ruleset", "4.0.0"]):
        main(["score", "--json", str(tmp_path / "gpt3"), *extra])
        rep = json.loads(capsys.readouterr().out)
        means[rep["ruleset"]] = rep["rcp"]["numbers"]["rcp_mean"]
        assert rep["ruleset_source"] == "--ruleset" if extra else rep["ruleset_source"].startswith("default")
    assert means == {"4.1.0": pytest.approx(1177760563.2), "4.0.0": pytest.approx(1182793728.0)}

    # rules: a LoRA log without a key 6.1.0 added fails the default rules, with a hint, and not 4.1.0's
    key = "lowest_numerical_precision_in_linear"

    def older_log(lines):
        # a smoke run stops short of the target; its last eval is put on it, so that the key is the
        # only thing the checker finds wrong
        last = max(i for i, l in enumerate(lines) if '"key": "eval_accuracy"' in l)
        rec = json.loads(lines[last].split(":::MLLOG", 1)[1])
        lines[last] = ":::MLLOG " + json.dumps({**rec, "value": 0.92})
        return _drop(key)(lines)

    _edit(lora_smoke / "result_0.txt", tmp_path / "lora", older_log)
    default = score_dirs([tmp_path / "lora"])
    assert default.ruleset == "6.1.0" and "default" in default.ruleset_source
    assert default.runs[0].check.errors == [f"Required EXACTLY_ONE occurrence of '{key}' but found 0"]
    assert "--ruleset 4.0.0 / 4.1.0" in default.score.message and key in default.score.message
    older = score_dirs([tmp_path / "lora"], ruleset="4.1.0")
    assert older.ruleset == "4.1.0" and older.ruleset_source == "--ruleset"
    assert not any(key in e for e in older.runs[0].check.errors)
    assert main(["score", "--ruleset", "4.1.0", str(tmp_path / "lora")]) == 1  # one aborted smoke run
    assert "llama2_70b_lora (ruleset 4.1.0, --ruleset)" in capsys.readouterr().out


@pytest.mark.parametrize("asked", ["2.1.0", "5.0.0", "../../etc", "latest"])  # gpt3: 3.0.0 to 4.1.0
def test_bad_ruleset_is_one_line_exit_2(tmp_path, capsys, asked):
    for i in range(3):
        _gpt3_log(tmp_path / f"result_{i}.txt", 1_200_000_000)
    assert main(["score", "--ruleset", asked, str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"--ruleset {asked}" in err and "choices: 3.0.0, 3.1.0, 4.0.0, 4.1.0" in err
