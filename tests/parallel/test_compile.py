"""How `parallelize` compiles: each block (the whole model as one graph only when asked, to measure it);
parameter names unchanged either way (checkpoints cross layouts)."""

import torch

from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.parallel.apply import compile_model


def _model() -> torch.nn.Module:
    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.seq_len=16"])
    with torch.device("meta"):
        return Transformer(r.model)


def test_compile_each_block_or_the_whole_model_keeps_the_names():
    whole, blocks = _model(), _model()
    names = [n for n, _ in whole.named_parameters()]
    compile_model(whole, whole=True)
    compile_model(blocks, whole=False)
    assert whole._compiled_call_impl is not None
    assert all(b._compiled_call_impl is None for b in whole.layers.values())
    assert blocks._compiled_call_impl is None
    assert all(b._compiled_call_impl is not None for b in blocks.layers.values())
    assert [n for n, _ in whole.named_parameters()] == [n for n, _ in blocks.named_parameters()] == names
