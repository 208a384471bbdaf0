import torch

from trainperf.config import ModelConfig
from trainperf.model.transformer import Transformer, lora_state_dict, merged_state_dict


def _model(**kw):
    torch.manual_seed(0)
    return Transformer(ModelConfig(n_layer=2, d_model=32, n_head=4, seq_len=16, vocab_size=50, **kw))


def test_both_families_forward_and_causal():
    for fam in ("llama", "gpt"):
        m = _model(family=fam)
        x = torch.randint(0, 50, (2, 16))
        logits = m(x)
        assert logits.shape == (2, 16, 50)
        x2 = x.clone()
        x2[:, -1] = (x2[:, -1] + 1) % 50  # changing the last token must not change earlier logits
        assert torch.allclose(m(x2)[:, :-1], logits[:, :-1], atol=1e-5)


def test_gqa_has_fewer_kv_params():
    assert sum(p.numel() for p in _model(n_kv_head=1).parameters()) < sum(p.numel() for p in _model().parameters())


def test_lora_freezes_base_and_merges_exactly():
    m = _model(lora_rank=4, lora_targets=["wq", "wv"])
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_b" in n:
                p.normal_()
    x = torch.randint(0, 50, (2, 16))
    plain = Transformer(m.cfg.__class__(**{**m.cfg.__dict__, "lora_rank": 0}))
    plain.load_state_dict(merged_state_dict(m), strict=True)
    assert torch.allclose(plain(x), m(x), atol=1e-4)
    assert set(lora_state_dict(m)) == {n for n in m.state_dict() if ".lora_" in n}


def test_rope_scores_depend_only_on_relative_position():
    from trainperf.model.transformer import apply_rope, precompute_rope

    rope = precompute_rope(8, 32, 10000.0)
    torch.manual_seed(1)
    q, k = torch.randn(8), torch.randn(8)
    def score(i, j):
        qi = apply_rope(q.view(1, 1, 1, 8).expand(1, 1, 32, 8), rope)[0, 0, i]
        kj = apply_rope(k.view(1, 1, 1, 8).expand(1, 1, 32, 8), rope)[0, 0, j]
        return float(qi @ kj)
    assert abs(score(5, 2) - score(20, 17)) < 1e-4
    assert abs(score(5, 2) - score(5, 3)) > 1e-3


def test_rms_norm_runs_fused_under_bf16_autocast_without_warnings():
    """The query/key norms see bf16 activations under autocast; their fp32 weight is cast to the
    input's format, so torch takes its fused kernel instead of warning and falling back (every run
    printed "Cannot dispatch to fused implementation"), and the gradient still reaches the fp32 weight."""
    import warnings

    cfg = ModelConfig(family="llama", n_layer=1, d_model=32, n_head=2, seq_len=8, vocab_size=50, qk_norm=True)
    torch.manual_seed(0)
    m = Transformer(cfg)
    x = torch.randint(0, 50, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = m(x, x).mean()
        loss.backward()
    q_norm = m.layers["0"].attn.q_norm.weight
    assert q_norm.dtype == torch.float32 and q_norm.grad is not None and q_norm.grad.dtype == torch.float32
    h = torch.randn(3, 32).bfloat16()
    norm = m.layers["0"].attn_norm
    ref = (h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + norm.eps)).bfloat16()
    torch.testing.assert_close(norm(h), ref, rtol=1e-2, atol=1e-2)


def test_a_chunked_loss_gives_the_whole_ones_losses_and_gradients():
    """Past model.loss_chunk_bytes the head and the loss run chunk by chunk under activation
    checkpointing: the per-token losses and every gradient are the whole computation's (fp32; the
    head's weight gradient summed over chunks, so equal to rounding), unscored targets included."""
    from dataclasses import replace

    from trainperf.model.loss import loss_chunk

    cfg = ModelConfig(family="llama", n_layer=2, d_model=32, n_head=4, vocab_size=97, seq_len=24)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 97, (3, 24), generator=gen)
    y = torch.randint(0, 97, (3, 24), generator=gen)
    y[0, :5] = -100  # a prompt's unscored tokens
    runs = []
    for limit in (0, 11 * 97 * 12):  # never in chunks; then 7 chunks of 11 tokens, the last 6
        torch.manual_seed(0)
        m = Transformer(replace(cfg, loss_chunk_bytes=limit))
        losses = m(x, y)
        (losses.sum() / 3).backward()
        runs.append((losses.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    assert loss_chunk(72, 97, 11 * 97 * 12) == 11  # the second run did chunk
    (l0, g0), (l1, g1) = runs
    assert l1.shape == (3, 24) and torch.equal(l1[0, :5], torch.zeros(5))
    torch.testing.assert_close(l1, l0, rtol=0, atol=1e-6)
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-5, atol=1e-6, msg=n)


def test_loss_chunks_are_equal_and_bounded():
    from trainperf.config import ModelConfig as M
    from trainperf.model.loss import loss_bytes, loss_chunk

    limit = M().loss_chunk_bytes
    assert limit == 1 << 30 and loss_chunk(2048, 32000, limit) == 2048  # 0.79 GB: whole
    assert loss_chunk(8192, 128256, 0) == 8192  # 0: never in chunks
    for tokens, vocab in ((8192, 128256), (2048, 128256), (16384, 50368)):
        c = loss_chunk(tokens, vocab, limit)
        n = -(-tokens // c)
        assert loss_bytes(c, vocab, 1) <= limit  # each chunk holds no more
        assert (n - 1) * c < tokens <= n * c
        assert n == -(-loss_bytes(tokens, vocab, 1) // limit)  # the fewest that do
    assert loss_chunk(8192, 128256, limit, tp=2) == 820  # loss_parallel: 20 bytes per local entry
    assert loss_chunk(8192, 128256, limit) == 683  # Llama 3.1 8B's sequence: 12 chunks, 1.05 GB each


def test_written_out_attention_is_the_fused_kernels_and_is_taken_in_bf16_on_short_cpu_sequences(monkeypatch):
    """`causal_attention` computes what scaled_dot_product_attention(is_causal=True) does, grouped
    heads included (values and gradients); a block takes it on a CPU in bf16 up to
    EXPLICIT_ATTENTION_MAX_LEN tokens and the fused kernel in fp32 or past that length."""
    import torch.nn.functional as F

    from trainperf.model import transformer
    from trainperf.model.transformer import EXPLICIT_ATTENTION_MAX_LEN, Attention, causal_attention

    gen = torch.Generator().manual_seed(0)
    for kv in (4, 2):
        q = torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64, requires_grad=True)
        k, v = (torch.randn(2, kv, 16, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != 4)
        got = causal_attention(q, k, v)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.autograd.grad(got.square().sum(), (q, k, v)),
                                   torch.autograd.grad(want.square().sum(), (q, k, v)))
    taken = []
    monkeypatch.setattr(transformer, "causal_attention", lambda *a: taken.append(a[0].shape[-2]) or a[0])
    attn = Attention(ModelConfig(n_layer=1, d_model=32, n_head=4, seq_len=16, vocab_size=50))
    for dtype, t in ((torch.bfloat16, EXPLICIT_ATTENTION_MAX_LEN), (torch.bfloat16, EXPLICIT_ATTENTION_MAX_LEN + 1),
                     (torch.float32, 8)):
        q = torch.randn(1, 4, t, 8, dtype=dtype)
        attn.attend(q, q, q)
    assert taken == [EXPLICIT_ATTENTION_MAX_LEN]
