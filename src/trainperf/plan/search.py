"""Layout search: every valid (tp, pp, vpp, dp, cp, micro-batch, global batch, recompute, precision)
for a benchmark on a cluster, each priced by the performance model, the fastest first.

Valid means: tp splits the model (`tp_refusal`) and stays inside the NVLink domain; tp·pp·cp·dp
is the GPU count; the global batch is a whole number of micro-batches per data-parallel rank (and,
interleaved, of pipeline stages); virtual stages only where there is a pipeline; the sequence
splits evenly over cp; the layout fits in memory. Without `--gbs` the global batch is searched too,
inside the range the RCPs cover (outside it MLPerf would require new reference points)."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from trainperf.config import ConfigError, ModelConfig
from trainperf.layout import RECOMPUTE, parse_layout  # the grammar `run --layout` shares
from trainperf.plan.perf import Estimate, Layout, Model, best_precision
from trainperf.plan.rcp import gbs_range, load_rcps

MBS = (1, 2, 4, 8)
POW2 = (1, 2, 4, 8, 16, 32, 64)
MIN_CP_CHUNK = 1024  # tokens per context-parallel rank
# Global batches tried when the search picks one: every RCP point's batch (where the convergence
# line bends) and a ladder from the smallest to the largest in steps of this ratio, each rounded
# down and up to what the layout can run. Tied to the RCP range, not to a count of micro-batches,
# so every dp reaches all of it (dp 1 on GPT-3 too); a layout prices at most 2 x (points + rungs)
# batches (16 on GPT-3) whatever its dp. On the four benchmarks' plans the best found is within
# 0.6% of the best over every batch in the range, and a finer ladder (2^(1/4)) finds the same.
GBS_STEP = 2 ** 0.5


@dataclass
class SearchResult:
    best: list[Estimate]  # fitting layouts, fastest first
    evaluated: int
    closest_unfit: Estimate | None  # the smallest-memory layout when none fits
    fastest_unranked: Estimate | None = None  # the fastest layout, when evidence ranked another first


def _pp_candidates(n_layer: int, limit: int) -> list[int]:
    top = min(limit, n_layer)
    return sorted({p for p in range(1, top + 1) if n_layer % p == 0} | {p for p in POW2 if p <= top})


@functools.lru_cache(maxsize=None)
def _gbs_ladder(benchmark: str, ruleset: str) -> tuple[int, ...]:
    """The global batches the search aims at: the RCP points and the `GBS_STEP` ladder between."""
    pts = load_rcps(benchmark, ruleset)
    out, x = {p.gbs for p in pts}, float(pts[0].gbs)
    while x < pts[-1].gbs:
        out.add(int(x))
        x *= GBS_STEP
    return tuple(sorted(out))


def _gbs_candidates(model: Model, dp: int, mbs: int, fixed: int | None, per_rank: int = 1) -> list[int]:
    """Global batches a layout runs: whole steps of dp·mbs sequences, and `per_rank` (an interleaved
    pipeline's pp) divides each rank's micro-batches; `fixed` (--gbs) or the ladder's nearest."""
    unit = dp * mbs * per_rank
    if fixed:
        return [fixed] if fixed % unit == 0 else []
    lo, hi = gbs_range(model.b.mlperf, model.ruleset)
    out = sorted({k * unit for t in _gbs_ladder(model.b.mlperf, model.ruleset) for k in (t // unit, -(-t // unit))
                  if lo <= k * unit <= hi})
    if not out and per_rank == 1 and unit > hi:
        # beyond the RCPs: the smallest batch this layout runs (flagged); interleaved, pp times
        # that, further still from the points, is not tried
        out = [unit]
    return out


def tp_refusal(cfg: ModelConfig, tp: int) -> str | None:
    """Why tensor parallelism `tp` cannot split this model, or None. Megatron splits attention by
    query and KV heads and the MLP by its hidden width (ffn), each into tp equal shards, and the
    model prices one rank's shard (flops.layer_gemms); a width tp does not divide has no such
    shard (ffn < tp: none at all)."""
    bad = [what for n, what in ((cfg.n_head, f"the {cfg.n_head} heads"), (cfg.kv_heads, f"the {cfg.kv_heads} KV heads"),
                                (cfg.ff_dim, f"ffn={cfg.ff_dim} (the MLP's hidden width)")) if n % tp]
    return f"tp={tp} does not divide {', '.join(bad)}" if bad else None


def _tp_candidates(model: Model, n_gpus: int) -> tuple[list[int], str | None]:
    """The tensor-parallel sizes the search tries, and why the next larger one the GPU count and
    the NVLink domain would allow is not among them (None when nothing larger is refused)."""
    ok = []
    for t in POW2:  # a width one power of two does not divide, no larger one divides
        if t > model.gpu.nvlink_domain or n_gpus % t:
            return ok, None
        if why := tp_refusal(model.cfg, t):
            return ok, why
        ok.append(t)
    return ok, None


def _shapes(model: Model, n_gpus: int, gbs: int | None, fix: dict):
    """(tp, cp, pp, dp, vpp, mbs, global batches) of every structurally valid layout."""
    c = model.cfg
    tps = _tp_candidates(model, n_gpus)[0]
    # ring attention needs chunks long enough for the attention math to hide the K/V exchange
    cps = [1] + [x for x in POW2 if x > 1 and c.seq_len // x >= MIN_CP_CHUNK and c.seq_len % (2 * x) == 0
                 and n_gpus % x == 0]
    pps = _pp_candidates(c.n_layer, 128)
    for tp in tps if "tp" not in fix else [fix["tp"]]:
        for cp in cps if "cp" not in fix else [fix["cp"]]:
            for pp in pps if "pp" not in fix else [fix["pp"]]:
                if n_gpus % (tp * cp * pp):
                    continue
                dp = n_gpus // (tp * cp * pp)
                if "dp" in fix and fix["dp"] != dp:
                    continue
                # a benchmark's layouts stay ones trainperf's trainer runs (`plan --emit-run`, `run --layout`)
                most = (lambda v: c.n_layer) if model.b.is_mlperf else (lambda v: model.max_stages(pp, v))
                vpps = [1] if pp == 1 else [v for v in (1, 2, 3, 4, 6, 8, 12) if pp * v <= most(v)]
                if "vpp" in fix:  # a fixed vpp > 1 needs a pipeline to interleave (check_layout)
                    vpps = [fix["vpp"]] if pp > 1 or fix["vpp"] == 1 else []
                for vpp in vpps:
                    if model.empty_stage(pp, vpp):
                        continue
                    for mbs in MBS if "mbs" not in fix else [fix["mbs"]]:
                        bs = _gbs_candidates(model, dp, mbs, gbs, pp if vpp > 1 else 1)
                        if bs:
                            yield tp, cp, pp, dp, vpp, mbs, bs


@dataclass(frozen=True)
class Candidate:
    """A layout that fits memory, with its predicted minutes: what the search ranks."""

    minutes: float
    layout: Layout

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.layout.shape


def search(model: Model, n_gpus: int, gbs: int | None = None, ceiling: str = "fp4",
           precision: str | None = None, top: int = 5, fix: dict | None = None,
           proven: set | None = None, proven_precisions: frozenset | None = None) -> SearchResult:
    """The `top` fastest fitting layouts. With `proven` (a set of (tp, pp, cp)), layouts of those
    shapes rank before all others, each group fastest first; with `proven_precisions` as well,
    within each group the layouts in those formats rank before the others."""
    fix = fix or {}
    precs = [precision] if precision else best_precision(model.cl, ceiling)
    rcs = RECOMPUTE if "recompute" not in fix else [fix["recompute"]]
    # Every layout is timed (one ShapeCost per model-parallel shape, priced at each global batch);
    # memory, the costlier model, is asked only of the layouts walked in rank order until `top` fit
    timed: list[tuple[float, Layout]] = []
    for tp, cp, pp, dp, vpp, mbs, bs in _shapes(model, n_gpus, gbs, fix):
        lays = [Layout(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, mbs=mbs, gbs=bs[0], recompute=rc, precision=pr)
                for rc in rcs for pr in precs]
        costs = [model.cost(lay) for lay in lays]
        timed += [(model.minutes(st, b), replace(lay, gbs=b)) for b in bs for lay, st in zip(lays, costs)]
    if proven is not None:
        pp_ok = proven_precisions
        ranked = sorted(timed, key=lambda x: (x[1].shape not in proven,
                                              pp_ok is not None and x[1].precision not in pp_ok, x[0]))
    else:
        ranked = sorted(timed, key=lambda x: x[0])
    fits = _Fits(model, rcs)
    scored = list(itertools.islice((Candidate(m, lay) for m, lay in ranked if fits(lay)), top))
    best = [model.estimate(x.layout) for x in scored]
    unfit = None
    if not scored and timed:  # the layout nearest to fitting (the first of equals), for the error or a fixed --layout
        unfit = model.estimate(min(timed, key=lambda x: fits.memory(x[1]))[1])
    fastest = None
    if proven is not None and scored:
        quick = next(lay for m, lay in sorted(ranked, key=lambda x: x[0]) if fits(lay))
        if quick != scored[0].layout:
            fastest = model.estimate(quick)
    n = len(timed)
    return SearchResult(best=best, evaluated=n, closest_unfit=unfit, fastest_unranked=fastest)


class _Fits:
    """Whether a layout fits memory and is the least recompute of its kind that does (more
    recompute of a layout that fits only costs time); each layout's memory is asked once."""

    def __init__(self, model: Model, recomputes: list[str] | tuple[str, ...]):
        self.model, self.cap, self.recomputes, self._mem = model, model.capacity(), recomputes, {}

    def memory(self, lay: Layout) -> float:
        if lay not in self._mem:
            self._mem[lay] = self.model.cost(lay).memory_bytes(lay.gbs)
        return self._mem[lay]

    def __call__(self, lay: Layout) -> bool:
        if self.memory(lay) > self.cap:
            return False
        cheaper = self.recomputes[:list(self.recomputes).index(lay.recompute)]
        return not any(self.memory(replace(lay, recompute=rc)) <= self.cap for rc in cheaper)


def check_layout(fix: dict, model: Model, n_gpus: int) -> None:
    """One-line errors for a user's --layout that cannot run on this model and GPU count."""
    c = model.cfg
    tp, pp, cp = fix.get("tp", 1), fix.get("pp", 1), fix.get("cp", 1)
    if why := tp_refusal(c, tp):
        raise ConfigError(f"--layout: {why}")
    vpp = fix.get("vpp", 1)
    if vpp > 1 and fix.get("pp") == 1:
        raise ConfigError(f"--layout: vpp={vpp} needs pp > 1 (virtual stages interleave a pipeline; pp=1 has none)")
    if pp * vpp > model.max_stages(pp, vpp):
        raise ConfigError(f"--layout: pp={pp}{f' x vpp={vpp}' if vpp > 1 else ''} exceeds the {c.n_layer} layers")
    if model.empty_stage(pp, vpp):
        per = math.ceil(c.n_layer / (pp * vpp))
        raise ConfigError(f"--layout: pp={pp}{f' x vpp={vpp}' if vpp > 1 else ''} leaves a pipeline stage with no "
                          f"layer ({c.n_layer} layers, {per} a stage, fill {math.ceil(c.n_layer / per)} stages)")
    if "dp" in fix:
        prod = tp * pp * cp * fix["dp"]
        if prod != n_gpus:
            raise ConfigError(f"--layout: tp*pp*cp*dp = {prod}, not the {n_gpus} GPUs")
    elif n_gpus % (tp * pp * cp):
        raise ConfigError(f"--layout: tp*pp*cp = {tp * pp * cp} does not divide {n_gpus} GPUs")
    if c.seq_len % (2 * cp) and cp > 1:
        raise ConfigError(f"--layout: cp={cp} does not split the {c.seq_len}-token sequence evenly")


def fits_hint(model: Model, lay: Layout) -> str:
    """'needs 93.1 GB of 80.0 GB (13.1 GB over)', and where the layout's tp is as far as the model
    lets tensor parallelism go, why it goes no further ('; tp stops at 1: tp=2 does not divide ...')."""
    mem = model.memory(lay)
    cap = model.capacity()
    out = f"needs {mem.total / 1e9:.1f} GB of {cap / 1e9:.1f} GB ({(mem.total - cap) / 1e9:.1f} GB over)"
    tps, why = _tp_candidates(model, model.cl.n_gpus)
    if why and tps and lay.tp == tps[-1]:
        out += f"; tp stops at {lay.tp}: {why}"
    return out


__all__ = ["search", "parse_layout", "check_layout", "tp_refusal", "fits_hint", "SearchResult", "Candidate"]
