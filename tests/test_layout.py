"""The layout grammar shared by `plan --layout`, `run --layout` and recipes' [layouts] tables."""

import pytest

from trainperf.config import ConfigError, load_recipe
from trainperf.layout import format_layout, merge_overrides, parse_layout, ranks, recipe_overrides
from trainperf.plan import search


def test_one_parser_for_planner_and_trainer():
    assert search.parse_layout is parse_layout
    spec = parse_layout("tp=4, pp=8, vp=6, cp=2, dp=16, microbatch=1, gbs=1024, rc=selective, prec=fp8")
    assert spec == {"tp": 4, "pp": 8, "vpp": 6, "cp": 2, "dp": 16, "mbs": 1, "gbs": 1024,
                    "recompute": "selective", "precision": "fp8"}
    assert parse_layout(format_layout(spec)) == spec
    assert ranks(spec) == 4 * 8 * 2 * 16 and ranks({"tp": 4}) is None


@pytest.mark.parametrize("text,msg", [("tp=two", "tp must be an integer"), ("tp=0", "tp must be >= 1"),
                                      ("foo=1", "unknown key 'foo'"), ("tp", "expected key=value"),
                                      ("precision=fp16", "precision must be one of"),
                                      ("tp=2,pp=2,tp=4", "tp is given twice"), ("mbs=1,microbatch=2", "mbs is given twice")])
def test_bad_layout_is_one_message(text, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_layout(text)


def test_recipe_keys():
    spec = parse_layout("tp=2,pp=2,vpp=2,cp=2,dp=4,mbs=1,gbs=32,recompute=full,precision=bf16")
    assert recipe_overrides(spec) == [
        "parallel.tp=2", "parallel.pp=2", "parallel.vpp=2", "parallel.cp=2", "parallel.dp_shard=4",
        "train.micro_batch_size=1", "train.global_batch_size=32", "parallel.activation_checkpoint=full",
        "train.precision=bf16", "train.fp8_linear=false"]
    # dp counts every data-parallel rank: with dp_replicate = 2 it is 2 x dp_shard
    assert "parallel.dp_shard=2" in recipe_overrides({"dp": 4}, dp_replicate=2)
    with pytest.raises(ConfigError, match="dp=5 is not a multiple of parallel.dp_replicate=2"):
        recipe_overrides({"dp": 5}, dp_replicate=2)
    with pytest.raises(ConfigError, match="fp4"):
        recipe_overrides({"precision": "fp4"})


def test_conflict_with_set_names_both():
    with pytest.raises(ConfigError, match=r"--layout tp=4 and --set parallel.tp=2 both set parallel.tp"):
        merge_overrides({"tp": 4}, ["parallel.tp=2"])
    with pytest.raises(ConfigError, match=r"--layout precision=fp8 and --set train.fp8_linear=false"):
        merge_overrides({"precision": "fp8"}, ["train.fp8_linear=false"])
    # vpp > 1 means the interleaved schedule, unless the user names one
    assert merge_overrides({"vpp": 2}, [])[-1] == "parallel.pp_schedule=interleaved_1f1b"
    assert merge_overrides({"vpp": 2}, ["parallel.pp_schedule=gpipe"]) == ["parallel.pp_schedule=gpipe", "parallel.vpp=2"]


def test_layout_applies_to_a_recipe():
    r = load_recipe("tiny", merge_overrides(parse_layout("tp=2,cp=2,dp=2,mbs=4,gbs=16"), ["model.n_layer=2"]))
    p = r.parallel
    assert (p.tp, p.cp, p.dp_shard, r.train.micro_batch_size, r.train.global_batch_size) == (2, 2, 2, 4, 16)


@pytest.mark.parametrize("bench", ["gpt3_175b", "llama2_70b_lora", "llama31_405b", "llama31_8b"])
def test_recipes_state_their_record_layouts_with_sources(bench):
    layouts = load_recipe(bench).layouts
    assert layouts
    for name, entry in layouts.items():
        spec = parse_layout(entry.layout)
        assert spec["tp"] * spec["pp"] * spec["cp"] * spec["dp"] == entry.gpus, name
        assert entry.source.startswith("https://github.com/") and entry.gpu and entry.precision


def test_bad_layouts_table_names_the_key(tmp_path):
    base = (load_recipe("tiny").source)
    text = open(base).read()
    for extra, msg in [('[layouts.x]\nlayout = "tp=2,dp=2"\ngpus = 8\nsource = "s"\n', r"layouts.x.layout: tp\*pp\*cp\*dp = 4"),
                       ('[layouts.x]\nlayout = "tp=2"\ngpus = 2\n', "layouts.x.source"),
                       ('[layouts.x]\nlayout = "tp=q"\ngpus = 2\nsource = "s"\n', "layouts.x.layout: tp must be an integer"),
                       ('[layouts.x]\nnodes = 2\n', "layouts.x.nodes: unknown key")]:
        p = tmp_path / "r.toml"
        p.write_text(text + "\n" + extra)
        with pytest.raises(ConfigError, match=msg):
            load_recipe(str(p))


def test_fewer_micro_batches_than_stages_take_gpipe():
    # 1F1B needs a micro-batch per stage: 64 / (8 x 2) = 4 micro-batches on pp 8
    assert "parallel.pp_schedule=gpipe" in merge_overrides(parse_layout("pp=8,dp=8,mbs=2,gbs=64"), [])
    assert not any("pp_schedule" in o for o in merge_overrides(parse_layout("pp=2,dp=8,mbs=2,gbs=64"), []))


def test_the_planner_grammar_takes_fp16_which_the_trainer_refuses():
    """`plan --layout precision=fp16` prices A100-era runs as `--precision fp16` does; `run` has no FP16 matmuls."""
    from trainperf.layout import recipe_overrides
    from trainperf.plan.hardware import PLAN_PRECISIONS

    spec = parse_layout("tp=2,precision=fp16", precisions=PLAN_PRECISIONS)
    assert spec == {"tp": 2, "precision": "fp16"}
    with pytest.raises(ConfigError, match="the trainer has no FP16 matmuls"):
        recipe_overrides(spec)
