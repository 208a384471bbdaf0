"""Memory per GPU of trainperf's own PyTorch-native trainer (`plan --stack pytorch`, the dry run).

The trainer keeps fp32 parameters and shards them with FSDP2 over the data-parallel shard group
(dp_shard x cp; HSDP replicates over dp_replicate), splits the blocks' matrices with DTensor tensor
parallelism (sequence-parallel norms), cuts the layers into pipeline stages run by
torch.distributed.pipelining, and adds LoRA adapters on a frozen base. `stack_memory` prices the
busiest rank (the first pipeline stage for activations, the last for the head; a stage holding
both when pp = 1), term by term, for `P` parameters and `T` trainable ones on one rank's stage after
tensor parallelism, `F` = the FSDP shard count (1 without FSDP), `w` = bytes of a computed-with
parameter (2 under bf16 mixed precision, else 4):

  weights      4·P/F: the fp32 sharded parameters (frozen LoRA base included: the trainer builds it
               in fp32 like the rest), and each model part's own position buffers, whole: the RoPE
               table (fp32 cos and sin, 8·head_dim bytes per position) and the positions (int64),
               over the s/cp positions of the rank (134 MB a part at 131,072 tokens and head_dim 128)
  grads        4·T/F: the fp32 sharded gradients the optimizer reads
  optimizer    8·T/F: AdamW's two fp32 moments (Muon: 4 bytes of momentum on the blocks' matrices)
  accumulation 4·T: gradients kept whole (fp32) between micro-batches: where FSDP2's gradient sync
               is off (where they fit: `parallel.dims.unsharded_grads_fit`; under a pipeline, whose
               schedule also keeps the stage's parameters gathered through backward, + w·P, where
               4·T + 2·P fit; else every micro-batch reduce-scatters, `parallel.apply`)
  gathered     w·(2 blocks + the root's embedding, final norm and head): FSDP2's all-gathered
               parameters, the root's for the whole step, a block's while it runs and the last one's
               from its forward to its backward (none without FSDP: the parameters are in `weights`;
               none under a pipeline: `accumulation` holds them all)
  activations  `plan.memory.activation_bytes_per_layer` (16-bit; x2 in fp32), plus, without
               recompute, the SwiGLU's SiLU output 2·s·b·f/tp (the trainer's unfused gate·up
               product saves it for its backward, beside the gate, the up projection and the
               product that count has), x the stage's layers x the micro-batches its schedule
               keeps in flight (`in_flight`). Three more per layer where the trainer has them:
               torch's DTensor tensor parallelism saves the all-gathered (whole) inputs of the
               column-parallel projections, where Megatron's sequence parallelism, which that count
               assumes, saves their 1/tp shard: + (1 - 1/tp) of those inputs;
               LoRA's adapter dropout keeps a mask (1 byte) and its output (2) of each adapted
               projection's input (the whole s·b·h a column-parallel projection gathers, 1/tp of a
               row-parallel one's), and context parallelism's all-gather attention keeps SDPA's
               causal mask over the global positions, (s/cp)·s·w bytes (PyTorch's ring, which
               CUDA with NCCL runs where a fused kernel takes the shape, has none). Under full
               recompute a block keeps only its input, the 1/tp sequence shard it gets, none of
               these; under either recompute a block's backward first rebuilds what it dropped,
               one layer's worth, once (traced: tp 4 with full recompute, planned/traced 1.92
               before this term was counted so, 1.03 after)
  reducing     a block's whole gradients while its backward runs under FSDP2: in the compute dtype
               and their fp32 copy that the reduce-scatter takes (reduce_dtype fp32; none in fp32),
               and the flat all-gather buffer of the block prefetched for the next backward before
               it is copied out, (2·w + 4)·block parameters/tp in bf16 (8 in fp32); gone before the
               next block's
  logits       (past model.loss_chunk_bytes, without a pipeline: one chunk of tokens' worth
               of what follows, beside the head's gradient summed over the chunks, `_loss_bytes`)
               the loss of one micro-batch of s/cp tokens over the vocabulary/tp entries of this
               rank (the head's output stays split over the vocabulary and the loss is taken by
               loss_parallel, without gathering it), at its peak in cross-entropy's backward: the fp32
               log-softmax it saved, the fp32 gradient it receives and the one it makes, 12 bytes
               per token and vocabulary entry (its forward holds 10 in bf16: logits, their fp32
               copy, the log-softmax); under tensor parallelism loss_parallel's 20 per local entry
               (model/loss.py)

The peak is the resident state (weights, optimizer) plus what the step holds when its activations
peak, with the larger of the two transients that come after them (the loss's backward, then each
block's gradients being reduced): the sharded gradients only where they accumulate from the first micro-batch on (reduce-scatter
every micro-batch, or no FSDP); the whole gradients (`accumulation`) only where a backward has run
before the peak: where the schedule has a steady phase (fewer micro-batches in flight than the
step has); where it has none (GPipe, a step that is all warm-up), at the first backward or just
after it, whichever holds more: every micro-batch's activations, or one fewer with the whole
gradients made.

Not counted: the CUDA context, cuBLAS/NCCL workspaces and buffers, allocator fragmentation (the
planner's `reserve`, beside this), and FP8 (torchao's Float8Linear keeps bf16 weights here).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainperf.config import ModelConfig
from trainperf.model.loss import loss_bytes, loss_chunk
from trainperf.plan.memory import activation_bytes_per_layer

ADAM_BYTES = 8  # two fp32 moments per trainable parameter
MUON_BYTES = 4  # one fp32 momentum buffer


@dataclass(frozen=True)
class StackMemory:
    weights: float
    grads: float
    optimizer: float
    accumulation: float
    gathered: float
    activations: float
    logits: float
    accumulation_mode: str
    reducing: float = 0.0
    grads_at_peak: bool = True  # the sharded gradients exist while the activations peak

    @property
    def total(self) -> float:
        """The peak: the resident state, and what the step holds at its peak (see the module)."""
        grads = self.grads if self.grads_at_peak else 0.0
        # the loss's backward comes before any block's: the two transients never meet
        return (self.weights + grads + self.optimizer + self.accumulation + self.gathered
                + self.activations + max(self.logits, self.reducing))

    def as_gb(self) -> dict:
        d = {k: round(v / 1e9, 2) for k, v in self.__dict__.items() if isinstance(v, float)}
        d["grads"] = d["grads"] if self.grads_at_peak else 0.0  # as the total counts them
        d["total"] = round(self.total / 1e9, 2)
        return d


def block_params(cfg: ModelConfig) -> tuple[int, int]:
    """(parameters, LoRA adapter parameters) of one block, as `model.transformer.Block` builds it."""
    h, hd = cfg.d_model, cfg.head_dim
    q, kv, f = cfg.n_head * hd, cfg.kv_heads * hd, cfg.ff_dim
    b = 1 if cfg.bias else 0
    shapes = {"wq": (h, q), "wk": (h, kv), "wv": (h, kv), "wo": (q, h), "w1": (h, f), "w2": (f, h)}
    if cfg.gated:
        shapes["w3"] = (h, f)
    n = sum(i * o + b * o for i, o in shapes.values())
    norm = h * (2 if cfg.family == "gpt" and cfg.bias else 1)
    n += 2 * norm + (2 * hd if cfg.qk_norm else 0)
    lora = sum(cfg.lora_rank * (i + o) for k, (i, o) in shapes.items() if k in cfg.lora_targets) if cfg.lora_rank else 0
    return n + lora, lora


def root_params(cfg: ModelConfig, first: bool, last: bool) -> int:
    """Parameters outside the blocks on a stage: the embedding (and GPT's positions) on the first,
    the final norm and the head on the last (the tied head is the embedding on one stage, its copy
    on two)."""
    h = cfg.d_model
    n = 0
    if first:
        n += cfg.vocab_size * h + (cfg.seq_len * h if cfg.family == "gpt" else 0)
    if last:
        n += h * (2 if cfg.family == "gpt" and cfg.bias else 1)
        if not (cfg.tie_embeddings and first):
            n += cfg.vocab_size * h
    return n


def stage_layer_counts(n_layer: int, pp: int, vpp: int) -> list[int]:
    """Layers on each pipeline rank (rank p holds virtual stages p, p + pp, ...), as the trainer's
    `parallel.dims.stage_layers` splits them."""
    return list(_stage_layer_counts(n_layer, pp, vpp))


@functools.lru_cache(maxsize=1024)  # the planner's search asks for the same splits thousands of times
def _stage_layer_counts(n_layer: int, pp: int, vpp: int) -> tuple[int, ...]:
    from trainperf.parallel.dims import stage_layers

    per_stage = [len(r) for r in stage_layers(n_layer, pp * vpp)]
    return tuple(sum(per_stage[s] for s in range(p, pp * vpp, pp)) for p in range(pp))


def in_flight(schedule: str, pp: int, vpp: int, rank: int, microbatches: int) -> float:
    """Micro-batches (in whole-stage units) whose activations pipeline rank `rank` holds at once, as
    torch.distributed.pipelining's schedules order them: GPipe all of them; 1F1B pp - rank (its
    warm-up forwards); the interleaved schedules (vpp chunks of the stage each) their warm-up,
    (vpp - 1)·pp + 2·(pp - 1 - rank) chunks, plus the one in its steady 1F1B step."""
    if pp == 1:
        return 1
    if schedule == "gpipe":
        return microbatches
    if vpp == 1:
        return min(pp - rank, microbatches)
    rounds = max(1, microbatches // pp)
    warmup = min((vpp - 1) * (microbatches // rounds) + 2 * (pp - 1 - rank), microbatches * vpp)
    return min(warmup + 1, microbatches * vpp) / vpp


@dataclass(frozen=True)
class _Stage:
    """The terms that do not depend on the global batch (bytes) of the pipeline ranks `ranks`,
    which hold the same layers and roots and so differ only in their micro-batches in flight."""

    ranks: tuple[int, ...]
    params: float  # P
    trainable: float  # T
    optimizer: float  # before sharding
    acts_per_mb: float  # one micro-batch's activations on the rank's layers
    rebuilt: float  # what recompute rebuilds of one layer for its backward
    gathered: float
    logits: float
    reducing: float
    buffers: float  # the model parts' position buffers (RoPE table, positions), whole on every rank


@dataclass(frozen=True)
class ShapeMemory:
    """The memory of one model-parallel shape (tp, pp, vpp, cp, dp, micro-batch, recompute, ...)
    whatever the global batch, stage by stage; `at(gbs)` is the busiest rank's peak for a batch.
    The planner's search prices every global batch of a shape from one of these."""

    stages: tuple[_Stage, ...]
    fsdp: bool
    shard: int  # F
    compute_bytes: int  # w
    dp: int
    mbs: int
    pp: int
    vpp: int
    schedule: str

    def at(self, gbs: int, gpu_bytes: float | None = None) -> StackMemory:
        """The busiest rank's memory at `gbs` sequences per step (see the module for each term)."""
        from trainperf.parallel.dims import unsharded_grads_fit

        fsdp, F, w = self.fsdp, self.shard, self.compute_bytes
        accum = max(1, gbs // self.dp // self.mbs)
        # Of ranks with the same terms, the peak grows with the micro-batches in flight on either side
        # of `accum` (below it: whole gradients beside every one; from it on: see below), so only the
        # rank with the most in flight and the one with the most below `accum` can be the busiest.
        ranked = []
        for st in self.stages:
            flights = [(in_flight(self.schedule, self.pp, self.vpp, r, accum), -r) for r in st.ranks]
            below = [x for x in flights if x[0] < accum]
            for flight, r in {max(flights), *([max(below)] if below else [])}:
                ranked.append((-r, flight, st))
        best = None
        for _, flight, st in sorted(ranked, key=lambda x: x[0]):
            P, T = st.params, st.trainable
            if fsdp and accum > 1 and self.pp > 1 and (gpu_bytes is None or unsharded_grads_fit(4 * T + 2 * P, gpu_bytes)):
                mode, acc = "pipeline", 4 * T + w * P
            elif fsdp and accum > 1 and (gpu_bytes is None or unsharded_grads_fit(4 * T, gpu_bytes)):
                mode, acc = "unsharded", 4 * T
            else:
                mode, acc = ("reduce-scatter" if fsdp and accum > 1 else "local"), 0.0
            acts = st.acts_per_mb * flight + st.rebuilt
            if flight >= accum:
                # no steady phase: the peak is at the first backward (nothing accumulated) or just after
                # it, one micro-batch's activations freed and the whole gradients (parameters) made
                if acc > st.acts_per_mb:
                    acts -= st.acts_per_mb
                else:
                    acc = 0.0
            # a pipeline's stage keeps all its parameters gathered once its backward ran (in `accumulation`)
            gathered = 0.0 if mode == "pipeline" and acc else st.gathered
            m = StackMemory(weights=4 * P / F + st.buffers, grads=4 * T / F, optimizer=st.optimizer / F, accumulation=acc,
                            gathered=gathered, activations=acts, logits=st.logits, accumulation_mode=mode,
                            reducing=st.reducing, grads_at_peak=accum > 1 and mode in ("reduce-scatter", "local"))
            if best is None or m.total > best.total:
                best = m
        return best


def layer_activations(cfg: ModelConfig, *, tp: int, cp: int, mbs: int, recompute: str, w: int) -> float:
    """Bytes one block keeps for its backward per micro-batch in the trainer (see `activations` in
    the module); under full recompute only its input, the 1/tp sequence shard the block gets."""
    s_loc = cfg.seq_len // cp
    frozen_mlp = cfg.lora_rank > 0 and not {"w1", "w2", "w3"} & set(cfg.lora_targets)
    act = activation_bytes_per_layer(cfg, s_loc, mbs, tp=tp, sp=True, recompute=recompute,
                                     flash=True, dropout=False, frozen_mlp=frozen_mlp)
    if recompute == "full":
        return act * (w // 2)
    if cfg.gated and recompute == "none":
        act += 2 * s_loc * mbs * cfg.ff_dim / tp
    if tp > 1:
        gemm_in = (1 if frozen_mlp else 2) * 2 * s_loc * mbs * cfg.d_model
        act += gemm_in * (1 - 1 / tp)
    act *= w // 2
    if cfg.lora_rank and cfg.lora_dropout > 0:
        h, q, f = cfg.d_model, cfg.n_head * cfg.head_dim, cfg.ff_dim
        inputs = {"wq": h, "wk": h, "wv": h, "w1": h, "w3": h, "wo": q / tp, "w2": f / tp}
        act += 3 * s_loc * mbs * sum(inputs[t] for t in cfg.lora_targets if t in inputs)
    if cp > 1:
        act += s_loc * cfg.seq_len * w
    return act


def shape_memory(cfg: ModelConfig, *, tp: int = 1, pp: int = 1, vpp: int = 1, cp: int = 1, dp: int = 1,
                 dp_replicate: int = 1, mbs: int = 1, schedule: str = "1f1b", recompute: str = "none",
                 precision: str = "bf16", optimizer: str = "adamw") -> ShapeMemory:
    """The terms of this layout that do not depend on the global batch, per pipeline rank, `dp`
    counting every data-parallel rank (dp_shard = dp / dp_replicate)."""
    from trainperf.parallel.dims import fsdp_applies

    dp_shard = dp // dp_replicate
    fsdp = fsdp_applies(dp_replicate, dp_shard, tp, pp, cp)
    F = dp_shard * cp if fsdp else 1
    w = 2 if precision == "bf16" else 4  # fp8 matmuls run inside bf16 autocast, on bf16 weights
    blk, blk_lora = block_params(cfg)
    layers = stage_layer_counts(cfg.n_layer, pp, vpp)
    act_layer = layer_activations(cfg, tp=tp, cp=cp, mbs=mbs, recompute=recompute, w=w)
    # a recomputed block's backward first rebuilds its forward: one layer's whole activations, once
    rebuilt = layer_activations(cfg, tp=tp, cp=cp, mbs=mbs, recompute="none", w=w) - act_layer
    s_loc = cfg.seq_len // cp
    parts = vpp if pp > 1 else 1  # a pipeline rank holds one model part per virtual stage
    buffers = parts * 8 * s_loc * ((cfg.head_dim if cfg.family == "llama" else 0) + 1)
    kinds: dict[tuple[int, bool, bool], list[int]] = {}
    for p in range(pp):
        kinds.setdefault((layers[p], p == 0, p == pp - 1), []).append(p)
    stages = []
    for (n_layers, first, last), ranks in kinds.items():
        root = root_params(cfg, first, last)
        P = (n_layers * blk + root) / tp
        T = n_layers * blk_lora / tp if cfg.lora_rank else P
        opt = ADAM_BYTES * T
        if optimizer == "muon" and not cfg.lora_rank:
            matrices = n_layers * (blk - 2 * cfg.d_model) / tp
            opt = ADAM_BYTES * (T - matrices) + MUON_BYTES * matrices
        stages.append(_Stage(
            ranks=tuple(ranks), params=P, trainable=T, optimizer=opt, acts_per_mb=act_layer * n_layers,
            rebuilt=rebuilt if n_layers else 0.0,
            gathered=w * (2 * blk + root) / tp if F > 1 else 0.0,
            logits=_loss_bytes(cfg, mbs * s_loc, tp, pp, w) if last else 0.0,
            reducing=((w + 4 if w == 2 else 4) + w) * blk / tp if F > 1 else 0.0, buffers=buffers))
    return ShapeMemory(tuple(stages), fsdp, F, w, dp, mbs, pp, vpp, schedule)


def loss_tokens(cfg: ModelConfig, tokens: int, tp: int, pp: int) -> int:
    """How many of a micro-batch's `tokens` the last stage's loss holds at once: a chunk's where the
    trainer chunks (model/loss.py: without a pipeline, over this rank's vocabulary/tp entries), else
    all of them."""
    return loss_chunk(tokens, cfg.vocab_size, cfg.loss_chunk_bytes, tp) if pp == 1 else tokens


def _loss_bytes(cfg: ModelConfig, tokens: int, tp: int, pp: int, w: int) -> float:
    """The loss's transient on the last stage (`logits` in the module's terms). Where the trainer
    takes it in chunks (model/loss.py: no pipeline, and more than one chunk), one chunk's, beside
    the head's gradient (this rank's 1/tp of it): autograd sums the chunks' weight gradients out
    of place (the running sum, the new chunk's and their sum: 3 x w.V.D at the add; one stays for the
    rest of the backward). Traced at V = 128,256: planned/traced 1.01-1.02 (docs/scale-validation.md)."""
    chunk = loss_tokens(cfg, tokens, tp, pp)
    whole = loss_bytes(chunk, cfg.vocab_size, tp)
    if chunk >= tokens:
        return whole
    head = 0.0 if cfg.lora_rank else float(w * cfg.vocab_size * cfg.d_model / tp)  # a LoRA run's head is frozen
    return head + max(whole, 2 * head)


def stack_memory(cfg: ModelConfig, *, tp: int = 1, pp: int = 1, vpp: int = 1, cp: int = 1, dp: int = 1,
                 dp_replicate: int = 1, mbs: int = 1, gbs: int = 1, schedule: str = "1f1b",
                 recompute: str = "none", precision: str = "bf16", optimizer: str = "adamw",
                 gpu_bytes: float | None = None) -> StackMemory:
    """The busiest rank's memory (bytes, by term: see the module) for this layout, `dp` counting every
    data-parallel rank (dp_shard = dp / dp_replicate), `gbs` sequences per step; `gpu_bytes` decides
    whether whole gradients fit between micro-batches (None: they do)."""
    return shape_memory(cfg, tp=tp, pp=pp, vpp=vpp, cp=cp, dp=dp, dp_replicate=dp_replicate, mbs=mbs,
                        schedule=schedule, recompute=recompute, precision=precision,
                        optimizer=optimizer).at(gbs, gpu_bytes)
