"""What the CLI calls: plan one benchmark on one cluster, compare two GPU kinds, sweep GPU counts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from trainperf.config import ConfigError
from trainperf.errors import PlanError
from trainperf.plan.calibration import Calibration, load_calibration
from trainperf.plan.convergence import MAX_TOKENS, Convergence
from trainperf.plan.cost import Cost, cost_of
from trainperf.plan.evidence import proven_precisions
from trainperf.plan.evidence import proven_shapes as _proven_shapes
from trainperf.plan.hardware import FP16, PRECISIONS, Cluster, cluster, precision_rank
from trainperf.plan.logged import Trend, software_trend
from trainperf.plan.perf import Estimate, Layout, Model
from trainperf.plan.prediction import Prediction, predict
from trainperf.plan.search import SearchResult, check_layout, fits_hint, search
from trainperf.plan.stack import get_stack
from trainperf.plan.workload import Benchmark, load_benchmark, max_precision


@dataclass
class Plan:
    bench: Benchmark
    cluster: Cluster
    calibration: Calibration
    result: SearchResult  # what the search found (Estimates)
    predictions: list[Prediction]  # its best layouts with band and evidence, in its order
    seconds: float
    fixed: dict = field(default_factory=dict)
    convergence: Convergence | None = None
    explore: bool = False
    price: float | None = None  # USD per GPU-hour
    pue: float | None = None
    formats: frozenset | None = None  # formats NVIDIA ran the benchmark in on this GPU kind this round
    fastest_unpublished: Prediction | None = None  # the fastest layout, when evidence ranked another first
    tokens: float | None = None  # a model that is not a benchmark: its token budget (None: step only)
    stack: str = "megatron"  # the software priced (plan/stack.py)
    # a --layout that fixes every value and that the memory model says does not fit: priced anyway,
    # with what the model says it needs ('needs X GB of Y GB ...'); None when it fits
    over_memory: str | None = None

    @property
    def cost(self) -> Cost:
        return cost_of(self.best, self.cluster.gpu, self.cluster.n_gpus, self.price, self.pue)

    @property
    def best(self) -> Prediction:
        return self.predictions[0]

    @property
    def trend(self) -> Trend | None:
        """For a round after the newest logged results: how fast NVIDIA's software moved per round
        (plan/logged.py). The minutes do not apply it; the output says what it would change."""
        return software_trend(self.bench.round) if self.bench.is_mlperf else None

    def to_dict(self) -> dict:
        p = self.best
        b = p.estimate
        d = {
            "benchmark": self.bench.name, "mlperf_benchmark": self.bench.mlperf, "round": self.bench.round,
            "model_source": self.bench.model_source,
            "gpu": self.cluster.gpu.key, "gpu_name": self.cluster.gpu.name, "gpus": self.cluster.n_gpus,
            "network": self.cluster.network.key, "nvlink_domain": self.cluster.gpu.nvlink_domain,
            "stack": self.stack, **p.to_dict(),
            "cost": self.cost.to_dict(),
            "convergence": (self.convergence.to_dict() if self.convergence else
                            {"samples": round(b.samples, 1), "global_batch": b.layout.gbs, "runs": None,
                             "source": f"RCP mean ({b.rcp_ruleset})"}),
            "layouts": [e.to_dict() for e in self.predictions[1:]],
            "ranking": "predicted time only (--explore)" if self.explore else
                       "layouts published for this GPU family first (NVIDIA's up to this round, others' "
                       "from earlier rounds), then the rest; within each, formats NVIDIA ran on this GPU "
                       "kind this round first",
            "formats_published": sorted(self.formats) if self.formats else None,
            "software_trend": (None if (trend := self.trend) is None else
                               trend.to_dict(b.train_s, b.eval_s + b.overhead_s)),
            "fastest_unpublished": (self.fastest_unpublished.to_dict()
                                    if self.fastest_unpublished is not None else None),
            "search": {"layouts_evaluated": self.result.evaluated, "seconds": round(self.seconds, 3),
                       "fixed": self.fixed},
            "fits_memory": self.over_memory is None,
            "memory_warning": self.over_memory,
            "calibration": {"generation": self.cluster.gpu.generation,
                            "gemm_efficiency": round(self.calibration.efficiency_for(self.cluster.gpu.generation,
                                                                                     self.stack), 4),
                            "fitted_on": self.calibration.fitted_on, "source": self.calibration.source},
        }
        if not self.bench.is_mlperf:
            return self._model_dict(d)
        return d

    def _model_dict(self, d: dict) -> dict:
        """A model that is not a benchmark: no rules, RCPs or evaluations; time-to-train only for a
        token budget."""
        for k in NO_RULES:
            d.pop(k, None)
        d["model"] = d.pop("benchmark")
        d["tokens"] = self.tokens
        d["model_shape"] = model_shape(self.bench.model)
        if self.tokens is None:
            for k in (*UNTIMED, "cost"):
                d[k] = None
            for x in d["layouts"]:
                x.update(dict.fromkeys(UNTIMED))
        return d


# what a model without a token budget has no figure for: it is priced one step at a time
UNTIMED = ("minutes", "minutes_p10", "minutes_p50", "minutes_p90", "interval", "steps", "train_min")
# what only an MLPerf benchmark has: rules, RCPs, evaluations, published evidence
NO_RULES = ("mlperf_benchmark", "round", "rcp_ruleset", "gbs_in_rcp_range", "convergence", "software_trend",
            "formats_published", "evidence", "evals", "eval_min", "overhead_min", "samples_to_target")


def model_shape(c) -> dict:
    """The shape a plan priced, in the inline grammar's names."""
    return {"family": c.family, "layers": c.n_layer, "d_model": c.d_model, "heads": c.n_head,
            "kv_heads": c.kv_heads, "head_dim": c.head_dim, "ffn": c.ff_dim, "vocab": c.vocab_size, "seq": c.seq_len,
            "gated_mlp": c.gated, "tied_embeddings": c.tie_embeddings}


def make_plan(bench: str | Benchmark, gpu: str, n_gpus: int, network: str | None = None,
              layout: dict | None = None, gbs: int | None = None, precision: str | None = None,
              calib: Calibration | None = None, top: int = 5, round_: str | None = None,
              ceiling: str | None = None, convergence: Convergence | None = None, explore: bool = False,
              price: float | None = None, pue: float | None = None, tokens: float | None = None,
              stack: str = "megatron") -> Plan:
    """The best layouts for `bench` on `n_gpus` x `gpu` under the rules of MLPerf round `round_`
    (default the newest with the benchmark): its RCPs, evaluation costs and, unless `ceiling` says
    otherwise, its lowest allowed precision. `plan validate` predicts a published row the same way.
    `convergence` replaces the RCP mean with known samples to the target; runs read from logs also
    fix the global batch they used. A model that is not a benchmark (workload.custom_workload) is
    priced at its global batch, for `tokens` when given (else one step), without MLPerf's rules."""
    b = _benchmark(bench, round_)
    ceiling = ceiling or max_precision(b.round)
    sw = get_stack(stack)
    if not sw.name == "megatron":
        explore = True  # the published layouts ran on Megatron/NeMo: no evidence for another stack
    if PRECISIONS.index(ceiling) > PRECISIONS.index(sw.max_precision):
        ceiling = sw.max_precision  # the software trains no lower format
    cl = cluster(gpu, n_gpus, network)
    cal = calib or load_calibration()
    fix = dict(layout or {})
    if "gbs" in fix:
        if gbs is not None and gbs != fix["gbs"]:
            raise ConfigError(f"--layout gbs={fix['gbs']} and --gbs {gbs} disagree: give the global batch once")
        gbs = fix.pop("gbs")
    _check_budget(b, tokens, round_, convergence)
    samples = convergence.samples if convergence else None
    if not b.is_mlperf:
        gbs = gbs or b.default_gbs
        explore = True  # no published layouts to rank first
        # a token budget; without one the plan prices one step
        samples = tokens / b.seq_len if tokens is not None else float(gbs)
    budget = not b.is_mlperf or (convergence is not None and convergence.runs == 0)
    model = Model(b, cl, cal, b.round, samples=samples, stack=stack, whole_steps=budget)
    if convergence and convergence.gbs:
        if gbs is not None and gbs != convergence.gbs:
            raise ConfigError(f"--gbs {gbs}: the runs in --samples-from converged at global batch "
                              f"{convergence.gbs}; samples to converge depend on the batch, so plan at that one")
        gbs = convergence.gbs
    if "precision" in fix and precision is not None and fix["precision"] != precision:
        raise ConfigError(f"--layout precision={fix['precision']} and --precision {precision} disagree: give the format once")
    precision = fix.pop("precision", precision)
    _check_precision(precision, cl, sw, ceiling, b.round)
    if fix:
        check_layout(fix, model, n_gpus)
    if gbs is not None and gbs < 1:
        raise ConfigError(f"--gbs: must be >= 1, got {gbs}")
    t0 = time.perf_counter()
    proven = None if explore else proven_shapes(b, cl)
    formats = None if explore else proven_precisions(b.mlperf, cl.gpu.key, b.round, n_gpus)
    res = search(model, n_gpus, gbs=gbs, ceiling=ceiling, precision=precision, top=top, fix=fix, proven=proven,
                 proven_precisions=formats)
    dt = time.perf_counter() - t0
    res, over = _over_memory(model, res, n_gpus, gbs, ceiling, precision, fix)
    fast = None if res.fastest_unranked is None else predict(model, res.fastest_unranked)
    return Plan(bench=b, cluster=cl, calibration=cal, result=res, predictions=[predict(model, e) for e in res.best],
                seconds=dt, fixed=layout or {}, convergence=convergence, explore=explore, price=price, pue=pue,
                formats=formats, fastest_unpublished=fast, tokens=tokens, stack=stack, over_memory=over)


def _over_memory(model: Model, res: SearchResult, n_gpus: int, gbs: int | None, ceiling: str,
                 precision: str | None, fix: dict) -> tuple[SearchResult, str | None]:
    """The search's result, and what the memory model says of a layout that does not fit where
    --layout fixed every value: the user asks about that one layout (often one that ran), so its
    price is given with the verdict beside it; otherwise no fitting layout is the one-line error."""
    if res.best:
        return res, None
    if res.closest_unfit is None or not _pinned(fix, gbs, precision):
        raise _no_layout(model, res, n_gpus, gbs, ceiling, precision, fix)
    return replace(res, best=[res.closest_unfit]), fits_hint(model, res.closest_unfit.layout)


def _pinned(fix: dict, gbs: int | None, precision: str | None) -> bool:
    """--layout fixes the whole layout: tp, pp, cp, micro-batch and recompute (dp follows from the
    GPU count), the global batch and the format, and vpp wherever there is a pipeline."""
    return ({"tp", "pp", "cp", "mbs", "recompute"} <= fix.keys() and gbs is not None and precision is not None
            and (fix["pp"] == 1 or "vpp" in fix))


def _benchmark(bench: str | Benchmark, round_: str | None) -> Benchmark:
    """The benchmark under round `round_`'s rules (a model that is not a benchmark as it is)."""
    if isinstance(bench, Benchmark) and not bench.is_mlperf:
        return bench
    if isinstance(bench, Benchmark):
        return bench if round_ is None or round_.lstrip("v") == bench.round else load_benchmark(bench.name, round_)
    return load_benchmark(bench, round_)


def _check_budget(b: Benchmark, tokens: float | None, round_: str | None, convergence: Convergence | None) -> None:
    """A benchmark trains to its MLPerf target; a model to a token budget, without MLPerf's rules."""
    if b.is_mlperf:
        if tokens is not None:
            raise ConfigError(f"--tokens: {b.name} trains to its MLPerf quality target (RCPs); a token budget is "
                              "for --model")
        return
    if round_ is not None:
        raise ConfigError("--round: MLPerf rounds apply to the benchmarks, not to --model")
    if convergence is not None:
        raise ConfigError("--samples/--samples-from: for --model give the budget as --tokens")
    if tokens is not None and not 1 <= tokens <= MAX_TOKENS:
        raise ConfigError(f"--tokens: must be a number of tokens from 1 to {MAX_TOKENS:.0e}, got {tokens:g}")


def _check_precision(precision: str | None, cl, sw, ceiling: str, round_: str) -> None:
    """A fixed matmul format the GPU has, the software trains in and the round allows."""
    if not precision:
        return
    if precision not in (*cl.gpu.precisions(), FP16):
        raise ConfigError(f"--precision: {cl.gpu.name} has no {precision} tensor cores "
                          f"(it has {', '.join(cl.gpu.precisions())})")
    if precision_rank(precision) > PRECISIONS.index(sw.max_precision):
        raise ConfigError(f"--precision: the {sw.name} stack trains no {precision} (lowest: {sw.max_precision})")
    if precision_rank(precision) > PRECISIONS.index(ceiling):
        raise ConfigError(f"--precision: MLPerf round {round_} allows no {precision} (lowest allowed: {ceiling}); "
                          "give another --round")


def _no_layout(model: Model, res, n_gpus: int, gbs: int | None, ceiling: str, precision: str | None,
               fix: dict) -> PlanError:
    """The one-line error when no layout fits memory or splits the batch; with --layout, the
    free search's best as a hint."""
    b, cl = model.b, model.cl
    if res.closest_unfit is not None:
        lay = res.closest_unfit.layout
        msg = f"{b.name} on {n_gpus} x {cl.gpu.key}: no layout fits in memory; the smallest ({_spec(lay)}) {fits_hint(model, lay)}"
        if fix:
            free = search(model, n_gpus, gbs=gbs, ceiling=ceiling, precision=precision, top=1)
            if free.best:
                msg += f"; this fits: --layout {_spec(free.best[0].layout)}"
        return PlanError(msg)
    what = f"global batch {gbs}" if gbs else "any global batch in the RCP range"
    return PlanError(f"{b.name} on {n_gpus} x {cl.gpu.key}: no layout{' matching --layout' if fix else ''} "
                     f"splits {what} over {n_gpus} GPUs (tp*pp*cp*dp must equal the GPU count and "
                     f"dp*mbs must divide the global batch)")


def proven_shapes(b: Benchmark, cl: Cluster) -> set:
    """(tp, pp, cp) published for this benchmark on this GPU family, or at a larger tp on a GPU kind
    with less memory, as evidence under the rules of the benchmark's round (plan/evidence.py)."""
    return set(_proven_shapes(b.mlperf, cl.gpu.key, cl.gpu.generation, b.round))


def speedup_factors(fast: Estimate, slow: Estimate) -> dict:
    """slow.minutes / fast.minutes as the product of three factors: the hardware step-time ratio, the
    convergence ratio (optimizer steps to the target: samples and global batch), and what
    evaluations and fixed costs add on top of training in each. `evaluation_ratio` is the plain
    ratio of evaluation time, for reading; it is not a factor of the product."""
    step = slow.step_time_s / fast.step_time_s
    conv = slow.steps / fast.steps
    rest = ((slow.train_s + slow.eval_s + slow.overhead_s) / slow.train_s) / (
        (fast.train_s + fast.eval_s + fast.overhead_s) / fast.train_s)
    return {"speedup": round(slow.minutes / fast.minutes, 4), "step_time": round(step, 4),
            "convergence": round(conv, 4), "evaluation_and_fixed": round(rest, 4),
            "evaluation_ratio": round(slow.eval_s / fast.eval_s, 4) if fast.eval_s > 0 else None,
            "samples": [round(fast.samples, 1), round(slow.samples, 1)], "evals": [round(fast.evals, 2), round(slow.evals, 2)]}


def _spec(lay: Layout) -> str:
    s = f"tp={lay.tp},pp={lay.pp},dp={lay.dp},cp={lay.cp},mbs={lay.mbs},gbs={lay.gbs},recompute={lay.recompute},precision={lay.precision}"
    return s + (f",vpp={lay.vpp}" if lay.vpp > 1 else "")


def parse_gpu_count(text: str) -> int:
    """--gpus of one plan: a positive integer."""
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(f"--gpus: expected an integer, got '{text}'") from None
    if n < 1:
        raise ConfigError(f"--gpus: expected a positive integer, got '{text}'")
    return n


def parse_gpus(text: str) -> list[int]:
    """'512' -> [512]; '64..16384' -> powers of two from 64 to 16384; '8,64,512' -> as listed."""
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split("..", 1))
            if lo < 1 or hi < lo:
                raise ValueError
            out, n = [], lo
            while n <= hi:
                out.append(n)
                n *= 2
            if out[-1] != hi:
                out.append(hi)
            return out
        vals = [int(x) for x in text.split(",") if x.strip()]
        if not vals or min(vals) < 1:
            raise ValueError
        return vals
    except ValueError:
        raise ConfigError(f"--gpus: expected N, A..B or A,B,C with positive integers, got '{text}'") from None


@dataclass
class SweepPoint:
    gpu: str
    n_gpus: int
    prediction: Prediction | None
    reason: str = ""
    round: str = ""
    cost: Cost | None = None
    stack: str = "megatron"
    timed: bool = True  # False: a model without a token budget (`UNTIMED`)
    benchmark: bool = True  # False: a model under no MLPerf rules (`NO_RULES`)

    def to_dict(self) -> dict:
        """One point of `plan sweep --json`."""
        d = {"gpu": self.gpu, "gpus": self.n_gpus, "round": self.round, "stack": self.stack,
             **(self.prediction.to_dict() if self.prediction else {}),
             **({"cost": self.cost.to_dict()} if self.cost and self.timed else {}),
             **({"error": self.reason} if not self.prediction else {})}
        if not self.benchmark:
            d = {k: v for k, v in d.items() if k not in NO_RULES}
        return d if self.timed or not self.prediction else {**d, **dict.fromkeys(UNTIMED)}


def sweep(bench: str | Benchmark, gpus: list[str], counts: list[int], network: str | None = None,
          calib: Calibration | None = None, gbs: int | None = None, round_: str | None = None,
          explore: bool = False, price: float | None = None, pue: float | None = None,
          stack: str = "megatron", tokens: float | None = None) -> list[SweepPoint]:
    """`make_plan`'s best layout at every GPU kind and count; a point where none fits says why."""
    b = _benchmark(bench, round_)
    cal = calib or load_calibration()
    timed = b.is_mlperf or tokens is not None
    out = []
    for g in gpus:
        for n in counts:
            try:
                p = make_plan(b, g, n, network=network, calib=cal, top=1, gbs=gbs, explore=explore, price=price,
                              pue=pue, stack=stack, round_=round_, tokens=tokens)
                out.append(SweepPoint(g, n, p.best, round=b.round, cost=p.cost, stack=stack, timed=timed,
                                      benchmark=b.is_mlperf))
            except PlanError as e:
                out.append(SweepPoint(g, n, None, str(e), round=b.round, stack=stack, benchmark=b.is_mlperf))
    return out
