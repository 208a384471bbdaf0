"""Step time, memory, MFU and time-to-train of one parallel layout.

One optimizer step of a pipeline with p stages, v virtual stages per GPU and m micro-batches
(1F1B, interleaved when v > 1; Narayanan et al. 2021):
    step = (m + (p-1)/v) · (t_f + t_b)  +  exposed data-parallel time  +  optimizer
where t_f, t_b are one micro-batch's forward and backward on the slowest stage: its GEMMs at
peak·efficiency(shape), attention at the bf16 rate, memory-bound element-wise work at HBM speed,
the tensor- and context-parallel collectives that compute does not hide, and the pipeline's
point-to-point sends. Time-to-train = steps to the RCP's samples · step + evaluations + a fixed
per-run overhead. Every constant not fitted by calibration is named below with its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainperf.plan import comm, interval
from trainperf.plan.calibration import Calibration
from trainperf.plan.flops import ATTN_BWD_OVER_FWD, layer_gemms, attn_fwd_flops_per_token_layer, flops_per_token
from trainperf.plan.hardware import PRECISIONS, Cluster
from trainperf.plan.memory import RESERVE, Memory, activation_bytes_per_layer, state_bytes
from trainperf.plan.rcp import ruleset_for, samples_to_converge
from trainperf.plan.stack import get_stack
from trainperf.plan.stack_memory import ShapeMemory, shape_memory
from trainperf.plan.workload import Benchmark

ELEMWISE_BW_SHARE = 0.8  # element-wise kernels reach ~80% of HBM bandwidth (streaming reads/writes)
OPTIMIZER_BYTES_PER_PARAM = 32  # AdamW on fp32 master, grads, m, v: 16 bytes read + 16 written
LOGIT_BYTES = 6  # bf16 logits plus their fp32 gradient, per vocabulary entry and token


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vpp: int = 1
    mbs: int = 1
    gbs: int = 1
    recompute: str = "none"  # none | selective | full
    precision: str = "bf16"  # matmul format: bf16 | fp8 | fp4

    @property
    def microbatches(self) -> int:
        return self.gbs // (self.dp * self.mbs)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(tp, pp, cp): the split that published configuration names state (plan/evidence.py)."""
        return (self.tp, self.pp, self.cp)

    def short(self) -> str:
        v = f" vpp={self.vpp}" if self.vpp > 1 else ""
        return (f"tp={self.tp} pp={self.pp}{v} dp={self.dp} cp={self.cp} mbs={self.mbs} gbs={self.gbs} "
                f"rc={self.recompute} {self.precision}")

    def to_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "vpp": self.vpp, "dp": self.dp, "cp": self.cp,
                "microbatch": self.mbs, "global_batch": self.gbs, "microbatches": self.microbatches,
                "recompute": self.recompute, "precision": self.precision}


@dataclass(frozen=True)
class LayerCost:
    """One transformer layer, one micro-batch, on one rank: seconds and the bytes it keeps."""

    fwd: float  # forward: compute, exposed tp/cp traffic, element-wise work
    bwd: float  # backward, with what recompute repeats
    compute: float  # GEMMs and attention, forward + backward + recompute
    tp: float  # exposed tensor-parallel traffic
    cp: float  # exposed context-parallel traffic
    other: float  # element-wise (memory-bound) work
    act_bytes: float  # activations kept for the backward
    tokens: float  # tokens the rank processes


@dataclass(frozen=True)
class StateMemory:
    """The `megatron` stack's memory of one shape: the busiest rank's state (weights, gradients,
    optimizer, logits, reserve) and its activations per micro-batch in flight under 1F1B."""

    weights: float
    grads: float
    optimizer: float
    logits: float
    reserve: float
    act_per_mb: float  # interleaving included
    pp: int

    def at(self, gbs: int, microbatches: int) -> Memory:
        in_flight = min(self.pp, microbatches) if self.pp > 1 else 1
        return Memory(weights=self.weights, grads=self.grads, optimizer=self.optimizer,
                      activations=self.act_per_mb * in_flight, logits=self.logits, reserve=self.reserve)


@dataclass(frozen=True)
class TrainerMemory:
    """The `pytorch` stack's memory of one shape: trainperf's trainer's own accounting
    (plan/stack_memory.py), plus the planner's reserve."""

    shape: ShapeMemory
    reserve: float
    gpu_bytes: float  # decides where whole gradients fit between micro-batches, as the trainer does

    def at(self, gbs: int, microbatches: int) -> Memory:
        return Memory.of_stack(self.shape.at(gbs, self.gpu_bytes), self.reserve)


@dataclass(frozen=True)
class ShapeCost:
    """What one model-parallel shape (tp, pp, vpp, dp, cp, micro-batch, recompute, precision)
    costs, whatever the global batch: the search and the full estimate both read this, and the
    step, memory and evaluation formulas below are the only ones."""

    pp: int
    vpp: int
    dp: int
    mbs: int
    layer: LayerCost
    layers: int  # layers on the slowest pipeline rank
    stage_layers: int  # layers on the busiest rank (its memory)
    head_f: float  # output layer + loss on the slowest rank (0 when it does not hold it)
    head_b: float
    t_f: float  # one micro-batch's forward on the slowest rank
    t_b: float  # and its backward
    p2p: float  # exposed pipeline sends per micro-batch
    dp_exposed: float  # data-parallel traffic compute does not hide, per step
    optimizer: float  # optimizer step, per step
    overhead: float  # calibrated fixed cost per step
    mem: StateMemory | TrainerMemory  # bytes, busiest rank, under the stack
    eval_s: float  # one evaluation

    def microbatches(self, gbs: int) -> int:
        return gbs // (self.dp * self.mbs)

    def bubble_s(self) -> float:
        """1F1B fill and drain: (p-1)/v stage-times of one micro-batch."""
        return (self.pp - 1) / self.vpp * (self.t_f + self.t_b)

    def step_s(self, gbs: int) -> float:
        """One optimizer step: m micro-batches + bubble + exposed DP + optimizer + overhead."""
        m = self.microbatches(gbs)
        return m * (self.t_f + self.t_b + self.p2p) + self.bubble_s() + self.dp_exposed + self.optimizer + self.overhead

    def memory_bytes(self, gbs: int) -> float:
        return self.memory(gbs).total

    def memory(self, gbs: int) -> Memory:
        return self.mem.at(gbs, self.microbatches(gbs))

    def breakdown(self, gbs: int) -> dict:
        """Seconds per step by component; they sum to `step_s`."""
        m, L, ly = self.microbatches(gbs), self.layers, self.layer
        return {
            "compute": m * (L * ly.compute + self.head_f + self.head_b),
            "tp": m * L * ly.tp,
            "cp": m * L * ly.cp,
            "pp_bubble": self.bubble_s(),
            "dp": self.dp_exposed,
            "other": m * (L * ly.other + self.p2p) + self.optimizer + self.overhead,
        }


@dataclass(frozen=True)
class Estimate:
    """The model's prediction for one layout: step, memory, MFU and time-to-train. The band and
    the published evidence are a later stage (plan/prediction.py)."""

    layout: Layout
    step_time_s: float
    breakdown: dict  # seconds per step: compute, tp, pp_bubble, dp, cp, other
    memory: Memory
    capacity: float  # bytes available per GPU
    mfu: float  # model FLOPs / (N · dense peak of the matmul precision used)
    mfu_bf16: float  # the same against the dense BF16 peak (comparable across precisions)
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    samples: float  # to reach the target (RCP mean, or as given)
    rcp_ruleset: str
    gbs_in_rcp_range: bool
    steps: float
    evals: float
    train_s: float
    eval_s: float
    overhead_s: float

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity

    @property
    def minutes(self) -> float:
        return (self.train_s + self.eval_s + self.overhead_s) / 60

    def to_dict(self) -> dict:
        return {
            "minutes": round(self.minutes, 4),
            "step_time_s": round(self.step_time_s, 5),
            "mfu": round(self.mfu, 4), "mfu_bf16": round(self.mfu_bf16, 4), "tokens_per_s": round(self.tokens_per_s, 1),
            "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 1),
            "memory_gb_per_gpu": round(self.memory.total / 1e9, 2),
            "memory_capacity_gb": round(self.capacity / 1e9, 2), "memory_breakdown_gb": self.memory.as_gb(),
            "layout": self.layout.to_dict(),
            "breakdown_s": {k: round(v, 6) for k, v in self.breakdown.items()},
            "samples_to_target": round(self.samples, 1), "rcp_ruleset": self.rcp_ruleset,
            "gbs_in_rcp_range": self.gbs_in_rcp_range, "steps": round(self.steps, 2),
            "evals": round(self.evals, 2), "train_min": round(self.train_s / 60, 4),
            "eval_min": round(self.eval_s / 60, 4), "overhead_min": round(self.overhead_s / 60, 4),
        }


def _shape_eff(d: float, half: float) -> float:
    return d / (d + half)


class Model:
    """The performance model of one benchmark on one cluster; caches one ShapeCost per
    model-parallel shape so the search can price thousands of layouts quickly."""

    def __init__(self, bench: Benchmark, cl: Cluster, calib: Calibration, round_: str | None = None,
                 samples: float | None = None, stack: str = "megatron", whole_steps: bool = False):
        """`samples`: training samples to reach the target, when known (a submitter's own
        convergence, read from its logs); otherwise the RCP mean at each global batch. `stack`:
        the software that runs it (plan/stack.py). `whole_steps`: `samples` is a budget (tokens,
        --samples), trained in whole steps, rather than a mean over runs."""
        self.b, self.cl, self.cal = bench, cl, calib
        self.stack = get_stack(stack)
        self.overlap = calib.overlap_for(stack)  # share of tp/cp/pp traffic compute hides
        self.samples_given = samples
        self.whole_steps = whole_steps
        self.cfg = bench.model
        self.gpu = cl.gpu
        self.eff = calib.efficiency_for(cl.gpu.generation, stack)
        self.half = calib.shape_half(cl.gpu)
        self.nvl = comm.Link(cl.nvlink_bytes_per_s, cl.nvlink.alpha_s)
        self.nic = comm.Link(cl.nic_bytes_per_s, cl.network.alpha_s)
        self.round = round_.lstrip("v") if round_ else bench.round
        if bench.is_mlperf:
            self.ruleset = ruleset_for(bench.mlperf, self.round or None)
            self.sd_conv = 0.0 if samples is not None else interval.convergence_sd(bench.mlperf, self.ruleset,
                                                                                    bench.runs_per_result)
        else:  # any other model: a token budget (or one step) instead of RCPs
            if samples is None:
                raise ValueError("Model: a model that is not an MLPerf benchmark needs `samples`")
            self.ruleset, self.sd_conv = "", 0.0
        self.model_fpt = flops_per_token(self.cfg)  # MFU numerator, per token
        self._layer_cache: dict = {}
        self._cost_cache: dict = {}
        self._samples_cache: dict = {}
        self._params = self._count_params()

    # -- parameters --------------------------------------------------------------------------
    def _count_params(self) -> dict:
        c = self.cfg
        h, hd = c.d_model, c.head_dim
        attn = h * (c.n_head + 2 * c.kv_heads) * hd + c.n_head * hd * h
        mlp = (3 if c.gated else 2) * h * c.ff_dim
        norms = 2 * h * (2 if c.family == "gpt" else 1)  # LayerNorm has a bias, RMSNorm none
        lora = 0
        if c.lora_rank > 0:
            from trainperf.model.flops import lora_forward_flops

            lora = lora_forward_flops(c) / c.n_layer / 2  # forward FLOPs = 2 x params per token
        emb = c.vocab_size * h
        return {"layer": attn + mlp + norms, "lora_layer": lora, "emb": emb}

    # -- one layer, one micro-batch ----------------------------------------------------------
    def _layer(self, tp: int, cp: int, mbs: int, precision: str, recompute: str) -> LayerCost:
        key = (tp, cp, mbs, precision, recompute)
        hit = self._layer_cache.get(key)
        if hit is not None:
            return hit
        c, g = self.cfg, self.gpu
        tokens = mbs * c.seq_len / cp  # tokens a rank processes per micro-batch
        peak_mm = g.peak(precision) * self.eff
        if precision == "fp4":
            # NVFP4 training keeps part of the GEMM work in FP8 (sensitive layers, scaled
            # transforms); the fitted share runs at the FP4 rate, the rest at FP8's (Amdahl).
            phi = self.cal.fp4_share
            peak_mm = 1.0 / (phi / peak_mm + (1 - phi) / (g.peak("fp8") * self.eff))
        peak_bf16 = g.peak("bf16") * self.eff
        gemm_f = 0.0
        for gm in layer_gemms(c, tp):
            eff = _shape_eff(tokens, self.half) * _shape_eff(gm.n, self.half) * _shape_eff(gm.k, self.half)
            gemm_f += 2 * tokens * gm.n * gm.k / (peak_mm * eff)
        # frozen base: activation gradients only; otherwise activation + weight gradients
        gemm_b = gemm_f * (1 if self.b.lora else 2)
        lora_f = 0.0
        if self._params["lora_layer"]:
            r = c.lora_rank
            lora_f = 2 * tokens * self._params["lora_layer"] / (peak_bf16 * _shape_eff(r, self.half))
        attn_f = tokens * attn_fwd_flops_per_token_layer(c) / tp / (peak_bf16 * self.cal.attn_ratio)
        attn_b = attn_f * ATTN_BWD_OVER_FWD
        elem_f = tokens * self._elementwise_bytes(precision) / tp / (g.hbm_bytes_per_s * ELEMWISE_BW_SHARE)
        elem_b = 2 * elem_f
        exp_tp_f, exp_tp_b, exp_cp_f, exp_cp_b = self._exposed_comm(tokens, tp, cp, attn_f, attn_b)
        comp_f = gemm_f + attn_f + lora_f
        comp_b = gemm_b + attn_b + 2 * lora_f
        # recompute: full repeats the layer's forward (GEMMs, attention, its TP traffic) before the
        # backward; selective repeats the element-wise parts
        rc_comp, rc_tp, rc_elem = 0.0, 0.0, 0.0
        if recompute == "full":
            rc_comp, rc_tp, rc_elem = comp_f, exp_tp_f + exp_cp_f, elem_f
        elif recompute == "selective":
            rc_elem = 0.5 * elem_f
        act = activation_bytes_per_layer(c, int(c.seq_len / cp), mbs, tp=tp, sp=True, recompute=recompute,
                                         frozen_mlp=self.b.lora,
                                         # not under LoRA: its adapters run in 16 bits on 16-bit inputs
                                         fp8_inputs=precision in ("fp8", "fp4") and not self.b.lora)
        out = LayerCost(
            fwd=comp_f + exp_tp_f + exp_cp_f + elem_f,
            bwd=comp_b + rc_comp + exp_tp_b + exp_cp_b + rc_tp + elem_b + rc_elem,
            compute=comp_f + comp_b + rc_comp,
            tp=exp_tp_f + exp_tp_b + (exp_tp_f if recompute == "full" else 0.0),
            cp=exp_cp_f + exp_cp_b + (exp_cp_f if recompute == "full" else 0.0),
            other=elem_f + elem_b + rc_elem,
            act_bytes=act, tokens=tokens)
        self._layer_cache[key] = out
        return out

    def _exposed_comm(self, tokens: float, tp: int, cp: int, attn_f: float, attn_b: float) -> tuple:
        """Seconds of one layer's tensor- and context-parallel traffic that compute does not hide:
        (tp forward, tp backward, cp forward, cp backward)."""
        c, g = self.cfg, self.gpu
        # tensor parallel with sequence parallelism: all-gather before and reduce-scatter after
        # each of the two GEMM pairs, forward and again backward
        act_bytes = tokens * c.d_model * 2
        link = self.nvl if tp <= g.nvlink_domain else self.nic
        tp_one = comm.all_gather(act_bytes, tp, link)
        tp_f, tp_b = 4 * tp_one, 4 * tp_one
        # context parallel (ring attention): K and V chunks travel cp-1 hops forward, K, V and their
        # gradients backward; hidden behind attention compute as far as it lasts
        cp_link = self.nvl if tp * cp <= g.nvlink_domain else self.nic
        kv_bytes = tokens * 2 * c.kv_heads * c.head_dim * 2 / tp
        cp_f = (cp - 1) * comm.p2p(kv_bytes, cp_link) if cp > 1 else 0.0
        cp_b = 2 * cp_f
        ov = self.overlap
        return (1 - ov) * tp_f, (1 - ov) * tp_b, max(0.0, cp_f - ov * attn_f), max(0.0, cp_b - ov * attn_b)

    def _elementwise_bytes(self, precision: str) -> float:
        """HBM bytes per token of one layer's forward element-wise kernels: two norms (read+write h),
        two residual adds (2 reads + 1 write of h), RoPE on q and k (llama), the MLP activation
        (SwiGLU reads 2f writes f; GELU reads and writes f), and with FP8/FP4 the cast of each GEMM
        input (read 2 bytes, write 1)."""
        c = self.cfg
        h, f = c.d_model, c.ff_dim
        kvd = c.kv_heads * c.head_dim
        elems = 2 * 2 * h + 2 * 3 * h
        if c.family == "llama":  # RoPE on q and k
            elems += 2 * (c.n_head * c.head_dim + kvd)
        elems += 3 * f if c.gated else 2 * f
        b = 2 * elems
        if precision in ("fp8", "fp4"):
            b += 3 * (3 * h + f)
        return b

    def _head(self, tp: int, cp: int, mbs: int, precision: str) -> tuple[float, float]:
        """(forward, backward) of the output projection + loss, run in bf16 on the last stage."""
        c, g = self.cfg, self.gpu
        tokens = mbs * c.seq_len / cp
        n = c.vocab_size / tp
        eff = _shape_eff(tokens, self.half) * _shape_eff(n, self.half) * _shape_eff(c.d_model, self.half)
        f = 2 * tokens * n * c.d_model / (g.peak("bf16") * self.eff * eff)
        if self.b.lora:
            return f, f
        return f, 2 * f

    # -- a whole layout ----------------------------------------------------------------------
    def stage_layers(self, lay: Layout) -> int:
        """Layers on the busiest pipeline rank (uneven splits put the extra layers somewhere). When
        the split counts the embedding and the loss as a layer each, a middle rank holds the most."""
        return math.ceil(self.pipeline_slots(lay.pp, lay.vpp) / (lay.pp * lay.vpp)) * lay.vpp

    def pipeline_slots(self, pp: int, vpp: int = 1) -> int:
        """Layer slots the pipeline split divides: the layers, plus one each for the embedding and
        the output layer + loss where the split counts them (and there is a pipeline). A benchmark
        counts them where its submissions did; a model's own layout does where that, and not the
        plain count, divides evenly over the pp·vpp stages (126 layers over 16 x 4: Llama 3 405B's
        first and last stage one layer short, Megatron's account-for-embedding/loss options, and
        the trainer's own split, `parallel.dims.stage_layers`)."""
        L, stages = self.cfg.n_layer, pp * vpp
        if pp == 1:
            return L
        if self.b.pp_split_counts_embedding_and_loss:
            return L + 2
        return L + 2 if not self.b.is_mlperf and L % stages and (L + 2) % stages == 0 else L

    def max_stages(self, pp: int, vpp: int) -> int:
        """The most (virtual) pipeline stages the stack's split may have: trainperf's trainer gives
        every stage a transformer layer (`parallel.dims.check_pipeline`); Megatron may give the
        embedding and the loss a stage each (Llama 3 405B: 126 layers over 16 x 8)."""
        return self.cfg.n_layer if self.stack.trainer_memory else self.pipeline_slots(pp, vpp)

    def _asym(self, lay: Layout) -> bool:
        return self.pipeline_slots(lay.pp, lay.vpp) > self.cfg.n_layer

    def empty_stage(self, pp: int, vpp: int = 1) -> bool:
        """Whether splitting the layers over pp·vpp (virtual) stages, ceil(slots / (pp·vpp)) each,
        leaves the last stage with no layer (pp=35 on 96 layers: 3 each fill 32 stages)."""
        if pp * vpp <= 1:
            return False
        slots = self.pipeline_slots(pp, vpp)
        return math.ceil(slots / (pp * vpp)) * (pp * vpp - 1) >= slots

    def _slowest_stage(self, lay: Layout, ly: LayerCost, hf: float, hb: float) -> tuple[int, bool]:
        """(layers, whether it holds the output layer) of the pipeline rank with the most work per
        micro-batch: in 1F1B the slowest rank sets the pace. Without the embedding/loss accounting
        that is the last rank, with the busiest share of layers and the output layer; with it the
        last rank gives up a layer for the output layer, and a middle rank may be the slower one."""
        L = self.stage_layers(lay)
        if not self._asym(lay):
            return L, True
        last = (L - 1) * (ly.fwd + ly.bwd) + hf + hb
        return (L - 1, True) if last > L * (ly.fwd + ly.bwd) else (L, False)

    def memory(self, lay: Layout) -> Memory:
        return self.cost(lay).memory(lay.gbs)

    def _trainer_memory(self, lay: Layout) -> TrainerMemory:
        """The `pytorch` stack: the trainer's accounting of this shape (16-bit formats compute in
        bf16 autocast there, FP8 included), the trainer's pipeline split and 1F1B schedule, AdamW."""
        return TrainerMemory(shape_memory(self.cfg, tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, dp=lay.dp,
                                          mbs=lay.mbs, recompute=lay.recompute, precision="bf16"),
                             reserve=RESERVE * self.gpu.usable_bytes, gpu_bytes=self.gpu.usable_bytes)

    def _static_memory(self, lay: Layout) -> tuple[float, float, float, float]:
        """The `megatron` stack's (weights, grads, optimizer, logits) bytes on the busiest rank:
        pipeline stage with the most layers plus the embedding or the output layer (both when
        pp = 1 and they are untied)."""
        c = self.cfg
        L = self.stage_layers(lay)
        p = self._params
        emb = p["emb"] / lay.tp * (1 if lay.pp > 1 or c.tie_embeddings else 2)
        base = L * p["layer"] / lay.tp + emb
        lora = L * p["lora_layer"]
        trainable, frozen = (lora, base) if self.b.lora else (base, 0.0)
        w, gr, opt = state_bytes(trainable, frozen, lay.dp * lay.cp, lay.precision,
                                 fp8_params=self.b.fp8_param_gather, grad_bytes=self.b.grad_bytes,
                                 sharded=self.stack.fully_sharded)
        if self.stack.fully_sharded:  # Megatron-FSDP's double buffer: two layers held gathered, 16-bit
            w += 2 * 2 * (p["lora_layer"] if self.b.lora else p["layer"] / lay.tp)
        logits = lay.mbs * c.seq_len / lay.cp * c.vocab_size / lay.tp * LOGIT_BYTES
        return w, gr, opt, logits

    def capacity(self) -> float:
        return self.gpu.usable_bytes

    def _dp_time(self, lay: Layout) -> tuple[float, float]:
        """(reduce-scatter of BF16 gradients, all-gather of parameters) over the dp·cp group."""
        n_ranks = lay.dp * lay.cp
        if n_ranks <= 1:
            return 0.0, 0.0
        n = self._rank_params(lay) * 2
        # parameters gathered in FP8 where the benchmark's software does so under FP8 (benchmarks.toml)
        n_ag = n / 2 if self.b.fp8_param_gather and lay.precision == "fp8" and not self.stack.fully_sharded else n
        # dp·cp ranks are strided by tp: that many share one NVLink domain
        p_in = max(1, min(n_ranks, self.gpu.nvlink_domain // lay.tp))
        while n_ranks % p_in:
            p_in -= 1
        p_out = n_ranks // p_in
        rs = comm.hier_reduce_scatter(n, p_in, p_out, self.nvl, self.nic)
        ag = comm.hier_all_gather(n_ag, p_in, p_out, self.nvl, self.nic)
        return rs, ag

    def cost(self, lay: Layout) -> ShapeCost:
        """The ShapeCost of `lay`'s model-parallel shape, recompute and precision (its global batch
        is not read), cached."""
        key = (lay.tp, lay.pp, lay.vpp, lay.dp, lay.cp, lay.mbs, lay.recompute, lay.precision)
        hit = self._cost_cache.get(key)
        if hit is not None:
            return hit
        c, g = self.cfg, self.gpu
        ly = self._layer(lay.tp, lay.cp, lay.mbs, lay.precision, lay.recompute)
        hf, hb = self._head(lay.tp, lay.cp, lay.mbs, lay.precision)
        L, head = self._slowest_stage(lay, ly, hf, hb)
        if not head:
            hf, hb = 0.0, 0.0
        t_f = L * ly.fwd + hf
        t_b = L * ly.bwd + hb
        # pipeline sends: one activation (sequence-parallel shard) per stage boundary and virtual
        # stage, forward and backward; across domains unless the whole model-parallel group fits
        p2p = 0.0
        if lay.pp > 1:
            link = self.nvl if lay.tp * lay.cp * lay.pp <= g.nvlink_domain else self.nic
            p2p = 2 * lay.vpp * comm.p2p(ly.tokens * c.d_model * 2 / lay.tp, link) * (1 - self.overlap)
        rs, ag = self._dp_time(lay)
        # gradients reduce bucket by bucket while the last micro-batch runs backward, parameters
        # gather while the first runs forward (Megatron's overlap_grad_reduce and
        # overlap_param_gather, set in NVIDIA's MLPerf configs): hidden as far as that compute lasts
        dp_exposed = max(0.0, rs - t_b) + max(0.0, ag - t_f)
        if self.stack.fully_sharded:
            # FSDP gathers the parameters again for the backward (resharded after the forward)
            dp_exposed = max(0.0, ag - t_f) + max(0.0, ag + rs - t_b)
        opt = (self._rank_params(lay) / (lay.dp * lay.cp) * OPTIMIZER_BYTES_PER_PARAM
               / (g.hbm_bytes_per_s * ELEMWISE_BW_SHARE))
        S = self.stage_layers(lay)
        if self.stack.trainer_memory:
            mem = self._trainer_memory(lay)
        else:
            w, gr, os_, logits = self._static_memory(lay)
            # interleaving keeps (1 + (p-1)/(p·v)) micro-batches' worth of the rank's layers in flight
            interleave = 1 + (lay.pp - 1) / (lay.pp * lay.vpp) if lay.vpp > 1 else 1.0
            mem = StateMemory(w, gr, os_, logits, RESERVE * g.usable_bytes, S * ly.act_bytes * interleave, lay.pp)
        out = ShapeCost(
            pp=lay.pp, vpp=lay.vpp, dp=lay.dp, mbs=lay.mbs, layer=ly, layers=L, stage_layers=S,
            head_f=hf, head_b=hb, t_f=t_f, t_b=t_b, p2p=p2p, dp_exposed=dp_exposed, optimizer=opt,
            overhead=self.cal.step_overhead_s, mem=mem,
            eval_s=eval_time(self.b.eval_samples, lay.dp, lay.mbs, lay.pp,
                             max(L * ly.fwd + hf, L * self.b.eval_eager_s_per_layer), self.b.eval_overhead_s))
        self._cost_cache[key] = out
        return out

    def _rank_params(self, lay: Layout) -> float:
        L = self.stage_layers(lay)
        p = self._params
        return L * p["lora_layer"] if self.b.lora else L * p["layer"] / lay.tp + p["emb"] / lay.tp

    def _samples(self, gbs: int) -> tuple[float, bool]:
        if self.samples_given is not None:
            return self.samples_given, True
        hit = self._samples_cache.get(gbs)
        if hit is None:
            hit = samples_to_converge(self.b.mlperf, gbs, self.ruleset, self.b.rcp_unit, self.cfg.seq_len)
            self._samples_cache[gbs] = hit
        return hit

    def _train_eval_fixed(self, cost: ShapeCost, gbs: int) -> tuple[float, float, float, float, bool, float]:
        """(train s, evaluations s, fixed s, samples, inside the RCP range, evaluations) of a run
        at `gbs`: time-to-train = steps to the target · step + evaluations + fixed."""
        samples, inside = self._samples(gbs)
        evals = self.b.evals(samples, gbs)
        return self.steps(samples, gbs) * cost.step_s(gbs), evals * cost.eval_s, self._fixed_s(), samples, inside, evals

    def steps(self, samples: float, gbs: int) -> float:
        """Optimizer steps to train `samples` at `gbs`: a budget in whole steps (the last one full),
        the RCP's or the logs' mean sample count as the mean number of steps it is."""
        n = samples / gbs
        return float(math.ceil(n * (1 - 1e-12))) if self.whole_steps else n

    def minutes(self, cost: ShapeCost, gbs: int) -> float:
        """Predicted minutes at global batch `gbs` for the shape whose cost is `cost`."""
        train, ev, fixed = self._train_eval_fixed(cost, gbs)[:3]
        return (train + ev + fixed) / 60

    def _fixed_s(self) -> float:
        """Seconds on the clock once per run: the calibrated start-up share plus the benchmark's
        measured one-time cost of its first evaluation (benchmarks.toml `first_eval_s`). The
        start-up share was fitted on MLPerf's clock; a token budget is priced without it."""
        if not self.b.is_mlperf:
            return 0.0
        return self.cal.run_overhead_s + self.b.first_eval_s

    def estimate(self, lay: Layout) -> Estimate:
        g = self.gpu
        cost = self.cost(lay)
        step = cost.step_s(lay.gbs)
        tps = lay.gbs * self.cfg.seq_len / step
        mfu_bf16 = tps * self.model_fpt / (self.cl.n_gpus * g.peak("bf16"))
        mfu = tps * self.model_fpt / (self.cl.n_gpus * g.peak(lay.precision))
        train, ev, fixed, samples, inside, evals = self._train_eval_fixed(cost, lay.gbs)
        return Estimate(layout=lay, step_time_s=step, breakdown=cost.breakdown(lay.gbs), memory=cost.memory(lay.gbs),
                        capacity=self.capacity(), mfu=mfu, mfu_bf16=mfu_bf16, tokens_per_s=tps,
                        tokens_per_s_per_gpu=tps / self.cl.n_gpus, samples=samples,
                        rcp_ruleset=self.ruleset, gbs_in_rcp_range=inside, steps=self.steps(samples, lay.gbs),
                        evals=evals, train_s=train, eval_s=ev, overhead_s=fixed)


def eval_time(eval_samples: float, dp: int, mbs: int, pp: int, fwd_s: float, overhead_s: float) -> float:
    """Seconds of one evaluation: each data-parallel rank runs ceil(eval_samples / (dp·mbs))
    micro-batches forward (the last one partly padding), the pipeline fills once (pp - 1 more
    stage-times of `fwd_s`), and the evaluation pays `overhead_s` once, whatever its size. At 512
    GPUs a LoRA evaluation is 3 micro-batches per rank, so the fixed part is most of it. `fwd_s`
    is the stage's forward, no less than its eager floor where the benchmark's software evaluates
    eagerly (`Benchmark.eval_eager_s_per_layer`)."""
    m_eval = math.ceil(eval_samples / (dp * mbs))
    return (m_eval + pp - 1) * fwd_s + overhead_s


def best_precision(cl: Cluster, ceiling: str = "fp4") -> list[str]:
    """Formats the GPU has, no lower than `ceiling` allows (e.g. a round before FP4 was approved)."""
    allowed = PRECISIONS[: PRECISIONS.index(ceiling) + 1]
    return [p for p in cl.gpu.precisions() if p in allowed]


__all__ = ["Layout", "LayerCost", "ShapeCost", "Estimate", "Model", "best_precision", "eval_time"]
