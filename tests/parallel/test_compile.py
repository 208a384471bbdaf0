"""How `parallelize` compiles: each block, parameter names unchanged (checkpoints cross layouts)."""

import torch

from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.parallel.apply import compile_model


def _model() -> torch.nn.Module:
    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.seq_len=16"])
    with torch.device("meta"):
        return Transformer(r.model)


def test_each_block_is_compiled_and_the_names_are_kept():
    m = _model()
    names = [n for n, _ in m.named_parameters()]
    compile_model(m)
    assert m._compiled_call_impl is None
    assert all(b._compiled_call_impl is not None for b in m.layers.values())
    assert [n for n, _ in m.named_parameters()] == names
