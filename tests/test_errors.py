"""One error hierarchy: every expected failure is a TrainperfError carrying its exit code, defined in
errors.py, and the CLI turns any of them into one line and that code."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import trainperf
from trainperf import errors
from trainperf.cli import main as cli_main

SRC = Path(trainperf.__file__).parent


def _error_classes() -> list[type]:
    # Terminated is a signal's arrival, not an error: a BaseException like KeyboardInterrupt
    return [c for _, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, BaseException) and c.__module__ == errors.__name__ and c is not errors.Terminated]


def test_every_error_has_the_base_and_an_exit_code():
    classes = _error_classes()
    assert len(classes) >= 12
    for cls in classes:
        assert issubclass(cls, errors.TrainperfError), cls
        assert cls.exit_code in (errors.EXIT_FAIL, errors.EXIT_USAGE), cls
    assert errors.ConfigError.exit_code == errors.UsageError.exit_code == 2
    for cls in (errors.DataError, errors.TrainError, errors.CheckpointError, errors.WeightsError, errors.PlanError,
                errors.ScoreError, errors.RunDirError, errors.ExportError, errors.RunError):
        assert cls.exit_code == 1, cls


def test_no_exception_class_outside_errors_py():
    """A second home for errors is how two classes named CheckpointError came about."""
    outside = []
    for f in sorted(SRC.rglob("*.py")):
        mod = ".".join(f.relative_to(SRC.parent).with_suffix("").parts)
        if mod == "trainperf.errors":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b).split(".")[-1].endswith(("Error", "Exception", "Failure")) for b in node.bases):
                outside.append(f"{mod}.{node.name}")
    assert not outside, f"define these in trainperf/errors.py under TrainperfError: {outside}"


def test_errors_module_is_a_leaf():
    tree = ast.parse((SRC / "errors.py").read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(n) for n in imports] == ["from __future__ import annotations", "import errno"]


@pytest.mark.parametrize("cls", [errors.ConfigError, errors.UsageError, errors.DataError, errors.CheckpointError,
                                 errors.WeightsError, errors.TrainError, errors.PlanError, errors.RunError])
def test_cli_prints_one_line_and_exits_with_the_code(cls, monkeypatch, capsys):
    def handler(args):
        raise cls(f"{cls.__name__}: the message names the key")

    monkeypatch.setattr(cli_main, "cmd_recipes", handler)
    assert cli_main.main(["recipes"]) == cls.exit_code
    err = capsys.readouterr().err
    assert err == f"trainperf: error: {cls.__name__}: the message names the key\n"


def test_cli_keeps_the_traceback_of_a_bug_and_with_debug(monkeypatch):
    def bug(args):
        raise KeyError("not an expected failure")

    monkeypatch.setattr(cli_main, "cmd_recipes", bug)
    with pytest.raises(KeyError):
        cli_main.main(["recipes"])

    def expected(args):
        raise errors.DataError("x")

    monkeypatch.setattr(cli_main, "cmd_recipes", expected)
    with pytest.raises(errors.DataError):
        cli_main.main(["--debug", "recipes"])


def test_old_import_paths_name_the_same_classes():
    from trainperf.config import ConfigError
    from trainperf.data.corpus import DataError
    from trainperf.mlperf.score import ScoreError
    from trainperf.plan.api import PlanError as PlannerError
    from trainperf.report.scaling import PlanError as ReportPlanError

    assert ConfigError is errors.ConfigError and DataError is errors.DataError and ScoreError is errors.ScoreError
    assert PlannerError is ReportPlanError is errors.PlanError
    assert trainperf.errors is errors


def test_readme_has_one_exit_code_table_with_every_code():
    """The exit codes are documented once, in README.md's table, and it lists exactly errors.py's."""
    readme = (SRC.parent.parent / "README.md").read_text(encoding="utf-8")
    rows = [ln for ln in readme.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip().replace(" / ", "").isdigit()]
    codes = sorted(int(c) for ln in rows for c in ln.split("|")[1].split("/"))
    constants = sorted(v for k, v in vars(errors).items() if k.startswith("EXIT_"))
    assert codes == constants
