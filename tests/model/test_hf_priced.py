"""The dense decoder types the planner prices without training them (`hf_config.PRICED`): each
config, as transformers saves it, read into trainperf blocks that hold the same weights as
transformers' own model of it (every Linear and the token embedding, on the meta device)."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from trainperf.config import ConfigError  # noqa: E402
from trainperf.model.hf_config import PRICED  # noqa: E402
from trainperf.model.transformer import Transformer  # noqa: E402
from trainperf.plan.workload import custom_workload  # noqa: E402

# small sizes under each type's own key names, uneven so that a swapped size shows
LLAMA = dict(hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=6,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
SMALL = {
    **{t: LLAMA for t in PRICED},
    "gemma": {**LLAMA, "head_dim": 24},
    "gemma2": {**LLAMA, "head_dim": 24, "sliding_window": 64},
    "gemma3_text": {**LLAMA, "head_dim": 24, "sliding_window": 64},
    "olmo3": {**LLAMA, "sliding_window": 64},
    "nemotron": {**LLAMA, "head_dim": 16},
    # their HF classes default head_dim to a size of another model (or to null, which they cannot build)
    **{t: {**LLAMA, "head_dim": 16} for t in ("helium", "hunyuan_v1_dense")},
    "ministral": {**LLAMA, "head_dim": 16, "sliding_window": 64},
    "arcee": {**LLAMA, "head_dim": 16},
    "phi": {**LLAMA, "num_key_value_heads": 6},
    "gpt_neox": {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"},
    "falcon": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6, num_kv_heads=2,
                   new_decoder_architecture=True, ffn_hidden_size=160, vocab_size=256, max_position_embeddings=64),
    "opt": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6, ffn_dim=160, vocab_size=256,
                max_position_embeddings=64, word_embed_proj_dim=96),
    "bloom": dict(hidden_size=96, n_layer=2, n_head=6, vocab_size=256),
    # transformers' MPT builds a 4 x d_model MLP whatever expansion_ratio says; MosaicML's own code
    # (and the planner) read the ratio, 4 in every released MPT
    "mpt": dict(d_model=96, n_layers=2, n_heads=6, expansion_ratio=4, max_seq_len=64, vocab_size=256),
    "gpt_bigcode": dict(n_embd=96, n_layer=2, n_head=6, n_inner=160, n_positions=64, vocab_size=256),
    "gptj": dict(n_embd=96, n_layer=2, n_head=6, n_inner=160, n_positions=64, vocab_size=256, rotary_dim=8),
}


def weights(model: torch.nn.Module, embedding: torch.nn.Module) -> dict[str, int]:
    """Sizes of every Linear weight and of the token embedding, a tied head's counted once."""
    seen, out = set(), {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) or m is embedding:
            if id(m.weight) not in seen:
                seen.add(id(m.weight))
                out[name] = m.weight.numel()
    return out


def saved(tmp_path, kind: str, **extra) -> str:
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside the small vocabulary
    cfg = transformers.AutoConfig.for_model(kind, **{**SMALL[kind], **ids, **extra})
    cfg.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("kind", sorted(PRICED))
@pytest.mark.parametrize("tied", [False, True])
def test_a_priced_type_holds_transformers_weights(tmp_path, kind, tied):
    folder = saved(tmp_path, kind, tie_word_embeddings=tied)
    cfg = custom_workload(folder, seq_len=64 if kind == "bloom" else None, gbs=8).model
    raw = json.loads((tmp_path / "config.json").read_text())
    assert cfg.tie_embeddings == raw.get("tie_word_embeddings", PRICED[kind].tied)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder))
        ours = Transformer(cfg)
    theirs, mine = weights(hf, hf.get_input_embeddings()), weights(ours, ours.tok_emb)
    assert sum(mine.values()) == sum(theirs.values()), (kind, mine, theirs)  # fused q/k/v or gate/up: one each
    assert cfg.gated == PRICED[kind].gated


@pytest.mark.parametrize("kind,extra,msg", [
    ("gemma2", {"sliding_window": 32}, "sliding_window=32: .*a 32-token window is that only for sequences of at "
                                       "most 32 tokens \\(this one: 64\\)"),
    ("olmo3", {"layer_types": ["linear_attention", "full_attention"]}, "layer_types holds linear_attention"),
    ("falcon", {"num_kv_heads": 4}, "num_kv_heads=4: does not divide num_attention_heads=6"),
    ("mpt", {"expansion_ratio": 0}, "expansion_ratio=0: must be a positive integer"),
    ("bloom", {}, "a bloom config states no sequence length .*give --seq-len"),
    ("nemotron", {"num_hidden_layers": None}, "num_hidden_layers=None: must be a positive integer"),
])
def test_what_a_priced_type_cannot_be_priced_by_is_refused_by_key(tmp_path, kind, extra, msg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": kind, **SMALL[kind], **extra}))
    with pytest.raises(ConfigError, match=msg):
        custom_workload(str(p), gbs=8)


def test_falcon_states_its_kv_heads_three_ways(tmp_path):
    """FalconConfig: grouped KV heads only in the new decoder architecture, else one (multi-query) or all."""
    p = tmp_path / "config.json"
    base = {k: v for k, v in SMALL["falcon"].items() if k not in ("num_kv_heads", "new_decoder_architecture")}
    for extra, kv in (({"new_decoder_architecture": True, "num_kv_heads": 2}, 2), ({"multi_query": True}, 1),
                      ({"multi_query": False}, 6), ({}, 1)):
        p.write_text(json.dumps({"model_type": "falcon", **base, **extra}))
        assert custom_workload(str(p), gbs=8).model.kv_heads == kv
    p.write_text(json.dumps({"model_type": "falcon", **{k: v for k, v in base.items() if k != "max_position_embeddings"}}))
    with pytest.raises(ConfigError, match="max_position_embeddings is missing: give --seq-len"):
        custom_workload(str(p), gbs=8)
    assert custom_workload(str(p), seq_len=2048, gbs=8).model.seq_len == 2048


def test_the_planner_prices_a_gemma_config_and_names_it(tmp_path, capsys):
    from trainperf.cli.main import main

    folder = saved(tmp_path, "gemma")
    assert main(["plan", "--model", folder, "--gpu", "h100", "--gpus", "8", "--gbs", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model_shape"]["gated_mlp"] and d["model_source"].endswith("config.json")


def test_a_width_under_its_older_name_is_read_and_named_as_written(tmp_path):
    """BloomConfig and FalconConfig take `n_embed` for hidden_size: read from it, and an error about
    it names the key the file holds, on every path that names keys (size_keys is the one rule)."""
    from trainperf.model.hf_config import size_keys

    raw = {"model_type": "bloom", **{k: v for k, v in SMALL["bloom"].items() if k != "hidden_size"},
           "n_embed": SMALL["bloom"]["hidden_size"]}
    assert size_keys("bloom", raw)["d_model"] == "n_embed" and size_keys("bloom")["d_model"] == "hidden_size"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw))
    assert custom_workload(str(p), seq_len=64, gbs=8).model.d_model == SMALL["bloom"]["hidden_size"]
    p.write_text(json.dumps({**raw, "n_embed": 1 << 40}))
    with pytest.raises(ConfigError, match="n_embed"):
        custom_workload(str(p), seq_len=64, gbs=8)
