"""`trainperf score` and `trainperf package`; `trainperf run --seeds N` ends here to be scored."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainperf import atomic
from trainperf.cli.args import file_name
from trainperf.errors import UsageError


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("score", parents=[common],
                       help="check result logs with the official checker, score them (olympic mean), RCP check")
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                   help="run directories (result_*.txt), or folders of them (e.g. run --seeds output)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--count-restarts", action="store_true",
                   help="score a restarted run (earlier attempts in RUN/attempts/) at its whole wall clock, "
                        "first run_start to the final run_stop, as MLPerf counts it; without this flag such "
                        "a run is marked and counts as failed, since its log times the last attempt only")
    p.add_argument("--ruleset", metavar="X.Y.Z", default=None,
                   help="MLPerf training ruleset for the compliance check and the RCPs, one the installed "
                        "mlperf-logging has for the benchmark, e.g. 4.0.0 for a v4.0 result (default: the newest "
                        "it has; the logs do not say which round's rules they follow)")
    p.set_defaults(handler=cmd_score)

    q = sub.add_parser("package", parents=[common],
                       help="lay results out as an MLPerf submission and run the package checker")
    q.add_argument("dirs", nargs="+", type=Path, metavar="RUNDIR")
    q.add_argument("--system", required=True, type=file_name, help="system name (systems/<name>.json)")
    q.add_argument("--out", required=True, type=Path, help="submission folder to create (a new or empty folder)")
    q.add_argument("--submitter", default="", help="organization (default: $TRAINPERF_ORG)")
    q.add_argument("--status", default="Research, Development, or Internal (RDI)",
                   help="availability class for systems/<name>.json")
    q.add_argument("--json", action="store_true", help="print the result as JSON")
    q.set_defaults(handler=cmd_package)


def _fmt(v, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def print_report(rep, out=None) -> None:
    out = out or sys.stdout
    w = max([len(str(r.path)) for r in rep.runs] + [3])
    print(f"{rep.benchmark} (ruleset {rep.ruleset}, {rep.ruleset_source or 'default'}): {len(rep.runs)} result logs",
          file=out)
    unit = "tokens" if rep.benchmark == "gpt3" else "samples"
    print(f"  {'run':<{w}}  {'seed':>5}  {'status':<9}  {'minutes':>9}  {unit + ' to target':>18}  "
          f"{'tokens to target':>16}  {'model FLOPs':>11}  checker", file=out)
    for r in rep.runs:
        conv = (r.tokens if rep.benchmark == "gpt3" else r.samples) if r.converged else None
        verdict = "pass" if r.check and r.check.passed else f"FAIL: {r.check.first_error}" if r.check else "-"
        status = str(r.status or "truncated") + ("*" if r.restarts else "")
        flops = r.model_flops_to_target
        print(f"  {str(r.path):<{w}}  {_fmt(r.seed):>5}  {status:<9}  "
              f"{_fmt(r.minutes, '.4f'):>9}  {_fmt(conv, ','):>18}  {_fmt(r.tokens if r.converged else None, ','):>16}  "
              f"{'-' if flops is None else f'{flops:.3g}':>11}  {verdict}", file=out)
        if r.restarts:
            print(f"  {'':<{w}}  * {r.restart_note}", file=out)
        if r.check and len(r.check.errors) > 1:
            more = r.check.errors[1:4] + ([f"(+{len(r.check.errors) - 4} more; --json lists all)"]
                                          if len(r.check.errors) > 4 else [])
            for e in more:
                print(f"  {'':<{w}}  {'':>5}  {'':<9}  {'':>9}  {'':>18}        {e}", file=out)
    s = rep.score
    head = f"score: {s.minutes:.4f} minutes" if s.valid else "score: none"
    print(f"{head} ({s.message}; {s.counted} counted, {s.failed} failed, {s.required} required)", file=out)
    rcp = rep.rcp
    if rcp.ran:
        n = rcp.numbers
        # the factor to 4 decimals, as the package logs it (x1.0347 read as 1.0 at one decimal)
        nums = ", ".join(f"{k} {v:.4f}" if k == "normalization" and isinstance(v, float)
                         else f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {'unknown' if v is None else v}"
                         for k, v in n.items())
        print(f"RCP: {'pass' if rcp.passed else 'FAIL'} ({rcp.message}; {nums})", file=out)
    else:
        print(f"RCP: not checked ({rcp.message})", file=out)


def _score(dirs: list[Path], as_json: bool, count_restarts: bool = False, ruleset: str | None = None) -> int:
    from trainperf.mlperf.score import score_dirs

    rep = score_dirs(dirs, count_restarts=count_restarts, ruleset=ruleset)
    if as_json:
        print(json.dumps(rep.to_dict(), indent=1))
    else:
        print_report(rep)
    return 0 if rep.ok else 1


def cmd_score(args) -> int:
    return _score(args.dirs, args.json, args.count_restarts, args.ruleset)


def cmd_package(args) -> int:
    from trainperf.mlperf.package import package

    res = package(args.dirs, args.system, args.out, submitter=args.submitter, status=args.status)
    if args.json:
        print(json.dumps({"out": str(res.out), "files": [str(f) for f in res.files], "to_fill": res.to_fill,
                          "checker_ran": res.checker_ran, "checker_passed": res.checker_passed,
                          "checker_errors": res.checker_errors, "checker_note": res.checker_note}, indent=1))
    else:
        print(f"wrote {res.out}: {len(res.files)} files")
        for f in res.files:
            print(f"  {f.relative_to(res.out)}")
        if res.to_fill:
            print(f"left for a person to fill in systems/*.json: {', '.join(res.to_fill)}")
        if res.checker_ran:
            print("package checker: " + ("no errors" if res.checker_passed else "FOUND ERRORS"))
            for e in res.checker_errors:
                print(f"  {e}")
        elif res.checker_note:
            print(f"package checker: not run ({res.checker_note})")
    return 0 if res.checker_passed in (True, None) else 1


def smoke_incomplete(recipe, max_steps: int, out: Path) -> str:
    """Why a `run --smoke` that stopped short of the target does not count as done ("" when it does):
    it must train the steps and make the evaluations its plan has (the skipped ones plus
    `smoke.evals`, not fewer because of --max-steps), and leave a sound result log."""
    from trainperf.mlperf.score import log_problem
    from trainperf.train.benchmark import smoke_max_steps

    if not recipe.smoke.enabled:
        return "not a smoke run"
    planned = smoke_max_steps(recipe)
    if max_steps and max_steps < planned:
        return f"--max-steps {max_steps} stopped it before its planned {planned} steps"
    try:
        s = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError) as e:
        return f"{out / 'summary.json'}: unreadable ({e})"
    per_eval = max(1, -(-recipe.eval.every_samples // recipe.train.global_batch_size))
    evals = -(-planned // per_eval)
    if s.get("steps") != planned or s.get("evals") != evals:
        return f"it ran {s.get('steps')} steps and {s.get('evals')} evaluations of the planned {planned} and {evals}"
    # a restarted run's log is its last attempt's: the evaluations before the restart are not in it
    logged = None if s.get("restarts") else max(0, evals - recipe.eval.skip_evals)
    return log_problem(out / f"result_{s.get('seed', 0)}.txt", logged)


def run_seeds_and_score(recipe, args, out: Path, seed: int) -> int:
    """`trainperf run --seeds N`: seeds seed..seed+N-1 into OUT/seed_<s>/, then `score OUT`."""
    from trainperf.parallel.env import init_env
    from trainperf.train.benchmark import run_seeds
    from trainperf.train.trainer import RunOptions

    if getattr(args, "nproc", 0) > 1 or getattr(args, "resume", None) is not None:
        raise UsageError("--seeds runs in this process; it does not combine with --nproc or --resume")
    if out.exists() and any(p.name != atomic.OUT_MARKER for p in out.iterdir()):
        raise UsageError(f"{out}: exists and is not empty; --seeds writes a fresh OUT/seed_<i>/ per run")
    atomic.mark_out(out, "seeds")
    listener_for = None
    if getattr(args, "tensorboard", False):
        from trainperf.report.tensorboard import TensorBoardWriter

        listener_for = TensorBoardWriter  # one event file per seed directory
    env = init_env(args.device)
    done = run_seeds(recipe, env, RunOptions(out=out, seed=seed, max_steps=args.max_steps, progress=False),
                     args.seeds, listener_for)
    env.close()
    if env.is_main:
        for d, s in zip(done.dirs, done.summaries):
            print(f"{d}: {s.status}, {s.time_to_train_s:.1f} s, {s.steps} steps, eval {s.final_eval_loss:.4f}")
        return _score([out], False)
    return 0
