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


def test_the_ring_rotates_kv_chunks_instead_of_all_gathering(tmp_path):
    """torch's context_parallel all-gathers K/V unless told otherwise; inside trainperf's ring
    context the rotation is all-to-all (one chunk to the next rank per step), and torch's option is
    put back afterwards. On a 1-rank gloo group: the ring's kernels need CUDA, its option does not."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental._attention import _cp_options, _RotateMethod

    from trainperf.parallel.context import ring_context

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("cp",))
        before = _cp_options.rotate_method
        with ring_context(mesh, 8, torch.device("cpu")):
            assert _cp_options.rotate_method == _RotateMethod.ALL_TO_ALL
        assert _cp_options.rotate_method == before
    finally:
        dist.destroy_process_group()
