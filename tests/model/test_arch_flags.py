"""The architecture levers of the time-to-target recipe: each changes the function it says it
changes, the FLOP count follows the MLP's shape, and Hugging Face export refuses what its classes
cannot compute."""

import pytest
import torch

from trainperf.config import ConfigError, load_recipe
from trainperf.errors import WeightsError
from trainperf.model import hf
from trainperf.model.flops import forward_breakdown
from trainperf.model.transformer import Transformer

SMALL = ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.n_head=4", "model.seq_len=16",
         "model.qk_norm=false"]  # each lever on only where a test names it


def build(*extra: str) -> Transformer:
    torch.manual_seed(0)
    return Transformer(load_recipe("tiny", SMALL + list(extra)).model)


def test_relu2_mlp_is_ungated_and_counted_so():
    m = build("model.mlp_act=relu2")
    mlp = m.layers["0"].mlp
    assert not hasattr(mlp, "w3") and mlp.w1.out_features == 4 * 32
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(mlp(x), mlp.w2(torch.relu(mlp.w1(x)) ** 2))
    cfg = m.cfg
    assert forward_breakdown(cfg).mlp == cfg.n_layer * 2 * 2 * 32 * 128
    assert forward_breakdown(build().cfg).mlp == 2 * 3 * 2 * 32 * build().cfg.ff_dim


def test_qk_norm_makes_attention_invariant_to_the_query_scale():
    m = build("model.qk_norm=true")
    attn, x = m.layers["0"].attn, torch.randn(1, 6, 32)
    y = attn(x, m.rope)
    with torch.no_grad():
        attn.wq.weight.mul_(7.0)  # the per-head RMSNorm divides the scale back out
        attn.wk.weight.mul_(3.0)
    torch.testing.assert_close(attn(x, m.rope), y, rtol=1e-3, atol=1e-5)
    plain = build()
    with torch.no_grad():
        plain.layers["0"].attn.wq.weight.mul_(7.0)
    assert not torch.allclose(plain.layers["0"].attn(x, plain.rope), build().layers["0"].attn(x, plain.rope), atol=1e-4)


def test_softcap_bounds_logits_and_zero_head_starts_uniform():
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    capped = build("model.logit_softcap=0.5")(idx)
    assert float(capped.detach().abs().max()) < 0.5
    torch.testing.assert_close(capped, 0.5 * torch.tanh(build()(idx) / 0.5))  # same weights, capped
    zero = build("model.zero_init_head=true", "model.tie_embeddings=false")
    losses = zero(idx, idx)
    torch.testing.assert_close(losses, torch.full_like(losses, torch.log(torch.tensor(64.0)).item()))
    with pytest.raises(ConfigError, match="^model.zero_init_head: needs model.tie_embeddings = false"):
        load_recipe("tiny", ["model.zero_init_head=true"])


@pytest.mark.parametrize("flags, key", [(["model.family=gpt", "model.qk_norm=true"], "model.qk_norm"),
                                        (["model.qk_norm=true", "model.bias=true"], "model.qk_norm"),
                                        (["model.mlp_act=relu2"], "model.mlp_act"),
                                        (["model.logit_softcap=30"], "model.logit_softcap")])
def test_hf_export_refuses_what_transformers_cannot_load(flags, key):
    cfg = build(*flags).cfg
    with pytest.raises(WeightsError, match=f"^{key}=.*cannot be exported"):
        hf.hf_config(cfg)
    with pytest.raises(WeightsError, match=f"^{key}="):
        hf.to_hf(cfg, build(*flags).state_dict())


def test_hf_export_takes_the_levers_transformers_computes():
    hf.hf_config(build("model.zero_init_head=true", "model.tie_embeddings=false").cfg)  # init only: exportable
    qk = build("model.qk_norm=true")
    assert hf.hf_config(qk.cfg)["architectures"] == ["Qwen3ForCausalLM"]
    assert {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"} <= hf.to_hf(
        qk.cfg, qk.state_dict()).keys()
