"""What `trainperf plan` prints: the tables and lines for people, and the JSON documents, of a
plan, a comparison, a sweep and a validation. Nothing here computes a prediction."""

from __future__ import annotations

import sys

def gpus_per_node(gpu) -> int:
    """GPUs one torchrun starts: HGX/DGX boards hold 8; NVL72 racks (an NVLink domain over 8) are
    built from 4-GPU compute trays."""
    return 4 if gpu.nvlink_domain > 8 else 8


def run_command(plan) -> str:
    """The `trainperf run` command line for the plan's top layout; beyond one node, comment lines
    with the Slurm example and the plain torchrun form (one per node), and the dry run that checks it."""
    import math
    import shlex

    from trainperf.layout import format_layout, spec_of

    from trainperf.config import load_recipe

    L, n, bench = plan.best.layout, plan.cluster.n_gpus, plan.bench.recipe
    spec = spec_of(L)
    e = plan.best.estimate
    timed = plan.bench.is_mlperf or plan.tokens is not None
    notes = [f"# planned on the {plan.stack} stack: "
             + (f"{plan.best.minutes:.1f} min, " if timed else f"{e.step_time_s:.3f} s a step, ")
             + f"{e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, {e.memory.total / 1e9:.1f} of "
               f"{e.capacity / 1e9:.1f} GB per GPU"]
    extra: list[str] = []
    if L.tp > 1 and load_recipe(bench).parallel.compile:  # config.validate refuses the pair
        extra = ["--set", "parallel.compile=false"]
        notes.append("# the trainer does not compile tensor-parallel blocks yet: they run eager here, slower "
                     "than the compiled step the plan priced")
    # the trainer has bf16 and FP8 linear layers (train.fp8_linear, with or without tensor parallelism)
    if L.precision not in ("bf16", "fp8"):
        del spec["precision"]
        why = ("trains 16-bit matmuls in BF16" if L.precision == "fp16" else "has no FP4 matmuls")
        notes.append(f"# the plan priced {L.precision} matmuls; the trainer {why}: this runs the recipe's precision")
    layout = format_layout(spec)
    cmd = ["trainperf", "run", bench, "--layout", layout, *extra]
    node = math.gcd(n, gpus_per_node(plan.cluster.gpu))
    if n <= node:
        return shlex.join(cmd + ["--nproc", str(n)]) + "".join("\n" + x for x in notes)
    nodes = n // node
    args = shlex.join(cmd[3:])  # --layout ... (--set ...)
    lines = [shlex.join(cmd),
             f"# {n:,} GPUs = {nodes:,} nodes x {node}: one torchrun per node (docs/cluster.md); under Slurm:",
             f"#   BENCH={bench} GPUS_PER_NODE={node} sbatch --nodes={nodes} --gpus-per-node={node} "
             f"examples/slurm/train.sbatch {args}",
             f"#   or on every node: torchrun --nnodes {nodes} --nproc-per-node {node} --rdzv-backend c10d "
             f"--rdzv-endpoint HEAD:29500 -m trainperf run {bench} {args} --out RUN_DIR",
             f"# check it first: trainperf run {bench} {args} --dry-run --nproc {n} --gpu {plan.cluster.gpu.key}"]
    return "\n".join(lines + notes)


def _named_table(s: dict, benches: list[str]):
    from rich.table import Table

    n = Table(title="rows whose submission's config names its layout: searched vs submitted-layout error, and "
                    "at the submitted layout the step and evaluation time against the result logs' own")
    for col in ("benchmark", "split", "rows", "searched MAPE", "submitted MAPE", "submitted signed",
                "logged rows", "step MAPE", "step signed", "eval MAPE", "eval signed"):
        n.add_column(col, justify="left" if col in ("benchmark", "split") else "right")
    for split in ("fit", "held_out"):
        for bname in benches + ["overall"]:
            d = (s[split] if bname == "overall" else s[split]["per_benchmark"].get(bname, {})).get("named_layout", {})
            if not d.get("rows"):
                continue
            logged = [v for x in (d["logged_step"], d["logged_eval"])
                      for v in ((f"{x['mape']:.1f}%", f"{x['mean_signed_pct']:+.1f}%") if x["rows"] else ("-", "-"))]
            n.add_row(bname, split.replace("_", "-"), str(d["rows"]), f"{d['searched_mape']:.1f}%",
                      f"{d['submitted_mape']:.1f}%", f"{d['submitted_mean_signed_pct']:+.1f}%",
                      str(d["logged_step"]["rows"]), *logged)
    return n


def _console():
    from rich.console import Console

    # piped output (files, CI logs) gets a width the wide tables fit in instead of rich's 80 columns
    return Console(highlight=False, width=None if sys.stdout.isatty() else 150)


def _evidence_line(plan) -> str:
    best, fast = plan.best, plan.fastest_unpublished
    ev = best.evidence
    if ev is not None:
        s = (f"layout evidence: {plan.bench.mlperf} ran tp {ev.tp} pp {ev.pp} cp {ev.cp} on {plan.cluster.gpu.generation} "
             f"in {ev.submitter}'s v{ev.round} config at {ev.gpus} GPUs ({ev.source.rsplit('/', 1)[-1]})")
        if ev.tp != best.layout.tp:
            s += (f", on the {ev.gpu} with less memory; tp {best.layout.tp} here, as submitters cut tensor "
                  "parallelism where memory allows")
    else:
        s = (f"layout evidence: none; no {plan.cluster.gpu.generation} submission ran tp {best.layout.tp} pp {best.layout.pp} "
             f"cp {best.layout.cp}, so this rests on the model alone")
    if plan.formats and not plan.explore:
        s += (f"; formats: NVIDIA ran {plan.bench.mlperf} in {'/'.join(sorted(plan.formats))} on "
              f"{plan.cluster.gpu.key} in v{plan.bench.round}, ranked first")
    if fast is not None:
        s += (f"; faster by the model but unpublished: {fast.layout.short()} {fast.minutes:.3f} min "
              "(--explore ranks it first)")
    elif plan.explore:
        s += "; ranked by predicted time only (--explore)"
    return s


def _trend_line(trend, best) -> str:
    lo, mid, hi = trend.per_round
    fast, m, slow = trend.minutes(best.train_s, best.eval_s + best.overhead_s)
    return (f"software trend: the logged results end at round {trend.newest}, {trend.rounds_ahead} round(s) before "
            f"this one; where NVIDIA ran one configuration in two rounds its step got {lo:.2f}-{hi:.2f}x faster per "
            f"round (median {mid:.2f}x, {len(trend.pairs)} configurations, plan/data/logged_steps.csv). Not applied: "
            f"if it holds, {m:.3f} min ({fast:.3f}-{slow:.3f}) instead of {best.minutes:.3f}")


def _cost_line(cost) -> str:
    s = (f"cost: {cost.gpu_hours:,.1f} GPU-hours ({cost.gpu_hours_p10:,.1f}-{cost.gpu_hours_p90:,.1f}), "
         f"{cost.energy_kwh:,.0f} kWh (GPUs at {cost.tdp_w:.0f} W TDP x PUE {cost.pue}, an upper bound for the GPUs)")
    if cost.cost_usd is not None:
        s += f", ${cost.cost_usd:,.0f} at ${cost.price_per_gpu_hour:g}/GPU-hour"
    return s


def _ceiling(round_: str) -> str:
    from trainperf.plan.workload import max_precision

    return max_precision(round_)


def _lay(e) -> str:
    return e.layout.short()


def _stack_line(plan) -> str:
    from trainperf.plan.stack import get_stack

    cal, g = plan.calibration, plan.cluster.gpu
    return (f"model: {plan.bench.model_source}; software: {plan.stack} ({get_stack(plan.stack).describes}); "
            f"calibration: {cal.source} ({g.generation} GEMM efficiency {cal.efficiency_for(g.generation, plan.stack):.3f})")


def print_model_plan(plan, explain: bool = False, note: str | None = None) -> None:
    """A model that is not a benchmark: step time, throughput, MFU and memory; with a token
    budget, the time to train it."""
    from trainperf.plan.api import model_shape

    from rich.table import Table

    c = _console()
    b, cl, pred = plan.bench, plan.cluster, plan.best
    best = pred.estimate
    shape = ", ".join(f"{k}={v}" for k, v in model_shape(b.model).items())
    c.print(f"[bold]{b.name}[/] ({shape}) on {cl.describe()}")
    c.print(_stack_line(plan))
    if note:
        c.print(f"note: {note}")
    c.print(f"searched {plan.result.evaluated:,} layouts in {plan.seconds:.2f} s")
    budget = plan.tokens is not None
    t = Table(title="fastest layouts" + (f" for {plan.tokens:,.0f} tokens" if budget else ""))
    cols = (("#",) + (("hours",) if budget else ()) + ("step s", "tokens/s/GPU", "MFU", "mem GB", "tp", "pp", "vpp",
                                                       "dp", "cp", "mbs", "gbs", "recompute", "precision"))
    for col in cols:
        t.add_column(col, justify="right" if col not in ("recompute", "precision") else "left")
    for i, p in enumerate(plan.predictions, 1):
        L, e = p.layout, p.estimate
        t.add_row(str(i), *((f"{e.minutes / 60:,.1f}",) if budget else ()), f"{e.step_time_s:.3f}",
                  f"{e.tokens_per_s / cl.n_gpus:,.0f}", f"{100 * e.mfu:.1f}%", f"{e.memory.total / 1e9:.1f}",
                  str(L.tp), str(L.pp), str(L.vpp), str(L.dp), str(L.cp), str(L.mbs), str(L.gbs), L.recompute,
                  L.precision)
    c.print(t)
    line = (f"best: step {best.step_time_s:.3f} s for {best.layout.gbs} x {b.seq_len:,} tokens, "
            f"{best.tokens_per_s / cl.n_gpus:,.0f} tokens/s per GPU, MFU {100 * best.mfu:.1f}% of dense "
            f"{best.layout.precision} peak ({100 * best.mfu_bf16:.1f}% of BF16), {best.memory.total / 1e9:.1f} of "
            f"{best.capacity / 1e9:.1f} GB")
    if budget:
        line += (f"; {plan.tokens:,.0f} tokens = {best.steps:,.0f} steps = [bold]{best.minutes / 60:,.1f} h[/] "
                 f"(80% band {pred.minutes_p10 / 60:,.1f}-{pred.minutes_p90 / 60:,.1f} h, the MLPerf fit's spread "
                 "away from NVIDIA's configurations)")
    c.print(line)
    _memory_warning(c, plan)
    if budget:
        c.print(_cost_line(plan.cost))
    if explain:
        print_explain(best)


def _memory_warning(c, plan) -> None:
    if plan.over_memory is not None:
        c.print(f"[bold]memory: this layout does not fit by the memory model[/] ({plan.over_memory}); priced "
                "anyway because --layout fixed every value (the model errs: plan-validation.md)")


def print_plan(plan, explain: bool = False, note: str | None = None) -> None:
    from rich.table import Table

    if not plan.bench.is_mlperf:
        print_model_plan(plan, explain, note)
        return
    c = _console()
    b, cl, pred = plan.bench, plan.cluster, plan.best
    best, band = pred.estimate, pred.band
    c.print(f"[bold]{b.name}[/] on {cl.describe()}; rules of MLPerf round {b.round} "
            f"(RCPs {best.rcp_ruleset}, lowest precision allowed {_ceiling(b.round)})")
    c.print(_stack_line(plan))
    if note:
        c.print(f"note: {note}")
    c.print(f"searched {plan.result.evaluated:,} layouts in {plan.seconds:.2f} s")
    t = Table(title="fastest layouts")
    for col in ("#", "minutes", "p10-p90", "step s", "MFU", "mem GB", "tp", "pp", "vpp", "dp", "cp", "mbs", "gbs",
                "recompute", "precision"):
        t.add_column(col, justify="right" if col not in ("recompute", "precision") else "left")
    for i, p in enumerate(plan.predictions, 1):
        L, e = p.layout, p.estimate
        t.add_row(str(i), f"{e.minutes:.3f}", f"{p.minutes_p10:.2f}-{p.minutes_p90:.2f}", f"{e.step_time_s:.3f}", f"{100 * e.mfu:.1f}%",
                  f"{e.memory.total / 1e9:.1f}", str(L.tp), str(L.pp), str(L.vpp), str(L.dp), str(L.cp),
                  str(L.mbs), str(L.gbs), L.recompute, L.precision)
    c.print(t)
    conv_src = (plan.convergence.source if plan.convergence else
                f"RCP {best.rcp_ruleset}{'' if best.gbs_in_rcp_range else ', OUTSIDE the RCP range'}")
    c.print(f"best: [bold]{best.minutes:.3f} min[/] = {best.steps:,.0f} steps x {best.step_time_s:.3f} s "
            f"({best.samples:,.0f} samples to target at GBS {best.layout.gbs}, {conv_src}"
            f") + {best.evals:.1f} evals "
            f"({best.eval_s / 60:.3f} min) + {best.overhead_s / 60:.3f} min fixed; "
            f"MFU {100 * best.mfu:.1f}% of dense {best.layout.precision} peak ({100 * best.mfu_bf16:.1f}% of BF16)")
    narrows = ("(negative: they lie closer to the model than NVIDIA's spread says, which narrows the band) "
               if band.config_sd < 0 else "")
    c.print(f"80% band: {pred.minutes_p10:.3f}-{pred.minutes_p90:.3f} min (sd of log minutes {band.sd_log:.3f}: "
            f"NVIDIA's own spread {band.software_sd:.3f}, configurations NVIDIA did not submit {band.config_sd:.3f} "
            f"{narrows}"
            f"from half of the other submitters' {plan.bench.mlperf} results"
            f"{'' if plan.bench.mlperf in plan.calibration.config_sd_by_benchmark else ' (too few of them: all benchmarks pooled)'}, "
            f"convergence {band.convergence_sd:.3f} from the RCPs; "
            "`plan validate` shows its coverage of the other half)")
    _memory_warning(c, plan)
    c.print(_evidence_line(plan))
    if (trend := plan.trend) is not None:
        c.print(_trend_line(trend, best))
    c.print(_cost_line(plan.cost))
    if explain:
        print_explain(best)


def print_explain(e) -> None:
    from rich.table import Table

    c = _console()
    t = Table(title=f"one step ({e.step_time_s:.4f} s) of {e.layout.short()}")
    t.add_column("component")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    labels = {"compute": "compute (GEMMs + attention)", "tp": "exposed tensor-parallel comm",
              "cp": "exposed context-parallel comm", "pp_bubble": "pipeline bubble",
              "dp": "exposed data-parallel comm", "other": "other (element-wise, optimizer, p2p)"}
    for k, v in e.breakdown.items():
        t.add_row(labels.get(k, k), f"{v:.4f}", f"{100 * v / e.step_time_s:.1f}%")
    c.print(t)
    m = Table(title=f"memory per GPU ({e.memory.total / 1e9:.1f} of {e.capacity / 1e9:.1f} GB)")
    m.add_column("part")
    m.add_column("GB", justify="right")
    # under pytorch the loss's backward and a block's gradient reduction come one after the other
    mem_labels = {"reducing": "reducing (counted only if above logits)"}
    for k, v in e.memory.as_gb().items():
        m.add_row(mem_labels.get(k, k), f"{v:.2f}")
    c.print(m)
    L = e.layout
    c.print(f"micro-batches per step {L.microbatches}; bubble share (p-1)/(v*m) = "
            f"{(L.pp - 1) / (L.vpp * L.microbatches):.3f}; time-to-train = train {e.train_s / 60:.3f} + "
            f"eval {e.eval_s / 60:.3f} + fixed {e.overhead_s / 60:.3f} min")


def print_vs(a, b) -> None:
    c = _console()
    sp = b.best.minutes / a.best.minutes
    from trainperf.plan.api import speedup_factors

    if not a.bench.is_mlperf and a.tokens is None:  # a model priced a step at a time: no time-to-train
        ea, eb = a.best.estimate, b.best.estimate
        c.print(f"\n[bold]{a.cluster.gpu.key}[/] {ea.step_time_s:.3f} s a step, {ea.tokens_per_s_per_gpu:,.0f} tokens/s "
                f"per GPU vs [bold]{b.cluster.gpu.key}[/] {eb.step_time_s:.3f} s, {eb.tokens_per_s_per_gpu:,.0f} "
                f"({b.best.layout.short()}): speed-up of {a.cluster.gpu.key} over {b.cluster.gpu.key} = "
                f"[bold]{sp:.2f}x[/]")
        return
    f = speedup_factors(a.best.estimate, b.best.estimate)
    c.print(f"\n[bold]{a.cluster.gpu.key}[/] {a.best.minutes:.3f} min vs [bold]{b.cluster.gpu.key}[/] "
            f"{b.best.minutes:.3f} min ({b.best.layout.short()}): "
            f"speed-up of {a.cluster.gpu.key} over {b.cluster.gpu.key} = [bold]{sp:.2f}x[/]")
    ev = "-" if f["evaluation_ratio"] is None else f"{f['evaluation_ratio']:.2f}x"
    c.print(f"  = step time {f['step_time']:.3f}x (hardware and layout) x convergence {f['convergence']:.3f}x "
            f"(optimizer steps: {f['samples'][1]:,.0f} vs {f['samples'][0]:,.0f} samples) x evaluations and fixed costs "
            f"{f['evaluation_and_fixed']:.3f}x (evaluation time alone {ev}; {f['evals'][1]:.1f} vs {f['evals'][0]:.1f} evals)")
    c.print(f"  cost: {b.cost.gpu_hours:,.1f} vs {a.cost.gpu_hours:,.1f} GPU-hours"
            + (f", ${b.cost.cost_usd:,.0f} vs ${a.cost.cost_usd:,.0f}" if a.cost.cost_usd is not None else ""))


def _sds(pooled: float, by: dict) -> str:
    """'0.053 pooled (llama31_8b 0.105, ...; the others pooled)': a band's configuration spreads."""
    if not by:
        return f"{pooled:.3f}"
    return f"{pooled:.3f} pooled ({', '.join(f'{b} {v:.3f}' for b, v in sorted(by.items()))}; the others pooled)"


def print_validation(rows, s, cal, cross_sd: float | None = None, cross_by: dict | None = None) -> None:
    from rich.table import Table

    c = _console()
    t = Table(title="published MLPerf results: predicted (megatron stack) vs actual minutes")
    for col in ("round", "benchmark", "submitter", "GPUs", "accelerator", "GBS", "actual", "predicted",
                "p10-p90", "error", "submitted", "precision", "split"):
        t.add_column(col, justify="right" if col in ("GPUs", "GBS", "actual", "predicted", "p10-p90", "error",
                                                     "submitted") else "left")
    for r in rows:
        if r.prediction is None:
            continue
        x, e = r.result, r.prediction
        inside = e.minutes_p10 <= x.minutes <= e.minutes_p90
        t.add_row(x.round, x.benchmark, x.submitter[:22], str(x.n_gpus), x.accelerator[:28], str(x.gbs),
                  f"{x.minutes:.3f}", f"{e.minutes:.3f}",
                  f"{e.minutes_p10:.3f}-{e.minutes_p90:.3f}{'' if inside else ' out'}", f"{100 * r.error:+.1f}%",
                  "-" if r.submitted is None else f"{100 * r.submitted_error:+.1f}%",
                  f"{e.layout.precision}" + (f" (ran {r.config_precision})" if r.config_precision else ""),
                  {"fit": "fit", "calibration": "held-out (band cal)", "evaluation": "held-out (eval)"}[x.band_split])
    c.print(t)
    skipped = [r for r in rows if r.prediction is None]
    if skipped:
        kinds = sorted({f"{r.result.accelerator} ({r.reason})" for r in skipped})
        c.print(f"skipped {len(skipped)} rows: " + "; ".join(kinds[:8]) + (" ..." if len(kinds) > 8 else ""))
    benches = sorted(set(s["fit"]["per_benchmark"]) | set(s["held_out"]["per_benchmark"]))
    c.print(_error_table(s, benches))
    c.print(_population_table(s["by_population"]))
    c.print(_named_table(s, benches))
    c.print(f"band: p10-p90 from NVIDIA's spread {cal.software_sd:.3f} (sd of log minutes on the fit rows), the spread "
            f"of configurations NVIDIA did not submit {_sds(cal.config_sd, cal.config_sd_by_benchmark)} "
            f"({cal.band_calibrated_on}; a negative spread narrows the band, down to the convergence spread) and each "
            "benchmark's RCP convergence spread; negative signed error: the model is too optimistic")
    if cross_sd is not None:
        c.print(f"cross-fitted coverage: the band-calibration half's rows judged with the configuration spread "
                f"{_sds(cross_sd, cross_by or {})} calibrated on the evaluation half the same way (not shipped)")
    c.print(f"calibration: {cal.fitted_on}")


def _population_table(pop: dict):
    """Error by submitter (NVIDIA's are the fit rows) and by round."""
    from rich.table import Table

    t = Table(title="by population: NVIDIA's results (fitted on) against the other submitters', older rounds "
                    "against newer: how far the fit carries")
    for col in ("split", "group", "rows", "MAPE", "signed", "in 80% band"):
        t.add_column(col, justify="left" if col in ("split", "group") else "right")
    for split, groups in pop.items():
        for g, d in groups.items():
            t.add_row(split.replace("_", " "), g, str(d["rows"]), f"{d['mape']:.1f}%", f"{d['mean_signed_pct']:+.1f}%",
                      f"{d['coverage_80_pct']:.1f}%")
    return t


def _error_table(s: dict, benches: list[str]):
    """Per benchmark and overall: fit and held-out error, and band coverage three ways."""
    from rich.table import Table

    m = Table(title="error of the searched prediction: MAPE, mean signed error; share inside the 80% band on the "
                    "evaluation half of the held-out rows (the band-calibration half's is the fit of the band), and "
                    "on all held-out rows cross-fitted (each half judged by the band calibrated on the other); "
                    "in brackets the exact 90% interval of that coverage for so many rows")
    for col in ("benchmark", "fit rows", "fit MAPE", "fit in band", "held-out rows", "held-out MAPE",
                "held-out signed", "held-out in band (cross-fitted)", "eval rows", "eval in band", "cal rows",
                "cal in band (fitted)"):
        m.add_column(col, justify="left" if col == "benchmark" else "right", no_wrap=col == "benchmark")

    def pct(d: dict, k: str, sign: bool = False) -> str:
        return "-" if d.get(k) is None else (f"{d[k]:+.1f}%" if sign else f"{d[k]:.1f}%")

    def band(d: dict, k: str, ci: str) -> str:
        return pct(d, k) + ("" if not d.get(ci) else f" ({d[ci][0]:.0f}-{d[ci][1]:.0f})")

    for bname in benches + ["overall"]:
        f = s["fit"] if bname == "overall" else s["fit"]["per_benchmark"].get(bname, {})
        h, ev, bc = (s[k] if bname == "overall" else s[k]["per_benchmark"].get(bname, {})
                     for k in ("held_out", "evaluation", "band_calibration"))
        m.add_row(bname, str(f.get("rows", 0)), pct(f, "mape"), pct(f, "coverage_80_pct"), str(h.get("rows", 0)),
                  pct(h, "mape"), pct(h, "mean_signed_pct", True),
                  band(h, "coverage_80_pct_cross_fitted", "coverage_80_ci90_cross_fitted"),
                  str(ev.get("rows", 0)), band(ev, "coverage_80_pct", "coverage_80_ci90"),
                  str(bc.get("rows", 0)), pct(bc, "coverage_80_pct"))
    return m


def print_anchors(anchors, speedup) -> None:
    from rich.table import Table

    c = _console()
    t = Table(title="the article's checks: published vs predicted minutes (all held out of the fit)")
    for col in ("result", "published", "searched layout", "submitted layout", "as run"):
        t.add_column(col, justify="left" if col == "result" else "right")

    def cell(m: float | None, pub: float) -> str:
        return "-" if m is None else f"{m:.3f} ({100 * (m / pub - 1):+.1f}%)"

    for a in anchors:
        t.add_row(a.name, f"{a.published:.3f}", cell(a.searched.minutes, a.published),
                  cell(a.submitted.minutes, a.published), cell(a.as_run_minutes, a.published))
    if speedup:
        t.add_row(speedup["name"], f"{speedup['published']:.2f}x", f"{speedup['searched']:.2f}x",
                  f"{speedup['submitted_layout']:.2f}x",
                  "-" if speedup["as_run"] is None else f"{speedup['as_run']:.2f}x")
    c.print(t)
    c.print("searched: the layout search and the RCP-mean convergence, what `plan` predicts; submitted: "
            "the layout of the submission's config; as run: that layout with the submitter's own samples to "
            "converge and evaluation count from its result logs (plan/data/anchors.toml)")


def print_sweep(bench, points, plot) -> None:
    from rich.table import Table

    c = _console()
    rnd = next((p.round for p in points), "")
    stack = next((p.stack for p in points), "")
    rules = f"rules of MLPerf round {rnd}" if rnd else "no MLPerf rules: a token budget, or throughput alone"
    t = Table(title=f"{bench}: predicted time-to-train on the {stack} stack ({rules})")
    numeric = ("GPUs", "minutes", "p10-p90", "step s", "tokens/s/GPU", "MFU")
    for col in ("gpu", *numeric, "layout"):
        t.add_column(col, justify="right" if col in numeric else "left")
    for p in points:
        if p.prediction is None:
            t.add_row(p.gpu, str(p.n_gpus), "-", "-", "-", "-", "-", p.reason[:70])
            continue
        e, pr = p.prediction.estimate, p.prediction
        timed = p.timed
        t.add_row(p.gpu, str(p.n_gpus), f"{e.minutes:.2f}" if timed else "-",
                  f"{pr.minutes_p10:.2f}-{pr.minutes_p90:.2f}" if timed else "-", f"{e.step_time_s:.3f}",
                  f"{e.tokens_per_s_per_gpu:,.0f}", f"{100 * e.mfu:.1f}%", e.layout.short())
    c.print(t)
    if plot:
        c.print(f"wrote {plot}")


def plan_json(plan, other, note: str | None, emit_run: bool) -> dict:
    """`plan --json`: the plan, and with --vs the other GPU kind's plan and the speed-up."""
    from trainperf.plan.api import speedup_factors

    d = plan.to_dict()
    if emit_run:
        d["run_command"] = run_command(plan)
    if note:
        d["calibration"]["note"] = note
    if other:
        d["vs"] = other.to_dict()
        d["speedup"] = round(other.best.minutes / plan.best.minutes, 4)
        d["speedup_factors"] = speedup_factors(plan.best.estimate, other.best.estimate)
    return d


def print_validation_report(val) -> None:
    print_validation(val.rows, val.summary, val.calibration, val.cross_sd, val.cross_by)
    if val.table is not None:
        _console().print(f"rows of {val.table}, predicted with the shipped calibration (no refit): 'fit' marks "
                         "NVIDIA's submissions, the population the fit describes, 'held-out' every other submitter's")
    if val.anchors:
        print_anchors(val.anchors, val.speedup)


def print_holdout(d: dict) -> None:
    """`plan validate --holdout`: each group predicted by the calibration refitted without it."""
    from rich.table import Table

    t = Table(title=f"leave one {d['holdout']} out: each group predicted by the calibration refitted on the "
                    "other rows (NVIDIA's among them fit, the band-calibration half sets the band)")
    for col in (d["holdout"], "rows", "MAPE", "signed", "in 80% band", "refit on"):
        t.add_column(col, justify="left" if col in (d["holdout"], "refit on") else "right")
    for g in d["groups"]:
        refit = f"{g['refit']['fit_rows']} fit rows" if g["refit"] else g["reason"]
        t.add_row(g["group"], *_stat_cells(g), refit)
    t.add_section()
    for name, o in d["overall"].items():
        t.add_row(f"overall, {name}", *_stat_cells(o), "")
    _console().print(t)


def _stat_cells(d: dict) -> tuple[str, ...]:
    if not d["rows"]:
        return "0", "-", "-", "-"
    return (str(d["rows"]), f"{d['mape']:.1f}%", f"{d['mean_signed_pct']:+.1f}%", f"{d['coverage_80_pct']:.1f}%")


def calibrated_line(path, cal, s: dict) -> str:
    e = s["evaluation"]
    return (f"wrote {path}: fit MAPE {s['fit']['mape']}% on {s['fit']['rows']} rows, "
            f"held-out MAPE {s['held_out']['mape']}% on {s['held_out']['rows']} rows; band: software_sd "
            f"{cal.software_sd:.4f} (fit rows), config_sd {_sds(cal.config_sd, cal.config_sd_by_benchmark)} "
            f"({s['band_calibration']['rows']} "
            f"band-calibration rows), 80% band coverage {e['coverage_80_pct']}% on {e['rows']} evaluation rows")


def print_published(report) -> None:
    """`plan validate --published`: each published run predicted at its own layout and stack, then
    the error by stack and GPU generation."""
    from rich.table import Table

    c = _console()
    t = Table(title="published runs outside MLPerf: predicted vs published tokens/s per GPU, each at its own "
                    "layout and stack")
    for col in ("source", "model", "GPUs", "stack", "layout", "published", "predicted", "error"):
        t.add_column(col, justify="right" if col in ("GPUs", "published", "predicted", "error") else "left")
    for r in report.rows:
        x = r.run
        t.add_row(x.table, x.model, f"{x.gpus}x{x.gpu}", x.stack, x.name.split(" ", 2)[2],
                  f"{x.tokens_per_s_per_gpu:.0f}", "-" if r.error is None else f"{r.predicted:.0f}",
                  "-" if r.error is None else f"{100 * r.error:+.1f}%")
    c.print(t)
    for r in report.rows:
        if r.prediction is None:
            c.print(f"not expressible: {r.run.table} {r.run.name}: {r.reason}")
        elif r.over_memory is not None:
            c.print(f"over the memory model (it ran; priced at its fixed layout): {r.run.table} {r.run.name}: "
                    f"{r.over_memory}")
    s = Table(title="error of tokens/s per GPU (MAPE; negative signed error: the model is too slow)")
    for col in ("stack", "generation", "rows", "predicted", "MAPE", "signed"):
        s.add_column(col, justify="left" if col in ("stack", "generation") else "right")
    for stack, d in report.groups().items():
        for gen, g in [("all", d), *d["by_generation"].items()]:
            s.add_row(stack, gen, str(g["rows"]), str(g["predicted"]), "-" if g["mape"] is None else f"{g['mape']:.1f}%",
                      "-" if g["mean_signed_pct"] is None else f"{g['mean_signed_pct']:+.1f}%")
    c.print(s)
    c.print(f"calibration: {report.calibration}; nothing here is fitted (data/published_runs.csv)")
