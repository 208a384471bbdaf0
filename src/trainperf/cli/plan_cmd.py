"""`trainperf plan`: predict time-to-train of an MLPerf LLM benchmark on a GPU cluster and search the
parallel layout; `plan validate | sweep | calibrate` as subcommands. Parses and calls plan/."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainperf.cli.args import finite_float, positive_int
from trainperf.errors import RunError, UsageError

EPILOG = """examples:
  trainperf plan gpt3_175b --gpu h100 --gpus 10752
  trainperf plan llama2_70b_lora --gpu h200 --gpus 512 --vs h100
  trainperf plan llama31_405b --gpu gb200 --gpus 2048 --explain
  trainperf plan llama31_8b --gpu h200 --gpus 8 --layout tp=1,pp=1,dp=8,mbs=1 --json
  trainperf plan validate
  trainperf plan sweep gpt3_175b --gpu h100,h200,gb200 --gpus 64..16384 --plot scaling.png
  trainperf plan calibrate            (refit calibration.toml on the fit rows)"""

VERBS = ("validate", "sweep", "calibrate")
_PLAN = "plan-one"  # the subparser a benchmark name falls through to


class _VerbOrBenchmark(argparse._SubParsersAction):
    """`plan validate|sweep|calibrate ...` are subcommands; any other first word is the benchmark
    of a plan (`plan gpt3_175b --gpu ...`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.choices = None  # argparse checks a subcommand against its choices before calling; a benchmark is not one

    def __call__(self, parser, namespace, values, option_string=None):
        if values and values[0] not in self._name_parser_map:
            values = [_PLAN, *values]
        super().__call__(parser, namespace, values, option_string)


def _cluster_opts(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    kinds = "; comma list" if sweep else ""
    p.add_argument("--gpu", help=f"GPU kind (a100, h100, h200, b200, gb200, b300, gb300){kinds}")
    p.add_argument("--gpus", help="GPU count" + ("s: A..B (powers of two) or A,B,C" if sweep else ""))
    p.add_argument("--network", default=None, help="scale-out network (ib_ndr, ib_xdr, roce_400, ...); default: the GPU's")
    p.add_argument("--gbs", type=positive_int, default=None, help="global batch (default: searched inside the RCP range)")
    p.add_argument("--round", dest="round_", default=None, metavar="X.Y",
                   help="MLPerf round whose rules apply: RCPs, allowed precisions, evaluation costs "
                        "(default: the newest round with the benchmark)")
    p.add_argument("--explore", action="store_true",
                   help="rank layouts by predicted time only (default: layouts NVIDIA published for the GPU family first)")
    p.add_argument("--price", type=finite_float, default=None, metavar="USD_PER_GPU_HOUR",
                   help="price of one GPU-hour: adds cost_usd")
    p.add_argument("--pue", type=finite_float, default=None,
                   help="facility overhead on the GPUs' TDP energy (default 1.2, an assumption)")
    p.add_argument("--calibrate", metavar="RUNDIR", default=None,
                   help="refit the compute efficiency from a trainperf run's summary.json")
    p.add_argument("--stack", choices=["megatron", "megatron-fsdp", "pytorch"], default=None,
                   help="the software that runs it: megatron (NVIDIA's Megatron/NeMo, what the MLPerf fit describes; "
                        "default for a benchmark), megatron-fsdp (the same with Megatron-FSDP) or pytorch (FSDP2, "
                        "DTensor TP, torch.compile, torchao Float8: trainperf's trainer; default for --model and "
                        "--calibrate)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _stack(args) -> str:
    """--stack, else pytorch where the plan is for trainperf's trainer (a --model, --calibrate from
    a trainperf run, --emit-run's `trainperf run` command, priced as `run --dry-run` prices it),
    else megatron (a benchmark, as MLPerf's results ran it)."""
    if args.stack:
        return args.stack
    ours = getattr(args, "model", None) or args.calibrate or getattr(args, "emit_run", False)
    return "pytorch" if ours else "megatron"


def _model_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="M",
                   help="any dense GPT/Llama model instead of a benchmark: a recipe name or TOML, a Hugging Face "
                        "config.json, or layers=,d_model=,heads=,kv_heads=,head_dim=,ffn=,vocab=,seq=,family=gpt|llama[,mlp=swiglu|gelu|relu2,tied=true|false]")
    p.add_argument("--seq-len", type=positive_int, default=None, metavar="N", help="--model: the sequence length")
    p.add_argument("--tokens", type=finite_float, default=None, metavar="N",
                   help="--model: the token budget to train (time-to-train); without it step time and throughput")


def _workload(args):
    """The benchmark named, or the --model (with --seq-len and the global batch); exactly one."""
    from trainperf.plan.workload import custom_workload

    if args.bench and args.model:
        raise UsageError(f"plan: give a benchmark ('{args.bench}') or --model, not both")
    if not args.bench and args.model is None:
        raise UsageError("plan: name a benchmark or give --model (or: validate | sweep | calibrate)")
    if args.bench and (args.seq_len is not None or args.tokens is not None):
        raise UsageError("--seq-len/--tokens: an MLPerf benchmark's rules fix its sequence and target; use --model")
    layout = _layout(args) or {}
    return args.bench or custom_workload(args.model, args.seq_len, args.gbs or layout.get("gbs"))


def _layout(args) -> dict | None:
    """--layout parsed, with the planner's formats (fp16 included)."""
    from trainperf.layout import parse_layout
    from trainperf.plan.hardware import PLAN_PRECISIONS

    return parse_layout(args.layout, precisions=PLAN_PRECISIONS) if getattr(args, "layout", None) else None


MAX_TOP = 500  # a table row costs about 1 ms to render: more would take a plan past a second


def _top(text: str) -> int:
    n = positive_int(text)
    if n > MAX_TOP:
        raise argparse.ArgumentTypeError(f"at most {MAX_TOP} layouts, got {n}")
    return n


def _plan_opts() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    _cluster_opts(p)
    p.add_argument("--vs", default=None, metavar="GPU", help="also plan on this GPU kind and report the speed-up")
    p.add_argument("--explain", action="store_true", help="where the step time and memory go")
    p.add_argument("--layout", default=None, help="fix part of the layout: tp=,pp=,vpp=,dp=,cp=,mbs=,gbs=,recompute=,precision=")
    p.add_argument("--precision", choices=["fp16", "bf16", "fp8", "fp4"], default=None,
                   help="matmul format (default: the fastest the GPU has; fp16 at the 16-bit rate, as A100-era runs)")
    _model_opts(p)
    p.add_argument("--samples", type=finite_float, default=None, metavar="N",
                   help="training samples to reach the target (default: the RCP mean at the global batch)")
    p.add_argument("--samples-from", nargs="+", default=None, metavar="LOGS",
                   help="take samples to the target (and the global batch) from MLPerf result logs: "
                        "olympic mean over their converged runs")
    p.add_argument("--top", type=_top, default=5, help=f"layouts to list (1-{MAX_TOP})")
    p.add_argument("--emit-run", action="store_true",
                   help="print the `trainperf run` command line for the top layout (and how to start it on many nodes)")
    return p


def add_parser(sub, common) -> None:
    opts = _plan_opts()
    p = sub.add_parser("plan", help="predict time-to-train on a GPU cluster and search the layout",
                       parents=[common, opts], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=cmd_plan, bench=None)
    p.register("action", "parsers", _VerbOrBenchmark)
    verbs = p.add_subparsers(dest="verb", metavar="BENCHMARK | validate | sweep | calibrate")
    one = verbs.add_parser(_PLAN, parents=[common, opts], prog=p.prog)  # errors name `plan`, not the internal verb
    one.add_argument("bench", help="benchmark (gpt3_175b, llama31_405b, llama31_8b, llama2_70b_lora)")
    one.set_defaults(handler=cmd_plan)

    v = verbs.add_parser("validate", parents=[common], help="predict every published MLPerf result and report the error")
    v.add_argument("--benchmark", dest="only", default=None, help="only this benchmark")
    v.add_argument("--calibrate", metavar="RUNDIR", default=None, help="with the efficiency refit from this run")
    v.add_argument("--gpu", default=None, help="with --calibrate: the GPU kind a non-catalog run stands for")
    v.add_argument("--published", action="store_true",
                   help="predict published runs outside MLPerf (tokens/s per GPU, each at its layout and stack)")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.add_argument("--holdout", metavar="BY", default=None,
                   help="round, generation, submitter or benchmark: refit without each group, predict it (minutes)")
    v.add_argument("--results", metavar="CSV", default=None,
                   help="predict the rows of this table (the catalogue's columns: data/mlperf_results.csv) instead")
    v.set_defaults(handler=cmd_validate, stack="megatron")  # MLPerf's results ran on Megatron/NeMo

    s = verbs.add_parser("sweep", parents=[common], help="predict over GPU kinds and counts")
    s.add_argument("bench", nargs="?", default=None, help="the benchmark (or --model)")
    _cluster_opts(s, sweep=True)
    _model_opts(s)
    s.add_argument("--plot", metavar="PNG", default=None, help="write scaling + breakdown figure")
    s.set_defaults(handler=cmd_sweep)

    c = verbs.add_parser("calibrate", parents=[common], help="refit calibration.toml on the fit rows")
    c.set_defaults(handler=cmd_calibrate)


def _calibration(args):
    """The calibration, refit from --calibrate's run for the GPU generation it ran on. A plan
    (`--gpus` given) must be for that generation: the refit changes no other. `validate` takes
    --gpu only to say which generation a run on another device stands for."""
    from trainperf.plan.calibration import load_calibration, read_run, refit_from_run
    from trainperf.plan.hardware import get_gpu, gpu_for_result

    cal = load_calibration()
    planned = getattr(args, "gpus", None) is not None
    if not args.calibrate:
        if args.gpu and not planned:
            raise UsageError("--gpu: validate takes it only with --calibrate (the GPU a non-catalog run stands for)")
        return cal, None
    run = read_run(args.calibrate)
    g = gpu_for_result(run.device)
    kinds = [get_gpu(k.strip()) for k in (args.gpu or "").split(",") if k.strip()]
    note = None
    if g is None:
        if not kinds:
            raise UsageError(f"--calibrate: the run was on '{run.device}', not a catalog GPU; give --gpu to say "
                             "which generation its efficiency should stand for")
        g = kinds[0]
        note = (f"run measured on '{run.device}' (not a catalog GPU): its efficiency is applied to "
                f"{g.generation} as asked by --gpu")
    elif kinds and not planned:
        raise UsageError(f"--gpu: the run was on '{run.device}', a catalog GPU ({g.generation}); --gpu is for a "
                         "run on another device")
    other = sorted({k.key for k in kinds if k.generation != g.generation})
    if other:
        raise UsageError(f"--calibrate: the run measured {g.generation} ({run.device}), which the refit changes; "
                         f"--gpu {', '.join(other)} is another generation: plan {g.generation}, or calibrate from a "
                         "run on the GPU planned")
    stack = _stack(args)
    cal = refit_from_run(cal, g.generation, run, stack)
    note = note or f"{g.generation} {stack} efficiency refit from the run on {run.device}"
    return cal, note


def _convergence(args):
    from trainperf.plan import convergence
    from trainperf.plan.workload import load_benchmark

    if args.samples is not None and args.samples_from:
        raise UsageError("give --samples or --samples-from, not both")
    if args.samples is not None:
        return convergence.given(args.samples)
    if args.samples_from:
        if not args.bench:
            raise UsageError("--samples-from: reads an MLPerf benchmark's logs; for --model give --tokens")
        b = load_benchmark(args.bench)
        return convergence.from_logs(args.samples_from, b.mlperf, b.model.seq_len)
    return None


def cmd_plan(args) -> int:
    from trainperf.plan import view
    from trainperf.plan.api import make_plan, parse_gpu_count
    from trainperf.plan.cost import check
    what = _workload(args)
    if not args.gpu or not args.gpus:
        raise UsageError("plan: --gpu and --gpus are required (e.g. --gpu h100 --gpus 512)")
    n = parse_gpu_count(args.gpus)
    check(args.price, args.pue)
    cal, note = _calibration(args)
    layout = _layout(args)
    kw = dict(stack=_stack(args), network=args.network, layout=layout, gbs=args.gbs,
              precision=args.precision, calib=cal, top=args.top, convergence=_convergence(args),
              explore=args.explore, price=args.price, pue=args.pue)
    plan = _run(lambda: make_plan(what, args.gpu, n, round_=args.round_, tokens=args.tokens, **kw))
    other = _run(lambda: make_plan(plan.bench, args.vs, n, round_=args.round_ and plan.bench.round,
                                   tokens=args.tokens, **kw)) if args.vs else None
    if args.emit_run and not plan.bench.recipe:
        raise UsageError(f"--emit-run: the model came from {plan.bench.model_source}, not a recipe `trainperf run` takes")
    if args.emit_run and not args.json:
        print(view.run_command(plan))
    elif args.json:
        print(json.dumps(view.plan_json(plan, other, note, args.emit_run), indent=1))
    else:
        view.print_plan(plan, explain=args.explain, note=note)
        if other:
            view.print_vs(plan, other)
    return 0


def _run(f):
    """A planner failure (no layout fits) is a failed run, exit 1; bad input stays exit 2."""
    from trainperf.errors import PlanError

    try:
        return f()
    except PlanError as e:
        raise RunError(str(e)) from None


def cmd_validate(args) -> int:
    """`plan validate`: the MLPerf results (default), `--published` runs or `--holdout` splits."""
    from trainperf.plan import view

    if sum(map(bool, (args.published, args.holdout, args.results))) > 1:
        raise UsageError("--published, --holdout and --results: one at a time")
    if args.published:
        from trainperf.plan.published import validate_published

        if args.only:
            raise UsageError("--benchmark: MLPerf benchmarks are not in --published")
        report = validate_published(_calibration(args)[0])
        return _show(args, report.to_dict(), lambda: view.print_published(report))
    if args.holdout:
        from trainperf.plan.holdout import holdout

        if args.calibrate or args.only:
            raise UsageError("--holdout refits the calibration on the whole catalogue: no --calibrate or --benchmark")
        d = holdout(args.holdout, log=lambda m: print(m, file=sys.stderr)).to_dict()
        return _show(args, d, lambda: view.print_holdout(d))
    from trainperf.plan.validate import run_validation

    val = run_validation(_calibration(args)[0], args.only, Path(args.results) if args.results else None)
    return _show(args, val.to_dict() if args.json else None, lambda: view.print_validation_report(val))


def _show(args, d: dict | None, table) -> int:
    """A result as JSON (`--json`) or as its table."""
    if args.json:
        print(json.dumps(d, indent=1))
    else:
        table()
    return 0


def cmd_calibrate(args) -> int:
    from trainperf.plan import view
    from trainperf.plan.calibration import save_calibration
    from trainperf.plan.fitting import recalibrate

    cal, s = recalibrate(log=lambda m: print(m, file=sys.stderr))
    print(view.calibrated_line(save_calibration(cal), cal, s))
    return 0


def cmd_sweep(args) -> int:
    from trainperf.plan import view
    from trainperf.plan.api import parse_gpus, sweep
    from trainperf.plan.cost import check

    if not args.gpu or not args.gpus:
        raise UsageError("plan sweep: --gpu and --gpus are required (e.g. --gpu h100,h200 --gpus 64..4096)")
    what = _workload(args)
    kinds = [g.strip() for g in args.gpu.split(",") if g.strip()]
    counts = parse_gpus(args.gpus)
    cal, _ = _calibration(args)
    check(args.price, args.pue)
    if args.plot and args.model and args.tokens is None:
        raise UsageError("--plot: a model's time-to-train needs a token budget (--tokens N)")
    if args.plot:
        from trainperf.plan.plot import check_path

        check_path(args.plot)
    points = sweep(what, kinds, counts, network=args.network, calib=cal, gbs=args.gbs, round_=args.round_,
                   explore=args.explore, price=args.price, pue=args.pue, stack=_stack(args), tokens=args.tokens)
    name = args.bench or what.name
    if args.plot:
        if not any(p.prediction for p in points):
            raise RunError("plan sweep: no point has a layout that fits; nothing to plot")
        from trainperf.plan.plot import plot_sweep

        plot_sweep(points, name, args.plot, cost_panel=True)
    if args.json:
        print(json.dumps([p.to_dict() for p in points], indent=1))
    else:
        view.print_sweep(name, points, args.plot)
    return 0
