import math

import pytest

from trainperf.config import ConfigError, load_recipe
from trainperf.mlperf.benchmarks import OFFICIAL, benchmark_hooks

OFFICIAL_RECIPES = ["llama31_8b", "llama31_405b", "gpt3_175b", "llama2_70b_lora"]


@pytest.mark.parametrize("name,shape", [
    # layers, width, heads, kv heads, ffn, vocab, seq
    ("llama31_8b", (32, 4096, 32, 8, 14336, 128256, 8192)),
    ("llama31_405b", (126, 16384, 128, 8, 53248, 32000, 8192)),
    ("gpt3_175b", (96, 12288, 96, 96, 49152, 50257, 2048)),
    ("llama2_70b_lora", (80, 8192, 64, 8, 28672, 32000, 8192)),
])
def test_official_shapes(name, shape):
    m = load_recipe(name).model
    assert (m.n_layer, m.d_model, m.n_head, m.kv_heads, m.ff_dim, m.vocab_size, m.seq_len) == shape


@pytest.mark.parametrize("name", OFFICIAL_RECIPES)
def test_full_recipes_follow_their_closed_rules(name):
    r = load_recipe(name)
    assert r.benchmark.rules in OFFICIAL and r.benchmark.ruleset == OFFICIAL[r.benchmark.rules][0]
    assert r.benchmark.runs_per_result == OFFICIAL[r.benchmark.rules][1]
    hooks = benchmark_hooks(r)
    assert [x.key for x in hooks.rule_checks() if not x.ok] == []
    assert hooks.deviations() == [] and hooks.stops_at_target


def test_changed_recipe_values_are_listed():
    devs = benchmark_hooks(load_recipe("llama31_8b", ["model.n_layer=16", "data.corpus=/my/c4"])).deviations()
    assert devs == ["changed: model.n_layer: 32 -> 16"]  # where the data lives is no departure
    assert benchmark_hooks(load_recipe("tiny", ["model.n_layer=2"])).deviations() == []  # our own benchmark


def test_rules_catch_a_changed_value():
    r = load_recipe("llama31_405b", ["train.global_batch_size=2304"])  # LR, warm-up, decay, skip not rescaled
    bad = {x.key for x in benchmark_hooks(r).rule_checks() if not x.ok}
    assert {"train.lr", "train.warmup_steps", "train.decay_steps", "eval.skip_evals"} <= bad
    r = load_recipe("gpt3_175b", ["train.lr=3e-5"])
    assert "train.lr" in {x.key for x in benchmark_hooks(r).rule_checks() if not x.ok}


@pytest.mark.parametrize("name", OFFICIAL_RECIPES)
def test_smoke_keeps_what_the_rules_pin(name):
    """A smoke recipe may shrink only the sequence, the eval set and cadence, the batch (GBS is the
    RCPs' business), and, for gpt3, the start checkpoint's step; every schedule formula still holds."""
    r = load_recipe(name, smoke=True)
    allowed = {"model.seq_len", "eval.eval_samples", "eval.eval_documents", "eval.every_samples", "train.global_batch_size",
               "train.init_checkpoint", "train.init_checkpoint_step"}
    bad = {x.key for x in benchmark_hooks(r).rule_checks() if not x.ok}
    assert bad <= allowed, bad - allowed
    assert r.smoke.enabled and r.model.d_model <= 64 and r.data.synthetic
    if r.benchmark.rules == "llama31_405b":
        assert r.train.lr * 1152 == r.train.global_batch_size * 8e-5  # the checker's exact float test
        assert r.eval.skip_evals == math.floor(0.0026 * r.train.global_batch_size + 12)


def test_smoke_section_is_validated():
    with pytest.raises(ConfigError, match="smoke.enabled"):
        load_recipe("llama31_8b", ["smoke.enabled=true"])
    with pytest.raises(ConfigError, match="smoke.evals"):
        load_recipe("llama31_8b", ["smoke.evals=0"])
    with pytest.raises(ConfigError, match="train.init_checkpoint_step"):
        load_recipe("tiny", ["train.init_checkpoint_step=5"])
