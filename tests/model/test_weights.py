import pytest
import torch
from safetensors.torch import save_file

from trainperf.config import ModelConfig
from trainperf.model.transformer import Transformer, merged_state_dict
from trainperf.errors import WeightsError
from trainperf.model.weights import load_adapters, load_base_weights, save_adapters


def _cfg(**kw):
    base = dict(n_layer=2, d_model=32, n_head=4, n_kv_head=2, seq_len=16, vocab_size=64, tie_embeddings=False)
    return ModelConfig(**{**base, **kw})


def test_base_checkpoint_into_lora_model_and_adapters_on_their_own(tmp_path):
    torch.manual_seed(0)
    base = Transformer(_cfg())
    save_file({k: v.contiguous() for k, v in base.state_dict().items()}, str(tmp_path / "base.safetensors"))
    lora = Transformer(_cfg(lora_rank=4, lora_alpha=8.0))
    load_base_weights(lora, tmp_path / "base.safetensors")
    x = torch.randint(0, 64, (2, 16))
    assert torch.equal(lora(x), base(x))  # B starts at zero: the adapters add nothing yet
    assert {n for n, p in lora.named_parameters() if p.requires_grad} == {
        n for n in lora.state_dict() if ".lora_" in n}  # only adapters train
    with torch.no_grad():
        for n, p in lora.named_parameters():
            if ".lora_b" in n:
                p.normal_()
    save_adapters(lora, tmp_path / "adapters.safetensors")
    other = Transformer(_cfg(lora_rank=4, lora_alpha=8.0))
    load_base_weights(other, tmp_path / "base.safetensors")
    assert load_adapters(other, tmp_path / "adapters.safetensors") == 2 * 4 * 2  # a, b on wq wk wv wo, 2 layers
    assert torch.allclose(other(x), lora(x))
    plain = Transformer(_cfg())
    plain.load_state_dict(merged_state_dict(lora))
    assert torch.allclose(plain(x), lora(x), atol=1e-5)


def test_checkpoint_errors(tmp_path):
    m = Transformer(_cfg())
    with pytest.raises(WeightsError, match="not found"):
        load_base_weights(m, tmp_path / "missing.safetensors")
    save_file({k: v.contiguous() for k, v in Transformer(_cfg(d_model=64)).state_dict().items()},
              str(tmp_path / "wide.safetensors"))
    with pytest.raises(WeightsError, match="shape"):
        load_base_weights(m, tmp_path / "wide.safetensors")
    with pytest.raises(WeightsError, match="no LoRA adapters"):
        save_adapters(m, tmp_path / "a.safetensors")


def test_meta_built_lora_model_materializes_and_loads_its_base(tmp_path):
    """Built on the meta device (as every run builds), given storage and seeded weights tensor by
    tensor, then the start checkpoint read one tensor at a time; B = 0, so it computes the base."""
    import dataclasses

    cfg = ModelConfig(n_layer=2, d_model=32, n_head=4, n_kv_head=2, seq_len=16, vocab_size=64, tie_embeddings=False)
    torch.manual_seed(0)
    base = Transformer(cfg).eval()
    save_file({k: v.contiguous() for k, v in base.state_dict().items()}, str(tmp_path / "base.safetensors"))
    lcfg = dataclasses.replace(cfg, lora_rank=4)
    with torch.device("meta"):
        lora = Transformer(lcfg)
    lora.to_empty(device="cpu")
    lora.init_weights(seed=3)
    with torch.device("meta"):  # the same seed draws the same weights
        again = Transformer(lcfg)
    again.to_empty(device="cpu")
    again.init_weights(seed=3)
    for (n, p), (_, q) in zip(lora.named_parameters(), again.named_parameters()):
        assert torch.equal(p, q), n
    wq = lora.layers["0"].attn.wq
    assert float(wq.lora_a.detach().abs().max()) > 0 and float(wq.lora_b.detach().abs().max()) == 0
    assert load_base_weights(lora, tmp_path / "base.safetensors") == len(base.state_dict())
    x = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        assert torch.equal(lora.eval()(x), base(x))


def test_eager_and_meta_builds_share_one_init():
    """One init rule: an eager build seeded through torch's global generator and a meta build given
    the same generator state draw the same weights (there is no second implementation to drift)."""
    cfg = ModelConfig(n_layer=2, d_model=32, n_head=4, seq_len=16, vocab_size=64, lora_rank=2)
    with torch.device("meta"):
        meta = Transformer(cfg)
    meta.to_empty(device="cpu")
    torch.manual_seed(5)
    meta.init_weights()
    torch.manual_seed(5)
    eager = Transformer(cfg)
    torch.manual_seed(5)
    eager.init_weights()
    for (n, p), (_, q) in zip(eager.named_parameters(), meta.named_parameters()):
        assert torch.equal(p, q), n
    std = eager.layers["0"].attn.wo.base.weight.std().item()
    assert std < 0.02 / 1.5  # the residual projection is scaled by 1/sqrt(2 n_layer) = 0.5
    assert torch.equal(eager.norm.weight, torch.ones(32))


def test_a_pipeline_stage_loads_its_share_of_a_start_checkpoint(tmp_path):
    """The last of 2 stages takes its layers and, for a tied head, the embedding as its head."""
    from trainperf.parallel.pipeline import split_stage

    cfg = ModelConfig(n_layer=4, d_model=32, n_head=4, seq_len=16, vocab_size=64)  # tied embeddings
    torch.manual_seed(0)
    whole = Transformer(cfg)
    sd = {k: v.contiguous() for k, v in whole.state_dict().items() if k != "output.weight"}
    save_file(sd, str(tmp_path / "start.safetensors"))
    last = split_stage(whole, 1, 2)
    for p in last.parameters():
        p.data.zero_()
    assert sorted(last.layers.keys()) == ["2", "3"] and last.tok_emb is None
    load_base_weights(last, tmp_path / "start.safetensors")
    assert torch.equal(last.output.weight, whole.tok_emb.weight)
    assert torch.equal(last.layers["3"].mlp.w2.weight, whole.layers["3"].mlp.w2.weight)
