"""The prediction interval: its parts, its JSON, and validate's coverage."""

import json
import math

import pytest

from trainperf.cli.main import main
from trainperf.plan import interval
from trainperf.plan.rcp import load_rcps, seed_spread


def test_seed_spread_is_the_median_of_the_rcp_points_spreads():
    pts = load_rcps("gpt3", "4.1.0")
    sds = sorted(p.rel_sd for p in pts)
    assert max(sds) > 1.0  # the one wild point (GBS 3072)
    assert seed_spread("gpt3", "4.1.0") < 0.05  # ... does not set the spread
    assert seed_spread("gpt3", "4.1.0") == pytest.approx((sds[2] + sds[3]) / 2)


def test_olympic_mean_keeps_less_variance_with_more_runs():
    assert interval.olympic_var_share(10) < interval.olympic_var_share(3) < 1.0
    assert interval.convergence_sd("llama2_70b_lora", "4.1.0", 10) == pytest.approx(
        seed_spread("llama2_70b_lora", "4.1.0") * math.sqrt(0.105))


def test_software_sd_removes_the_convergence_part_and_widens_for_parameters():
    res = [0.1, -0.1] * 10
    raw = math.sqrt(sum(r * r for r in res) / 20)
    assert interval.software_sd(res, [0.0] * 20, 0) == pytest.approx(raw)
    assert interval.software_sd(res, [0.0] * 20, 8) > raw
    assert interval.software_sd(res, [0.05] * 20, 0) == pytest.approx(math.sqrt(raw ** 2 - 0.05 ** 2))
    with pytest.raises(ValueError):
        interval.software_sd([0.1] * 5, [0.0] * 5, 8)


def test_plan_json_carries_the_band(capsys):
    assert main(["plan", "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["minutes_p10"] < d["minutes_p50"] == d["minutes"] < d["minutes_p90"]
    iv = d["interval"]
    assert iv["software_sd"] > 0 and iv["convergence_sd"] > 0
    assert math.log(d["minutes_p90"] / d["minutes"]) == pytest.approx(1.2816 * iv["sd_log"], rel=1e-3)
    # known convergence: no convergence spread left
    assert main(["plan", "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--samples", "7440", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert g["interval"]["convergence_sd"] == 0 and g["interval"]["sd_log"] < iv["sd_log"]


def test_validate_reports_coverage_per_benchmark(capsys):
    assert main(["plan", "validate", "--benchmark", "llama31_405b", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    h = d["summary"]["held_out"]
    assert 0 <= h["coverage_80_pct"] <= 100 and "mean_signed_pct" in h
    rows = [r for r in d["rows"] if r["predicted_minutes"] and r["split"] == "held_out"]
    inside = sum(r["predicted_p10"] <= r["actual_minutes"] <= r["predicted_p90"] for r in rows)
    assert h["coverage_80_pct"] == pytest.approx(100 * inside / len(rows), abs=0.1)
