"""`trainperf plan`: predict time-to-train of an MLPerf LLM benchmark on a GPU cluster, search the
parallel layout, and check the model against published MLPerf results."""

from __future__ import annotations

import argparse
import json
import sys

from trainperf.errors import RunError, UsageError

EPILOG = """examples:
  trainperf plan gpt3_175b --gpu h100 --gpus 10752
  trainperf plan llama2_70b_lora --gpu h200 --gpus 512 --vs h100
  trainperf plan llama31_405b --gpu gb200 --gpus 2048 --explain
  trainperf plan llama31_8b --gpu h200 --gpus 8 --layout tp=1,pp=1,dp=8,mbs=1 --json
  trainperf plan validate
  trainperf plan sweep gpt3_175b --gpu h100,h200,gb200 --gpus 64..16384 --plot scaling.png
  trainperf plan calibrate            (refit calibration.toml on the fit rows)"""


def add_parser(sub, common) -> None:
    p = sub.add_parser("plan", help="predict time-to-train on a GPU cluster and search the layout",
                       parents=[common], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", help="benchmark (gpt3_175b, llama31_405b, llama31_8b, llama2_70b_lora), "
                                "or validate | sweep | calibrate")
    p.add_argument("bench", nargs="?", help="the benchmark, after 'sweep'")
    p.add_argument("--gpu", help="GPU kind (a100, h100, h200, b200, gb200, b300, gb300); sweep: comma list")
    p.add_argument("--gpus", help="GPU count; sweep: A..B (powers of two) or A,B,C")
    p.add_argument("--network", default=None, help="scale-out network (ib_ndr, ib_xdr, roce_400, ...); default: the GPU's")
    p.add_argument("--vs", default=None, metavar="GPU", help="also plan on this GPU kind and report the speed-up")
    p.add_argument("--explain", action="store_true", help="where the step time and memory go")
    p.add_argument("--layout", default=None, help="fix part of the layout: tp=,pp=,vpp=,dp=,cp=,mbs=,gbs=,recompute=,precision=")
    p.add_argument("--gbs", type=int, default=None, help="global batch (default: searched inside the RCP range)")
    p.add_argument("--precision", choices=["bf16", "fp8", "fp4"], default=None,
                   help="matmul format (default: the fastest the GPU has)")
    p.add_argument("--round", dest="round_", default=None, metavar="X.Y",
                   help="MLPerf round whose rules apply: RCPs, allowed precisions, evaluation costs "
                        "(default: the newest round with the benchmark)")
    p.add_argument("--explore", action="store_true",
                   help="rank layouts by predicted time only (default: layouts NVIDIA published for the GPU family first)")
    p.add_argument("--price", type=float, default=None, metavar="USD_PER_GPU_HOUR",
                   help="price of one GPU-hour: adds cost_usd")
    p.add_argument("--pue", type=float, default=None,
                   help="facility overhead on the GPUs' TDP energy (default 1.2, an assumption)")
    p.add_argument("--samples", type=float, default=None, metavar="N",
                   help="training samples to reach the target (default: the RCP mean at the global batch)")
    p.add_argument("--samples-from", nargs="+", default=None, metavar="LOGS",
                   help="take samples to the target (and the global batch) from MLPerf result logs: "
                        "olympic mean over their converged runs")
    p.add_argument("--top", type=int, default=5, help="layouts to list")
    p.add_argument("--calibrate", metavar="RUNDIR", default=None,
                   help="refit the compute efficiency from a trainperf run's summary.json")
    p.add_argument("--plot", metavar="PNG", default=None, help="sweep: write scaling + breakdown figure")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--emit-run", action="store_true",
                   help="print the `trainperf run` command line for the top layout (and how to start it on many nodes)")
    p.add_argument("--benchmark", dest="only", default=None, help="validate: only this benchmark")
    p.set_defaults(handler=cmd_plan)


def _calibration(args):
    from trainperf.plan.calibration import load_calibration, read_run, refit_from_run
    from trainperf.plan.hardware import get_gpu, gpu_for_result

    cal = load_calibration()
    if not args.calibrate:
        return cal, None
    run = read_run(args.calibrate)
    g = gpu_for_result(run.device)
    note = None
    if g is None:
        if not args.gpu:
            raise UsageError(f"--calibrate: the run was on '{run.device}', not a catalog GPU; give --gpu to say "
                           "which generation its efficiency should stand for")
        g = get_gpu(args.gpu.split(",")[0])
        note = (f"run measured on '{run.device}' (not a catalog GPU): its efficiency is applied to "
                f"{g.generation} as asked by --gpu")
    cal = refit_from_run(cal, g.generation, run)
    note = note or f"{g.generation} efficiency refit from the run on {run.device}"
    return cal, note


def _convergence(args):
    from trainperf.plan import convergence
    from trainperf.plan.workload import load_benchmark

    if args.samples is not None and args.samples_from:
        raise UsageError("give --samples or --samples-from, not both")
    if args.samples is not None:
        return convergence.given(args.samples)
    if args.samples_from:
        b = load_benchmark(args.what)
        return convergence.from_logs(args.samples_from, b.mlperf, b.model.seq_len)
    return None


def cmd_plan(args) -> int:
    from trainperf.config import ConfigError

    if args.what in ("validate", "calibrate", "sweep") and (args.samples is not None or args.samples_from):
        raise UsageError(f"plan {args.what}: --samples/--samples-from apply to one plan, not to '{args.what}'")
    if args.what in ("validate", "calibrate") and args.round_:
        raise UsageError(f"plan {args.what}: --round does not apply; each published row is predicted under its own round")

    if args.what == "validate":
        return _validate(args)
    if args.what == "calibrate":
        return _calibrate(args)
    if args.what == "sweep":
        if not args.bench:
            raise UsageError("plan sweep: name the benchmark, e.g. plan sweep gpt3_175b --gpu h100 --gpus 64..4096")
        return _sweep(args)
    if args.bench:
        raise UsageError(f"plan: unexpected argument '{args.bench}'")
    if not args.gpu or not args.gpus:
        raise UsageError("plan: --gpu and --gpus are required (e.g. --gpu h100 --gpus 512)")
    try:
        n = int(args.gpus)
    except ValueError:
        raise UsageError(f"--gpus: expected an integer, got '{args.gpus}'") from None
    if args.top < 1:
        raise UsageError("--top must be >= 1")
    from trainperf.plan.api import PlanError, make_plan
    from trainperf.plan.search import parse_layout

    from trainperf.plan.cost import check

    check(args.price, args.pue)
    cal, note = _calibration(args)
    layout = parse_layout(args.layout) if args.layout else None
    conv = _convergence(args)
    try:
        plan = make_plan(args.what, args.gpu, n, network=args.network, layout=layout, gbs=args.gbs,
                         precision=args.precision, calib=cal, top=args.top, convergence=conv, round_=args.round_,
                         explore=args.explore, price=args.price, pue=args.pue)
        other = None
        if args.vs:
            other = make_plan(plan.bench, args.vs, n, network=args.network, layout=layout, gbs=args.gbs,
                              precision=args.precision if args.precision else None, calib=cal, top=args.top,
                              convergence=conv, round_=plan.bench.round, explore=args.explore, price=args.price,
                              pue=args.pue)
    except PlanError as e:
        raise RunError(str(e)) from None
    except ConfigError:
        raise
    if args.emit_run and not args.json:
        print(run_command(plan))
        return 0
    if args.json:
        print(json.dumps(_plan_json(plan, other, note, args.emit_run), indent=1))
        return 0
    print_plan(plan, explain=args.explain, note=note)
    if other:
        print_vs(plan, other)
    return 0


def _plan_json(plan, other, note: str | None, emit_run: bool) -> dict:
    from trainperf.plan.api import speedup_factors

    d = plan.to_dict()
    if emit_run:
        d["run_command"] = run_command(plan)
    if note:
        d["calibration"]["note"] = note
    if other:
        d["vs"] = other.to_dict()
        d["speedup"] = round(other.best.minutes / plan.best.minutes, 4)
        d["speedup_factors"] = speedup_factors(plan.best, other.best)
    return d


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

    L, n, bench = plan.best.layout, plan.cluster.n_gpus, plan.bench.name
    spec = spec_of(L)
    notes = []
    # the trainer has bf16 and FP8 linear layers (train.fp8_linear, with or without tensor parallelism)
    if L.precision not in ("bf16", "fp8"):
        del spec["precision"]
        notes.append(f"# the plan priced {L.precision} matmuls; the trainer has no FP4 matmuls: "
                     "this runs the recipe's precision")
    layout = format_layout(spec)
    cmd = ["trainperf", "run", bench, "--layout", layout]
    node = math.gcd(n, gpus_per_node(plan.cluster.gpu))
    if n <= node:
        return shlex.join(cmd + ["--nproc", str(n)]) + "".join("\n" + x for x in notes)
    nodes = n // node
    lines = [shlex.join(cmd),
             f"# {n:,} GPUs = {nodes:,} nodes x {node}: one torchrun per node (docs/cluster.md); under Slurm:",
             f"#   BENCH={bench} GPUS_PER_NODE={node} sbatch --nodes={nodes} --gpus-per-node={node} "
             f"examples/slurm/train.sbatch --layout {layout}",
             f"#   or on every node: torchrun --nnodes {nodes} --nproc-per-node {node} --rdzv-backend c10d "
             f"--rdzv-endpoint HEAD:29500 -m trainperf run {bench} --layout {layout} --out RUN_DIR",
             f"# check it first: trainperf run {bench} --layout {layout} --dry-run --nproc {n} --gpu {plan.cluster.gpu.key}"]
    return "\n".join(lines + notes)


def _picked(only: str, benchmark: str) -> bool:
    """--benchmark ONLY names this results row's benchmark: its MLPerf name ('gpt3') or a name
    containing it ('gpt3_175b')."""
    return benchmark in only


def _validate(args) -> int:
    from trainperf.plan.validate import band_sd, check_anchors, load_results, summary, validate

    cal, _ = _calibration(args)
    results = load_results()
    if args.only and not any(_picked(args.only, r.benchmark) for r in results):
        raise UsageError(f"--benchmark: no published rows for '{args.only}'")
    rows = validate(cal, results)
    # the cross-fitted coverage's other band, from every benchmark's evaluation-half rows just
    # predicted, as the shipped one came from every benchmark's band-calibration half (measure_band)
    cross_sd, cross_by = band_sd(rows, cal.software_sd, "evaluation")[:2] if cal.config_sd > 0 else (None, None)
    if args.only:
        rows = [r for r in rows if _picked(args.only, r.result.benchmark)]
    s = summary(rows, cross_sd, cross_by)
    anchors, speedup = check_anchors(cal) if not args.only else ([], None)
    if args.json:
        out = {"summary": s, "calibration": {"fitted_on": cal.fitted_on, "source": cal.source,
                                           "software_sd": cal.software_sd, "config_sd": cal.config_sd,
                                           "config_sd_by_benchmark": cal.config_sd_by_benchmark,
                                           "band_calibrated_on": cal.band_calibrated_on,
                                           "config_sd_evaluation_half": cross_sd,
                                           "config_sd_by_benchmark_evaluation_half": cross_by},
               "anchors": [a.to_dict() for a in anchors], "speedup": speedup, "rows": [
            {"round": r.result.round, "benchmark": r.result.benchmark, "submitter": r.result.submitter,
             "accelerator": r.result.accelerator, "gpus": r.result.n_gpus, "global_batch_size": r.result.gbs,
             "actual_minutes": r.result.minutes, "split": "fit" if r.result.fit else "held_out",
             "band_half": None if r.result.fit else r.result.band_split,
             "predicted_minutes": round(r.estimate.minutes, 4) if r.estimate else None,
             "predicted_p10": round(r.estimate.minutes_p10, 4) if r.estimate else None,
             "predicted_p90": round(r.estimate.minutes_p90, 4) if r.estimate else None,
             "error_pct": round(100 * r.error, 2) if r.estimate else None,
             "layout": r.estimate.layout.to_dict() if r.estimate else None, "skipped": r.reason or None,
             "config_precision": r.config_precision or None,
             "configs": [c.source for c in r.configs],
             "submitted_layout": None if r.submitted is None else {
                 "minutes": round(r.submitted.minutes, 4), "error_pct": round(100 * r.submitted_error, 2),
                 "layout": r.submitted.layout.to_dict(), "step_s": round(r.submitted.step_time_s, 5),
                 "step_error_pct": _pct(r.step_error), "eval_error_pct": _pct(r.eval_error)},
             "logged": None if r.logged is None else {"step_s": r.logged.step_s, "eval_s": r.logged.eval_s,
                                                      "logs": r.logged.logs, "method": r.logged.method},
             "source": r.result.source} for r in rows]}
        print(json.dumps(out, indent=1))
        return 0
    print_validation(rows, s, cal, cross_sd, cross_by)
    if anchors:
        print_anchors(anchors, speedup)
    return 0


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 2)


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


def _calibrate(args) -> int:
    from trainperf.plan.calibration import Calibration, parse_calibration, save_calibration
    from trainperf.plan.validate import fit, measure_band, measure_spread, summary, validate

    cal = fit(Calibration(), log=lambda m: print(m, file=sys.stderr))
    # each spread is measured on the parameters as the file stores them (rounded), so that
    # measuring again from calibration.toml gives the same figures
    cal = measure_spread(parse_calibration(cal.to_toml()))
    cal = measure_band(parse_calibration(cal.to_toml()))
    path = save_calibration(cal)
    s = summary(validate(cal, submitted=False))
    e = s["evaluation"]
    print(f"wrote {path}: fit MAPE {s['fit']['mape']}% on {s['fit']['rows']} rows, "
          f"held-out MAPE {s['held_out']['mape']}% on {s['held_out']['rows']} rows; band: software_sd "
          f"{cal.software_sd:.4f} (fit rows), config_sd {_sds(cal.config_sd, cal.config_sd_by_benchmark)} "
          f"({s['band_calibration']['rows']} "
          f"band-calibration rows), 80% band coverage {e['coverage_80_pct']}% on {e['rows']} evaluation rows")
    return 0


def _sweep(args) -> int:
    from trainperf.plan.api import parse_gpus, sweep

    if not args.gpu or not args.gpus:
        raise UsageError("plan sweep: --gpu and --gpus are required (e.g. --gpu h100,h200 --gpus 64..4096)")
    kinds = [g.strip() for g in args.gpu.split(",") if g.strip()]
    counts = parse_gpus(args.gpus)
    cal, _ = _calibration(args)
    from trainperf.plan.cost import check

    check(args.price, args.pue)
    points = sweep(args.bench, kinds, counts, network=args.network, calib=cal, gbs=args.gbs, round_=args.round_,
                   explore=args.explore, price=args.price, pue=args.pue)
    if args.plot:
        if not any(p.estimate for p in points):
            raise RunError("plan sweep: no point has a layout that fits; nothing to plot")
        from trainperf.plan.plot import plot_sweep

        plot_sweep(points, args.bench, args.plot, cost_panel=True)
    if args.json:
        print(json.dumps([{"gpu": p.gpu, "gpus": p.n_gpus, "round": p.round, **(p.estimate.to_dict() if p.estimate else {}),
                           **({"cost": p.cost.to_dict()} if p.cost else {}),
                           **({"error": p.reason} if not p.estimate else {})} for p in points], indent=1))
        return 0
    print_sweep(args.bench, points, args.plot)
    return 0


# -- tables for people ---------------------------------------------------------------------------

def _console():
    from rich.console import Console

    # piped output (files, CI logs) gets a width the wide tables fit in instead of rich's 80 columns
    return Console(highlight=False, width=None if sys.stdout.isatty() else 150)


def _evidence_line(plan) -> str:
    best, fast = plan.best, plan.result.fastest_unranked
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


def print_plan(plan, explain: bool = False, note: str | None = None) -> None:
    from rich.table import Table

    c = _console()
    b, cl, best = plan.bench, plan.cluster, plan.best
    c.print(f"[bold]{b.name}[/] on {cl.describe()}; rules of MLPerf round {b.round} "
            f"(RCPs {best.rcp_ruleset}, lowest precision allowed {_ceiling(b.round)})")
    c.print(f"model: {b.model_source}; calibration: {plan.calibration.source} "
            f"({cl.gpu.generation} GEMM efficiency {plan.calibration.efficiency(cl.gpu.generation):.3f})")
    if note:
        c.print(f"note: {note}")
    c.print(f"searched {plan.result.evaluated:,} layouts in {plan.seconds:.2f} s")
    t = Table(title="fastest layouts")
    for col in ("#", "minutes", "p10-p90", "step s", "MFU", "mem GB", "tp", "pp", "vpp", "dp", "cp", "mbs", "gbs",
                "recompute", "precision"):
        t.add_column(col, justify="right" if col not in ("recompute", "precision") else "left")
    for i, e in enumerate(plan.result.best, 1):
        L = e.layout
        t.add_row(str(i), f"{e.minutes:.3f}", f"{e.minutes_p10:.2f}-{e.minutes_p90:.2f}", f"{e.step_time_s:.3f}", f"{100 * e.mfu:.1f}%",
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
               if best.sd_config < 0 else "")
    c.print(f"80% band: {best.minutes_p10:.3f}-{best.minutes_p90:.3f} min (sd of log minutes {best.sd_log:.3f}: "
            f"NVIDIA's own spread {best.sd_software:.3f}, configurations NVIDIA did not submit {best.sd_config:.3f} "
            f"{narrows}"
            f"from half of the other submitters' {plan.bench.mlperf} results"
            f"{'' if plan.bench.mlperf in plan.calibration.config_sd_by_benchmark else ' (too few of them: all benchmarks pooled)'}, "
            f"convergence {best.sd_convergence:.3f} from the RCPs; "
            "`plan validate` shows its coverage of the other half)")
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
    for k, v in e.memory.as_gb().items():
        m.add_row(k, f"{v:.2f}")
    c.print(m)
    L = e.layout
    c.print(f"micro-batches per step {L.microbatches}; bubble share (p-1)/(v*m) = "
            f"{(L.pp - 1) / (L.vpp * L.microbatches):.3f}; time-to-train = train {e.train_s / 60:.3f} + "
            f"eval {e.eval_s / 60:.3f} + fixed {e.overhead_s / 60:.3f} min")


def print_vs(a, b) -> None:
    c = _console()
    sp = b.best.minutes / a.best.minutes
    from trainperf.plan.api import speedup_factors

    f = speedup_factors(a.best, b.best)
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
    t = Table(title="published MLPerf results: predicted vs actual minutes")
    for col in ("round", "benchmark", "submitter", "GPUs", "accelerator", "GBS", "actual", "predicted",
                "p10-p90", "error", "submitted", "precision", "split"):
        t.add_column(col, justify="right" if col in ("GPUs", "GBS", "actual", "predicted", "p10-p90", "error",
                                                     "submitted") else "left")
    for r in rows:
        if r.estimate is None:
            continue
        x, e = r.result, r.estimate
        inside = e.minutes_p10 <= x.minutes <= e.minutes_p90
        t.add_row(x.round, x.benchmark, x.submitter[:22], str(x.n_gpus), x.accelerator[:28], str(x.gbs),
                  f"{x.minutes:.3f}", f"{e.minutes:.3f}",
                  f"{e.minutes_p10:.3f}-{e.minutes_p90:.3f}{'' if inside else ' out'}", f"{100 * r.error:+.1f}%",
                  "-" if r.submitted is None else f"{100 * r.submitted_error:+.1f}%",
                  f"{e.layout.precision}" + (f" (ran {r.config_precision})" if r.config_precision else ""),
                  {"fit": "fit", "calibration": "held-out (band cal)", "evaluation": "held-out (eval)"}[x.band_split])
    c.print(t)
    skipped = [r for r in rows if r.estimate is None]
    if skipped:
        kinds = sorted({f"{r.result.accelerator} ({r.reason})" for r in skipped})
        c.print(f"skipped {len(skipped)} rows: " + "; ".join(kinds[:8]) + (" ..." if len(kinds) > 8 else ""))
    benches = sorted(set(s["fit"]["per_benchmark"]) | set(s["held_out"]["per_benchmark"]))
    c.print(_error_table(s, benches))
    c.print(_named_table(s, benches))
    c.print(f"band: p10-p90 from NVIDIA's spread {cal.software_sd:.3f} (sd of log minutes on the fit rows), the spread "
            f"of configurations NVIDIA did not submit {_sds(cal.config_sd, cal.config_sd_by_benchmark)} "
            f"({cal.band_calibrated_on}; a negative spread narrows the band, down to the convergence spread) and each "
            "benchmark's RCP convergence spread; negative signed error: the model is too optimistic")
    if cross_sd is not None:
        c.print(f"cross-fitted coverage: the band-calibration half's rows judged with the configuration spread "
                f"{_sds(cross_sd, cross_by or {})} calibrated on the evaluation half the same way (not shipped)")
    c.print(f"calibration: {cal.fitted_on}")


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
    t = Table(title=f"{bench}: predicted time-to-train (rules of MLPerf round {rnd})")
    for col in ("gpu", "GPUs", "minutes", "p10-p90", "step s", "MFU", "layout"):
        t.add_column(col, justify="right" if col in ("GPUs", "minutes", "p10-p90", "step s", "MFU") else "left")
    for p in points:
        e = p.estimate
        if e is None:
            t.add_row(p.gpu, str(p.n_gpus), "-", "-", "-", "-", p.reason[:70])
        else:
            t.add_row(p.gpu, str(p.n_gpus), f"{e.minutes:.2f}", f"{e.minutes_p10:.2f}-{e.minutes_p90:.2f}",
                      f"{e.step_time_s:.3f}", f"{100 * e.mfu:.1f}%",
                      e.layout.short())
    c.print(t)
    if plot:
        c.print(f"wrote {plot}")
