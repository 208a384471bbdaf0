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


def test_config_sd_is_the_split_conformal_quantile_of_the_scores():
    # scores: the config spread each row needs to be inside the band; the ceil((n+1)*0.8)-th is taken
    res = [0.05 * i for i in range(1, 10)]  # 9 rows, k = 8
    sw, conv = 0.02, [0.01] * 9
    scores = sorted(interval.config_score(r, c, sw) for r, c in zip(res, conv))
    assert interval.config_sd(res, conv, sw) == scores[7]
    # the 8th row sits exactly on its band's edge with that spread, the 9th outside
    sd = interval.sd_log(sw, scores[7], 0.01)
    assert interval.Z80 * sd == pytest.approx(res[7]) and interval.Z80 * sd < res[8]
    # the residual's sign does not matter (the band is symmetric in log minutes)
    assert interval.config_score(-0.3, 0.01, sw) == interval.config_score(0.3, 0.01, sw)
    # a row well inside NVIDIA's band has a negative score: a band that much narrower still holds it
    neg = interval.config_score(0.02, 0.01, sw)
    assert neg < 0
    assert interval.Z80 * interval.sd_log(sw, neg, 0.01) == pytest.approx(0.02)
    # conformal needs (n+1)*0.8 <= n
    assert interval.config_sd([0.1] * 4, [0.0] * 4, 0.0) > 0
    with pytest.raises(ValueError):
        interval.config_sd([0.1] * 3, [0.0] * 3, 0.0)


def test_a_negative_config_spread_narrows_the_band_down_to_the_convergence_spread():
    sw, conv = 0.08, 0.02
    assert interval.sd_log(sw, 0.0, conv) == pytest.approx(math.hypot(sw, conv))
    assert interval.sd_log(sw, -0.05, conv) == pytest.approx(math.sqrt(sw ** 2 - 0.05 ** 2 + conv ** 2))
    assert interval.sd_log(sw, -0.05, conv) < interval.sd_log(sw, 0.0, conv) < interval.sd_log(sw, 0.05, conv)
    # the seed-to-seed spread of the score itself is never calibrated away
    assert interval.sd_log(sw, -0.2, conv) == pytest.approx(conv)
    # all rows far inside NVIDIA's band: the conformal quantile is negative, and its band still
    # holds the k-th row on its edge
    res, convs = [0.01 * i for i in range(1, 10)], [conv] * 9
    q = interval.config_sd(res, convs, sw)
    assert q < 0
    assert interval.Z80 * interval.sd_log(sw, q, conv) == pytest.approx(res[7])


def test_plan_json_carries_the_band(capsys):
    assert main(["plan", "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["minutes_p10"] < d["minutes_p50"] == d["minutes"] < d["minutes_p90"]
    iv = d["interval"]
    assert iv["software_sd"] > 0 and iv["convergence_sd"] > 0 and iv["config_sd"] > 0
    assert iv["sd_log"] == pytest.approx(math.sqrt(iv["software_sd"] ** 2 + iv["config_sd"] ** 2
                                                   + iv["convergence_sd"] ** 2), abs=2e-4)
    assert math.log(d["minutes_p90"] / d["minutes"]) == pytest.approx(1.2816 * iv["sd_log"], rel=1e-3)
    # known convergence: no convergence spread left
    assert main(["plan", "llama2_70b_lora", "--gpu", "h200", "--gpus", "512", "--samples", "7440", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert g["interval"]["convergence_sd"] == 0 and g["interval"]["sd_log"] < iv["sd_log"]


def test_validate_reports_coverage_on_the_evaluation_half(validate_405b_json):
    d = validate_405b_json
    s = d["summary"]
    assert "coverage_80_pct" not in s["held_out"] and "mean_signed_pct" in s["held_out"]
    held = [r for r in d["rows"] if r["predicted_minutes"] and r["split"] == "held_out"]
    assert {r["band_half"] for r in held} == {"calibration", "evaluation"}
    assert all(r["band_half"] is None for r in d["rows"] if r["split"] == "fit")
    for half, key in (("evaluation", "evaluation"), ("calibration", "band_calibration")):
        rows = [r for r in held if r["band_half"] == half]
        inside = sum(r["predicted_p10"] <= r["actual_minutes"] <= r["predicted_p90"] for r in rows)
        assert s[key]["rows"] == len(rows)
        assert s[key]["coverage_80_pct"] == pytest.approx(100 * inside / len(rows), abs=0.1)
    assert d["calibration"]["config_sd"] > 0 and "band-calibration half" in d["calibration"]["band_calibrated_on"]


def test_coverage_interval_is_the_exact_binomial_one():
    from trainperf.plan.interval import coverage_interval

    # closed forms at the edges: all inside -> ((1-conf)/2)^(1/n); none inside -> 1 - that
    assert coverage_interval(11, 11) == (pytest.approx(0.05 ** (1 / 11)), 1.0)
    assert coverage_interval(0, 5) == (0.0, pytest.approx(1 - 0.05 ** (1 / 5)))
    lo, hi = coverage_interval(8, 10)  # tabulated Clopper-Pearson 90%: 0.4931-0.9632
    assert (lo, hi) == (pytest.approx(0.4931, abs=1e-4), pytest.approx(0.9632, abs=1e-4))
    lo, hi = coverage_interval(106, 132)
    assert lo < 106 / 132 < hi and hi - lo < 0.15
    with pytest.raises(ValueError):
        coverage_interval(3, 2)
