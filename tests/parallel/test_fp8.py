"""FP8 linear layers through torchao: which layers convert, and that training still matches bf16."""

import pytest
import torch
from torch.distributed.tensor.parallel import loss_parallel

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


def _fp8_tp_model(**cfg):
    """A 2-layer model built as the trainer builds it (meta device, `parallelize` with fp8 and tp=2)
    on torch's fake process group of 2 ranks: the collectives return without moving data, so the
    graph composes for real while the numbers are one rank's. gloo cannot carry FP8 tensors
    ("Invalid scalar type"), so a gloo run of the FP8 all-gather is not possible on a CPU."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from trainperf.config import ParallelConfig
    from trainperf.parallel.apply import parallelize
    from trainperf.parallel.dims import ParallelDims

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    dims = ParallelDims.from_config(ParallelConfig(tp=2, dp_shard=1), 2, 0)
    dims.build_mesh("cpu")
    with torch.device("meta"):
        m = Transformer(ModelConfig(n_layer=2, d_model=64, n_head=4, seq_len=32, vocab_size=96, **cfg))
    return parallelize(m, dims, torch.device("cpu"), "bf16", fp8=True, seed=0)


def _run_with_inputs_seen(m, names):
    """Forward and backward in bf16 autocast; the kind of tensor each named linear receives."""
    seen = {}

    def spy(name):
        def hook(mod, inp) -> None:
            seen.setdefault(name, type(getattr(inp[0], "_local_tensor", inp[0])).__name__)
        return hook

    for name in names:
        m.get_submodule(name).register_forward_pre_hook(spy(name))
    x = torch.randint(0, 96, (4, 33), generator=torch.Generator().manual_seed(1))
    # as the trainer's step_context: the vocabulary-split logits' loss and its backward under loss_parallel
    with loss_parallel():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = m(x[:, :-1], x[:, 1:]).mean()
        loss.backward()
    return loss, seen


def test_fp8_with_tensor_parallelism_uses_torchaos_float8_styles():
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard
    from torchao.float8.float8_linear import Float8Linear

    try:
        m = _fp8_tp_model(d_ff=192)  # 192 / tp=2 = 96 columns per rank: FP8 GEMMs take it
        blk = m.layers["0"]
        assert isinstance(blk.attn.wq, Float8Linear) and isinstance(blk.mlp.w2, Float8Linear)
        assert isinstance(blk.attn.wq.weight, DTensor) and blk.attn.wq.weight.placements == (Shard(0),)
        assert blk.attn.wo.weight.placements == (Shard(1),)
        loss, seen = _run_with_inputs_seen(m, ["layers.0.attn.wq", "layers.0.mlp.w1"])
        # cast to FP8 before the sequence-parallel all-gather (PrepareFloat8ModuleInput), as torchtitan does
        assert seen == {"layers.0.attn.wq": "Float8TrainingTensor", "layers.0.mlp.w1": "Float8TrainingTensor"}
        assert torch.isfinite(loss)
        assert all(p.grad is not None for p in m.parameters() if p.requires_grad)
    finally:
        dist.destroy_process_group()


def test_fp8_tp_keeps_bf16_inputs_where_a_layer_is_not_fp8():
    """An MLP too narrow for FP8 shards (176 / 2 = 88 columns) and LoRA attention (the adapters
    read the input in bf16) keep torch's styles; the other sub-module still gets the FP8 ones."""
    import torch.distributed as dist
    from torchao.float8.float8_linear import Float8Linear

    try:
        m = _fp8_tp_model(d_ff=176, lora_rank=4)
        assert not isinstance(m.layers["0"].mlp.w1, Float8Linear)
        assert isinstance(m.layers["0"].attn.wq.base, Float8Linear)
        loss, seen = _run_with_inputs_seen(m, ["layers.0.attn.wq", "layers.0.mlp.w1"])
        assert seen == {"layers.0.attn.wq": "Tensor", "layers.0.mlp.w1": "Tensor"}
        assert torch.isfinite(loss)
    finally:
        dist.destroy_process_group()


def test_fp8_with_tensor_parallelism_is_accepted():
    r = load_recipe("tiny", ["train.fp8_linear=true", "train.precision=bf16", "parallel.tp=2"])
    assert r.train.fp8_linear and r.parallel.tp == 2
