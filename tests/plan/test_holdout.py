"""Leave-one-group-out validation (plan/holdout.py): each fold is refitted without its group and
its numbers are its rows' predictions. The refit is stubbed here (the real one takes minutes; the
fit itself is tested in test_validate.py): the stubs record what each fold's fit and band read."""

import json
from dataclasses import replace

import pytest

from trainperf.config import ConfigError
from trainperf.plan import fitting
from trainperf.plan.calibration import load_calibration
from trainperf.plan.holdout import GROUPINGS, holdout
from trainperf.plan.results import load_results
from trainperf.plan.validate import Predictor


@pytest.fixture
def recorded(monkeypatch):
    """fit_spread and measure_band replaced by stubs that record the rows they were given and
    return the shipped calibration, its efficiency scaled by the number of rows fitted on (so a
    fold's predictions show which refit made them)."""
    seen = {"fit": [], "band": []}
    shipped = load_calibration()

    def fit_spread(results, log=None):
        seen["fit"].append(results)
        fit = [r for r in results if r.fit]
        if not fit:
            raise ConfigError("calibrate: no fit rows")
        scale = 1 + len(fit) / 1000
        return replace(shipped, gemm_eff={k: v * scale for k, v in shipped.gemm_eff.items()}, fit_rows=len(fit))

    def measure_band(cal, results, half="calibration"):
        seen["band"].append(results)
        return cal

    monkeypatch.setattr(fitting, "fit_spread", fit_spread)
    monkeypatch.setattr(fitting, "measure_band", measure_band)
    return seen


def _rows(bench: str) -> list:
    return [r for r in load_results() if r.benchmark == bench]


def test_a_fold_never_sees_its_own_rows(recorded):
    rows = _rows("gpt3")
    h = holdout("round", rows)
    assert [f.group for f in h.folds] == sorted({r.round for r in rows}, key=lambda x: tuple(map(int, x.split("."))))
    # every fold's band read the rest; fits are shared only between folds that leave out the same fit rows
    assert len(recorded["band"]) == len(h.folds)
    for f, band_read in zip(h.folds, recorded["band"]):
        mine = {r.result for r in f.rows}
        assert mine and not mine & set(band_read), f.group
        assert set(band_read) == set(rows) - mine
    for fit_read in recorded["fit"]:
        assert any(not {r.result for r in f.rows} & set(fit_read) for f in h.folds)
    assert sum(len(f.rows) for f in h.folds) == len(rows)  # each row in exactly one fold


def test_the_numbers_are_the_folds_predictions(recorded):
    rows = _rows("gpt3")
    h = holdout("round", rows)
    d = h.to_dict()
    for f, g in zip(h.folds, d["groups"]):
        pred = [r for r in f.rows if r.prediction is not None]
        assert pred and g["rows"] == len(pred)
        for r in pred:  # the refit without this group made the prediction
            again = Predictor(f.calibration).predict(r.result)
            assert again.prediction.minutes == r.prediction.minutes
            assert f.calibration.fit_rows == sum(1 for x in rows if x.fit and x.round != f.group)
        errs = [abs(r.prediction.minutes / r.result.minutes - 1) for r in pred]
        assert g["mape"] == pytest.approx(100 * sum(errs) / len(errs), abs=0.006)
        inside = sum(r.prediction.minutes_p10 <= r.result.minutes <= r.prediction.minutes_p90 for r in pred)
        assert g["coverage_80_pct"] == pytest.approx(100 * inside / len(pred), abs=0.06)
    assert d["overall"]["all"]["rows"] == sum(g["rows"] for g in d["groups"])
    assert [len(g["predictions"]) for g in d["groups"]] == [g["rows"] + g["skipped"] for g in d["groups"]]


def test_a_fold_with_no_fit_rows_left_says_so(recorded):
    """Leaving NVIDIA out leaves the fit nothing to read: its rows are reported, not predicted."""
    rows = _rows("gpt3")
    h = holdout("submitter", rows)
    nv = next(f for f in h.folds if f.group == "nvidia")
    assert nv.calibration is None and "no fit rows" in nv.reason and not nv.predicted
    others = [f for f in h.folds if f.group != "nvidia"]
    assert others and all(f.calibration is not None for f in others)
    assert len(recorded["fit"]) == 2  # one fit for every fold that keeps all of NVIDIA's rows, one failed
    # Intel's Gaudi rows have no catalog GPU: no group, no refit for nothing
    assert any(r.submitter == "Intel-HabanaLabs" for r in rows)
    assert "intel-habanalabs" not in {f.group for f in h.folds}


def test_groupings_and_a_bad_one():
    r = next(x for x in load_results() if x.accelerator.endswith("(GB300)"))
    assert GROUPINGS["generation"](r) == "blackwell_ultra"
    assert GROUPINGS["submitter"](replace(r, submitter="Azure+NVIDIA")) == "azure"
    with pytest.raises(ConfigError, match="--holdout"):
        holdout("vendor", [])


def test_the_command_refuses_a_bad_grouping_and_options_it_ignores(capsys):
    """Bad input is exit 2 with one line, before any refit."""
    from trainperf.cli.main import main

    assert main(["plan", "validate", "--holdout", "vendor"]) == 2
    assert "--holdout: one of round, generation" in capsys.readouterr().err
    assert main(["plan", "validate", "--holdout", "round", "--benchmark", "gpt3"]) == 2
    assert "no --calibrate or --benchmark" in capsys.readouterr().err


def test_the_command_renders_the_folds(recorded, monkeypatch, capsys):
    from trainperf.cli.main import main
    from trainperf.plan import holdout as mod

    gpt3 = _rows("gpt3")
    monkeypatch.setattr(mod, "load_results", lambda: gpt3)
    assert main(["plan", "validate", "--holdout", "round", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["holdout"] == "round" and [g["group"] for g in d["groups"]] == ["3.0", "3.1", "4.0", "4.1"]
    assert main(["plan", "validate", "--holdout", "round"]) == 0
    out = capsys.readouterr().out
    assert "leave one round out" in out and "overall, others" in out
