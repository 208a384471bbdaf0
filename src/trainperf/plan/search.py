"""Layout search: every valid (tp, pp, vpp, dp, cp, micro-batch, global batch, recompute, precision)
for a benchmark on a cluster, each priced by the performance model, the fastest first.

Valid means: tp divides the attention and KV heads and stays inside the NVLink domain; tp·pp·cp·dp
is the GPU count; the global batch is a whole number of micro-batches per data-parallel rank (and,
interleaved, of pipeline stages); the sequence splits evenly over cp; the layout fits in memory.
Without `--gbs` the global batch is searched too, over multiples of dp inside the range the RCPs
cover (outside it MLPerf would require new reference points)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainperf.config import ConfigError
from trainperf.layout import RECOMPUTE, parse_layout  # the grammar `run --layout` shares
from trainperf.plan.perf import Estimate, Layout, Model, best_precision
from trainperf.plan.rcp import gbs_range

MBS = (1, 2, 4, 8)
POW2 = (1, 2, 4, 8, 16, 32, 64)
MIN_CP_CHUNK = 1024  # tokens per context-parallel rank
# per-data-parallel-rank micro-batch counts tried when the global batch is searched
GBS_MULTIPLES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)


@dataclass
class SearchResult:
    best: list[Estimate]  # fitting layouts, fastest first
    evaluated: int
    closest_unfit: Estimate | None  # the smallest-memory layout when none fits
    fastest_unranked: Estimate | None = None  # the fastest layout, when evidence ranked another first


def _pp_candidates(n_layer: int, limit: int) -> list[int]:
    top = min(limit, n_layer)
    return sorted({p for p in range(1, top + 1) if n_layer % p == 0} | {p for p in POW2 if p <= top})


def _gbs_candidates(model: Model, dp: int, mbs: int, fixed: int | None) -> list[int]:
    if fixed:
        return [fixed] if fixed % (dp * mbs) == 0 else []
    lo, hi = gbs_range(model.b.mlperf, model.ruleset)
    out = [dp * mbs * k for k in GBS_MULTIPLES if lo <= dp * mbs * k <= hi]
    if not out and dp * mbs > hi:
        out = [dp * mbs]  # beyond the RCPs: the smallest batch this layout can run (flagged)
    return out


def _shapes(model: Model, n_gpus: int, gbs: int | None, fix: dict):
    """(tp, cp, pp, dp, vpp, mbs, global batches) of every structurally valid layout."""
    c, g = model.cfg, model.gpu
    tps = [t for t in POW2 if t <= g.nvlink_domain and c.n_head % t == 0 and c.kv_heads % t == 0
           and n_gpus % t == 0]
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
                for vpp in vpps if "vpp" not in fix else [fix["vpp"]]:
                    if model.empty_stage(pp, vpp):
                        continue
                    for mbs in MBS if "mbs" not in fix else [fix["mbs"]]:
                        bs = [b for b in _gbs_candidates(model, dp, mbs, gbs)
                              if not (vpp > 1 and (b // (dp * mbs)) % pp)]
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
    scored: list[Candidate] = []
    closest: tuple[float, Layout] | None = None
    n = 0
    cap = model.capacity()
    fix = fix or {}
    precs = [precision] if precision else best_precision(model.cl, ceiling)
    rcs = RECOMPUTE if "recompute" not in fix else [fix["recompute"]]
    # each model-parallel shape's ShapeCost is looked up once and priced at every global batch
    for tp, cp, pp, dp, vpp, mbs, bs in _shapes(model, n_gpus, gbs, fix):
        costs = [(rc, pr, model.cost(Layout(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, mbs=mbs, gbs=bs[0],
                                            recompute=rc, precision=pr)))
                 for rc in rcs for pr in precs]
        for b in bs:
            fitted: set = set()
            for rc, pr, st in costs:
                n += 1
                if pr in fitted:
                    continue  # a cheaper recompute setting already fits: more recompute only costs time
                mem = st.memory_bytes(b)
                fits = mem <= cap
                if not fits and closest is not None and mem >= closest[0]:
                    continue
                # only layouts that fit (or the smallest that does not) become Layout objects
                lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, mbs=mbs, gbs=b, recompute=rc, precision=pr)
                if not fits:
                    closest = (mem, lay)
                    continue
                fitted.add(pr)
                scored.append(Candidate(model.minutes(st, b), lay))
    if proven is not None:
        pp_ok = proven_precisions
        scored.sort(key=lambda x: (x.shape not in proven, pp_ok is not None and x.layout.precision not in pp_ok,
                                   x.minutes))
    else:
        scored.sort(key=lambda x: x.minutes)
    best = [model.estimate(x.layout) for x in scored[:top]]
    unfit = model.estimate(closest[1]) if closest and not scored else None
    fastest = None
    if proven is not None and scored:
        quick = min(scored, key=lambda x: x.minutes)
        if quick != scored[0]:
            fastest = model.estimate(quick.layout)
    return SearchResult(best=best, evaluated=n, closest_unfit=unfit, fastest_unranked=fastest)


def check_layout(fix: dict, model: Model, n_gpus: int) -> None:
    """One-line errors for a user's --layout that cannot run on this model and GPU count."""
    c = model.cfg
    tp, pp, cp = fix.get("tp", 1), fix.get("pp", 1), fix.get("cp", 1)
    if c.n_head % tp or c.kv_heads % tp:
        raise ConfigError(f"--layout: tp={tp} does not divide the {c.n_head} heads / {c.kv_heads} KV heads")
    vpp = fix.get("vpp", 1)
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
    """'needs 93.1 GB of 80.0 GB (13.1 GB over)'."""
    mem = model.memory(lay)
    cap = model.capacity()
    return f"needs {mem.total / 1e9:.1f} GB of {cap / 1e9:.1f} GB ({(mem.total - cap) / 1e9:.1f} GB over)"


__all__ = ["search", "parse_layout", "check_layout", "SearchResult", "Candidate"]
