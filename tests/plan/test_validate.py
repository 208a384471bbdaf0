"""`validate` over the package's published-results CSV, and the calibration fit."""

import csv
from dataclasses import replace

import pytest

from trainperf.plan.calibration import load_calibration
from trainperf.plan.hardware import gpu_for_result
from trainperf.plan.validate import RESULTS, Predictor, _loss, fit, load_results, summary, validate


@pytest.fixture(scope="module")
def rows():
    return validate(load_calibration())


def test_results_csv_rows_have_sources():
    with open(RESULTS, newline="") as f:
        raw = list(csv.DictReader(f))
    assert len(raw) > 100
    for r in raw:
        assert r["source"].startswith("https://github.com/mlcommons/training_results_v"), r
        assert int(r["global_batch_size"]) > 0 and float(r["minutes"]) > 0
    benches = {r["benchmark"] for r in raw}
    assert benches == {"gpt3", "llama31_405b", "llama31_8b", "llama2_70b_lora"}


def test_validate_predicts_every_catalog_row(rows):
    for r in rows:
        on_catalog = gpu_for_result(r.result.accelerator) is not None
        assert (r.estimate is not None) == on_catalog, (r.result.key, r.reason)
        if r.estimate is not None:
            assert r.estimate.layout.gbs == r.result.gbs  # the submission's own global batch
            assert r.estimate.fits
    s = summary(rows)
    assert s["fit"]["rows"] > 20 and s["held_out"]["rows"] > 50
    assert s["skipped"] == sum(1 for r in rows if r.estimate is None)
    # a regression guard, not a target: the model as shipped is far inside this
    assert s["held_out"]["mape"] < 30 and s["fit"]["mape"] < 30


def test_held_out_error_stays_where_it_was_measured(rows):
    """A guard on the bars as measured on 2026-12-04 (docs/plan.md): held-out MAPE 8.79% overall
    (bar 8%, missed) and 9.1% for Llama 3.1 8B (bar: no benchmark above 12%), mean signed error
    within +-3%. The margins let a refit move them a little, not back to 9.86% / 15.6%."""
    s = summary(rows)["held_out"]
    assert s["mape"] < 9.5
    assert abs(s["mean_signed_pct"]) < 3
    per = s["per_benchmark"]
    assert per["llama31_8b"]["mape"] < 12 and per["llama2_70b_lora"]["mape"] < 9.5 and per["gpt3"]["mape"] < 8


def test_llama31_405b_runs_its_published_layouts_without_recompute(rows):
    """With FP8 parameters and BF16 gradient buffers (NVIDIA's NeMo settings, benchmarks.toml) the
    layouts submitted for 512 H100 (NVIDIA, tp 8 pp 8 cp 2) and 512 H200 (Nebius, tp 4 pp 8 cp 2)
    fit without recompute, as their configs ran them; with FP32 gradients and BF16+FP8 weights the
    model needed full recompute and put them 44-50% over the published minutes."""
    by = {(r.result.round, r.result.benchmark, r.result.submitter, r.result.n_gpus, r.result.accelerator[:11]): r
          for r in rows}
    h100 = by[("5.0", "llama31_405b", "NVIDIA", 512, "NVIDIA H100")]
    L = h100.submitted.layout
    assert (L.tp, L.pp, L.cp, L.recompute) == (8, 8, 2, "none")
    nebius = by[("5.0", "llama31_405b", "Nebius", 512, "NVIDIA H200")]
    L = nebius.submitted.layout
    assert (L.tp, L.pp, L.cp, L.recompute) == (4, 8, 2, "none")
    assert abs(nebius.submitted_error) < 0.15 and abs(h100.submitted_error) < 0.15


def test_the_articles_anchor_rows_are_held_out(rows):
    by = {(r.result.round, r.result.benchmark, r.result.submitter, r.result.n_gpus): r for r in rows}
    gpt3 = by[("3.1", "gpt3", "Azure+NVIDIA", 10752)]
    h200 = by[("4.1", "llama2_70b_lora", "Azure", 512)]
    h100 = by[("4.1", "llama2_70b_lora", "Oracle", 512)]
    assert gpt3.result.minutes == 4.008 and h200.result.minutes == 1.609 and h100.result.minutes == 2.065
    assert not (gpt3.result.fit or h200.result.fit or h100.result.fit)
    for r in (gpt3, h200, h100):
        assert r.estimate is not None and abs(r.error) < 0.5
    # H200 is predicted faster than H100 at the same scale and batch
    assert h200.estimate.minutes < h100.estimate.minutes


def test_fit_lowers_the_loss_on_its_rows():
    sub = [r for r in load_results() if r.fit and r.benchmark == "llama31_405b"
           and gpu_for_result(r.accelerator) is not None][:3]
    start = replace(load_calibration(), gemm_eff={"hopper": 0.3, "blackwell": 0.3, "blackwell_ultra": 0.3})
    p = Predictor(start)
    for r in sub:
        p.predict(r)
    before = _loss(p, sub, start)
    fitted = fit(start, sub, rounds=1)
    assert _loss(p, sub, fitted) < before
    assert fitted.fit_rows == len(sub) and "held out" in fitted.fitted_on


def test_the_articles_checks_as_run_reproduce_the_published_minutes_and_speedup():
    from trainperf.plan.validate import check_anchors

    checks, speedup = check_anchors(load_calibration())
    gpt3 = next(c for c in checks if c.name.startswith("GPT-3"))
    assert abs(gpt3.searched.minutes / gpt3.published - 1) < 0.10
    lora = [c for c in checks if "LoRA" in c.name]
    assert len(lora) == 2
    for c in lora:
        # the submitted layout is what ran: the model's step within 5% of the logged one
        assert c.submitted.layout.tp == 4 and c.submitted.layout.cp == 2
        assert abs(c.submitted.step_time_s / c.logged_step_s - 1) < 0.05, c.name
        # with the submitter's own convergence the published time is reproduced
        assert abs(c.as_run_minutes / c.published - 1) < 0.10, c.name
    # the 1.28x is a convergence difference: same layout and RCP-mean samples give about 1x,
    # each submitter's logged samples give the published ratio back
    assert speedup["published"] == pytest.approx(2.065 / 1.609, abs=1e-3)
    assert speedup["submitted_layout"] < 1.10
    assert abs(speedup["as_run"] / speedup["published"] - 1) < 0.10


def test_rows_that_name_their_layout_get_a_submitted_prediction(rows):
    by = {(r.result.round, r.result.benchmark, r.result.submitter, r.result.n_gpus): r for r in rows}
    azure = by[("4.1", "llama2_70b_lora", "Azure", 512)]
    assert {c.shape for c in azure.configs} == {(4, 1, 2)} and azure.config_precision == "fp8"
    L = azure.submitted.layout
    assert (L.tp, L.pp, L.cp, L.precision) == (4, 1, 2, "fp8")
    assert azure.submitted_error == pytest.approx(azure.submitted.minutes / 1.609 - 1)
    named = [r for r in rows if r.submitted is not None]
    assert len(named) > 60
    for r in named:
        assert len({c.shape for c in r.configs}) == 1
        assert (r.submitted.layout.tp, r.submitted.layout.pp, r.submitted.layout.cp) == next(iter(r.configs)).shape
    s = summary(rows)
    assert s["held_out"]["named_layout"]["rows"] == sum(1 for r in named if not r.result.fit)


def test_published_layouts_are_filed_under_the_model_they_train():
    """A Llama 3.1 405B layout needs at least 16-way model parallelism (810 GB of BF16 weights
    alone, 80-288 GB per GPU); the 8B never ran one that large. Dell's and Cisco's shared NeMo
    folders hold both models' configs: their 8B ones (MODEL_SIZE=8b / config_common_8b.sh) must
    not be filed as 405B."""
    from trainperf.plan.evidence import published, submitted

    for p in published():
        if p.benchmark == "llama31_405b":
            assert p.tp * p.pp >= 16, p.source
        if p.benchmark == "llama31_8b":
            assert p.tp * p.pp < 16, p.source
    assert {c.shape for c in submitted("5.1", "Cisco", "llama31_8b", "h100", 64)} == {(1, 1, 1)}
    assert {c.shape for c in submitted("5.1", "Cisco", "llama31_8b", "h100", 128)} == {(2, 1, 1)}
    assert len(submitted("5.1", "Dell", "llama31_8b", "b200", 16)) == 2
    assert not submitted("5.1", "Cisco", "llama31_405b", "h100", 64)
