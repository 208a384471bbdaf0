import pytest

from trainperf.config import ConfigError, list_recipes, load_recipe


def test_default_recipe_loads():
    r = load_recipe("tiny")
    assert r.benchmark.name == "tiny"
    assert r.eval.target == 1.45
    assert "tiny" in list_recipes()


def test_override_changes_value_with_type():
    r = load_recipe("tiny", ["train.lr=5e-2", "model.n_layer=3", "parallel.compile=true"])
    assert r.train.lr == 5e-2 and r.model.n_layer == 3 and r.parallel.compile is True


@pytest.mark.parametrize("override, key", [
    ("train.nope=1", "train.nope"),
    ("nosection.lr=1", "nosection"),
    ("train.lr=fast", "train.lr"),
    ("model.n_head=3", "model.n_head"),  # 3 does not divide 256
    ("train.lr=-1", "train.lr"),
    ("model.n_layer=2.5", "model.n_layer"),
    ("train.precision=fp16", "train.precision"),
    ("parallel.tp=8", "parallel.tp"),  # tp does not divide 4 heads
    ("trainlr=1", "trainlr"),
    ("data.corpus=0.5 a -1 b", "data.corpus"),  # a blend weight must be a positive number
    ("data.corpus=1 a 2", "data.corpus"),  # weight/prefix pairs
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_recipe("tiny", [override])
    assert str(e.value).startswith(key)


def test_unknown_recipe_lists_known():
    with pytest.raises(ConfigError, match="unknown benchmark 'nope'.*tiny"):
        load_recipe("nope")


def test_bad_toml_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[train]\nlr = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_recipe(str(p))


CHOICE_FIELDS = {  # every string field with a fixed set of values, and what it allows
    "model.family": ("llama", "gpt"),
    "data.kind": ("tokens", "samples"),
    "train.precision": ("auto", "bf16", "fp32"),
    "train.optimizer": ("adamw", "muon"),
    "train.schedule": ("cosine", "wsd"),
    "model.mlp_act": ("auto", "swiglu", "gelu", "relu2"),
    "train.fused": ("auto", "fused", "foreach", "for-loop"),
    "eval.metric": ("nats_per_byte", "log_perplexity"),
    "parallel.activation_checkpoint": ("none", "selective", "full"),
}


@pytest.mark.parametrize("key, allowed", CHOICE_FIELDS.items())
def test_choice_fields_are_checked_from_their_type(key, allowed):
    with pytest.raises(ConfigError) as e:
        load_recipe("tiny", [f"{key}=nonsense"])
    msg = str(e.value)
    assert msg.startswith(f"{key}: must be ") and msg.endswith("got 'nonsense'") and "\n" not in msg
    assert all(repr(a) in msg for a in allowed)


def test_choice_fields_accept_each_allowed_value():
    r = load_recipe("tiny", ["parallel.activation_checkpoint=selective", "train.fused=for-loop",
                             "eval.metric=log_perplexity", "train.precision=fp32"])
    assert (r.parallel.activation_checkpoint, r.train.fused, r.eval.metric, r.train.precision) == (
        "selective", "for-loop", "log_perplexity", "fp32")


def test_choice_message_lists_values_in_order():
    with pytest.raises(ConfigError, match=r"^parallel.activation_checkpoint: must be 'none', 'selective' or 'full', "
                                          r"got 'some'$"):
        load_recipe("tiny", ["parallel.activation_checkpoint=some"])
    with pytest.raises(ConfigError, match=r"^train.optimizer: must be 'adamw' or 'muon', got 'sgd'$"):
        load_recipe("tiny", ["train.optimizer=sgd"])


def test_choice_list_field_checks_every_element():
    r = load_recipe("tiny", ["model.lora_rank=4", "model.lora_targets=wq,w2"])
    assert r.model.lora_targets == ["wq", "w2"]
    with pytest.raises(ConfigError, match=r"^model.lora_targets: must be 'wq', .* or 'w3', got 'wx'$"):
        load_recipe("tiny", ["model.lora_rank=4", "model.lora_targets=wq,wx"])


def test_choice_in_a_toml_value_of_another_type(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text("[model]\nfamily = 3\n")
    with pytest.raises(ConfigError, match=r"^model.family: must be 'llama' or 'gpt', got 3$"):
        load_recipe(str(p))


def test_choices_checked_in_recipes_built_in_code():
    """`trainperf data prepare` builds its DataConfig from arguments, not from a recipe file."""
    from trainperf.config import DataConfig, Recipe, validate

    validate(Recipe(data=DataConfig(kind="samples", tokenizer="byte")))
    with pytest.raises(ConfigError, match=r"^data.kind: must be 'tokens' or 'samples', got 'rows'$"):
        validate(Recipe(data=DataConfig(kind="rows")))


def test_every_recipe_passes_the_choice_checks():
    for name in list_recipes():
        load_recipe(name)
        load_recipe(name, smoke=True)


def test_a_model_size_past_int32_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"model.d_ff=3000000000 is beyond 2147483647"):
        load_recipe("tiny", ["model.d_ff=3000000000"])


def test_an_empty_recipe_file_is_refused(tmp_path):
    """Every default is tiny's: an empty file ran tiny at full size, even under --smoke."""
    p = tmp_path / "empty.toml"
    p.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="empty"):
        load_recipe(str(p))


def test_a_corpus_the_synthetic_smoke_data_would_ignore_is_refused():
    with pytest.raises(ConfigError, match="data.corpus: the run trains on a synthetic corpus"):
        load_recipe("tiny", ["data.corpus=/somewhere"], smoke=True)
    r = load_recipe("tiny", ["data.corpus=stdlib", "data.synthetic=false"], smoke=True)
    assert not r.data.synthetic and r.data.corpus == "stdlib"
