"""`plan --model`: any dense GPT/Llama shape, a token budget, FP16, and inputs the model cannot price."""

import json
import math

import pytest

from trainperf.cli.main import main
from trainperf.config import ConfigError, ModelConfig
from trainperf.plan.api import make_plan
from trainperf.plan.flops import layer_gemms
from trainperf.plan.memory import activation_bytes_per_layer
from trainperf.plan.workload import custom_workload, parse_inline

GPT3 = "layers=96,d_model=12288,heads=96,kv_heads=96,ffn=49152,vocab=51200,seq=2048,family=gpt"


def plan_json(capsys, *argv):
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inline_shape_takes_the_familys_architecture():
    g = parse_inline(GPT3)
    assert (g.n_layer, g.d_model, g.n_head, g.kv_heads, g.ff_dim, g.vocab_size, g.seq_len) == \
        (96, 12288, 96, 96, 49152, 51200, 2048)
    assert g.family == "gpt" and not g.gated and g.tie_embeddings and g.bias
    ll = parse_inline("layers=32,d_model=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,seq=8192,family=llama")
    assert ll.gated and not ll.tie_embeddings and ll.kv_heads == 8


def test_hf_config_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                             "vocab_size": 128256, "max_position_embeddings": 131072,
                             "tie_word_embeddings": False}))
    b = custom_workload(str(p), seq_len=8192, gbs=64)
    c = b.model
    assert (c.n_layer, c.kv_heads, c.ff_dim, c.seq_len, c.family) == (32, 8, 14336, 8192, "llama")
    assert not b.is_mlperf and b.evals(1e6, 64) == 0.0
    p.write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ConfigError, match="model_type='mamba': trainperf reads dense"):
        custom_workload(str(p), gbs=8)


LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192}


@pytest.mark.parametrize("extra,msg", [
    ({"model_type": "qwen3", "attention_bias": False, "use_sliding_window": False, "sliding_window": 4096}, None),
    ({"model_type": "qwen2", "use_sliding_window": False, "sliding_window": 131072}, None),  # its q/k/v biases aside
    ({"model_type": "mistral", "sliding_window": None, "hidden_act": "gelu"}, None),  # the activation costs alike
    ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window=4096: trainperf attends over the whole"),
    ({"model_type": "mistral", "head_dim": 0}, "head_dim=0: must be a positive integer"),
    ({"model_type": "mixtral", "num_local_experts": 8}, "num_local_experts=8: a mixture of experts"),
    ({"model_type": "llama", "hidden_size": "4096"}, "hidden_size='4096': must be a positive integer"),
    ({"model_type": "llama", "vocab_size": None}, "vocab_size=None: must be a positive integer"),
    ({"model_type": "llama", "rope_theta": "big"}, "rope_theta must be a number, rope_scaling and rope_parameters mappings"),
    ({"model_type": "llama", "num_key_value_heads": None, "num_attention_heads": 8}, None),  # null: every head
    ({"model_type": "llama", "num_key_value_heads": 5}, "num_key_value_heads=5: does not divide"),
    # transformers types its booleans bool and refuses the rest; Python's truth read "false" as true
    ({"model_type": "llama", "tie_word_embeddings": "false"}, "tie_word_embeddings='false': must be true or false"),
    ({"model_type": "llama", "tie_word_embeddings": 0}, "tie_word_embeddings=0: must be true or false"),
    ({"model_type": "llama", "tie_word_embeddings": "no"}, "tie_word_embeddings='no': must be true or false"),
    ({"model_type": "llama", "attention_bias": 1}, "attention_bias=1: must be true or false"),
    ({"model_type": "qwen2", "use_sliding_window": "false"}, "use_sliding_window='false': must be true or false"),
])
def test_hf_configs_are_read_as_the_trainer_reads_them(tmp_path, extra, msg):
    """One reader (model.hf_config) for `plan --model config.json` and import-hf; the planner
    refuses only what changes the price, in one line naming the key."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA_8B, **extra}))
    if msg is None:
        c = custom_workload(str(p), gbs=8).model
        assert (c.n_layer, c.d_model, c.kv_heads, c.ff_dim, c.family) == (32, 4096, 8, 14336, "llama")
        assert c.qk_norm == (extra["model_type"] == "qwen3")
    else:
        with pytest.raises(ConfigError, match=msg):
            custom_workload(str(p), gbs=8)


@pytest.mark.parametrize("kind", ["llama", "qwen3", "mistral"])
@pytest.mark.parametrize("key", ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "intermediate_size", "max_position_embeddings"])
def test_a_config_without_a_size_is_refused_not_given_a_class_default(tmp_path, kind, key):
    """LlamaConfig's 32,000 tokens or 11,008 FFN are another model's (Qwen3's own class defaults
    differ again): a size the price depends on must be stated."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({k: v for k, v in {**LLAMA_8B, "model_type": kind, "sliding_window": None}.items()
                             if k != key}))
    with pytest.raises(ConfigError, match=f"config.json: {key} is missing"):
        custom_workload(str(p), gbs=8)


def test_sizes_transformers_derives_from_others_are_derived(tmp_path):
    """Missing or null, num_key_value_heads is every head and head_dim hidden / heads (Llama), n_inner
    4 x n_embd (GPT-2), as transformers computes them; a --seq-len stands in for a missing
    max_position_embeddings."""
    p = tmp_path / "config.json"
    base = {k: v for k, v in LLAMA_8B.items() if k not in ("num_key_value_heads", "max_position_embeddings")}
    p.write_text(json.dumps({**base, "model_type": "llama", "head_dim": None}))
    c = custom_workload(str(p), seq_len=4096, gbs=8).model
    assert (c.kv_heads, c.head_dim, c.seq_len) == (32, 128, 4096)
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257, "n_positions": 1024}
    for inner in ({}, {"n_inner": None}):
        p.write_text(json.dumps({**gpt2, **inner}))
        c = custom_workload(str(p), gbs=8).model
        assert (c.ff_dim, c.seq_len, c.tie_embeddings) == (3072, 1024, True)
    p.write_text(json.dumps({k: v for k, v in gpt2.items() if k != "n_embd"}))
    with pytest.raises(ConfigError, match="n_embd is missing"):
        custom_workload(str(p), gbs=8)


@pytest.mark.parametrize("window,seq,ok", [(4096, 4096, True), (4096, 2048, True), (4096, 4097, False),
                                           (4096, None, False), (None, None, True), ("absent", 4096, True),
                                           ("absent", 8192, False)])
def test_a_sliding_window_as_long_as_the_sequence_is_full_attention(tmp_path, capsys, window, seq, ok):
    """Mistral's 4,096-token window over a 4,096-token sequence reaches the first token: full
    attention, priced exactly. A longer sequence (max_position_embeddings 8192, or --seq-len) is
    refused by name; a config without the key has MistralConfig's 4,096."""
    p = tmp_path / "config.json"
    extra = {} if window == "absent" else {"sliding_window": window}
    p.write_text(json.dumps({**LLAMA_8B, "model_type": "mistral", **extra}))
    argv = ["plan", "--model", str(p), "--gpu", "h100", "--gpus", "8", "--gbs", "8", "--json"]
    rc = main([*argv, *(["--seq-len", str(seq)] if seq else [])])
    out = capsys.readouterr()
    if ok:
        assert rc == 0 and json.loads(out.out)["model_shape"]["seq"] == (seq or 8192)
    else:
        assert rc == 2 and out.err.count("\n") == 1
        assert f"sliding_window=4096: trainperf attends over the whole causal context; a 4096-token window" in out.err
        assert f"(this one: {seq or 8192})" in out.err


def test_a_hugging_face_model_folder_is_its_config(tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**LLAMA_8B, "model_type": "llama"}))
    b = custom_workload(str(tmp_path / "hf"), gbs=8)
    assert b.model.n_layer == 32 and b.name == "hf"
    (tmp_path / "empty").mkdir()
    assert main(["plan", "--model", str(tmp_path / "empty"), "--gpu", "h100", "--gpus", "8", "--gbs", "8"]) == 2
    err = capsys.readouterr().err
    assert "empty holds no config.json" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,msg", [
    (["--model", "layers=1000000000000000000000000000000,d_model=4096,heads=32,ffn=14336,vocab=32000,seq=2048"],
     "--model: layers=1000000000000000000000000000000 is beyond 2147483647"),
    (["--model", "layers=32,d_model=4096,heads=32,vocab=32000,seq=2048", "--seq-len", str(2**31)],
     "--seq-len=2147483648 is beyond 2147483647"),
    (["--model", "layers=32,layers=16,d_model=4096,heads=32,vocab=32000,seq=2048"], "--model: layers is given twice"),
    (["--model", "layers=32,d_model=4096,heads=32,vocab=32000,seq=2048,family=gpt,family=llama"],
     "--model: family is given twice"),
    (["--model", "layers=32,d_model=4096,heads=32,ffn=0,vocab=32000,seq=2048"], "ffn must be a positive integer, got 0"),
    (["--model", "  "], "--model: empty"),
])
def test_inline_shapes_the_planner_cannot_price_are_refused_in_one_line(capsys, argv, msg):
    assert main(["plan", *argv, "--gpu", "h100", "--gpus", "64", "--gbs", "512"]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_a_size_beyond_the_bound_is_refused_on_every_path(tmp_path, capsys):
    """One bound (workload.check_model) for the inline, Hugging Face and recipe forms, naming the key
    as each spells it: past it the pipeline split overflowed C sizes in a traceback."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA_8B, "model_type": "llama", "num_hidden_layers": 10**30}))
    with pytest.raises(ConfigError, match="num_hidden_layers=1000000000000000000000000000000 is beyond 2147483647"):
        custom_workload(str(p), gbs=8)
    r = tmp_path / "big.toml"
    r.write_text("[model]\nn_layer = 2\nd_model = 64\nn_head = 4\nseq_len = 64\nvocab_size = 4294967296\n")
    assert main(["plan", "--model", str(r), "--gpu", "h100", "--gpus", "8", "--gbs", "8"]) == 2
    err = capsys.readouterr().err
    assert "model.vocab_size=4294967296 is beyond 2147483647" in err and err.count("\n") == 1
    ok = custom_workload(f"layers={2**31 - 1},d_model=4096,heads=32,vocab=32000,seq=2048", gbs=8)
    assert ok.model.n_layer == 2**31 - 1


def test_a_recipe_whose_tokenizer_cannot_be_read_names_the_keys(tmp_path, capsys, monkeypatch):
    """model.vocab_size = 0 takes data.tokenizer's vocabulary, its relative path read from the
    current folder as `trainperf run` reads it; unreadable, it is the recipe's error (exit 2)."""
    from trainperf.data.tokenizer import ByteTokenizer

    r = tmp_path / "r.toml"
    r.write_text('[model]\nn_layer = 2\nd_model = 64\nn_head = 4\nseq_len = 64\nvocab_size = 0\n'
                 '[data]\ntokenizer = "tok/tokenizer.json"\n')
    assert main(["plan", "--model", str(r), "--gpu", "h100", "--gpus", "8", "--gbs", "8"]) == 2
    err = capsys.readouterr().err
    assert "data.tokenizer: tok/tokenizer.json: cannot read tokenizer" in err and "model.vocab_size is 0" in err
    assert err.count("\n") == 1
    (tmp_path / "tok").mkdir()
    ByteTokenizer().save(tmp_path / "tok" / "tokenizer.json")
    monkeypatch.chdir(tmp_path)
    assert custom_workload(str(r), gbs=8).model.vocab_size == ByteTokenizer().vocab_size


def test_a_head_size_apart_from_hidden_over_heads_is_priced(tmp_path):
    """Mistral NeMo: 32 heads of 128 on hidden 5120, so q and the attention output are 4,096 wide."""
    from trainperf.model.flops import matmul_params

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "mistral", "hidden_size": 5120, "head_dim": 128, "num_attention_heads": 32,
                             "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 40,
                             "vocab_size": 131072, "max_position_embeddings": 1024000, "sliding_window": None}))
    c = custom_workload(str(p), seq_len=4096, gbs=8).model
    assert c.head_dim == 128
    layer = 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 14336  # q and o, k and v, the SwiGLU MLP
    assert matmul_params(c) == 40 * layer + 5120 * 131072
    inline = parse_inline("layers=40,d_model=5120,heads=32,kv_heads=8,head_dim=128,ffn=14336,vocab=131072,seq=4096")
    assert matmul_params(inline) == matmul_params(c) and inline.head_dim == 128


def test_a_model_sweeps_like_a_benchmark(capsys, tmp_path):
    """`plan sweep --model`: every point's throughput; time-to-train (and the plot) only for a budget."""
    args = ["plan", "sweep", "--model", GPT3, "--gbs", "1536", "--gpu", "h100,b200", "--gpus", "512,1024"]
    assert main([*args, "--json"]) == 0
    pts = json.loads(capsys.readouterr().out)
    one = make_plan(custom_workload(GPT3, gbs=1536), "h100", 1024, top=1, stack="pytorch").best.estimate
    assert [(p["gpu"], p["gpus"]) for p in pts] == [("h100", 512), ("h100", 1024), ("b200", 512), ("b200", 1024)]
    assert pts[1]["tokens_per_s_per_gpu"] == pytest.approx(one.tokens_per_s_per_gpu, rel=1e-3)
    assert all(p["minutes"] is None and p["stack"] == "pytorch" and "evals" not in p for p in pts)
    assert main([*args, "--tokens", "3e11", "--json"]) == 0
    timed = json.loads(capsys.readouterr().out)
    assert timed[1]["minutes"] == pytest.approx(3e11 / one.tokens_per_s / 60, rel=1e-3)
    png = tmp_path / "s.png"
    assert main([*args, "--tokens", "3e11", "--plot", str(png)]) == 0 and png.stat().st_size > 0


def test_short_sequences_and_a_recipe_whose_vocabulary_is_its_tokenizers():
    """A sequence under context parallelism's 1,024-token chunk still plans at cp 1 (it had found no
    layout at all), and `tiny`'s vocabulary is its BPE's 2,048, as the trainer takes it."""
    gpt2 = make_plan(custom_workload("layers=12,d_model=768,heads=12,vocab=50257,seq=512,family=gpt", gbs=64),
                     "h100", 8, top=1)
    assert gpt2.best.layout.cp == 1
    tiny = custom_workload("tiny")
    assert tiny.model.vocab_size == 2048 and make_plan(tiny, "h100", 1, top=1).best.layout.gbs == 4


def test_emit_run_for_a_compiled_recipe_gives_a_command_the_trainer_takes(capsys):
    """`tiny` compiles, which the trainer refuses beside tensor parallelism: the emitted command turns
    compile off there (and says so), and its layout and settings pass the trainer's checks."""
    import shlex

    from trainperf.config import load_recipe
    from trainperf.layout import merge_overrides, parse_layout
    from trainperf.parallel.dims import ParallelDims

    assert main(["plan", "--model", "tiny", "--gpu", "h100", "--gpus", "8", "--emit-run"]) == 0
    cmd, *notes = capsys.readouterr().out.splitlines()
    argv = shlex.split(cmd)
    spec = parse_layout(argv[argv.index("--layout") + 1])
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert spec["tp"] > 1 and sets == ["parallel.compile=false"] and any("eager" in n for n in notes)
    assert notes[0].startswith("# planned on the pytorch stack: ") and " s a step" in notes[0]
    spec.pop("precision")
    r = load_recipe("tiny", merge_overrides(spec, sets))
    assert ParallelDims.for_recipe(r, 8).tp == spec["tp"]


def test_vs_without_a_budget_compares_steps_not_minutes(capsys):
    assert main(["plan", "--model", GPT3, "--gbs", "1536", "--gpu", "h100", "--gpus", "1024", "--vs", "b200"]) == 0
    out = capsys.readouterr().out
    assert "s a step" in out and "tokens/s per GPU vs" in out and "GPU-hours" not in out


def test_a_config_that_is_not_an_object_is_refused(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    assert main(["plan", "--model", str(p), "--gpu", "h100", "--gpus", "8", "--gbs", "8"]) == 2
    err = capsys.readouterr().err
    assert "expected a JSON object, not a JSON list" in err and err.count("\n") == 1


@pytest.mark.parametrize("spec,msg", [
    ("layers=96,d_model=12288,heads=96,foo=1", "unknown key 'foo'"),
    ("layers=96,d_model=12288,heads=96,vocab=5,seq=8,family=mamba", "family must be llama or gpt"),
    ("layers=96,d_model=12288,heads=96,vocab=51200", "missing seq"),
    ("layers=0,d_model=12288,heads=96,vocab=51200,seq=2048", "layers must be a positive integer"),
    ("layers=2,d_model=100,heads=3,vocab=51200,seq=2048", "do not divide d_model"),
    ("layers=2,d_model=96,heads=8,kv_heads=3,vocab=51200,seq=2048", "KV heads do not divide"),
])
def test_bad_shapes_are_refused_by_name(spec, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_inline(spec)


def test_an_inline_shape_may_replace_the_familys_mlp_and_head():
    """Nemotron-4 340B: Llama's blocks with a two-matrix squared-ReLU MLP (mlp=relu2), untied."""
    spec = "layers=96,d_model=18432,heads=96,kv_heads=8,ffn=73728,vocab=256000,seq=4096"
    n = parse_inline(spec + ",mlp=relu2")
    assert (n.family, n.gated, n.activation, n.tie_embeddings) == ("llama", False, "relu2", False)
    assert {g.name: g.n for g in layer_gemms(n, 1)}["mlp_in"] == 73728
    assert parse_inline(spec + ",family=gpt,tied=false,mlp=swiglu").gated
    assert parse_inline(spec + ",tied=true").tie_embeddings
    for bad, msg in ((",mlp=geglu", "mlp must be swiglu, gelu, relu2, got 'geglu'"),
                     (",tied=yes", "tied must be true or false, got 'yes'"), (",mlp=gelu,mlp=relu2", "mlp is given twice")):
        with pytest.raises(ConfigError, match=msg):
            parse_inline(spec + bad)


def test_gated_mlp_is_the_configs_not_the_familys():
    """A gpt-family model with SwiGLU (mlp_act) has three MLP matrices, as the trainer builds it."""
    gelu = ModelConfig(family="gpt", n_layer=2, d_model=256, n_head=4, d_ff=1024, vocab_size=100, seq_len=64)
    swiglu = ModelConfig(family="gpt", n_layer=2, d_model=256, n_head=4, d_ff=1024, vocab_size=100, seq_len=64,
                         mlp_act="swiglu")
    assert {g.name: g.n for g in layer_gemms(swiglu, 1)}["mlp_in"] == 2 * {g.name: g.n for g in layer_gemms(gelu, 1)}["mlp_in"]
    assert activation_bytes_per_layer(swiglu, 64, 1) > activation_bytes_per_layer(gelu, 64, 1)


def test_a_token_budget_is_steps_times_the_step(capsys):
    d = plan_json(capsys, "--model", GPT3, "--gpu", "h100", "--gpus", "1024", "--gbs", "1536", "--tokens", "3e11")
    steps = math.ceil(3e11 / (1536 * 2048))  # a budget trains whole steps
    assert d["steps"] == steps
    assert d["minutes"] == pytest.approx(steps * d["step_time_s"] / 60, rel=1e-4)
    assert d["tokens"] == 3e11 and d["model_shape"]["layers"] == 96 and "rcp_ruleset" not in d
    assert d["tokens_per_s"] == pytest.approx(1536 * 2048 / d["step_time_s"], rel=1e-4)
    # without a budget: the step, throughput, MFU and memory, no time-to-train
    s = plan_json(capsys, "--model", GPT3, "--gpu", "h100", "--gpus", "1024", "--gbs", "1536")
    assert s["minutes"] is None and s["step_time_s"] == d["step_time_s"] and s["mfu"] > 0.2


def test_the_layouts_gbs_is_the_models_global_batch(capsys):
    d = plan_json(capsys, "--model", GPT3, "--gpu", "h100", "--gpus", "1024", "--layout", "gbs=1536")
    assert d["layout"]["global_batch"] == 1536


def test_a_recipe_is_a_model_with_its_own_batch():
    p = make_plan(custom_workload("llama31_8b"), "h100", 64)
    assert p.best.layout.gbs == 32 and not p.bench.is_mlperf and p.best.estimate.evals == 0


def test_fp16_is_priced_at_the_16_bit_rate():
    b = custom_workload(GPT3, gbs=1536)
    fix = {"tp": 8, "pp": 8, "mbs": 1, "recompute": "none"}
    f16 = make_plan(b, "a100", 1024, layout=fix, precision="fp16", top=1).best.estimate
    bf16 = make_plan(b, "a100", 1024, layout=fix, precision="bf16", top=1).best.estimate
    assert f16.layout.precision == "fp16" and f16.step_time_s == pytest.approx(bf16.step_time_s, rel=1e-12)
    assert f16.memory.total == bf16.memory.total


@pytest.mark.parametrize("argv,msg", [
    (["--model", GPT3, "--gpu", "h100", "--gpus", "3360", "--gbs", "1680", "--layout", "pp=35"],
     "pp=35 leaves a pipeline stage with no layer"),
    (["--model", GPT3, "--gpu", "h100", "--gpus", "3072", "--gbs", "1536", "--layout", "cp=3"],
     "cp=3 does not split the 2048-token sequence"),
    (["--model", GPT3, "--gpu", "h100", "--gpus", "8"], "--gbs: give the global batch"),
    (["--model", GPT3, "--gpu", "h100", "--gpus", "8", "--gbs", "8", "--layout", "gbs=16"], "disagree"),
    (["--model", GPT3, "--gpu", "h100", "--gpus", "8", "--gbs", "8", "--round", "4.1"], "MLPerf rounds apply"),
    (["gpt3_175b", "--gpu", "h100", "--gpus", "1000000000000"], "beyond any catalogued system"),
    (["gpt3_175b", "--gpu", "h100", "--gpus", "-3"], "positive integer"),
    (["gpt3_175b", "--gpu", "h100", "--gpus", "512", "--tokens", "1e9"], "use --model"),
    (["gpt3_175b", "--model", GPT3, "--gpu", "h100", "--gpus", "512"], "not both"),
])
def test_what_the_model_cannot_price_is_refused_in_one_line(capsys, argv, msg):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,msg", [
    (["gpt3_175b", "--gpu", "h100", "--gpus", "512", "--samples", "inf"], "plan: argument --samples: must be a finite"),
    (["gpt3_175b", "--gpu", "h100", "--gpus", "512", "--price", "inf"], "--price: must be a finite number"),
    (["--model", GPT3, "--gpu", "h100", "--gpus", "8", "--gbs", "8", "--tokens", "nan"], "--tokens: must be a finite"),
])
def test_a_number_that_is_not_finite_is_a_usage_error(capsys, argv, msg):
    with pytest.raises(SystemExit) as e:
        main(["plan", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err and err.count("\n") == 1


def test_the_search_never_leaves_a_stage_empty():
    """96 layers over pp 64 would leave 16 stages without a layer: the search does not price it."""
    p = make_plan(custom_workload(GPT3, gbs=1536), "h100", 1024, top=50)
    for pr in p.predictions:
        L = pr.layout
        assert -(-96 // (L.pp * L.vpp)) * (L.pp * L.vpp - 1) < 96


def test_126_layers_split_over_16_stages_count_the_embedding_and_loss():
    """Llama 3 405B's 126 layers do not divide over pp 16 x vpp 8, 128 slots do: the first and last
    stage hold one layer fewer beside the embedding and the loss (as the trainer splits them), and
    the interleaved layout is priced rather than refused as leaving a stage empty."""
    from trainperf.plan.perf import Layout, Model

    b = custom_workload("layers=126,d_model=16384,heads=128,kv_heads=8,ffn=53248,vocab=128256,seq=8192", gbs=2048)
    p = make_plan(b, "h100", 16384, layout={"tp": 8, "pp": 16, "vpp": 8, "mbs": 1}, precision="bf16",
                  stack="megatron", top=1)
    m = Model(b, p.cluster, p.calibration, samples=2048, stack="megatron")
    lay = Layout(tp=8, pp=16, dp=128, cp=1, vpp=8, mbs=1, gbs=2048, recompute="selective", precision="bf16")
    assert m.pipeline_slots(16, 8) == 128 and m.stage_layers(lay) == 8 and not m.empty_stage(16, 8)
    assert p.best.layout.vpp == 8
    with pytest.raises(ConfigError, match="exceeds the 126 layers"):  # trainperf's trainer: a layer a stage
        make_plan(b, "h100", 16384, layout={"tp": 8, "pp": 16, "vpp": 8, "mbs": 1}, stack="pytorch")
    assert m.pipeline_slots(16, 2) == 128 and m.pipeline_slots(8, 3) == 126  # 126 = 8 x 3 x 5.25: no help from +2
    gpt3 = Model(custom_workload(GPT3, gbs=1536), p.cluster, p.calibration, samples=1536, stack="megatron")
    assert gpt3.pipeline_slots(8, 12) == 96 and gpt3.empty_stage(35)  # 96 or 98 over 35 stages: refused


def test_a_model_plan_is_fast():
    """Under a second of CPU (the shared test machine's wall clock varies with its load)."""
    import time

    t = time.process_time()
    make_plan(custom_workload(GPT3, gbs=1536), "gb200", 8192)
    assert time.process_time() - t < 1.0
