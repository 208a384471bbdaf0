"""How context-parallel attention is chosen, and the ring path's own attention, in one process
(the multi-process parity of the all-gather path is in test_parallel.py)."""

import torch
import torch.nn.functional as F

from trainperf.parallel.context import _ring_attention, ring_unsupported


def test_the_ring_is_not_chosen_off_cuda():
    why = ring_unsupported(torch.device("cpu"), None, torch.float32, heads=4, seq=16, head_dim=16)
    assert why is not None and "cpu" in why


def test_ring_attention_repeats_grouped_heads_like_enable_gqa():
    """Outside context_parallel the ring path's attention is plain causal SDPA: with 4 query heads
    over 2 key/value heads it gives what the model's own attention (enable_gqa) gives, to rounding."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 16, 8, generator=gen)
    k, v = torch.randn(2, 2, 16, 8, generator=gen), torch.randn(2, 2, 16, 8, generator=gen)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(_ring_attention(q, k, v), want, rtol=1e-5, atol=1e-6)
