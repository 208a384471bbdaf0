"""`trainperf` command line: parses arguments and calls the parts; no logic of its own.

Every expected failure (bad recipe, bad data, bad output dir, a full disk) prints one line and exits
with the code README.md's table gives; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import errno
import importlib
import signal
import sys
import time
from pathlib import Path

from trainperf import atomic
from trainperf.cli.args import Parser, non_negative_int, positive_int
from trainperf.cli.score_cmd import run_seeds_and_score, smoke_incomplete
from trainperf.config import MAX_SEED, DataConfig, Recipe, SubmittedLayout, list_recipes, load_recipe, validate
from trainperf.errors import (EXIT_FAIL, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, RunError, Terminated, TrainperfError,
                              UsageError, describe_os_error)
from trainperf.layout import format_layout, merge_overrides, parse_layout
from trainperf.parallel import launch

# Each part's subcommands live in their own module here: `add_parser(sub, common)` registers the
# parser and sets `handler=` via set_defaults; any TrainperfError a handler raises becomes a
# one-line message and its exit code in main().
_SUBCOMMAND_MODULES: list[str] = ["trainperf.cli.report_cmd", "trainperf.cli.plan_cmd", "trainperf.cli.score_cmd",
                                   "trainperf.cli.import_cmd"]


MAX_SEEDS = 1000  # MLPerf asks 3-10 runs a result; a thousand is a statistics study, more a typo


def _seeds(text: str) -> int:
    n = positive_int(text)
    if n > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SEEDS} seeds, got {n}")
    return n


def _common() -> argparse.ArgumentParser:
    """Options every subcommand accepts after its name too (`trainperf run --debug`)."""
    p = Parser(add_help=False)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return p


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="train a benchmark to its quality target", parents=[_common()])
    p.add_argument("benchmark", nargs="?", default="tiny", help="recipe name (recipes/*.toml) or path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a recipe value, e.g. --set train.lr=3e-3 (repeatable)")
    p.add_argument("--seed", type=non_negative_int, default=None, help="random seed (default: the recipe's)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    # 0 (the default) stands for "not given": the recipe's schedule; a user's 0 is refused
    p.add_argument("--max-steps", type=positive_int, default=0, help="stop (aborted) after this many steps")
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/<benchmark>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of a live bar")
    p.add_argument("--smoke", action="store_true",
                   help="the benchmark's control flow shrunk to seconds on a CPU (recipe's [smoke]); status "
                        "aborted, exit 0 when it made its planned evaluations and its log is sound")
    p.add_argument("--seeds", type=_seeds, default=0, metavar="N",
                   help=f"run seeds SEED..SEED+N-1 into OUT/seed_<s>/ and score them (trainperf score); N <= {MAX_SEEDS}")
    p.add_argument("--nproc", type=positive_int, default=0, metavar="N",
                   help="processes on this machine: N > 1 starts torchrun (gloo on CPU, NCCL on GPU)")
    p.add_argument("--max-restarts", type=non_negative_int, default=0, metavar="R",
                   help="restart the worker group up to R times after a failure, resuming from the last checkpoint")
    p.add_argument("--resume", type=Path, default=None, metavar="DIR",
                   help="continue a run: its directory (last complete checkpoint) or one checkpoints/step_* folder")
    p.add_argument("--checkpoint-every", type=non_negative_int, default=None, metavar="N",
                   help="a distributed checkpoint every N steps and at the end (checkpoint.every_steps)")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard scalars into the run directory")
    p.add_argument("--layout", default=None, metavar="SPEC|NAME",
                   help="the planner's layout grammar, e.g. tp=4,pp=8,vpp=6,cp=2,dp=64,mbs=1,gbs=512 (as `plan "
                        "--layout`; dp counts all data-parallel ranks), or the name of one of the recipe's [layouts]")
    p.add_argument("--dry-run", action="store_true",
                   help="check the layout on --nproc ranks, build the model on the meta device and print per-rank "
                        "parameters, the planner's memory estimate and the memory traced from one step on fake "
                        "tensors (--gpu), and the MLPerf keys; starts no training process")
    p.add_argument("--gpu", default=None, metavar="KIND",
                   help="with --dry-run: GPU kind for the planner's estimate and the traced memory (default: a "
                        "named layout's)")
    p.add_argument("--no-trace", action="store_true",
                   help="with --dry-run: skip the traced memory (it takes seconds to a minute or two)")
    p.add_argument("--json", action="store_true", help="with --dry-run: print JSON")


def _add_data(sub) -> None:
    p = sub.add_parser("data", help="prepare, inspect and verify token data", parents=[_common()])
    dsub = p.add_subparsers(dest="data_cmd", required=True)
    q = dsub.add_parser("prepare", help="tokenize SRC (.txt/.jsonl[.gz]/.json.gz/.parquet file or folder, or 'stdlib') "
                                        "into Megatron .bin/.idx pieces, one per input file")
    q.add_argument("src")
    q.add_argument("--out", type=Path, required=True,
                   help="a new or empty folder, or one trainperf prepared (any other folder is refused)")
    q.add_argument("--tokenizer", default="bpe", help="byte, bpe, a tokenizer.json or a SentencePiece .model")
    q.add_argument("--vocab-size", type=positive_int, default=None,
                   help=f"BPE vocabulary when training one (default {DataConfig.bpe_vocab_size})")
    q.add_argument("--val", default="", metavar="VALSRC",
                   help="validation file or folder (default: hold out documents by a hash of their id)")
    q.add_argument("--kind", choices=["tokens", "samples"], default="tokens",
                   help="samples: fine-tuning rows (input_ids/labels or input/output), loss on labels only")
    q.add_argument("--eod", default="", metavar="TOKEN",
                   help="a tokenizer token put after every document (as Megatron's --append-eod)")
    q.add_argument("--seq-len", type=non_negative_int, default=0, help="row length for --kind samples (the model's seq_len)")
    q.add_argument("--workers", type=non_negative_int, default=0, metavar="N", help="worker processes (default: the machine's cores)")
    q.add_argument("--shard", default="", metavar="I/N",
                   help="make only every N-th piece starting at I (0-based; e.g. one Slurm array task); a run "
                        "without --shard then assembles the dataset from the finished pieces")
    i = dsub.add_parser("info", help="documents, tokens, dtype and tokenizer of a dataset folder or Megatron prefix")
    i.add_argument("path")
    i.add_argument("--json", action="store_true")
    v = dsub.add_parser("verify", help="check every file of a prepared folder against its recorded sha256")
    v.add_argument("path", type=Path)


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="trainperf", description=__doc__.splitlines()[0])
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="cmd")
    _add_run(sub)
    _add_data(sub)
    for mod in _SUBCOMMAND_MODULES:
        importlib.import_module(mod).add_parser(sub, _common())
    r = sub.add_parser("rules", help="print the path of a benchmark's compliance YAML")
    r.add_argument("benchmark", nargs="?", default="tiny")
    sub.add_parser("recipes", help="list the benchmark recipes")
    return ap


def _load_run_recipe(args) -> tuple[Recipe, SubmittedLayout | None, dict | None]:
    """The recipe with --set and --layout applied: the layout spec, or the recipe's [layouts] entry
    named by --layout, turned into recipe keys (trainperf.layout), a key set twice an error."""
    overrides = list(args.overrides)
    # a value two different options set is refused, as --layout against --set is (merge_overrides);
    # one --set key repeated keeps the last, as scripts that append an override to a base list expect
    given = {o.split("=", 1)[0].strip(): o for o in overrides}
    flags = [(args.checkpoint_every, "checkpoint.every_steps", "--checkpoint-every"),
             (args.seed, "train.seed", "--seed")]
    for value, key, flag in flags:
        if value is not None and key in given:
            raise UsageError(f"{flag} {value} and --set {given[key]} both set {key}; give it once")
    if args.checkpoint_every is not None:
        overrides.append(f"checkpoint.every_steps={args.checkpoint_every}")
    recipe = load_recipe(args.benchmark, overrides, smoke=args.smoke)
    if not args.layout:
        return recipe, None, None
    named, text = None, args.layout
    if "=" not in text:
        named = recipe.layouts.get(text.strip())
        if named is None:
            have = ", ".join(recipe.layouts) or "none"
            raise UsageError(f"--layout {text}: neither key=value pairs nor one of {recipe.benchmark.name}'s "
                             f"[layouts] (it has: {have})")
        text = named.layout
    spec = parse_layout(text)
    recipe = load_recipe(args.benchmark, merge_overrides(spec, overrides, recipe.parallel.dp_replicate), smoke=args.smoke)
    return recipe, named, spec


def cmd_run(args) -> int:
    recipe, named, spec = _load_run_recipe(args)
    seed = recipe.train.seed if args.seed is None else args.seed
    last = seed + max(args.seeds, 1) - 1
    if last > MAX_SEED:
        raise UsageError(f"--seed {seed}{f' --seeds {args.seeds}' if args.seeds else ''}: seeds go up to "
                         f"{MAX_SEED} (numpy's range); the last would be {last}")
    if args.dry_run:
        from trainperf.cli.dry_run import check_gpu, dry_run, world_for

        # what only a training process does: refused rather than ignored, so a dry run checks the
        # command that will be run, not a shorter one
        training_only = [(args.resume is not None, "--resume"), (args.out is not None, "--out"),
                         (args.seeds > 0, "--seeds"), (args.max_steps > 0, "--max-steps"),
                         (args.tensorboard, "--tensorboard"), (args.max_restarts > 0, "--max-restarts"),
                         (args.checkpoint_every is not None, "--checkpoint-every")]
        extra = [flag for given, flag in training_only if given]
        if extra:
            raise UsageError(f"--dry-run starts no training: {', '.join(extra)} would be ignored; drop "
                             f"{'it' if len(extra) == 1 else 'them'} or the --dry-run")
        check_gpu(args.gpu)
        return dry_run(recipe, world_for(spec, named, args.nproc), args.gpu, named,
                       format_layout(spec) if spec else None, seed, as_json=args.json, trace=not args.no_trace)
    if args.gpu or args.json or args.no_trace:
        raise UsageError("--gpu, --json and --no-trace go with --dry-run")
    if not launch.under_torchrun():
        from trainperf.parallel.dims import ParallelDims

        # the trainer's whole layout check: a layout that does not fit this many processes fails
        # here in one line, before torchrun starts N workers and before a run directory exists
        ParallelDims.for_recipe(recipe, max(1, args.nproc))
        _check_weights_fit(recipe, max(1, args.nproc), args.device)
    out = args.out or Path("runs") / f"{recipe.benchmark.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.seeds:
        if args.max_restarts:
            raise UsageError("--max-restarts restarts a torchrun worker group; --seeds runs its seeds in this "
                             "process, so it would be ignored")
        atomic.check_out(out, "seeds")
        return run_seeds_and_score(recipe, args, out, seed)
    in_place = False
    if args.resume is not None:
        from trainperf.train.checkpoint import run_dir_of

        in_place = args.out is None or args.out.resolve() == run_dir_of(args.resume).resolve()
        out = run_dir_of(args.resume) if args.out is None else out  # a resumed run keeps writing into its own directory
    if not launch.under_torchrun() and not in_place:
        atomic.check_out(out, "run")  # under torchrun the launcher (or the job script's owner) checked it
    args.run_out = out  # for the line an interrupted run prints
    if launch.should_launch(args.nproc, args.max_restarts):
        return _launch(recipe, args, out)
    if launch.under_torchrun() and args.out is None and args.resume is None:
        raise UsageError("under torchrun pass --out DIR: every rank and every restart must use the same run directory")
    return _run_here(recipe, args, out, seed)


def _check_weights_fit(recipe: Recipe, nproc: int, device: str) -> None:
    """Refuse, before a run folder exists, a model whose fp32 weights alone (a quarter of what
    training holds with AdamW) exceed the memory they would live in, even sharded over every
    process: a typo in a size otherwise fails deep in torch (a storage overflow) or is killed."""
    import torch

    from trainperf.model.flops import matmul_params

    m = recipe.model
    weights = 4 * (matmul_params(m) + m.vocab_size * m.d_model)
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        room, where = nproc * torch.cuda.get_device_properties(0).total_memory, f"{nproc} GPU(s)"
    else:
        room, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"
    if weights > room:
        raise UsageError(f"model: its fp32 weights alone are {weights / 2**30:,.0f} GiB, more than {where} "
                         f"({room / 2**30:,.0f} GiB); check model.d_model, n_layer, d_ff and vocab_size")


def _launch(recipe, args, out: Path) -> int:
    """`run --nproc N` / `--max-restarts R`: start torchrun with this same command line as workers
    (cmd_run has checked the layout for N)."""
    launch.check_devices(max(1, args.nproc), args.device)
    started = time.time()
    rc = launch.run_torchrun(args.nproc, args.max_restarts, launch.worker_argv(args.argv, out))
    status = launch.finished_status(out, since=started)
    if status is None:
        raise RunError(f"torchrun: the workers failed (exit {rc}, {args.max_restarts} restarts allowed); "
                       "see their messages above")
    if rc != 0:
        # rank 0 writes summary.json last, after every rank has finished the run's collectives
        print(f"trainperf: torchrun exited {rc}, but only after the run had finished; its result in "
              f"{out / 'summary.json'} is complete", file=sys.stderr)
    return _run_exit(recipe, args, out, status)


def _run_here(recipe, args, out: Path, seed: int) -> int:
    """Train in this process (alone, or as one torchrun worker)."""
    from trainperf.cli.progress import RunDisplay
    from trainperf.parallel.env import init_env
    from trainperf.train.benchmark import run_benchmark
    from trainperf.train.checkpoint import exit_fault
    from trainperf.train.trainer import RunOptions

    env = init_env(args.device)
    display = RunDisplay(enabled=env.is_main, live=not args.no_progress and sys.stdout.isatty())
    tb = None
    if getattr(args, "tensorboard", False):
        from trainperf.report.tensorboard import TensorBoardWriter

        tb = TensorBoardWriter(out, then=display.update)
    try:
        with display:
            summary = run_benchmark(recipe, env, RunOptions(out=out, seed=seed, max_steps=args.max_steps, resume=args.resume,
                                                    on_event=tb or display.update))
    finally:
        if tb is not None:
            tb.close()  # what a failed run logged stays readable
    env.close()
    exit_fault(env)
    if env.is_main:
        display.print_summary(summary)
        if summary.deviations:
            print(f"{len(summary.deviations)} departures from the recipe or its closed rules, listed in "
                  f"{out / 'summary.json'} (deviations)")
    if env.elastic:
        return 0  # torchrun restarts workers that exit non-zero; the status is in summary.json
    return _run_exit(recipe, args, out, summary.status)


def _run_exit(recipe, args, out: Path, status: str) -> int:
    """0: the target was reached, or a --smoke run did all it planned; 3: stopped before the target."""
    if status == "success":
        return 0
    if recipe.smoke.enabled:
        why = smoke_incomplete(recipe, args.max_steps, out)
        if not why:
            return 0
        print(f"trainperf: the smoke run did not finish its plan: {why}", file=sys.stderr)
    return 3


def cmd_data(args) -> int:
    from trainperf.data import tools

    if args.data_cmd == "info":
        return tools.info(args.path, as_json=args.json)
    if args.data_cmd == "verify":
        return tools.verify(args.path)
    cfg = DataConfig(corpus=args.src, tokenizer=args.tokenizer, bpe_vocab_size=args.vocab_size or DataConfig.bpe_vocab_size,
                     kind=args.kind, val=args.val, eod=args.eod)
    validate(Recipe(data=cfg))
    if args.kind == "samples" and args.seq_len < 2:
        raise UsageError("--kind samples needs --seq-len (the model's sequence length)")
    return tools.prepare(cfg, args.out, args.seq_len, args.workers, tools.parse_shard(args.shard),
                         vocab_given=args.vocab_size is not None)


def cmd_rules(args) -> int:
    from trainperf.mlperf.logger import RULES_DIR

    path = RULES_DIR / f"{args.benchmark}.yaml"
    if not path.exists():
        raise UsageError(f"rules: no compliance YAML for '{args.benchmark}' (trainperf ships one for: "
                     f"{', '.join(p.stem for p in RULES_DIR.glob('*.yaml'))})")
    print(path)
    return 0


def cmd_recipes(args) -> int:
    print("\n".join(list_recipes()))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `run --nproc` hands it on to torchrun
    if args.cmd is None:
        ap.print_help()
        return EXIT_USAGE
    handlers = {"run": cmd_run, "data": cmd_data, "rules": cmd_rules, "recipes": cmd_recipes}
    handler = getattr(args, "handler", None) or handlers[args.cmd]
    previous = _on_sigterm()
    try:
        return handler(args)
    except TrainperfError as e:
        if args.debug:
            raise
        print(f"trainperf: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # the reader of our output left (`| head`): not an error of ours. Python would flush stdout
        # again at exit and print a second traceback, so it is pointed at /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL
    except OSError as e:
        # the one place an OS refusal on a user's path (disk full, permission, not a folder, read-only)
        # becomes one line; an OSError without a file name is not about the user's files: a bug
        # (a write on an open file carries no name: a full disk there is blamed on the output folder)
        where = e.filename if e.filename is not None else _output_of(args) if e.errno in _FULL else None
        if args.debug or where is None:
            raise
        print(f"trainperf: error: {describe_os_error(e, path=where)}", file=sys.stderr)
        return EXIT_FAIL
    except (KeyboardInterrupt, Terminated) as e:
        return _interrupted(args, isinstance(e, Terminated))
    except Exception:
        # a worker whose peer was terminated first sees its collective fail: still a termination
        if _sigterm_seen and not args.debug:
            return _interrupted(args, True)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def _output_of(args) -> Path | None:
    return getattr(args, "run_out", None) or getattr(args, "out", None)


_sigterm_seen = False


def _interrupted(args, term: bool) -> int:
    print(f"trainperf: {'terminated (SIGTERM)' if term else 'interrupted (Ctrl-C)'}{_resume_hint(args)}",
          file=sys.stderr)
    return EXIT_SIGTERM if term else EXIT_SIGINT


def _raise_terminated(signum, frame) -> None:
    global _sigterm_seen
    _sigterm_seen = True
    raise Terminated()


def _on_sigterm():
    """SIGTERM (Slurm, Kubernetes, torchrun stopping its workers) raises `Terminated` where the
    program is, as Ctrl-C raises KeyboardInterrupt: the run logs its stop, files being written are
    dropped (atomic writes), committed checkpoints stay. The previous handler, to put back; None
    where signals cannot be set (not the main thread)."""
    global _sigterm_seen
    _sigterm_seen = False
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:
        return None


def _resume_hint(args) -> str:
    out = getattr(args, "run_out", None)
    if out is None or args.cmd != "run":
        return ""
    from trainperf.train.checkpoint import committed

    ckpts = committed(out / "checkpoints")
    if not ckpts:
        return ""
    return f"; the last complete checkpoint is {ckpts[-1]}: continue with `trainperf run ... --resume {out}`"


if __name__ == "__main__":
    sys.exit(main())
