"""plan.stack_memory: the PyTorch-native trainer's memory per rank, torch-free. Its parameter counts
must be the model's own (checked against the meta-device model); its agreement with the traced
memory is tests/train/test_memtrace.py."""

import pytest
import torch

from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.plan.stack_memory import block_params, root_params, stack_memory


@pytest.mark.parametrize("sets", [
    ["model.vocab_size=512"],
    ["model.vocab_size=512", "model.qk_norm=true", "model.lora_rank=4", "model.lora_targets=wq,wv,w2"],
    ["model.vocab_size=512", "model.family=gpt", "model.bias=true", "model.tie_embeddings=true"],
])
def test_parameter_counts_are_the_models(sets):
    r = load_recipe("tiny", sets)
    with torch.device("meta"):
        m = Transformer(r.model)
    blk, lora = block_params(r.model)
    layer0 = [p for n, p in m.named_parameters() if n.startswith("layers.0.")]
    assert blk == sum(p.numel() for p in layer0)
    assert lora == sum(p.numel() for n, p in m.named_parameters() if n.startswith("layers.0.") and "lora_" in n)
    total = sum(p.numel() for p in m.parameters())
    assert r.model.n_layer * blk + root_params(r.model, first=True, last=True) == total


def test_whole_gradients_are_kept_only_where_they_fit():
    r = load_recipe("llama31_8b", [])
    big = stack_memory(r.model, dp=8, mbs=1, gbs=32, gpu_bytes=1e13)
    small = stack_memory(r.model, dp=8, mbs=1, gbs=32, gpu_bytes=80e9)
    assert (big.accumulation_mode, small.accumulation_mode) == ("unsharded", "reduce-scatter")
    # 4 bytes for every parameter of the 8B between micro-batches
    assert big.accumulation == pytest.approx(4 * 8.03e9, rel=0.01) and small.accumulation == 0
