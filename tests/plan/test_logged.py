"""`plan/logged.py`: the step and evaluation times published results' own logs record."""

import tomllib
from pathlib import Path

import pytest

from trainperf.config import ConfigError
from trainperf.plan.logged import LOGGED, load_logged, relative_error
from trainperf.plan.results import load_results

FIELDS = "round,benchmark,submitter,accelerator,gpus,global_batch_size,logs,method,step_s,step_min_s,step_max_s,eval_s,source"


def test_every_logged_row_belongs_to_a_results_row():
    logged = load_logged()
    results = {r.source: r for r in load_results()}
    assert len(logged) > 150
    assert set(logged) <= set(results)
    for src, lg in logged.items():
        assert lg.step_min_s <= lg.step_s <= lg.step_max_s, src


def test_logged_step_agrees_with_the_anchor_read_by_hand():
    """anchors.toml's Azure 512 x H200 LoRA step (64 / median throughput, read from the logs of
    another mirror) and the extractor's figure for the same folder are two readings of one thing."""
    anchors = tomllib.loads((Path(LOGGED).parent / "anchors.toml").read_text())["anchor"]
    azure = next(a for a in anchors if a["submitter"] == "Azure" and a["benchmark"] == "llama2_70b_lora")
    src = next(r.source for r in load_results() if r.submitter == "Azure" and r.benchmark == "llama2_70b_lora")
    assert load_logged()[src].step_s == pytest.approx(azure["logged_step_s"], rel=0.01)


def test_a_bad_row_is_named_by_file_and_line(tmp_path):
    p = tmp_path / "logged.csv"
    p.write_text(FIELDS + "\n5.1,gpt3,X,H100,8,8,3,train_step_time,1.0,1.2,1.3,,https://x\n")
    with pytest.raises(ConfigError, match=r"logged\.csv:2: bad logged-steps row"):
        load_logged(p)
    p.write_text(FIELDS + "\n5.1,gpt3,X,H100,8,8,3,guessed,1.0,0.9,1.1,,https://x\n")
    with pytest.raises(ConfigError, match="method 'guessed'"):
        load_logged(p)
    assert load_logged(tmp_path / "absent.csv") == {}


def test_relative_error_is_negative_when_the_model_is_faster():
    assert relative_error(0.9, 1.0) == pytest.approx(-0.1)
    assert relative_error(1.2, 1.0) == pytest.approx(0.2)


def test_rounds_count_two_a_year():
    from trainperf.plan.logged import round_index

    assert round_index("5.1") - round_index("4.0") == 3 and round_index("v6.0") - round_index("5.1") == 1


def test_same_configuration_pairs_measure_software_alone():
    from trainperf.plan.logged import same_config_pairs

    pairs = {(p.benchmark, p.gpu, p.gpus, p.before, p.after): p for p in same_config_pairs()}
    gpt3 = pairs[("gpt3", "h100", 512, "3.1", "4.1")]  # one round (4.0) between: two steps of the trend
    assert gpt3.shape == (4, 8, 1) and gpt3.gbs == 2048 and gpt3.precision == "fp8"
    assert gpt3.per_round == pytest.approx((gpt3.step_before_s / gpt3.step_after_s) ** 0.5)
    for p in same_config_pairs():
        assert p.before != p.after and 0.8 < p.per_round < 1.6, p


def test_software_trend_only_past_the_logged_rounds():
    from trainperf.plan.logged import software_trend

    assert software_trend("5.1") is None and software_trend("4.0") is None
    t = software_trend("6.1")
    assert t.newest == "5.1" and t.rounds_ahead == 2
    lo, mid, hi = t.per_round
    assert lo <= mid <= hi
    fast, m, slow = t.minutes(600.0, 60.0)
    assert fast <= m <= slow < 11.0  # training sped up, evaluations and fixed costs not
    assert m == pytest.approx((600.0 / mid ** 2 + 60.0) / 60)
    d = t.to_dict(600.0, 60.0)
    assert d["minutes_if_it_holds"] == pytest.approx(m, abs=1e-4) and len(d["pairs"]) == len(t.pairs)


def test_plan_reports_the_trend_for_a_round_after_the_logs():
    from trainperf.plan.api import make_plan

    newer = make_plan("llama2_70b_lora", "gb200", 512, round_="6.1").to_dict()
    assert newer["software_trend"]["rounds_ahead"] == 2
    assert newer["software_trend"]["minutes_if_it_holds"] < newer["minutes"]
    assert make_plan("llama2_70b_lora", "gb200", 512, round_="5.1").to_dict()["software_trend"] is None
