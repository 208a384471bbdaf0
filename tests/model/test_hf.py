"""Hugging Face checkpoints into trainperf (`trainperf.model.hf`, `load_base_weights`, `trainperf import-hf`):
transformers' own models are saved with save_pretrained, imported, and must give the same logits."""

import dataclasses
import functools
import json

import pytest
import torch
from safetensors.torch import load_file

from trainperf.cli.main import main
from trainperf.config import ModelConfig
from trainperf.errors import WeightsError
from trainperf.model.hf import HFTensors, read_hf_checkpoint, read_hf_config, to_hf
from trainperf.model.transformer import Transformer
from trainperf.model.weights import load_base_weights
from trainperf.report.export import export_hf

transformers = pytest.importorskip("transformers")

# fp32 on CPU: the two implementations differ only in summation order (measured max |diff| 0 for
# llama, 4.8e-7 for gpt2, on logits up to ~2), so 1e-4 is ample; a wrong layout (gate/up swapped,
# k and v swapped) is off by O(1) and fails every logits test here.
TOL = dict(rtol=1e-4, atol=1e-4)
VOCAB, SEQ = 96, 16


def _randomize(model, seed):
    """HF initialises biases to zero and norms to one; random values make every tensor count."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


def _llama(tmp_path, shard=False, **kw):
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                                   rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                                   bos_token_id=None, eos_token_id=None, **kw)
    torch.manual_seed(0)
    model = _randomize(transformers.LlamaForCausalLM(cfg), 1)
    out = tmp_path / "hf_llama"
    model.save_pretrained(out, **({"max_shard_size": "20KB"} if shard else {}))
    return model, out


def _qwen3(tmp_path, shard=False, head_dim=8, **kw):
    cfg = transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
                                   max_position_embeddings=SEQ, rms_norm_eps=1e-5, rope_theta=500000.0,
                                   tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, **kw)
    torch.manual_seed(0)
    model = _randomize(transformers.Qwen3ForCausalLM(cfg), 3)
    out = tmp_path / "hf_qwen3"
    model.save_pretrained(out, **({"max_shard_size": "20KB"} if shard else {}))
    return model, out


def _gpt2(tmp_path, shard=False, **kw):
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=SEQ,
                                  bos_token_id=None, eos_token_id=None, **kw)
    torch.manual_seed(0)
    model = _randomize(transformers.GPT2LMHeadModel(cfg), 2)
    out = tmp_path / "hf_gpt2"
    model.save_pretrained(out, **({"max_shard_size": "20KB"} if shard else {}))
    return model, out


def _tokens(seed=0):
    return torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", ["llama", "qwen3", "qwen3_wide_heads", "gpt2"])
@pytest.mark.parametrize("shard", [False, True])
def test_imported_model_gives_transformers_logits(tmp_path, family, shard):
    # qwen3_wide_heads: 4 heads of 16 on hidden 32, as Qwen 3's 0.6B and 32B models set head_dim apart
    wide = functools.partial(_qwen3, head_dim=16)
    hf_model, path = {"llama": _llama, "qwen3": _qwen3, "qwen3_wide_heads": wide, "gpt2": _gpt2}[family](
        tmp_path, shard=shard)
    assert (path / "model.safetensors.index.json").is_file() == shard
    cfg, sd = read_hf_checkpoint(path)
    if family != "gpt2":
        assert (cfg.family, cfg.n_kv_head, cfg.d_ff, cfg.rope_theta, cfg.tie_embeddings) == ("llama", 2, 48, 5e5, False)
        assert cfg.qk_norm == family.startswith("qwen3") and cfg.head_dim == (16 if "wide" in family else 8)
    else:
        assert (cfg.family, cfg.bias, cfg.tie_embeddings, cfg.seq_len) == ("gpt", True, True, SEQ)
    ours = Transformer(cfg).eval()
    ours.load_state_dict(sd, strict=not cfg.tie_embeddings)  # a tied head is the embedding, not in sd
    x = _tokens()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf_model(x).logits, **TOL)


def test_load_base_weights_converts_an_hf_folder_into_a_lora_model(tmp_path):
    hf_model, path = _llama(tmp_path, shard=True)
    cfg, _ = read_hf_config(path)
    lora = Transformer(dataclasses.replace(cfg, lora_rank=4, seq_len=8)).eval()  # RoPE needs no seq_len match
    n = load_base_weights(lora, path)
    assert n == 2 + 1 + 2 * 9  # emb, norm, head; per layer 2 norms + 7 projections
    x = _tokens()[:, :8]
    with torch.no_grad():
        torch.testing.assert_close(lora(x), hf_model(x).logits, **TOL)  # lora_b starts at zero


def test_gpt2_into_a_shorter_bias_free_recipe(tmp_path):
    """Zero biases drop; non-zero ones are refused by name; positions past seq_len are cut."""
    hf_model, path = _gpt2(tmp_path)
    with torch.no_grad():
        for n, p in hf_model.named_parameters():
            if n.endswith("bias"):
                p.zero_()
    hf_model.save_pretrained(path)
    cfg = ModelConfig(family="gpt", n_layer=2, d_model=32, n_head=4, vocab_size=VOCAB, seq_len=8, bias=False)
    model = Transformer(cfg).eval()
    load_base_weights(model, path)
    x = _tokens()[:, :8]
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf_model(x).logits, **TOL)
    _, path2 = _gpt2(tmp_path / "b")
    with pytest.raises(WeightsError, match=r"model.safetensors: 'transformer.ln_f.bias' is not zero"):
        load_base_weights(Transformer(cfg), path2)


def _saved_run(tmp_path, overrides):
    """A random trainperf model saved as a finished run saves it (what `trainperf export` reads)."""
    from types import SimpleNamespace

    from trainperf.config import load_recipe
    from trainperf.data.tokenizer import ByteTokenizer
    from trainperf.parallel.env import DistEnv
    from trainperf.train.save import save_final

    r = load_recipe("tiny", ["model.n_layer=2", "model.d_model=32", "model.n_head=4", "model.seq_len=16",
                             "model.vocab_size=256", *overrides])
    model = _randomize(Transformer(r.model), 4)
    (tmp_path / "data").mkdir()
    (tmp_path / "run").mkdir()
    ByteTokenizer().save(tmp_path / "data" / "tokenizer.json")
    save_final(model, r, tmp_path / "run", DistEnv(), SimpleNamespace(path=tmp_path / "data"))
    return model, tmp_path / "run"


@pytest.mark.parametrize("overrides", [
    ["model.family=llama", "model.n_kv_head=2", "model.bias=true", "model.tie_embeddings=false", "model.qk_norm=false"],
    ["model.family=llama", "model.qk_norm=true"],
    ["model.family=llama", "model.qk_norm=true", "model.head_size=32"],
    ["model.family=gpt", "model.qk_norm=false"],
    ["model.family=gpt", "model.n_kv_head=2", "model.tie_embeddings=false", "model.qk_norm=false"],
])
def test_export_then_import_gives_the_same_tensors(tmp_path, overrides):
    model, run = _saved_run(tmp_path, overrides)
    out = export_hf(run, tmp_path / "hf")
    cfg, sd = read_hf_checkpoint(out, like=model.cfg)
    want = {k: v for k, v in model.state_dict().items() if not (cfg.tie_embeddings and k == "output.weight")}
    assert sd.keys() == want.keys()
    for k, v in want.items():
        assert torch.equal(sd[k], v), k
    # without a recipe: the same bias choice; GPT-2 has no GQA, so every k/v head comes back (repeats)
    plain_cfg, _ = read_hf_checkpoint(out)
    gpt = model.cfg.family == "gpt"
    assert plain_cfg.bias == model.cfg.bias
    assert plain_cfg.kv_heads == (model.cfg.n_head if gpt else model.cfg.kv_heads)


def test_to_hf_is_the_inverse_on_a_plain_model(tmp_path):
    cfg = ModelConfig(family="gpt", n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, bias=True)
    model = _randomize(Transformer(cfg), 3)
    out = tmp_path / "hf"
    out.mkdir()
    from safetensors.torch import save_file

    save_file(to_hf(cfg, model.state_dict()), str(out / "model.safetensors"))
    from trainperf.model.hf import hf_config

    (out / "config.json").write_text(json.dumps(hf_config(cfg)))
    _, sd = read_hf_checkpoint(out, like=cfg)
    assert all(torch.equal(sd[k], v) for k, v in model.state_dict().items() if k != "output.weight")


def test_errors_are_one_line_and_name_file_and_key(tmp_path):
    _, path = _llama(tmp_path)
    recipe = ModelConfig(family="llama", n_layer=2, d_model=32, n_head=4, n_kv_head=2, d_ff=48, vocab_size=VOCAB,
                         seq_len=SEQ, rope_theta=500000.0, tie_embeddings=False)
    with pytest.raises(WeightsError, match=r"config.json: the checkpoint has model.n_layer=2, the recipe 3$"):
        load_base_weights(Transformer(dataclasses.replace(recipe, n_layer=3)), path)  # $: one line
    with pytest.raises(WeightsError, match=r"model.n_kv_head=2, the recipe 4"):
        read_hf_checkpoint(path, like=dataclasses.replace(recipe, n_kv_head=4))
    with pytest.raises(WeightsError, match=r"model.rope_theta=500000.0, the recipe 10000.0"):
        read_hf_checkpoint(path, like=dataclasses.replace(recipe, rope_theta=10000.0))

    # a tensor missing from the file / a tensor of the wrong shape
    from safetensors.torch import save_file

    sd = load_file(str(path / "model.safetensors"))
    head = sd.pop("lm_head.weight")
    save_file(sd, str(path / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"model.safetensors: no tensor 'lm_head.weight'"):
        read_hf_checkpoint(path)
    sd["lm_head.weight"] = head[:, :16].contiguous()
    save_file(sd, str(path / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"safetensors: 'lm_head.weight' gives output.weight shape \(96, 16\)"):
        read_hf_checkpoint(path)
    with pytest.raises(WeightsError, match=r"model.safetensors: 'lm_head.weight' has shape \(96, 16\)"):
        load_base_weights(Transformer(recipe), path)

    with pytest.raises(WeightsError, match=r"Hugging Face tensor names, no 'tok_emb.weight'; point at the folder"):
        load_base_weights(Transformer(recipe), path / "model.safetensors")  # the file, not its folder

    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "model_type": "mistral"}))
    with pytest.raises(WeightsError, match=r"config.json: model_type='mistral'"):
        load_base_weights(Transformer(recipe), path)  # an HF folder of an unknown kind is not a trainperf dir
    (path / "config.json").write_text(json.dumps({**raw, "hidden_act": "gelu"}))
    with pytest.raises(WeightsError, match=r"hidden_act='gelu'"):
        read_hf_config(path)
    # the planner prices Qwen2's blocks as Llama's (tests/plan/test_any_model.py); the trainer
    # cannot hold its q/k/v biases beside a bias-free o
    (path / "config.json").write_text(json.dumps({**raw, "model_type": "qwen2"}))
    with pytest.raises(WeightsError, match=r"model_type='qwen2': trainperf reads dense llama, qwen3 and gpt2"):
        read_hf_config(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match=r"no model.safetensors or model.safetensors.index.json"):
        HFTensors(path, "llama")


def test_bare_gpt2_names_and_llama3_rope_scaling(tmp_path):
    """The original gpt2 upload has no `transformer.` prefix; Llama 3.1's RoPE scaling loads with a warning."""
    from safetensors.torch import save_file

    hf_model, path = _gpt2(tmp_path)
    sd = load_file(str(path / "model.safetensors"))
    save_file({k.removeprefix("transformer."): v for k, v in sd.items()}, str(path / "model.safetensors"))
    cfg, ours = read_hf_checkpoint(path)
    model = Transformer(cfg).eval()
    model.load_state_dict(ours, strict=False)
    with torch.no_grad():
        torch.testing.assert_close(model(_tokens()), hf_model(_tokens()).logits, **TOL)

    _, path = _llama(tmp_path)
    raw = json.loads((path / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0}
    (path / "config.json").write_text(json.dumps(raw))
    cfg, notes = read_hf_config(path)
    assert cfg.rope_theta == 500000.0 and "'yarn' is ignored" in notes[0]
    with pytest.warns(UserWarning, match="yarn"):
        load_base_weights(Transformer(cfg), path)


def test_llama3_rope_scaling_gives_transformers_logits(tmp_path):
    """Llama 3.1's frequency scaling, with an original context of 8 so that, at 16 positions and
    head size 8, the four frequencies fall in every band (kept, blended, stretched)."""
    scaling = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
    hf_model, path = _llama(tmp_path, rope_parameters=scaling)
    cfg, sd = read_hf_checkpoint(path)
    assert (cfg.rope_scaling_factor, cfg.rope_original_context) == (8.0, 8)
    ours = Transformer(cfg).eval()
    ours.load_state_dict(sd)
    unscaled = Transformer(dataclasses.replace(cfg, rope_scaling_factor=0.0)).eval()
    unscaled.load_state_dict(sd)
    x = _tokens()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf_model(x).logits, **TOL)
        assert (unscaled(x) - hf_model(x).logits).abs().max() > 1e-2  # the scaling matters here
    # export writes the scaling back; a recipe without it is refused by name
    from trainperf.model.hf import hf_config

    assert hf_config(cfg)["rope_parameters"]["rope_type"] == "llama3"
    with pytest.raises(WeightsError, match="rope_scaling_factor=8.0, the recipe 0.0"):
        read_hf_checkpoint(path, like=dataclasses.replace(cfg, rope_scaling_factor=0.0))


def test_gpt2_with_distinct_kv_heads_does_not_fold(tmp_path):
    _, path = _gpt2(tmp_path)
    like = ModelConfig(family="gpt", n_layer=2, d_model=32, n_head=4, n_kv_head=2, vocab_size=VOCAB, seq_len=SEQ,
                       bias=True)
    with pytest.raises(WeightsError, match=r"'transformer.h.0.attn.c_attn.weight' has 4 distinct k/v heads"):
        read_hf_checkpoint(path, like=like)


def test_cli_import_hf_writes_the_file_and_the_model_section(tmp_path, capsys):
    import tomllib

    hf_model, path = _gpt2(tmp_path, shard=True)
    out = tmp_path / "w" / "gpt2.safetensors"
    assert main(["import-hf", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    section = tomllib.loads(printed[printed.index("[model]"):])["model"]
    assert section["family"] == "gpt" and section["n_layer"] == 2 and section["bias"] is True
    cfg = ModelConfig(**section)
    model = Transformer(cfg).eval()
    assert load_base_weights(model, out) > 0
    x = _tokens()
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf_model(x).logits, **TOL)
    assert sorted(p.name for p in out.parent.iterdir()) == ["gpt2.safetensors"]  # no temp file left
    # an existing file is kept; a recipe of another model is a one-line error, exit 1
    assert main(["import-hf", str(path), "--out", str(out)]) == 1
    assert "exists" in capsys.readouterr().err
    assert main(["import-hf", str(path), "--out", str(tmp_path / "x.safetensors"), "--recipe", "gpt3_175b"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.n_layer=2, the recipe 96" in err
    assert not (tmp_path / "x.safetensors").exists()
    # the same recipe shrunk to the checkpoint's shapes: converted into its layout, section printed
    shrink = ["model.n_layer=2", "model.d_model=32", "model.n_head=4", "model.n_kv_head=4", "model.d_ff=128",
              "model.vocab_size=96", "model.seq_len=16"]
    args = ["import-hf", str(path), "--out", str(tmp_path / "x.safetensors"), "--recipe", "gpt3_175b"]
    assert main([*args, *(a for s in shrink for a in ("--set", s))]) == 0
    assert "matches recipe gpt3_175b" in capsys.readouterr().out
    assert load_file(str(tmp_path / "x.safetensors")).keys() == load_file(str(out)).keys()


def test_qwen3_checkpoint_needs_a_qk_norm_recipe_and_full_attention(tmp_path):
    _, path = _qwen3(tmp_path)
    recipe = ModelConfig(family="llama", n_layer=2, d_model=32, n_head=4, n_kv_head=2, d_ff=48, vocab_size=VOCAB,
                         seq_len=SEQ, rope_theta=500000.0, tie_embeddings=False, qk_norm=True)
    read_hf_checkpoint(path, like=recipe)
    with pytest.raises(WeightsError, match=r"the checkpoint has model.qk_norm=True, the recipe False$"):
        read_hf_checkpoint(path, like=dataclasses.replace(recipe, qk_norm=False))
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "use_sliding_window": True, "sliding_window": 8}))
    with pytest.raises(WeightsError, match=r"use_sliding_window=True: trainperf attends over the whole causal"):
        read_hf_config(path)


@pytest.mark.parametrize("change,msg", [
    ({"tie_word_embeddings": "false"}, r"tie_word_embeddings='false': must be true or false"),  # truthy to Python
    ({"tie_word_embeddings": 0}, r"tie_word_embeddings=0: must be true or false"),
    ({"mlp_bias": None}, r"mlp_bias=None: must be true or false"),
    ({"vocab_size": "drop"}, r"config.json: vocab_size is missing"),  # not LlamaConfig's 32,000
    ({"intermediate_size": "drop"}, r"config.json: intermediate_size is missing"),
    ({"num_key_value_heads": "drop", "head_dim": None}, None),  # transformers derives both: 4 heads of 8
])
def test_import_reads_booleans_and_sizes_as_transformers_types_them(tmp_path, change, msg):
    """transformers types a config's booleans bool (it refuses "false" and 0) and a size left out
    would be a class default, a guess at another model: both are refused by key, in one line."""
    _, path = _llama(tmp_path)
    raw = json.loads((path / "config.json").read_text())
    edited = {k: v for k, v in {**raw, **change}.items() if v != "drop"}
    (path / "config.json").write_text(json.dumps(edited))
    if msg is None:
        cfg, _ = read_hf_config(path)
        assert (cfg.kv_heads, cfg.head_dim) == (4, 8)
    else:
        with pytest.raises(WeightsError, match=msg + "[^\n]*$"):
            read_hf_config(path)


@pytest.mark.parametrize("key", ["num_hidden_layers", "vocab_size"])
def test_a_size_past_int32_is_refused_before_anything_is_built(tmp_path, key):
    """10**30 layers hung `import-hf` building the model; the bound is the one config.oversized states."""
    _, path = _llama(tmp_path)
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, key: 10**30}))
    with pytest.raises(WeightsError, match=rf"{key}=10+ is beyond 2147483647"):
        read_hf_config(path)


@pytest.mark.parametrize("change, msg", [({"rms_norm_eps": float("nan")}, r"rms_norm_eps=nan: must be a finite number > 0"),
                                         ({"rope_theta": -5, "rope_parameters": {"rope_type": "default", "rope_theta": -5}},
                                          r"rope_theta=-5.0: must be a finite number > 0")])
def test_scales_must_be_finite_and_positive(tmp_path, change, msg):
    _, path = _llama(tmp_path)
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, **change}))
    with pytest.raises(WeightsError, match=msg):
        read_hf_config(path)
