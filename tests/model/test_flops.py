import torch

from trainperf.config import ModelConfig
from trainperf.model.flops import flops_per_token, forward_breakdown, matmul_params
from trainperf.model.transformer import Transformer


def test_gpt_flops_by_hand():
    # GPT: d=64, 2 layers, 4 heads, ff=256, vocab=100, T=16
    cfg = ModelConfig(family="gpt", n_layer=2, d_model=64, n_head=4, seq_len=16, vocab_size=100)
    per_layer = 2 * 64 * 64 * 4 + 2 * 64 * 256 * 2  # qkvo + mlp
    attn = 2 * 2 * 16 * 64
    head = 2 * 64 * 100
    fwd = 2 * (per_layer + attn) + head
    assert forward_breakdown(cfg).forward == fwd
    assert flops_per_token(cfg) == 3 * fwd
    assert flops_per_token(cfg, training=False) == fwd


def test_six_n_rule_matches_linear_params():
    # matmul params N: training FLOPs = 6N + attention term (PaLM)
    cfg = ModelConfig(family="llama", n_layer=3, d_model=128, n_head=8, n_kv_head=2, seq_len=64, vocab_size=512)
    model = Transformer(cfg)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert matmul_params(cfg) == linear
    assert flops_per_token(cfg) == 6 * linear + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * cfg.seq_len


def test_lora_flops_fewer_than_full():
    full = ModelConfig(n_layer=2, d_model=64, n_head=4, seq_len=16, vocab_size=100)
    lora = ModelConfig(n_layer=2, d_model=64, n_head=4, seq_len=16, vocab_size=100, lora_rank=4)
    assert flops_per_token(lora) < flops_per_token(full)
