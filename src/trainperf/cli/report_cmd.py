"""`trainperf report`, `trainperf export`, `trainperf sample`: what people look at and load after a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainperf import atomic
from trainperf.cli.args import non_negative_int, positive_int
from trainperf.errors import UsageError


def cmd_report(args) -> int:
    from trainperf.report.page import build_report

    if not args.run_dirs and not args.plan:
        raise UsageError("report: give at least one run directory (or a --plan JSON)")
    atomic.check_out(args.out, "report")
    rep = build_report(args.run_dirs, args.out, plans=args.plan, check=not args.no_check,
                       force=args.force, published=args.published, benchmarks=args.benchmark)
    atomic.mark_out(args.out, "report")
    for run, v in zip(rep.runs, rep.verdicts):
        print(f"{run}: compliance {v.status} ({v.detail})")
    for sc in rep.scores:
        val = f"{sc.minutes:.3f} min" if sc.minutes is not None else "—"
        print(f"score {sc.benchmark} [{sc.group}]: {val} ({sc.note})")
    print(f"wrote {rep.index} and {len(rep.images)} PNGs ({', '.join(p.name for p in rep.images)})")
    return 0


def cmd_export(args) -> int:
    from trainperf.report.export import export_hf

    atomic.check_out(args.out, "export")
    out = export_hf(args.run_dir, args.out)
    print(f"wrote {out}/ (config.json, model.safetensors, tokenizer.json, tokenizer_config.json); load it with "
          f"transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
    return 0


def cmd_sample(args) -> int:
    from trainperf.parallel.launch import check_devices
    from trainperf.report.sample import sample

    check_devices(1, args.device)  # --device cuda without CUDA: one line, before the model is read
    texts = sample(args.run_dir, args.prompt, args.max_new_tokens, args.num_samples, args.temperature,
                   args.top_k, args.seed, args.device)
    for i, text in enumerate(texts):
        if len(texts) > 1:
            print(f"----- sample {i + 1}")
        print(text)
    return 0


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("report", parents=[common],
                       help="one HTML page (+ PNGs) about finished runs: convergence, throughput, compliance")
    p.add_argument("run_dirs", nargs="*", type=Path, metavar="RUNDIR", help="run directories of `trainperf run` (a folder of runs stands for all of them)")
    p.add_argument("--out", type=Path, default=Path("report"), help="output folder (default: report/)")
    p.add_argument("--plan", action="append", default=[], type=Path, metavar="JSON",
                   help="`trainperf plan ... --json` output to draw as a scaling curve (repeatable)")
    p.add_argument("--published", type=Path, default=None, metavar="CSV",
                   help="published MLPerf results to draw beside the plan (default: the package's copy)")
    p.add_argument("--benchmark", action="append", default=[], metavar="NAME",
                   help="benchmark of --plan JSON that does not name one (plan sweep output), e.g. "
                        "gpt3_175b: once for all plans, or once per --plan in order")
    p.add_argument("--no-check", action="store_true", help="skip the official compliance checker")
    p.add_argument("--force", action="store_true", help="replace an existing report in --out")
    p.set_defaults(handler=cmd_report)

    e = sub.add_parser("export", parents=[common],
                       help="write a run's model as a Hugging Face checkpoint (LlamaForCausalLM / GPT2LMHeadModel)")
    e.add_argument("run_dir", type=Path, metavar="RUNDIR")
    e.add_argument("--format", choices=["hf"], default="hf", help="checkpoint format (hf: transformers)")
    e.add_argument("--out", type=Path, required=True, help="new folder for the checkpoint")
    e.set_defaults(handler=cmd_export)

    s = sub.add_parser("sample", parents=[common], help="generate text from a trained run's model")
    s.add_argument("run_dir", type=Path, metavar="RUNDIR")
    s.add_argument("--prompt", default="def ", help='text to continue (default "def ")')
    s.add_argument("--max-new-tokens", type=positive_int, default=200)
    s.add_argument("--num-samples", type=positive_int, default=1)
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--top-k", type=non_negative_int, default=50, help="sample among the K likeliest tokens (0: all)")
    s.add_argument("--seed", type=non_negative_int, default=0)
    s.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    s.set_defaults(handler=cmd_sample)
