"""RCPs, the performance model and the layout search on small and known cases."""

from types import SimpleNamespace

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
    # "gh200" holds "h200": a Grace Hopper is its own 96 GB HBM3 part, and its HBM3e variant none of the catalog's
    gh = gpu_for_result("NVIDIA Hopper GPU (GH200)")
    assert gh.key == "gh200" and gh.hbm_gb == 96 and gh.generation == "hopper"
    assert gpu_for_result("NVIDIA GH200 144GB HBM3e") is None
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
        cost = m.cost(e.layout)
        minutes, mem = m.minutes(cost, e.layout.gbs), cost.memory_bytes(e.layout.gbs)
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


def test_a_layout_fixed_in_every_value_is_priced_over_memory_with_a_warning():
    """Asked about one whole layout (one that ran, say), the plan prices it and says what the memory
    model thinks of it; one value left to the search and it is refused as before."""
    whole = {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "mbs": 8, "recompute": "none", "precision": "bf16"}
    p = make_plan("llama31_8b", "h100", 8, layout=whole, calib=CAL, gbs=64)
    assert p.over_memory is not None and "GB over" in p.over_memory
    assert p.best.estimate.memory.total > p.best.estimate.capacity
    d = p.to_dict()
    assert d["fits_memory"] is False and d["memory_warning"] == p.over_memory and d["minutes"] > 0
    fits = make_plan("llama31_8b", "h100", 8, layout={**whole, "mbs": 1, "recompute": "full"}, calib=CAL, gbs=64)
    assert fits.over_memory is None and fits.to_dict()["fits_memory"] is True
    with pytest.raises(PlanError, match="GB over"):
        make_plan("llama31_8b", "h100", 8, layout={k: v for k, v in whole.items() if k != "precision"},
                  calib=CAL, gbs=64)


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
    costs = [m.cost(Layout(tp=4, pp=8, dp=336, vpp=v, mbs=1, gbs=2688, precision="fp8")) for v in (1, 2, 3, 4, 6, 12)]
    theirs = [(m.minutes(c, 2688), c.memory_bytes(2688)) for c in costs]
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


def test_evidence_is_what_was_public_under_the_round():
    """A plan under round R counts NVIDIA's configurations up to R and anyone's from before R: a
    v5.0 plan never sees a v5.1 configuration, nor another submitter's v5.0 one."""
    from trainperf.plan.evidence import envelope, proven_precisions, published

    for shape, pubs in envelope("llama31_405b", "hopper", "5.0").items():
        assert all(p.round == "5.0" and p.submitter == "NVIDIA" for p in pubs), shape
    v51 = envelope("llama31_405b", "hopper", "5.1")
    # Nebius ran tp 4 pp 8 cp 2 on H200 in v5.0: public evidence for v5.1, not for v5.0
    assert (4, 8, 2) in v51 and (4, 8, 2) not in envelope("llama31_405b", "hopper", "5.0")
    assert any(p.submitter == "Nebius" and p.round == "5.0" for p in v51[(4, 8, 2)])
    everything = envelope("llama31_405b", "hopper")
    assert sum(map(len, everything.values())) == sum(
        1 for p in published() if p.benchmark == "llama31_405b" and p.gpu_family == "hopper")
    assert proven_precisions("llama31_405b", "b200", "5.1") == {"fp8"}
    assert proven_precisions("llama31_405b", "gb300", "5.1") == {"fp8", "fp4"}
    assert proven_precisions("llama31_8b", "b300", "5.1") is None


def test_a_bigger_gpu_may_cut_the_tensor_parallelism_a_smaller_one_needed():
    """Under v5.0 rules the only public Hopper 405B layout is NVIDIA's tp 8 on the 80 GB H100: on
    the 141 GB H200 tp 4 and below with that pp and cp count as proven (Nebius ran tp 4), on the
    H100 itself they do not; the evidence named for tp 4 is the H100 config."""
    from trainperf.plan.evidence import evidence, proven_shapes

    h200 = proven_shapes("llama31_405b", "h200", "hopper", "5.0")
    h100 = proven_shapes("llama31_405b", "h100", "hopper", "5.0")
    assert (8, 8, 2) in h100 and (4, 8, 2) not in h100 and (2, 8, 2) not in h100
    assert {(8, 8, 2), (4, 8, 2), (2, 8, 2), (1, 8, 2)} <= h200
    assert (4, 8, 1) not in h200  # another pipeline or context split is not vouched for
    ev = evidence("llama31_405b", "hopper", 4, 8, 2, 512, "5.0", gpu="h200")
    assert ev is not None and ev.gpu == "h100" and ev.tp == 8
    assert evidence("llama31_405b", "hopper", 4, 8, 2, 512, "5.0", gpu="h100") is None
    assert evidence("llama31_405b", "hopper", 4, 8, 2, 512, "5.0") is None  # no GPU: exact shapes only


def test_pipeline_split_counting_embedding_and_loss():
    """NeMo's ASYM_PP_EMBED/ASYM_PP_LOSS (all NVIDIA 405B configs): 126 layers + embedding + loss
    = 128 slots over pp 8 x vpp 8, 16 layers on a middle rank, 15 plus the output layer on the
    last; without it the last rank holds 16 layers and the output layer."""
    from dataclasses import replace

    cal = Calibration()
    b = load_benchmark("llama31_405b", "5.1")
    assert b.pp_split_counts_embedding_and_loss
    asym = Model(b, cluster("h100", 512), cal, "5.1")
    plain = Model(replace(b, pp_split_counts_embedding_and_loss=False), cluster("h100", 512), cal, "5.1")
    lay = Layout(tp=8, pp=8, vpp=8, dp=4, cp=2, mbs=1, gbs=1152, precision="fp8")
    assert asym.stage_layers(lay) == plain.stage_layers(lay) == 16
    a, p = asym.cost(lay), plain.cost(lay)
    ly = a.layer
    hf, hb = asym._head(lay.tp, lay.cp, lay.mbs, lay.precision)
    layer = ly.fwd + ly.bwd
    # 1F1B runs at the pace of the slower of a middle rank and the last one
    assert a.t_f + a.t_b == pytest.approx(max(16 * layer, 15 * layer + hf + hb))
    assert p.t_f + p.t_b == pytest.approx(16 * layer + hf + hb)
    assert asym.estimate(lay).step_time_s < plain.estimate(lay).step_time_s
    # MLPerf's 405B has a 32,768-entry vocabulary: its output layer costs less than a layer, so a
    # middle rank is the slowest; an output layer dearer than a layer leaves the last rank slowest
    assert a.layers == 16 and a.head_f == 0.0
    assert asym._slowest_stage(lay, SimpleNamespace(fwd=1.0, bwd=2.0), 0.5, 1.0) == (16, False)
    assert asym._slowest_stage(lay, SimpleNamespace(fwd=1.0, bwd=2.0), 2.0, 4.0) == (15, True)
    assert plain._slowest_stage(lay, SimpleNamespace(fwd=1.0, bwd=2.0), 0.5, 1.0) == (16, True)
    # at vpp 4 (128 / 32 = 4 slots per virtual stage) the split still holds 16 layers per rank
    assert asym.stage_layers(replace(lay, vpp=4)) == 16
    # without pipeline parallelism the accounting changes nothing
    flat = Layout(tp=8, pp=1, dp=32, cp=2, mbs=1, gbs=1152, precision="fp8")
    assert asym.stage_layers(flat) == plain.stage_layers(flat) == 126


def test_the_formats_nvidia_ran_at_the_closest_gpu_count_rank_first():
    """v5.1: NVIDIA ran the 8B and the LoRA in FP4 on 8 GB200s but in FP8 on 72 and 512; per GPU
    kind alone a 72-GPU plan would prefer FP4, which no one ran there."""
    from trainperf.plan.evidence import proven_precisions

    assert proven_precisions("llama31_8b", "gb200", "5.1", 8) == {"fp4"}
    assert proven_precisions("llama31_8b", "gb200", "5.1", 72) == {"fp8"}
    assert proven_precisions("llama31_8b", "gb300", "5.1", 400) == {"fp8"}  # 512 is closest
    assert proven_precisions("llama2_70b_lora", "gb300", "5.1", 16) == {"fp4"}  # 8 is closest
    assert proven_precisions("llama31_8b", "gb200", "5.1") == {"fp4", "fp8"}  # no count: the kind's
    assert proven_precisions("llama31_8b", "b300", "5.1", 8) is None


def test_tensor_parallelism_divides_heads_kv_heads_and_ffn():
    """Megatron shards attention by heads and the MLP by its hidden width into tp equal parts: an ffn
    tp does not divide (1 to 7 at tp 8) is no layout, skipped by the search and refused by --layout
    in one line, not a ZeroDivisionError in the pricing."""
    from trainperf.plan.workload import custom_workload

    for ffn in (1, 6, 7, 12):
        b = custom_workload(f"layers=32,d_model=4096,heads=32,ffn={ffn},vocab=32000,seq=2048", gbs=512)
        p = make_plan(b, "h100", 64, calib=CAL, top=50)
        assert p.predictions and all(ffn % e.estimate.layout.tp == 0 for e in p.predictions)
    b = custom_workload("layers=32,d_model=4096,heads=32,ffn=6,vocab=32000,seq=2048", gbs=512)
    with pytest.raises(ConfigError, match=r"^--layout: tp=4 does not divide ffn=6 \(the MLP's hidden width\)$"):
        make_plan(b, "h100", 64, layout={"tp": 4}, calib=CAL)
    with pytest.raises(ConfigError, match="tp=5 does not divide the 32 heads, the 32 KV heads, ffn=6 "):
        make_plan(b, "h100", 64, layout={"tp": 5}, calib=CAL)
    # one layer too wide for a GPU at the tp the ffn allows: the no-fit line says why tp stops there
    wide = custom_workload("layers=1,d_model=65536,heads=64,ffn=6,vocab=32000,seq=8192", gbs=8)
    with pytest.raises(PlanError, match=r"GB over\); tp stops at 2: tp=4 does not divide ffn=6"):
        make_plan(wide, "h100", 8, calib=CAL)


def test_virtual_stages_need_a_pipeline():
    """vpp interleaves pipeline stages: with pp=1 there are none to interleave, so --layout refuses
    it, and a vpp fixed without pp is searched over pipelines only."""
    with pytest.raises(ConfigError, match=r"^--layout: vpp=4 needs pp > 1"):
        make_plan("llama31_8b", "h100", 8, layout={"pp": 1, "vpp": 4}, calib=CAL)
    p = make_plan("llama31_8b", "h100", 8, layout={"vpp": 4}, calib=CAL, top=100)
    assert all(e.estimate.layout.pp > 1 and e.estimate.layout.vpp == 4 for e in p.predictions)
    assert make_plan("llama31_8b", "h100", 8, layout={"pp": 1, "vpp": 1}, calib=CAL).best.estimate.layout.pp == 1


def test_the_global_batch_search_covers_the_rcp_range_at_every_dp():
    """GPT-3's RCPs run from GBS 1536 to 8192: a data-parallel group of 1 or 2 must reach them as a
    group of 336 does (a cap of 128 micro-batches a rank left tp 8 pp 8 dp 1 on 64 GPUs unsearched,
    and the plan twice as slow as that layout at --gbs 2048)."""
    b = load_benchmark("gpt3_175b", "4.1")
    m = Model(b, cluster("h100", 64), CAL, "4.1")
    rcps = [p.gbs for p in rcp.load_rcps("gpt3", m.ruleset)]
    pinned = make_plan(b, "h100", 64, layout={"tp": 8, "pp": 8, "dp": 1}, calib=CAL, top=1)
    assert pinned.best.estimate.layout.gbs >= rcps[0]
    at_2048 = make_plan(b, "h100", 64, layout={"tp": 8, "pp": 8, "dp": 1}, gbs=2048, calib=CAL, top=1)
    free = make_plan(b, "h100", 64, calib=CAL, top=1, explore=True)
    assert free.best.estimate.minutes <= pinned.best.estimate.minutes <= at_2048.best.estimate.minutes

    from trainperf.plan.search import _gbs_candidates, _gbs_ladder

    for dp, mbs, per_rank in ((1, 1, 1), (2, 2, 1), (1, 1, 8), (336, 1, 1), (7, 1, 1)):
        unit = dp * mbs * per_rank
        bs = _gbs_candidates(m, dp, mbs, None, per_rank)
        assert bs and all(x % unit == 0 and rcps[0] <= x <= rcps[-1] for x in bs)
        assert len(bs) <= 2 * len(_gbs_ladder("gpt3", m.ruleset))  # bounded whatever the dp
        if unit <= rcps[0]:  # the ends of the range, as near as the layout runs them
            assert bs[0] < rcps[0] + unit and bs[-1] > rcps[-1] - unit
    assert set(rcps) <= set(_gbs_candidates(m, 1, 1, None))
    assert _gbs_candidates(m, 1024, 16, None) == [16384]  # beyond the RCPs: the smallest it runs


def test_the_no_fit_message_quotes_the_least_memory_layout():
    """405B on 8 A100s fits nowhere; the layout the error quotes is the one needing least memory of
    every layout the search can build (tp 8 dp 1 mbs 1, 818 GB), not a dp 2 one the batch range
    happened to reach (1086 GB)."""
    from trainperf.layout import RECOMPUTE
    from trainperf.plan.perf import best_precision
    from trainperf.plan.search import _shapes

    b = load_benchmark("llama31_405b", "5.1")
    m = Model(b, cluster("a100", 8), CAL, "5.1")
    res = search(m, 8, ceiling="fp8")
    assert not res.best and res.closest_unfit is not None
    least = min(m.memory(Layout(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, mbs=mbs, gbs=g, recompute=rc, precision=pr)).total
                for tp, cp, pp, dp, vpp, mbs, bs in _shapes(m, 8, None, {}) for g in bs
                for rc in RECOMPUTE for pr in best_precision(m.cl, "fp8"))
    assert res.closest_unfit.memory.total == pytest.approx(least)
    assert res.closest_unfit.layout.dp == 1 and least < 900e9
    with pytest.raises(PlanError, match=r"the smallest \(tp=8,pp=1,dp=1,.*mbs=1,.*\) needs 818\.\d GB"):
        make_plan("llama31_405b", "a100", 8, calib=CAL, round_="5.1")
