"""`trainperf run` refuses, in one line and before a run folder exists, values no run can honour."""

import pytest

from trainperf.cli.main import main
from trainperf.config import ConfigError, load_recipe

SMOKE = ["run", "--smoke", "--max-steps", "1"]


@pytest.mark.parametrize("override", ["train.lr=inf", "train.grad_clip=nan", "eval.target=inf",
                                      "model.norm_eps=inf", "model.rope_theta=-1", "train.seed=4294967296"])
def test_values_no_run_can_honour(capsys, tmp_path, override):
    out = tmp_path / "run"
    assert main(SMOKE + ["--set", override, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and override.split("=")[0] in err and not out.exists()


def test_a_toml_inf_is_refused_like_an_override(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("[train]\nlr = inf\n")
    with pytest.raises(ConfigError, match="train.lr: must be a finite number"):
        load_recipe(str(recipe))


@pytest.mark.parametrize("argv, msg", [(["--seed", "99999999999999999999"], "seeds go up to 4294967295"),
                                       (["--seed", "4294967295", "--seeds", "2"], "the last would be 4294967296")])
def test_seeds_past_numpys_range(capsys, tmp_path, argv, msg):
    out = tmp_path / "run"
    assert main(SMOKE + argv + ["--out", str(out)]) == 2
    assert msg in capsys.readouterr().err and not out.exists()


def test_seeds_count_is_bounded(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(SMOKE + ["--seeds", "100000", "--out", str(tmp_path / "run")])
    assert e.value.code == 2 and "at most 1000 seeds" in capsys.readouterr().err


def test_a_model_whose_weights_cannot_fit_is_refused_before_building(capsys, tmp_path):
    """d_model 1e9 overflowed torch's storage size in a traceback, after the run folder was made."""
    out = tmp_path / "run"
    argv = SMOKE + ["--set", "model.n_layer=1", "--set", "model.d_model=1000000000", "--set", "model.seq_len=32"]
    assert main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "fp32 weights alone" in err and err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("argv, msg", [
    (["--dry-run", "--max-steps", "5", "--seeds", "3"], "--dry-run starts no training: --seeds, --max-steps"),
    (["--seed", "3", "--set", "train.seed=5"], "--seed 3 and --set train.seed=5 both set train.seed"),
    (["--checkpoint-every", "1", "--set", "checkpoint.every_steps=5"], "both set checkpoint.every_steps"),
    (["--seeds", "2", "--max-restarts", "3"], "--seeds runs its seeds in this process"),
])
def test_flags_that_would_be_ignored_or_overridden(capsys, tmp_path, argv, msg):
    out = tmp_path / "run"
    extra = [] if "--dry-run" in argv else ["--out", str(out)]
    assert main(SMOKE + argv + extra) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and not out.exists()
