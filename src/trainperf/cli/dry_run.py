"""`trainperf run --dry-run`: what a layout would run, checked and priced without starting a process.

It resolves the layout with the trainer's own check (`ParallelDims.for_recipe`), builds the model on
the meta device (no memory, no weights), and prints what each rank would hold, the planner's memory
estimate for that layout on a GPU kind, and the MLPerf keys the run would log. With a GPU kind it
also traces the memory of the busiest rank from the trainer's own code on fake tensors over a fake
process group (`train.memtrace`), beside the planner's price of the same stack
(`plan.stack_memory`), so any world size (10,752 ranks) checks on a laptop.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from trainperf.config import Recipe, SubmittedLayout
from trainperf.errors import ConfigError
from trainperf.layout import ranks

# How trainperf.parallel.apply.apply_tp shards each parameter over the tp ranks: the column-wise
# projections (and their biases) and the embedding tables / head along dim 0, the row-wise
# projections along dim 1 (their biases stay whole); norms are replicated (sequence parallel).
_TP_DIM0 = re.compile(r"(\.(wq|wk|wv|w1|w3)\.(weight|bias)|^(tok_emb|pos_emb|output)\.weight)$")
_TP_DIM1 = re.compile(r"\.(wo|w2)\.weight$")
_LAYER = re.compile(r"^layers\.(\d+)\.")
_FIRST = ("tok_emb.", "pos_emb.")  # on the first pipeline stage
_LAST = ("norm.", "output.")  # final norm and head on the last


@dataclass
class RankShare:
    """What one pipeline rank holds (each of its tp x dp_shard x cp peers the same amount)."""

    pp_rank: int
    layers: list[int]
    first: bool  # holds the embedding
    last: bool  # holds the final norm and the head
    params: int  # elements on one rank, after tp and FSDP sharding
    trainable: int


def _local(shape: tuple[int, ...], name: str, tp: int, fsdp: int) -> int:
    """Elements of one parameter on the busiest rank: its tp shard (DTensor's ceil split), then its
    FSDP2 shard along dim 0 over `fsdp` ranks."""
    dims = list(shape) or [1]
    if tp > 1 and _TP_DIM0.search(name):
        dims[0] = math.ceil(dims[0] / tp)
    elif tp > 1 and _TP_DIM1.search(name) and len(dims) > 1:
        dims[1] = math.ceil(dims[1] / tp)
    dims[0] = math.ceil(dims[0] / fsdp)
    return math.prod(dims)


def rank_shares(model, dims, vpp: int = 1) -> list[RankShare]:
    """Per pipeline rank, the parameters one of its ranks holds, from the meta model's named
    parameters and the layout alone (FSDP2 shards over dp_shard x cp when `dims.fsdp`)."""
    from trainperf.parallel.dims import stage_layers

    # the trainer's split (pp * vpp stages; rank r holds stages r, r + pp, ...), as in parallel.pipeline
    layers_of = [list(s) for s in stage_layers(len(model.layers), dims.pp * vpp)]
    rank_of_layer = {layer: s % dims.pp for s, ls in enumerate(layers_of) for layer in ls}
    fsdp = dims.dp_shard * dims.cp if dims.fsdp else 1
    params = [0] * dims.pp
    trainable = [0] * dims.pp
    tied = getattr(model.output, "weight", None) is getattr(model.tok_emb, "weight", None)
    for name, p in model.named_parameters():
        m = _LAYER.match(name)
        if m:
            ranks = [rank_of_layer[int(m.group(1))]]
        elif name.startswith(_FIRST):
            # a tied head is the embedding table: the last stage keeps its own copy (Megatron's way)
            ranks = [0, dims.pp - 1] if tied and name == "tok_emb.weight" and dims.pp > 1 else [0]
        elif name.startswith(_LAST):
            ranks = [dims.pp - 1]
        else:
            ranks = [0]
        n = _local(tuple(p.shape), name, dims.tp, fsdp)
        for r in ranks:
            params[r] += n
            trainable[r] += n if p.requires_grad else 0
    return [RankShare(r, [layer for s in range(r, len(layers_of), dims.pp) for layer in layers_of[s]],
                      r == 0, r == dims.pp - 1, params[r], trainable[r]) for r in range(dims.pp)]


def resolve_vocab(r: Recipe) -> str:
    """Fill model.vocab_size from the tokenizer when the recipe leaves it 0 (as the trainer does from
    its prepared data), without preparing any data; returns the tokenizer's name for the log."""
    d = r.data
    name = "byte" if d.tokenizer == "byte" else f"bpe{d.bpe_vocab_size}" if d.tokenizer == "bpe" else d.tokenizer
    if not r.model.vocab_size:
        from trainperf.data.tokenizer import planned_vocab

        r.model.vocab_size = planned_vocab(d.tokenizer, d.bpe_vocab_size)
    return name


STACK = "pytorch"  # what `trainperf run` is: the planner prices this stack for the dry run


def planner_estimate(r: Recipe, dims, geometry, gpu: str, precision: str, planned) -> dict[str, Any]:
    """The planner's estimate for this exact layout on `dims.world_size` x `gpu` under the stack that
    runs it: its time, and its memory, which is `planned` (`planned_memory`: the trainer's own
    accounting, the one the traced memory is checked against) plus the planner's reserve."""
    from trainperf.plan.calibration import load_calibration
    from trainperf.plan.hardware import cluster, precision_rank
    from trainperf.plan.memory import RESERVE, Memory
    from trainperf.plan.perf import Layout, Model
    from trainperf.plan.stack import get_stack
    from trainperf.plan.workload import known, load_benchmark

    if r.benchmark.name not in set(known()) | {load_benchmark(k).mlperf for k in known()}:
        return {"skipped": f"the planner models the MLPerf benchmarks ({', '.join(known())}), not '{r.benchmark.name}'"}
    b = load_benchmark(r.benchmark.name, model=r.model, gbs=r.train.global_batch_size)
    model = Model(b, cluster(gpu, dims.world_size), load_calibration(), b.round, stack=STACK)
    lowest = get_stack(STACK).max_precision
    priced = lowest if precision_rank(precision) > precision_rank(lowest) else precision
    lay = Layout(tp=dims.tp, pp=dims.pp, dp=dims.dp, cp=dims.cp, vpp=r.parallel.vpp,
                 mbs=geometry.micro, gbs=geometry.global_batch, recompute=r.parallel.activation_checkpoint,
                 precision=priced)
    est = model.estimate(lay)
    cap = model.capacity()
    mem = Memory.of_stack(planned, RESERVE * cap)
    out = {"stack": STACK, "gpu": model.gpu.key, "gpu_name": model.gpu.name, "precision": priced, "round": b.round,
           "memory_gb": mem.as_gb(), "capacity_gb": round(cap / 1e9, 2),
           "fits": mem.total <= cap, "minutes": round(est.minutes, 3),
           "step_time_s": round(est.step_time_s, 4), "tokens_per_s_per_gpu": round(est.tokens_per_s_per_gpu, 1),
           "loss_chunk_tokens": _loss_chunk(r, dims, geometry)}
    if priced != precision:
        out["precision_note"] = f"the {STACK} stack trains no {precision} (lowest: {lowest}): priced at {priced}"
    return out


def _chunks(est: dict) -> str:
    c = est.get("loss_chunk_tokens")
    return f" (taken in chunks of {c:,} tokens)" if c else ""


def _loss_chunk(r: Recipe, dims, geometry) -> int | None:
    """Tokens per chunk where the trainer takes a micro-batch's loss in chunks (model/loss.py), else None."""
    from trainperf.plan.stack_memory import loss_tokens

    tokens = geometry.micro * r.model.seq_len // dims.cp
    chunk = loss_tokens(r.model, tokens, dims.tp, dims.pp)
    return chunk if chunk < tokens else None


def memory_check(r: Recipe, dims, geometry, gpu: str, seed: int, plan, precision: str = "bf16") -> dict[str, Any]:
    """The busiest rank's memory traced from the trainer's code, the planner's price of the same
    stack (`plan`, from `planned_memory`), the GPU's usable memory, and what to change when the
    trace does not fit."""
    from trainperf.plan.hardware import get_gpu
    from trainperf.train.memtrace import trace_memory

    g = get_gpu(gpu)
    cap = g.usable_bytes
    trace = trace_memory(r, dims.world_size, device_bytes=cap, seed=seed)
    peak = trace.peak
    out = {"traced_peak_gb": round(peak.peak_bytes / 1e9, 2), "planned_gb": round(plan.total / 1e9, 2),
           "gpu_gb": round(cap / 1e9, 2), "gpu": g.key, "fits": peak.peak_bytes <= cap,
           "traced_rank": peak.rank, "traced_pp_rank": peak.pp_rank, "peak_at": peak.peak_at,
           "precision": trace.precision, "grad_accumulation": trace.grad_sync,
           "stages": [{"pp_rank": s.pp_rank, "rank": s.rank, "peak_gb": round(s.peak_bytes / 1e9, 2),
                       "resident_gb": round(s.resident_bytes / 1e9, 2), "seconds": s.seconds} for s in trace.stages],
           "planned": plan.as_gb(), "not_counted": trace.not_counted,
           "trace_seconds": round(sum(s.seconds for s in trace.stages), 1),
           "traced_layers": (f"{r.model.n_layer} (every layer)" if trace.depths is None else
                             f"{' and '.join(map(str, trace.depths))} per pipeline stage, extended to "
                             f"{r.model.n_layer} (identical blocks: memory is linear in them)")}
    if precision != trace.precision or r.train.fp8_linear:
        out["not_counted"] += (f"; {precision} matmuls: traced as their bf16 autocast (FP8/FP4 casts and "
                               f"low-precision weight copies are not traced)")
    if not out["fits"]:
        out["advice"] = fit_advice(r, dims, geometry, trace.precision, cap)
    return out


def planned_memory(r: Recipe, dims, geometry, precision: str, cap: float, **change):
    """`plan.stack_memory` for this run's layout (with `change`s: recompute=, mbs=, tp=, ...),
    `precision` the trainer's (`train.precision`, auto resolved as on a GPU)."""
    from trainperf.plan.stack_memory import stack_memory

    kw = dict(tp=dims.tp, pp=dims.pp, vpp=r.parallel.vpp, cp=dims.cp, dp=dims.dp, dp_replicate=dims.dp_replicate,
              mbs=geometry.micro, gbs=geometry.global_batch, schedule=r.parallel.pp_schedule,
              recompute=r.parallel.activation_checkpoint, precision=precision, optimizer=r.train.optimizer,
              gpu_bytes=cap)
    kw.update(change)
    return stack_memory(r.model, **kw)


def fit_advice(r: Recipe, dims, geometry, precision: str, cap: float) -> str:
    """The first of the usual levers (recompute, a smaller micro-batch, more tensor parallelism on
    the same GPUs) under which the planner's price of this stack fits, as --set/--layout words."""
    tries = []
    for rc in ("selective", "full"):
        if r.parallel.activation_checkpoint in ("none", "selective") and rc != r.parallel.activation_checkpoint:
            tries.append((f"--set parallel.activation_checkpoint={rc}", {"recompute": rc}))
    if geometry.micro > 1:
        tries.append(("--set train.micro_batch_size=1", {"mbs": 1}))
        tries.append(("--set train.micro_batch_size=1 --set parallel.activation_checkpoint=full",
                      {"mbs": 1, "recompute": "full"}))
    for tp in (2, 4, 8):
        if tp > dims.tp and dims.dp % (tp // dims.tp) == 0 and r.model.n_head % tp == 0:
            dp = dims.dp // (tp // dims.tp)
            if geometry.global_batch % dp == 0:
                tries.append((f"--layout tp={tp},dp={dp} (the same GPUs)", {"tp": tp, "dp": dp}))
                tries.append((f"--layout tp={tp},dp={dp},recompute=full", {"tp": tp, "dp": dp, "recompute": "full"}))
    for words, change in tries:
        m = planned_memory(r, dims, geometry, precision, cap, **change)
        if m.total <= cap:
            return f"{words}: planned {m.total / 1e9:.1f} GB of {cap / 1e9:.1f} GB (check it with this dry run)"
    return "none of recompute, micro-batch 1 or tp up to 8 fits by the planner: more pipeline stages or GPUs"


def dry_run(r: Recipe, world: int, gpu: str | None, named: SubmittedLayout | None, layout_text: str | None,
            seed: int, as_json: bool = False, trace: bool = True) -> int:
    """Check and describe the run `r` would be on `world` processes; 0, or a ConfigError (exit 2)."""
    import torch

    from trainperf.mlperf.benchmarks import benchmark_hooks
    from trainperf.model.transformer import Transformer
    from trainperf.parallel.dims import MESH_DIMS, ParallelDims
    from trainperf.train.metadata import run_metadata

    dims = ParallelDims.for_recipe(r, world)  # the trainer's whole layout check: one line, exit 2
    if dims.cp > 1:
        # the run asks its device and cp group (parallel.context.apply_cp); a dry run has neither
        dims.cp_attention = ("chosen at start: ring (PyTorch context_parallel) on CUDA with NCCL where an SDPA kernel "
                             "takes the shape, else allgather_kv")
    geometry = dims.batch(r.train)
    tokenizer = resolve_vocab(r)
    with torch.device("meta"):
        model = Transformer(r.model)
    shares = rank_shares(model, dims, r.parallel.vpp)
    total = sum(p.numel() for p in model.parameters())
    gpu = gpu or (named.gpu if named else None)
    precision = (named.precision if named and named.precision else
                 "fp8" if r.train.fp8_linear else "bf16")
    est = memory = None
    if gpu:
        from trainperf.plan.hardware import get_gpu
        from trainperf.train.memtrace import trace_recipe

        # the one planned memory: the planner's section and the traced comparison both show it
        planned = planned_memory(r, dims, geometry, trace_recipe(r).train.precision, get_gpu(gpu).usable_bytes)
        est = planner_estimate(r, dims, geometry, gpu, precision, planned)
        memory = memory_check(r, dims, geometry, gpu, seed, planned, precision) if trace else None
    ev = r.eval.eval_samples or r.eval.eval_documents
    keys = run_metadata(r, benchmark_hooks(r), dims, geometry, seed=seed, eval_samples=ev,
                        corpus_fingerprint="(dry run)", tokenizer=tokenizer, restarts=0)
    keys = dict(keys)
    if not ev:  # the run counts the windows data.eval_bytes gives, which needs the prepared data
        keys["eval_samples"] = "(counted from data.eval_bytes at run time)"
    out = {"benchmark": r.benchmark.name, "world_size": dims.world_size, "layout": layout_text,
           "submitted": None if named is None else {"system": named.system, "source": named.source},
           "mesh": dict(zip(MESH_DIMS, dims.mesh_shape)),
           "strategy": dims.strategy, "pp_schedule": r.parallel.pp_schedule if dims.pp > 1 else None,
           "vpp": r.parallel.vpp, "batch": {"global": geometry.global_batch, "per_dp_rank": geometry.per_rank,
                                            "micro": geometry.micro, "accumulation": geometry.accum},
           "params_total": total, "per_rank": [s.__dict__ for s in shares], "planner": est, "memory": memory,
           "mlperf_keys": keys}
    if as_json:
        print(json.dumps(out, indent=1, default=str))
    else:
        _print(out, shares)
    return 0


def _layers(ls: list[int]) -> str:
    if not ls:
        return "no layers"
    runs, start = [], ls[0]
    for a, b in zip(ls, ls[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return f"{len(ls)} layers ({', '.join(runs)})"


def _print(out: dict, shares: list[RankShare]) -> None:
    m, b = out["mesh"], out["batch"]
    head = f"dry run: {out['benchmark']} on {out['world_size']:,} processes"
    print(head + (f", --layout {out['layout']}" if out["layout"] else ", the recipe's [parallel]"))
    if out["submitted"]:
        print(f"  as run by {out['submitted']['system']}\n  source: {out['submitted']['source']}")
    print(f"mesh        pp {m['pp']} x dp_replicate {m['dp_replicate']} x dp_shard {m['dp_shard']} x cp {m['cp']} "
          f"x tp {m['tp']}  ({out['strategy']}" + (f", {out['pp_schedule']}, vpp {out['vpp']}" if out["pp_schedule"] else "")
          + ")")
    print(f"batch       global {b['global']:,} = {b['per_dp_rank']} per data-parallel rank = "
          f"{b['accumulation']} micro-batches of {b['micro']}")
    print(f"parameters  {out['params_total']:,} in the model; per rank (after tp, FSDP over dp_shard x cp, pp):")
    show = shares if len(shares) <= 8 else shares[:3] + shares[-3:]
    for i, s in enumerate(show):
        if len(shares) > 8 and i == 3:
            print(f"  ... {len(shares) - 6} more pipeline ranks")
        parts = [_layers(s.layers)] + (["embedding"] if s.first else []) + (["norm + head"] if s.last else [])
        train = "" if s.trainable == s.params else f", {s.trainable:,} trainable"
        print(f"  pp rank {s.pp_rank:>2}: {s.params:>15,} params{train}  [{', '.join(parts)}]")
    est = out["planner"]
    if est is None:
        print("memory      give --gpu (h100, h200, b200, gb200, ...) for the planner's estimate and the traced memory")
    elif "skipped" in est:
        print(f"memory      {est['skipped']}")
    else:
        g = est["memory_gb"]
        verdict = "fits" if est["fits"] else "does NOT fit"
        planned = g["total"] - g["reserve"]
        print(f"memory      the planner, {est['stack']} stack, on {out['world_size']:,} x {est['gpu']} ({est['precision']} "
              f"matmuls, round {est['round']}): planned {planned:.1f} GB + reserve {g['reserve']:.1f} GB "
              f"= {g['total']:.1f} GB of {est['capacity_gb']:.1f} GB per GPU, {verdict}")
        print(f"            weights {g['weights']:.1f}, grads {g['grads']:.1f}, optimizer {g['optimizer']:.1f}, "
              f"accumulation {g['accumulation']:.1f}, gathered {g['gathered']:.1f}, activations "
              f"{g['activations']:.1f}, loss {g['logits']:.1f} GB{_chunks(est)}; predicted {est['minutes']:.2f} min to train "
              f"({est['step_time_s']:.3f} s/step, {est['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU)")
        if "precision_note" in est:
            print(f"            {est['precision_note']}")
    mem = out["memory"]
    if mem is not None:
        fit = "fits" if mem["fits"] else "does NOT fit"
        print(f"traced      {mem['traced_peak_gb']:.1f} GB peak (pp rank {mem['traced_pp_rank']}, rank "
              f"{mem['traced_rank']}, in {mem['peak_at']})  |  planned {mem['planned_gb']:.1f} GB  |  "
              f"{mem['gpu']} {mem['gpu_gb']:.1f} GB usable: {fit}")
        print(f"            one step on fake tensors, this stack ({mem['precision']}, FSDP2/DTensor): gradients "
              f"accumulated {mem['grad_accumulation']}; planned as above, without the reserve")
        print(f"            layers traced: {mem['traced_layers']}; {mem['trace_seconds']:.0f} s")
        print(f"            not counted: {mem['not_counted']}")
        if not mem["fits"]:
            print(f"            to fit: {mem['advice']}")
    print("mlperf keys it would log (between init_start and init_stop):")
    for k, v in out["mlperf_keys"].items():
        print(f"  {k}: {json.dumps(v, default=str)}")


def world_for(spec: dict | None, named: SubmittedLayout | None, nproc: int) -> int:
    """The world size a dry run checks: --nproc, else the named layout's GPU count, else the
    product of a full layout (tp*pp*cp*dp), else one process."""
    if nproc:
        return nproc
    if named is not None:
        return named.gpus
    return (ranks(spec) if spec else None) or 1


def check_gpu(gpu: str | None) -> None:
    if gpu is None:
        return
    from trainperf.plan.hardware import get_gpu

    try:
        get_gpu(gpu)
    except ConfigError as e:
        raise ConfigError(f"--gpu: {e}") from None
