import pytest

from trainperf.config import ConfigError, list_recipes, load_recipe


def test_default_recipe_loads():
    r = load_recipe("tiny")
    assert r.benchmark.name == "tiny"
    assert r.eval.target == 1.45
    assert "tiny" in list_recipes()


def test_override_changes_value_with_type():
    r = load_recipe("tiny", ["train.lr=1e-3", "model.n_layer=3", "parallel.compile=true"])
    assert r.train.lr == 1e-3 and r.model.n_layer == 3 and r.parallel.compile is True


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
