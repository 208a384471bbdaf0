"""RCPs, the performance model and the layout search on small and known cases."""

import pytest

from trainperf.config import ConfigError, ModelConfig
from trainperf.plan import rcp
from trainperf.plan.api import PlanError, make_plan, parse_gpus
from trainperf.plan.calibration import Calibration
from trainperf.plan.hardware import cluster, get_gpu, gpu_for_result
from trainperf.plan.perf import Layout, Model
from trainperf.plan.search import parse_layout, search
from trainperf.plan.workload import load_benchmark

CAL = Calibration(gemm_eff={"hopper": 0.6, "blackwell": 0.55, "blackwell_ultra": 0.5})


def small_bench(**kw):
    cfg = ModelConfig(family="llama", n_layer=16, d_model=2048, n_head=16, n_kv_head=8, d_ff=5632,
                      vocab_size=32000, seq_len=8192, tie_embeddings=False)
    return load_benchmark("llama31_8b", model=cfg, gbs=kw.get("gbs", 32))


def test_rcp_olympic_mean_and_interpolation():
    pts = rcp.load_rcps("llama2_70b_lora", "5.1.0")
    assert [p.gbs for p in pts] == [8, 16, 32, 128]
    assert pts[0].mean == pytest.approx(3178.667, rel=1e-4)  # 20 points, min and max dropped
    mid, inside = rcp.samples_to_converge("llama2_70b_lora", 24, "5.1.0")
    assert inside and mid == pytest.approx((pts[1].mean + pts[2].mean) / 2)
    toks, _ = rcp.samples_to_converge("gpt3", 2048, "3.1.0", unit="tokens", seq_len=2048)
    assert toks == pytest.approx(1182793728 / 2048)
    assert rcp.ruleset_for("gpt3", "v3.1") == "3.1.0" and rcp.ruleset_for("llama31_8b", None) >= "6.0.0"


def test_catalog_lookups():
    assert get_gpu("H100").peak("fp8") == 1979e12
    assert get_gpu("h100").peak("fp4") == 1979e12  # no FP4 on Hopper: falls back to FP8
    assert gpu_for_result("NVIDIA Blackwell Ultra GPU (GB300)").key == "gb300"
    assert gpu_for_result("NVIDIA H200-SXM5-141GB").key == "h200"
    assert gpu_for_result("TPU-v5p") is None
    # an NVL or PCIe card is not the SXM part of the same name
    assert gpu_for_result("NVIDIA H200-NVL-141GB") is None and gpu_for_result("NVIDIA H100 PCIe") is None
    with pytest.raises(ConfigError, match="unknown GPU"):
        get_gpu("h900")


def test_small_model_prefers_pure_data_parallel():
    """A model that fits one GPU with room to spare: no tensor/pipeline split beats plain DP."""
    b = small_bench()
    m = Model(b, cluster("h100", 8), CAL)
    res = search(m, 8, gbs=32, ceiling="bf16")
    best = res.best[0].layout
    assert (best.tp, best.pp, best.cp, best.dp) == (1, 1, 1, 8)
    assert res.evaluated > 50
    times = [e.minutes for e in res.best]
    assert times == sorted(times)
    # the search's fast path prices a layout exactly as the full estimate does
    for e in res.best:
        minutes, mem = m.quick(e.layout)
        assert minutes == pytest.approx(e.minutes, rel=1e-12) and mem == pytest.approx(e.memory.total, rel=1e-12)


def test_big_model_needs_model_parallelism():
    b = load_benchmark("gpt3_175b", "3.1")
    m = Model(b, cluster("h100", 512), CAL, "3.1")
    res = search(m, 512, gbs=2048, ceiling="fp8", top=3)
    best = res.best[0]
    assert best.fits and best.layout.tp * best.layout.pp >= 8  # 175B x 6+ bytes cannot sit on a few GPUs
    assert best.memory.total <= best.capacity
    assert sum(best.breakdown.values()) == pytest.approx(best.step_time_s)
    # more GPUs, same batch: faster, but less than linearly (bubble and communication grow)
    m2 = Model(b, cluster("h100", 1024), CAL, "3.1")
    best2 = search(m2, 1024, gbs=2048, ceiling="fp8", top=1).best[0]
    assert best.minutes / 2 < best2.minutes < best.minutes


def test_pipeline_bubble_and_interleaving():
    b = small_bench()
    m = Model(b, cluster("h100", 16), CAL)
    base = Layout(tp=1, pp=4, dp=4, cp=1, vpp=1, mbs=1, gbs=32, precision="bf16")
    e1 = m.estimate(base)
    e2 = m.estimate(Layout(tp=1, pp=4, dp=4, cp=1, vpp=2, mbs=1, gbs=32, precision="bf16"))
    # eight more micro-batches per rank cost 8 x (t_f + t_b); the 1F1B bubble is (p-1) of them
    e_big = m.estimate(Layout(tp=1, pp=4, dp=4, cp=1, vpp=1, mbs=1, gbs=64, precision="bf16"))
    per_mb = (e_big.step_time_s - e1.step_time_s) / 8
    assert e1.breakdown["pp_bubble"] == pytest.approx(3 * per_mb, rel=0.05)
    # interleaving two virtual stages halves it
    assert e2.breakdown["pp_bubble"] == pytest.approx(e1.breakdown["pp_bubble"] / 2, rel=0.05)


def test_lora_has_no_optimizer_state_for_the_base():
    b = load_benchmark("llama2_70b_lora", "4.1")
    m = Model(b, cluster("h200", 8), CAL, "4.1")
    mem = m.memory(Layout(tp=8, pp=1, dp=1, mbs=1, gbs=8, precision="fp8"))
    assert mem.optimizer < 1e9 and mem.grads < 1e9  # adapters only
    # the frozen 69B base, split 8 ways, held in FP8 only (1 byte/param) ...
    assert 69e9 / 8 < mem.weights < 1.1 * 69e9 / 8
    # ... or in BF16 (2 bytes) when the matmuls are BF16
    bf16 = m.memory(Layout(tp=8, pp=1, dp=1, mbs=1, gbs=8, precision="bf16"))
    assert bf16.weights == pytest.approx(2 * mem.weights, rel=0.02)


def test_fp8_is_faster_than_bf16_for_large_matmuls():
    b = load_benchmark("gpt3_175b", "3.1")
    m = Model(b, cluster("h100", 512), CAL, "3.1")
    lay = Layout(tp=4, pp=8, dp=16, vpp=2, mbs=1, gbs=2048, recompute="selective", precision="bf16")
    from dataclasses import replace

    assert m.estimate(replace(lay, precision="fp8")).step_time_s < m.estimate(lay).step_time_s


def test_layout_errors_say_what_is_wrong():
    with pytest.raises(ConfigError, match="unknown key"):
        parse_layout("tp=2,foo=3")
    with pytest.raises(ConfigError, match="integer"):
        parse_layout("tp=two")
    with pytest.raises(ConfigError, match="does not divide"):
        make_plan("llama31_8b", "h100", 8, layout={"tp": 3}, calib=CAL)
    with pytest.raises(ConfigError, match="not the 8 GPUs"):
        make_plan("llama31_8b", "h100", 8, layout={"tp": 2, "dp": 2}, calib=CAL)
    with pytest.raises(PlanError, match=r"GB over.*this fits: --layout"):
        make_plan("llama31_8b", "h100", 8, layout={"tp": 1, "pp": 1, "dp": 8, "mbs": 8, "recompute": "none"},
                  calib=CAL, gbs=64)
    with pytest.raises(PlanError, match="no layout fits"):
        make_plan("gpt3_175b", "h100", 8, calib=CAL)


def test_parse_gpus():
    assert parse_gpus("64..512") == [64, 128, 256, 512]
    assert parse_gpus("8,72") == [8, 72]
    with pytest.raises(ConfigError):
        parse_gpus("0..8")


def test_nvidias_published_gpt3_layout_is_near_the_searched_best():
    """NVIDIA's v3.1 GPT-3 run on 10,752 H100 used TP 4, PP 8, micro-batch 1, FP8 and 8 micro-batches
    per data-parallel rank (training_results_v3.1 NVIDIA/benchmarks/gpt3/implementations/pytorch/
    config_DGXH100_1344x8x8x4x8_mbs1.sh). The model must let it fit and price it close to its best."""
    from trainperf.plan.calibration import load_calibration

    b = load_benchmark("gpt3_175b", "3.1")
    m = Model(b, cluster("h100", 10752), load_calibration(), "3.1")
    best = search(m, 10752, gbs=2688, ceiling="fp8", top=1).best[0]
    theirs = [m.quick(Layout(tp=4, pp=8, dp=336, vpp=v, mbs=1, gbs=2688, precision="fp8")) for v in (1, 2, 3, 4, 6, 12)]
    assert all(mem <= m.capacity() for _, mem in theirs)
    assert min(t for t, _ in theirs) < 1.10 * best.minutes
    assert best.layout.tp == 4 and best.layout.precision == "fp8"


def test_evaluations_follow_the_rules_cadence():
    b = load_benchmark("llama2_70b_lora", "4.1")
    # every 384 samples at GBS 8; floor(0.125*8 + 2) = 3 skipped
    assert b.evals(3840, 8) == pytest.approx(3840 / 384 - 3)
    # GBS 100 does not divide 384: evaluations every ceil(384/100) = 4 steps = 400 samples, 14 skipped
    assert b.evals(8000, 100) == pytest.approx(8000 / 400 - 14)
    assert b.evals(100, 8) == 1.0  # at least the evaluation that reaches the target


@pytest.mark.parametrize("gpu,n,lay", [
    # training_results_v4.0 NVIDIA/benchmarks/llama2_70b_lora/implementations/nemo/config_DGX*.sh
    ("h100", 8, Layout(tp=4, pp=1, dp=2, cp=1, mbs=1, gbs=8, precision="fp8")),       # 1x8x4xtp4pp1cp1
    ("h200", 8, Layout(tp=2, pp=1, dp=4, cp=1, mbs=1, gbs=8, precision="fp8")),       # 1x8x2xtp2pp1cp1
    ("h100", 1024, Layout(tp=4, pp=1, dp=128, cp=2, mbs=1, gbs=128, precision="fp8")),  # 128x8x1xtp4pp1cp2
])
def test_nvidias_published_lora_layouts_fit_and_are_near_the_best(gpu, n, lay):
    """They ran without activation recompute: the memory model must not reject them."""
    from trainperf.plan.calibration import load_calibration

    m = Model(load_benchmark("llama2_70b_lora", "4.0"), cluster(gpu, n), load_calibration(), "4.0")
    theirs = m.estimate(lay)
    assert theirs.fits, theirs.memory.as_gb()
    best = search(m, n, gbs=lay.gbs, ceiling="fp8", top=1).best[0]
    assert best.minutes <= theirs.minutes < 1.2 * best.minutes
