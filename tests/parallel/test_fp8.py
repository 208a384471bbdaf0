"""FP8 linear layers through torchao: which layers convert, and that training still matches bf16."""

import pytest
import torch

from trainperf.config import ConfigError, ModelConfig, load_recipe
from trainperf.model.transformer import Transformer
from trainperf.parallel.apply import apply_float8

torchao = pytest.importorskip("torchao")


def _model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(n_layer=2, d_model=64, n_head=4, seq_len=32, vocab_size=96, d_ff=176))


def test_blocks_convert_head_and_odd_shapes_do_not():
    from torchao.float8.float8_linear import Float8Linear

    m = _model()
    apply_float8(m)
    kinds = {n: type(mod).__name__ for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    assert isinstance(m.layers["0"].attn.wq, Float8Linear)
    assert isinstance(m.layers["1"].mlp.w1, Float8Linear)  # 64 -> 176: both multiples of 16
    assert kinds["output"] == "Linear"  # the head stays bf16


def test_fp8_losses_follow_bf16():
    x = torch.randint(0, 96, (4, 32), generator=torch.Generator().manual_seed(1))
    losses = {}
    for fp8 in (False, True):
        m = _model()
        if fp8:
            apply_float8(m)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        out = []
        for _ in range(5):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = m(x[:, :-1], x[:, 1:]).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(float(loss.detach()))
        losses[fp8] = out
    # FP8 (e4m3: 3 mantissa bits) rounds far more than bf16; the trajectories agree to a few percent
    assert losses[True][-1] < losses[True][0]
    for a, b in zip(losses[False], losses[True]):
        assert abs(a - b) / a < 0.05


def test_fp8_needs_bf16():
    with pytest.raises(ConfigError, match="train.fp8_linear"):
        load_recipe("tiny", ["train.fp8_linear=true", "train.precision=fp32"])
