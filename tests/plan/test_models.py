"""FLOPs, memory and collective formulas against hand calculations and published numbers."""

import math
from dataclasses import replace

import pytest

from trainperf.config import ModelConfig
from trainperf.plan import comm
from trainperf.plan.flops import flops_per_token, layer_gemms, matmul_params, megatron_flops_per_iteration, six_n
from trainperf.plan.memory import activation_bytes_per_layer, korthikanti_per_layer, state_bytes

GPT3 = ModelConfig(family="gpt", n_layer=96, d_model=12288, n_head=96, d_ff=49152, vocab_size=50257,
                   seq_len=2048, tie_embeddings=True, bias=True)


def test_gpt3_training_compute_matches_the_gpt3_paper():
    # Brown et al. 2020, Table D.1: 3.14e23 FLOPs to train 175B on 300B tokens (the 6·N rule)
    total = six_n(GPT3) * 300e9
    assert total == pytest.approx(3.14e23, rel=0.01)
    assert matmul_params(GPT3) == 96 * 12 * 12288**2 + 12288 * 50257


def test_flops_per_token_is_megatrons_per_iteration_formula():
    # Narayanan et al. 2021: 72·B·s·l·h²·(1 + s/6h + V/12lh) per iteration without recompute
    B, s = 1536, 2048
    ours = flops_per_token(GPT3) * B * s
    assert ours == pytest.approx(megatron_flops_per_iteration(B, s, 96, 12288, 50257), rel=1e-12)
    # with full recompute the layers' forward runs twice: 96 instead of 72, the head not repeated
    rc = megatron_flops_per_iteration(B, s, 96, 12288, 50257, recompute=True)
    fwd_layers = (flops_per_token(GPT3) - 6 * 12288 * 50257) / 3 * B * s
    assert rc == pytest.approx(ours + fwd_layers, rel=1e-12)


def test_layer_gemms_shard_by_tp():
    cfg = ModelConfig(family="llama", n_layer=2, d_model=4096, n_head=32, n_kv_head=8, d_ff=14336, vocab_size=1000)
    g1 = {g.name: (g.n, g.k) for g in layer_gemms(cfg, 1)}
    g4 = {g.name: (g.n, g.k) for g in layer_gemms(cfg, 4)}
    assert g1["qkv"] == ((32 + 16) * 128, 4096) and g4["qkv"] == (48 * 128 // 4, 4096)
    assert g1["mlp_in"] == (2 * 14336, 4096) and g4["mlp_out"] == (4096, 14336 // 4)
    # the sharded GEMMs add up to the layer's forward matmul FLOPs per token
    per_tok = sum(2 * n * k for n, k in g1.values())
    from trainperf.model.flops import forward_breakdown

    b = forward_breakdown(cfg)
    assert per_tok * cfg.n_layer == b.attn_proj + b.mlp


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("selective", [False, True])
def test_activation_memory_is_korthikanti(t, sp, selective):
    cfg = ModelConfig(family="gpt", n_layer=1, d_model=1024, n_head=16, d_ff=4096, vocab_size=100)
    s, b = 2048, 2
    ours = activation_bytes_per_layer(cfg, s, b, tp=t, sp=sp, flash=False, dropout=True,
                                      recompute="selective" if selective else "none")
    if not sp and selective:
        # the paper's selective formula is given with sequence parallelism; without it: 10 + 24/t
        assert ours == pytest.approx(s * b * 1024 * (10 + 24 / t))
        return
    assert ours == pytest.approx(korthikanti_per_layer(s, b, 1024, 16, t, sp=sp, selective=selective))


def test_activation_memory_full_recompute_and_flash():
    cfg = ModelConfig(family="gpt", n_layer=1, d_model=1024, n_head=16, d_ff=4096, vocab_size=100)
    s, b, t = 4096, 1, 4
    assert activation_bytes_per_layer(cfg, s, b, tp=t, recompute="full") == 2 * s * b * 1024 / t
    # FlashAttention drops the 5as²b score terms; no dropout drops the 2sbh of masks: 32·sbh/t left
    assert activation_bytes_per_layer(cfg, s, b, tp=t) == pytest.approx(32 * s * b * 1024 / t)


def test_frozen_mlp_keeps_no_gemm_inputs():
    cfg = ModelConfig(family="llama", n_layer=1, d_model=1024, n_head=8, n_kv_head=2, d_ff=2816, vocab_size=100)
    s, b = 4096, 1
    full = activation_bytes_per_layer(cfg, s, b)
    frozen = activation_bytes_per_layer(cfg, s, b, frozen_mlp=True)
    # the MLP input (2sbh) and the down-projection input (2sbf) served only weight gradients
    assert full - frozen == 2 * s * b * 1024 + 2 * s * b * 2816


def test_optimizer_state_sharding():
    w, g, o = state_bytes(1e9, 0, dp_shard=1, precision="bf16")
    assert (w + g + o) / 1e9 == 18  # 2 + 4 + 12 bytes/param (Megatron's mixed-precision Adam)
    w, g, o = state_bytes(1e9, 0, dp_shard=8, precision="bf16")
    assert (w + g + o) / 1e9 == pytest.approx(6 + 12 / 8)
    # LoRA: the frozen base only holds bf16 weights
    w, g, o = state_bytes(1e6, 1e9, dp_shard=1, precision="bf16")
    assert w == pytest.approx(2 * (1e9 + 1e6)) and g == 4e6 and o == 12e6


def test_fp8_parameters_and_bf16_gradients():
    """NVIDIA's Llama 3.1 code: FP8 weights only (fp8_param_gather) under FP8, BF16 gradient
    buffers (grad_reduce_in_fp32=False); its FP4 configs turn the FP8 parameters off."""
    w, g, _ = state_bytes(1e9, 0, dp_shard=1, precision="fp8")
    assert (w, g) == (3e9, 4e9)  # BF16 weights + FP8 copy, FP32 gradient buffer
    w, g, _ = state_bytes(1e9, 0, dp_shard=1, precision="fp8", fp8_params=True, grad_bytes=2)
    assert (w, g) == (1e9, 2e9)
    w, _, _ = state_bytes(1e9, 0, dp_shard=1, precision="fp4", fp8_params=True, grad_bytes=2)
    assert w == 3e9
    w, _, _ = state_bytes(1e9, 0, dp_shard=1, precision="bf16", fp8_params=True)
    assert w == 2e9


def test_llama31_software_settings_come_from_benchmarks_toml():
    from trainperf.plan.workload import load_benchmark

    for name in ("llama31_405b", "llama31_8b"):
        b = load_benchmark(name)
        assert b.fp8_param_gather and b.grad_bytes == 2
    for name in ("gpt3_175b", "llama2_70b_lora"):
        b = load_benchmark(name)
        assert not b.fp8_param_gather and b.grad_bytes == 4


def test_data_parallel_traffic_hides_behind_the_micro_batch_compute():
    """Megatron's overlap_grad_reduce / overlap_param_gather: the gradient reduce-scatter hides
    behind the last micro-batch's backward, the parameter all-gather (FP8 under fp8_param_gather)
    behind the first one's forward; only what outlasts them is exposed."""
    from trainperf.plan.calibration import load_calibration
    from trainperf.plan.hardware import cluster
    from trainperf.plan.perf import Layout, Model
    from trainperf.plan.workload import load_benchmark

    m = Model(load_benchmark("llama31_8b", "5.1"), cluster("b200", 64), load_calibration(), "5.1")
    fp8 = Layout(tp=1, cp=2, dp=32, mbs=1, gbs=32, precision="fp8")
    rs, ag = m._dp_time(fp8)
    _, ag_fp4 = m._dp_time(replace(fp8, precision="fp4"))
    assert ag < 0.6 * ag_fp4 and ag_fp4 == pytest.approx(rs)  # 1 byte a parameter instead of 2
    st = m.cost(fp8)
    assert st.dp_exposed == pytest.approx(max(0.0, rs - st.t_b) + max(0.0, ag - st.t_f))
    slow = Model(load_benchmark("llama31_8b", "5.1"), cluster("b200", 64, network="eth_100"),
                 load_calibration(), "5.1")
    rs2, ag2 = slow._dp_time(fp8)
    st2 = slow.cost(fp8)
    assert rs2 > st2.t_b and st2.dp_exposed == pytest.approx(rs2 - st2.t_b + max(0.0, ag2 - st2.t_f))


def test_collectives_follow_alpha_beta():
    link = comm.Link(bytes_per_s=100e9, alpha_s=5e-6)
    n, p = 1e9, 8
    assert comm.all_reduce(n, p, link) == pytest.approx(2 * 7 * 5e-6 + 2 * 7 / 8 * n / 100e9)
    assert comm.reduce_scatter(n, p, link) == pytest.approx(7 * 5e-6 + 7 / 8 * n / 100e9)
    assert comm.all_gather(n, p, link) == comm.reduce_scatter(n, p, link)
    assert comm.all_reduce(n, 1, link) == 0.0
    assert comm.p2p(n, link) == pytest.approx(5e-6 + 0.01)
    nic = comm.Link(bytes_per_s=40e9, alpha_s=1e-5)
    # one domain only: the hierarchical collective is the flat ring on NVLink
    assert comm.hier_all_reduce(n, 8, 1, link, nic) == pytest.approx(comm.all_reduce(n, 8, link))
    # across domains: RS inside + AR of n/8 across + AG inside
    h = comm.hier_all_reduce(n, 8, 16, link, nic)
    assert h == pytest.approx(2 * comm.reduce_scatter(n, 8, link) + comm.all_reduce(n / 8, 16, nic))
    assert h < comm.all_reduce(n, 128, nic)  # the point of going hierarchical
    assert math.isclose(comm.hier_reduce_scatter(n, 8, 16, link, nic),
                        comm.reduce_scatter(n, 8, link) + comm.reduce_scatter(n / 8, 16, nic))


def test_eval_time_is_forwards_plus_a_fixed_cost():
    from trainperf.plan.perf import eval_time

    # 173 LoRA eval sequences over 64 data-parallel ranks: ceil(173/64) = 3 forwards of 0.2 s + 0.8 s
    assert eval_time(173, 64, 1, 1, 0.2, 0.8) == pytest.approx(1.4)
    # pipelined: ceil(173/16) = 11 micro-batches + 3 fill stage-times
    assert eval_time(173, 16, 1, 4, 0.2, 0.8) == pytest.approx(14 * 0.2 + 0.8)
    assert eval_time(173, 64, 1, 1, 0.2, 0.0) == pytest.approx(0.6)


def test_lora_evaluation_costs_follow_the_rounds_software():
    from trainperf.plan.calibration import load_calibration
    from trainperf.plan.hardware import cluster, get_gpu
    from trainperf.plan.perf import Layout, Model
    from trainperf.plan.workload import load_benchmark

    costs = {r: (b.eval_overhead_s, b.eval_eager_s_per_layer, b.first_eval_s)
             for r in ("4.0", "4.1", "5.0") for b in [load_benchmark("llama2_70b_lora", r)]}
    assert costs == {"4.0": (0.30, 0.00532, 18.5), "4.1": (0.42, 0.00511, 8.5), "5.0": (0.0, 0.0, 0.0)}
    g = load_benchmark("gpt3_175b", "3.1")
    assert (g.eval_overhead_s, g.eval_eager_s_per_layer, g.first_eval_s) == (0.0, 0.0, 0.0)
    # same cluster and layout: v4.1's eager evaluation forward takes its floor (80 layers x 5.11 ms)
    # where v5.0's compute is shorter, plus 0.42 s per evaluation, and 8.5 s more once per run
    cal = load_calibration()
    lay = Layout(tp=4, cp=2, dp=64, mbs=1, gbs=64, precision="fp8")
    e41, e50 = (Model(load_benchmark("llama2_70b_lora", r), cluster(get_gpu("h200"), 512), cal, r).estimate(lay)
                for r in ("4.1", "5.0"))
    assert e41.step_time_s == pytest.approx(e50.step_time_s)
    fwd = e50.eval_s / e50.evals / 3  # ceil(173 / 64) forwards, nothing fixed
    assert fwd < 80 * 0.00511
    assert e41.eval_s / e41.evals == pytest.approx(3 * 80 * 0.00511 + 0.42)
    assert e41.overhead_s == pytest.approx(cal.run_overhead_s + 8.5) and e50.overhead_s == pytest.approx(cal.run_overhead_s)
    # where compute is longer than the floor (8 GPUs: 87 forwards per rank at tp 4, cp 1), compute
    lay8 = Layout(tp=4, cp=1, dp=2, mbs=1, gbs=8, precision="fp8")
    e41, e50 = (Model(load_benchmark("llama2_70b_lora", r), cluster(get_gpu("h100"), 8), cal, r).estimate(lay8)
                for r in ("4.1", "5.0"))
    assert e50.eval_s / e50.evals / 87 > 80 * 0.00511
    assert e41.eval_s / e41.evals == pytest.approx(e50.eval_s / e50.evals + 0.42)


def test_fp4_runs_only_its_share_of_gemm_work_at_the_fp4_rate():
    from dataclasses import replace

    from trainperf.plan.calibration import load_calibration
    from trainperf.plan.hardware import cluster, get_gpu
    from trainperf.plan.perf import Model
    from trainperf.plan.workload import load_benchmark

    b = load_benchmark("llama31_405b", "5.1")
    base = load_calibration()

    def gemm_seconds(share: float, precision: str) -> float:
        m = Model(b, cluster(get_gpu("gb300"), 512), replace(base, fp4_share=share), "5.1")
        return m._layer(2, 2, 1, precision, "none").compute

    fp8, fp4_all, fp4_none = gemm_seconds(0.7, "fp8"), gemm_seconds(1.0, "fp4"), gemm_seconds(0.0, "fp4")
    assert fp4_none == pytest.approx(fp8)  # no share at the FP4 rate: FP8's time
    assert fp4_all < fp8
    # Amdahl: a share phi of the GEMM FLOPs at the FP4 rate and the rest at FP8's, so the seconds
    # are linear in phi (attention and the adapters run in BF16 either way)
    assert gemm_seconds(0.7, "fp4") == pytest.approx(fp8 + 0.7 * (fp4_all - fp8), rel=1e-9)


def test_lora_layers_keep_no_frozen_mlp_gemm_inputs():
    from trainperf.plan.calibration import load_calibration
    from trainperf.plan.hardware import cluster
    from trainperf.plan.memory import activation_bytes_per_layer
    from trainperf.plan.perf import Model
    from trainperf.plan.workload import load_benchmark

    b = load_benchmark("llama2_70b_lora", "5.0")
    m = Model(b, cluster("b200", 8), load_calibration())
    got = m._layer(1, 1, 1, "fp8", "none").act_bytes
    assert got == activation_bytes_per_layer(b.model, b.seq_len, 1, tp=1, recompute="none", frozen_mlp=True)
    assert got < activation_bytes_per_layer(b.model, b.seq_len, 1, tp=1, recompute="none")
