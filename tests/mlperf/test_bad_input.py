"""Bad input to score and package found by fuzzing: each is refused in one line naming the file."""

import json
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.mlperf.logger import render_rules
from trainperf.mlperf.score import MAX_MLLOG_LINE, RulesError, ScoreError, checker_rules, find_results, read_log


def _line(key, value, t, **meta):
    rec = {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key, "value": value,
           "metadata": {"file": "x.py", "lineno": 1, **meta}}
    return ":::MLLOG " + json.dumps(rec)


def _tiny_log(folder: Path, accuracy: float = 7.0, extra: str = "") -> Path:
    """A short `tiny` result log whose eval_accuracy misses the 1.45 target by far."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [_line("submission_benchmark", "tiny", 1), _line("seed", 0, 2), _line("run_start", None, 3),
             _line("eval_accuracy", accuracy, 4, samples_count=8), extra,
             _line("run_stop", None, 5, status="success")]
    log = folder / "result_0.txt"
    log.write_text("\n".join(ln for ln in lines if ln) + "\n")
    return log


@pytest.mark.parametrize("text", ["\n", "", "- KEY:\n    NAME: seed\n", None])
def test_a_run_rules_file_that_is_not_trainperfs_is_refused(tmp_path, capsys, text):
    run = tmp_path / "run"
    _tiny_log(run)
    rules = run / "compliance.yaml"
    render_rules("tiny", 1.45, rules)
    if text is None:  # trainperf's rules, one rule loosened
        rules.write_text(rules.read_text().replace("REQ:   EXACTLY_ONE", "REQ:   AT_LEAST_ONE", 1))
    else:
        rules.write_text(text)
    with pytest.raises(RulesError, match="not the compliance rules trainperf writes for tiny"):
        checker_rules("tiny", run)
    assert main(["score", str(run)]) == 1
    cap = capsys.readouterr()
    assert "pass" not in cap.out and f"{rules}: not the compliance rules" in cap.err


def test_run_rules_are_accepted_only_with_the_runs_own_target(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    render_rules("tiny", 2.5, run / "compliance.yaml")
    assert checker_rules("tiny", run) == ("6.1.0", run / "compliance.yaml")
    (run / "config.json").write_text(json.dumps({"recipe": {"eval": {"target": 1.45}}}))
    with pytest.raises(RulesError, match="quality target 2.5, but the run's config.json says 1.45"):
        checker_rules("tiny", run)


def test_a_symlink_loop_is_one_line(tmp_path, capsys):
    (tmp_path / "result_0.txt").symlink_to("result_0.txt")
    with pytest.raises(ScoreError, match="result_0.txt: cannot be read \\(a symlink loop\\)"):
        find_results([tmp_path])
    assert main(["score", str(tmp_path)]) == 1
    assert "symlink loop" in capsys.readouterr().err


def test_a_huge_mllog_line_is_refused_before_the_checker(tmp_path, capsys):
    huge = _line("x", "a" * (MAX_MLLOG_LINE + 1), 4)
    log = _tiny_log(tmp_path / "run", extra=huge)
    with pytest.raises(ScoreError, match=f"{log}:5: a :::MLLOG line of"):
        read_log(log)
    assert main(["score", str(tmp_path / "run")]) == 1
    assert f"{log}:5:" in capsys.readouterr().err
    # a long line that is not an MLLOG line is none of the checker's business (a program's stdout)
    log.write_text("x" * (MAX_MLLOG_LINE * 4) + "\n" + log.read_text().replace(huge + "\n", ""))
    assert read_log(log).benchmark == "tiny"


def test_package_names_the_log_without_a_benchmark(tmp_path, capsys):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "result_0.txt").write_text("garbage\n")
    assert main(["package", str(tmp_path / "g"), "--system", "s", "--out", str(tmp_path / "pkg")]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'g' / 'result_0.txt'}: no submission_benchmark line" in err and "None" not in err
    assert not (tmp_path / "pkg").exists()


def test_package_out_names_what_the_folder_is(tmp_path, capsys):
    _tiny_log(tmp_path / "run")
    (tmp_path / "run" / ".trainperf").write_text('{"kind": "run"}')
    args = ["package", str(tmp_path / "run"), "--system", "s", "--out"]
    assert main(args + [str(tmp_path / "run")]) == 1
    assert "it is trainperf's run folder, not a package folder" in capsys.readouterr().err
    assert main(args + [str(tmp_path / "pkg")]) == 0
    capsys.readouterr()
    assert main(args + [str(tmp_path / "pkg")]) == 1
    err = capsys.readouterr().err
    assert "holds a submission tree (an earlier `trainperf package`)" in err and "did not make it" not in err
    (tmp_path / "empty").mkdir()
    assert main(args + [str(tmp_path / "empty")]) == 0
