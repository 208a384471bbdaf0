"""The benchmarks' closed rules as data: the formulas they derive, and the planner agreeing with them."""

import math

import pytest

from trainperf.config import load_recipe
from trainperf.errors import ConfigError
from trainperf.rules import _build, all_rules, rules_for


def test_derived_values_at_the_reference_batch():
    b = rules_for("llama31_405b")
    assert b.lrs(1152) == (8e-5,) and b.warmup_steps(1152) == 8000 and b.decay_steps(1152, 8000) == 1_192_000
    assert b.skip(1152) == math.floor(0.0026 * 1152 + 12) == 14
    g = rules_for("gpt3")
    assert g.lrs(1536) == (2e-5,) and g.lrs(3584) == (2e-5, 3e-5) and g.lrs(4096) == (3e-5,)
    assert (g.warmup_steps(1536), g.decay_steps(1536, 265), g.init_checkpoint_step(1536)) == (265, 108_600, 4000)
    assert rules_for("llama2_70b_lora").skip(8) == 3
    assert rules_for("llama31_8b").decay_steps(32, 128) == 1_200_000 - 128
    assert rules_for("tiny") is None


def test_the_405b_lr_is_the_checkers_exact_float():
    b = rules_for("llama31_405b")
    for gbs in (16, 1152, 2304, 4608):
        assert b.derived(gbs)["train.lr"] * 1152 == gbs * 8e-5


def test_smoke_recipes_take_their_schedule_from_the_rules():
    r = load_recipe("llama31_405b", smoke=True)
    b = rules_for("llama31_405b")
    gbs = r.train.global_batch_size
    assert (r.train.lr, r.train.warmup_steps, r.eval.skip_evals) == (b.lrs(gbs)[0], b.warmup_steps(gbs), b.skip(gbs))
    assert r.train.decay_steps == b.decay_steps(gbs, r.train.warmup_steps)
    # the user's --set still wins over the derived value
    assert load_recipe("llama31_405b", ["eval.skip_evals=0"], smoke=True).eval.skip_evals == 0


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ConfigError, match="unknown rule 'eval_evry'"):
        _build("x", {"family": "llama", "seq_len": 8, "eval_every_samples": 8, "eval_evry": 3})
