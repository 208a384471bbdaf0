"""Score result logs the way MLPerf does: official checker per log, olympic mean, RCP check.

- Every `result_*.txt` goes through the official compliance checker (the package's CLI, see
  `check.py`); trainperf's own benchmarks are checked against their own YAML (`rules/<name>.yaml`,
  or the `compliance.yaml` the run wrote with its target).
- The score is the package's `result_summarizer._compute_olympic_average` over run_stop - run_start
  minutes: the required number of runs, fastest and slowest dropped; one failed run may stand in for
  the slowest, two or more make the result invalid. A run that did not end with status `success`
  counts as failed (the package's summarizer does not look at the status; its RCP checker does).
  That function is private to the package, so `pyproject.toml` pins the range it was tested with and
  a test compares it with the rule on known inputs.
- A restarted run (earlier attempts in `<run>/attempts/N/`, `restarts` in its log or summary) is
  marked: its log times the last attempt only, while MLPerf counts the whole wall clock, from the
  first attempt's run_start to the final run_stop. It is not counted (it counts as failed) unless
  `count_restarts`, which scores it at that whole wall clock.
- The RCP check is the package's `rcp_checker.check_directory`, run on a private copy of the logs (it
  writes scaling.json next to them), where the package has RCPs for the benchmark and ruleset.
- One ruleset serves both checks: by default the newest the package has for the benchmark, or the
  one the user names (`ruleset=`, checked against those the package ships). The logs cannot choose
  it: no MLPerf log key names a ruleset, and the package's own checkers are told it on their command
  line. A published result of an earlier round fails the newest rules only on the keys they added,
  so such failures get a hint to name the round's ruleset.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainperf.errors import RulesError, ScoreError, UsageError
from trainperf.mlperf.benchmarks import OFFICIAL
from trainperf.mlperf.check import CheckResult, check_log
from trainperf.mlperf.logger import RULES_DIR, render_rules
from trainperf.mlperf import rulesets


@dataclass
class RunLog:
    """What one result log says, read without trusting it (the checker judges it separately)."""

    path: Path
    benchmark: str | None = None
    seed: int | None = None
    gbs: int | None = None
    status: str | None = None  # run_stop's status; None when the log has no run_stop
    minutes: float | None = None
    samples: int | None = None  # samples_count of the last eval_accuracy before run_stop
    tokens: int | None = None  # training tokens then: epoch_num (gpt3), else samples x max_sequence_length
    seq_len: int | None = None
    flops_per_token: int | None = None  # from a trainperf summary.json beside the log, when there is one
    bad_lines: int = 0
    evals: int = 0  # eval_accuracy lines
    check: CheckResult | None = None
    start_ms: float | None = None  # run_start's time_ms (milliseconds since the epoch)
    stop_ms: float | None = None
    logged_restarts: int = 0  # the log's own `restarts` event, 0 when it has none
    restarts: int = 0  # earlier attempts of this run, from every source (see restart_info)
    wall_minutes: float | None = None  # first attempt's run_start to the final run_stop
    count_restarts: bool = False  # score a restarted run at its whole wall clock

    @property
    def converged(self) -> bool:
        return self.status == "success"

    @property
    def model_flops_to_target(self) -> float | None:
        """Training model FLOPs to the target (6N plus attention per token): machine-independent."""
        if not self.converged or self.tokens is None or self.flops_per_token is None:
            return None
        return float(self.tokens * self.flops_per_token)

    @property
    def score_minutes(self) -> float | None:
        """The minutes this run is scored at: the log's for a run that never restarted, the whole
        wall clock for a restarted one when restarts count, else none."""
        if not self.restarts:
            return self.minutes
        return self.wall_minutes if self.count_restarts else None

    @property
    def ok(self) -> bool:
        return (self.converged and self.check is not None and self.check.passed
                and self.score_minutes is not None)

    @property
    def problem(self) -> str:
        """Why this run does not count, in one line ("" when it does)."""
        if self.status is None:
            return "truncated: the log has no run_stop"
        if self.check is not None and not self.check.passed:
            return f"checker: {self.check.first_error}"
        if not self.converged:
            return f"did not converge (status {self.status})"
        if self.minutes is None:
            return "no run_start / run_stop times"
        if self.restarts and self.score_minutes is None:
            return self.restart_note
        return ""

    @property
    def restart_note(self) -> str:
        """What a restart means for this run's time ("" for a run that never restarted)."""
        if not self.restarts:
            return ""
        last = "no run_start / run_stop" if self.minutes is None else f"{self.minutes:.4f} min"
        head = (f"restarted {self.restarts}x: the log times the last attempt only ({last}); "
                "MLPerf counts the whole wall clock")
        if self.wall_minutes is None:
            return head + ", and the earlier attempts' logs (attempts/N/) are missing"
        if self.count_restarts:
            return head + f", scored at {self.wall_minutes:.4f} min (first run_start to the final run_stop)"
        return head + f" ({self.wall_minutes:.4f} min); not counted (--count-restarts scores it so)"


# The longest `:::MLLOG` line a result log may hold. Real lines are a few hundred characters (the
# longest, hyperparameter and system events, stay under a few KB); the official checker's time grows
# with the square of a line's length (64K characters: 1.6 s, 256K: 22 s, 1M: minutes), so a longer
# line is refused before the checker sees it. 16K is several times any real line and checks in
# about 0.1 s. Other lines are not screened: the checker skips them at once, and a submission's log
# may carry a program's long stdout lines.
MAX_MLLOG_LINE = 16 * 1024


def read_log(path: Path) -> RunLog:
    """Parse the `:::MLLOG` lines of one result log (a line cut short is counted, not fatal; a line
    longer than MAX_MLLOG_LINE is a ScoreError naming it)."""
    run = RunLog(path)
    start = stop = None
    last_eval: dict | None = None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ScoreError(f"{path}: cannot read ({e.strerror})") from None
    # split at "\n" only, so that the line number is the one an editor shows
    for lineno, line in enumerate(text.split("\n"), 1):
        if ":::MLLOG" not in line:
            continue
        if len(line) > MAX_MLLOG_LINE:
            raise ScoreError(f"{path}:{lineno}: a :::MLLOG line of {len(line):,} characters (real ones are a "
                             f"few hundred; at most {MAX_MLLOG_LINE:,} are checked); not a result log")
        try:
            rec = json.loads(line.split(":::MLLOG", 1)[1])
            key, value, meta = rec["key"], rec.get("value"), rec.get("metadata") or {}
            t = rec["time_ms"]
        except (json.JSONDecodeError, KeyError, TypeError, IndexError):
            run.bad_lines += 1
            continue
        if key == "submission_benchmark" and run.benchmark is None:
            run.benchmark = str(value)
        elif key == "seed" and run.seed is None:
            run.seed = _int(value)
        elif key == "global_batch_size" and run.gbs is None:
            run.gbs = _int(value)
        elif key == "max_sequence_length" and run.seq_len is None:
            run.seq_len = _int(value)
        elif key == "run_start" and start is None:
            start = t
        elif key == "restarts":
            run.logged_restarts = _int(value) or 0
        elif key == "eval_accuracy" and stop is None:
            last_eval = meta
            run.evals += 1
        elif key == "run_stop" and stop is None:
            stop = t
            run.status = str(meta.get("status", ""))
    run.start_ms, run.stop_ms = start, stop
    if start is not None and stop is not None:
        run.minutes = (stop - start) / 60000.0
    if last_eval is not None:
        run.samples = _int(last_eval.get("samples_count"))
        run.tokens = _int(last_eval.get("epoch_num"))
        if run.tokens is None and run.samples is not None and run.seq_len:
            run.tokens = run.samples * run.seq_len
    run.flops_per_token = _summary_flops(path)
    return run


def _summary_flops(log: Path) -> int | None:
    """flops_per_token of the trainperf run that wrote `log` (its summary.json), else None."""
    try:
        summary = json.loads((log.parent / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    v = summary.get("flops_per_token") if isinstance(summary, dict) else None
    return v if isinstance(v, int) and v > 0 else None


def log_problem(path: Path, evals: int | None) -> str:
    """Why a finished run's result log is not sound, in one line ("" when it is): it must parse
    line by line, hold run_start and run_stop in that order, and log `evals` eval_accuracy lines
    (None: any number)."""
    if not path.is_file():
        return f"{path}: missing"
    run = read_log(path)
    if run.bad_lines:
        return f"{path}: {run.bad_lines} unreadable :::MLLOG lines"
    if run.start_ms is None or run.stop_ms is None or run.stop_ms < run.start_ms:
        return f"{path}: no run_start followed by a run_stop"
    if evals is not None and run.evals != evals:
        return f"{path}: {run.evals} eval_accuracy lines, the run made {evals} logged evaluations"
    return ""


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def find_results(dirs: list[Path]) -> list[Path]:
    """`result_*.txt` in each dir, or, for a dir that has none, in its immediate subdirs
    (`trainperf run --seeds N` writes OUT/seed_<i>/)."""
    found: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_file() and d.name.startswith("result_") and d.suffix == ".txt":
            found.append(d)
            continue
        if d.is_file():
            raise ScoreError(f"{d}: not a result log (result_*.txt) or a folder of them")
        if not d.is_dir():
            raise ScoreError(f"{d}: no such file or directory")
        here = sorted(d.glob("result_*.txt"))
        if not here:
            here = sorted(p for sub in sorted(d.iterdir()) if sub.is_dir() for p in sub.glob("result_*.txt"))
        if not here:
            raise ScoreError(f"{d}: no result_*.txt here or in its subdirectories")
        found.extend(here)
    return list(dict.fromkeys(_resolve(p) for p in found))


def _resolve(path: Path) -> Path:
    """`path` with its symlinks followed (so a log named twice is read once), or a ScoreError naming
    it: a symlink loop, or a link through something that is not a folder."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError) as e:  # RuntimeError: Python < 3.13 reports a symlink loop so
        why = "a symlink loop" if isinstance(e, RuntimeError) or getattr(e, "errno", None) == errno.ELOOP \
            else (e.strerror or str(e)).lower()
        raise ScoreError(f"{path}: cannot be read ({why})") from None


def restart_info(run: RunLog) -> tuple[int, float | None]:
    """(earlier attempts, whole wall-clock minutes or None) of the run whose final log is `run`.

    Any of three sources says the run restarted: the earlier attempts' files that the checkpointer
    moved to `<run>/attempts/N/`, `restarts` in the run's summary.json, the log's `restarts` event.
    The wall clock runs from the earliest run_start among the attempts' logs to the final run_stop."""
    run_dir = run.path.parent
    earlier = sorted(run_dir.glob(f"attempts/*/{run.path.name}"))
    attempt_dirs = [d for d in (run_dir / "attempts").glob("*") if d.name.isdigit()] \
        if (run_dir / "attempts").is_dir() else []
    summary_restarts = 0
    try:
        summary_restarts = int(json.loads((run_dir / "summary.json").read_text()).get("restarts") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    n = max(len(attempt_dirs), summary_restarts, run.logged_restarts)
    if n == 0 or run.stop_ms is None:
        return n, None
    starts = [s for s in (read_log(p).start_ms for p in earlier) if s is not None]
    if not starts:
        return n, None
    return n, (run.stop_ms - min(starts + [run.start_ms or run.stop_ms])) / 60000.0


# trainperf's own rules (rules/*.yaml) chain the common rules of this ruleset, and only of this one.
OWN_RULESET = "6.1.0"


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlperf-logging")
    except PackageNotFoundError:
        return "(unknown version)"


def package_rulesets(benchmark: str) -> list[str]:
    """The training rulesets, oldest first, whose closed rules in the installed mlperf-logging
    include `benchmark` (the checker crashes on a benchmark its ruleset lacks)."""
    return rulesets.package_rulesets("compliance_checker", f"closed_{benchmark}.yaml")


def ruleset_choices(benchmark: str) -> list[str]:
    """The rulesets `benchmark`'s logs can be checked against: the package's for an official
    benchmark, the one trainperf's own rules are written for otherwise."""
    return package_rulesets(benchmark) if benchmark in OFFICIAL else [OWN_RULESET]


def choose_ruleset(benchmark: str, asked: str | None = None) -> tuple[str, str]:
    """(ruleset, where it came from) for checking and RCP-scoring `benchmark`'s logs: `asked` (the
    user's --ruleset) once it is one of `ruleset_choices`, else the default (a UsageError naming the
    choices when it is not one)."""
    if asked is None:
        if benchmark in OFFICIAL:
            return OFFICIAL[benchmark][0], (f"default: the newest mlperf-logging {_package_version()} has for "
                                            f"{benchmark}; the logs do not name theirs (--ruleset picks another)")
        return OWN_RULESET, "trainperf's own rules"
    choices = ruleset_choices(benchmark)
    if asked not in choices:
        raise UsageError(f"--ruleset {asked}: mlperf-logging {_package_version()} has no rules for {benchmark} at "
                         f"that ruleset (choices: {', '.join(choices)})")
    return asked, "--ruleset"


def checker_rules(benchmark: str, log_dir: Path, ruleset: str | None = None) -> tuple[str, Path | None]:
    """(ruleset, custom YAML or None) for a benchmark: the package's rules for the official ones
    (at `ruleset`, default `choose_ruleset`'s), the run's own compliance.yaml or trainperf's YAML
    for ours."""
    if benchmark in OFFICIAL:
        return ruleset or OFFICIAL[benchmark][0], None
    own = log_dir / "compliance.yaml"
    if own.is_file():
        return OWN_RULESET, _run_rules(own, benchmark)
    ours = RULES_DIR / f"{benchmark}.yaml"
    if ours.is_file():
        return OWN_RULESET, ours
    raise ScoreError(f"{log_dir}: no compliance rules for benchmark '{benchmark}' (official: "
                     f"{', '.join(OFFICIAL)}; trainperf's own: {', '.join(p.stem for p in RULES_DIR.glob('*.yaml'))})")


# The quality-target line `render_rules` writes into a run's compliance.yaml.
_TARGET_LINE = re.compile(r"""    ATLEAST_ONE_CHECK: "\(v\['value'\] <= (\S+)\) and v\['value'\] > 0\.0"$""", re.M)


def _run_rules(own: Path, benchmark: str) -> Path:
    """The run's compliance.yaml, once it is shown to be trainperf's own rules for `benchmark` with
    one quality target put in (what `trainperf run` writes: `logger.render_rules`), else a ScoreError.

    The official checker runs whatever rules it is given and passes a log against an empty or cut
    short file (no rule, no failure), so a file that is not exactly those rules would turn the checks
    off. It is refused, not replaced by trainperf's own rules: the run claimed its own target, and
    checking it against another one would score something the run did not claim."""
    try:
        text = own.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RulesError(f"{own}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    found = _TARGET_LINE.findall(text)
    target: float | int | None = None
    if len(found) == 1:
        try:
            target = int(found[0])
        except ValueError:
            try:
                target = float(found[0])
            except ValueError:
                pass
    same = False
    if target is not None and (RULES_DIR / f"{benchmark}.yaml").is_file():
        with tempfile.TemporaryDirectory() as tmp:
            same = render_rules(benchmark, target, Path(tmp) / "rules.yaml").read_text(encoding="utf-8") == text
    if not same:
        raise RulesError(f"{own}: not the compliance rules trainperf writes for {benchmark} (empty, cut short or "
                         f"edited); the checker would pass any log against it. Delete it to check against "
                         f"trainperf's own rules (`trainperf rules {benchmark}`, the recipe's default target)")
    claimed = _config_target(own.parent)
    if claimed is not None and claimed != target:
        raise RulesError(f"{own}: quality target {target!r}, but the run's config.json says {claimed!r}; "
                         "the log is checked against the target the run trained for")
    return own


def _config_target(run_dir: Path) -> float | None:
    """The quality target in the run's config.json (recipe.eval.target), None where it has none."""
    try:
        v = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["recipe"]["eval"]["target"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def required_runs(benchmark: str, log_dir: Path) -> int:
    """Runs per scored result: the package's count for official benchmarks, else the recipe's."""
    if benchmark in OFFICIAL:
        return OFFICIAL[benchmark][1]
    cfg = log_dir / "config.json"
    try:
        return int(json.loads(cfg.read_text())["recipe"]["benchmark"]["runs_per_result"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from trainperf.config import ConfigError, load_recipe

    try:
        return load_recipe(benchmark).benchmark.runs_per_result
    except ConfigError:
        return 5


# The mlperf-logging versions whose private olympic average trainperf was tested with; pyproject.toml
# accepts this range, and tests/mlperf/test_score.py checks the function against the rule.
TESTED_MLPERF_LOGGING = ">=4.1.68,<4.2"


def olympic_average():
    """The package's `_compute_olympic_average(scores, dropped, max_dropped)`; a one-line error when
    an mlperf-logging release moved or renamed it."""
    try:
        from mlperf_logging.result_summarizer.result_summarizer import _compute_olympic_average
    except ImportError as e:
        from importlib.metadata import version

        raise ScoreError(f"mlperf-logging {version('mlperf-logging')} has no "
                         f"result_summarizer._compute_olympic_average ({e}); trainperf's scoring is tested "
                         f"with mlperf-logging{TESTED_MLPERF_LOGGING}") from None
    return _compute_olympic_average


@dataclass
class Score:
    valid: bool
    minutes: float | None  # olympic mean (after RCP normalization when that applies)
    raw_minutes: float | None  # olympic mean before normalization
    required: int
    counted: int
    failed: int
    message: str


def olympic_score(minutes: list[float], failed: int, required: int) -> Score:
    """MLPerf's rule on converged run times plus the number of failed runs (which count as slowest)."""
    n = len(minutes) + failed
    if n < required:
        return Score(False, None, None, required, len(minutes), failed,
                     f"invalid: {n} runs, the benchmark needs {required}")
    if n > required:
        return Score(False, None, None, required, len(minutes), failed,
                     f"invalid: {n} runs, MLPerf scores exactly {required} (pass those you submit)")
    if failed > 1:
        return Score(False, None, None, required, len(minutes), failed,
                     f"invalid: {failed} runs failed or did not converge; at most 1 may")
    value = olympic_average()(sorted(minutes), failed, 1)
    if value is None:
        return Score(False, None, None, required, len(minutes), failed, "invalid: no run left after dropping")
    why = "fastest and slowest dropped" if failed == 0 else "fastest dropped; the failed run counts as slowest"
    return Score(True, value, value, required, len(minutes), failed, f"valid: mean of {len(minutes) - 2 + failed} runs ({why})")


@dataclass
class RCPResult:
    ran: bool
    passed: bool | None
    message: str
    numbers: dict = field(default_factory=dict)


def rcp_available(benchmark: str, ruleset: str) -> bool:
    return (rulesets.package_dir("rcp_checker") / f"training_{ruleset}" / f"rcps_{benchmark}.json").is_file()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def rcp_check(runs: list[RunLog], benchmark: str, ruleset: str) -> RCPResult:
    """The package's RCP check on copies of the logs; numbers: submission mean, RCP mean, minimum."""
    if not rcp_available(benchmark, ruleset):
        return RCPResult(False, None, f"no RCPs in the package for {benchmark} at ruleset {ruleset}")
    gbs = {r.gbs for r in runs}
    if len(gbs) != 1 or None in gbs:
        return RCPResult(False, False, f"runs disagree on global_batch_size ({sorted(map(str, gbs))}); RCPs are per GBS")
    if len(runs) < 3:
        return RCPResult(False, None, "the RCP check needs at least 3 runs")
    from mlperf_logging.rcp_checker import rcp_checker as rc

    cap = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(cap)
    root.setLevel(logging.INFO)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, r in enumerate(runs):
                shutil.copyfile(r.path, Path(tmp) / f"result_{i}.txt")
            passed, msg, norm = rc.check_directory(tmp, "training", ruleset, False, False, rcp_pass="pruned_rcps")
    except Exception as e:  # the package raises bare KeyError/FileNotFoundError on odd input
        return RCPResult(True, False, f"rcp_checker failed: {type(e).__name__}: {e}")
    finally:
        root.removeHandler(cap)
        root.setLevel(old_level)
    nums: dict = {"global_batch_size": gbs.pop(), "normalization": _number(norm),
                  "unit": "tokens" if benchmark == "gpt3" else "samples"}
    nums.update(rcp_numbers(cap.records))
    unknown = [k for k in _RCP_NUMBERS if nums[k] is None]
    message = str(msg)
    if unknown:
        message += f"; {', '.join(unknown)} unknown (not in what the package's rcp_checker logged)"
    return RCPResult(True, bool(passed), message, nums)


# The numbers read from the package's RCP check; each is None ("unknown") when its log says none.
_RCP_NUMBERS = ("submission_mean", "rcp_mean", "rcp_min_mean")
# rcp_checker (mlperf-logging 4.1.68) logs the submission mean twice when it normalizes: as
# " Submission mean epochs: %.4f" and inside a sentence with no colon, "...Submission mean epochs
# faster than RCP mean ... normalized by factor of {rcp mean} / {submission mean} = {factor}".
_MEAN_LINE = re.compile(r"Submission mean epochs:\s*(\S+)\s*$")
_FACTOR_LINE = re.compile(r"factor of (\S+) / (\S+) = (\S+)\s*$")


def _number(v: Any) -> float | None:
    """v as a float, None where it is not a number (numpy scalars and numeric strings are)."""
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def rcp_numbers(records: list[logging.LogRecord]) -> dict[str, float | None]:
    """Submission mean, RCP mean and lowest passing mean from the log records of one
    `rcp_checker.check_directory` call, each None where no record gives it. Records from elsewhere,
    and messages in a form not known here, are skipped rather than trusted."""
    out: dict[str, float | None] = dict.fromkeys(_RCP_NUMBERS)
    normalized_mean = None
    for rec in records:
        if rec.module != "rcp_checker":
            continue
        try:
            text = rec.getMessage()
        except Exception:  # a record whose arguments do not fit its format string
            continue
        args = rec.args if isinstance(rec.args, tuple) else (rec.args,)
        if "RCP Record" in text and args and isinstance(args[0], dict):
            record = args[0]
            mean, speedup = _number(record.get("RCP Mean")), _number(record.get("Max Speedup"))
            out["rcp_mean"] = mean
            out["rcp_min_mean"] = mean / speedup if mean is not None and speedup else None
        elif (m := _MEAN_LINE.search(text)) is not None:
            # the argument itself where it is there: the message rounds it to 4 decimals
            exact = _number(args[0]) if len(args) == 1 and "%" in str(rec.msg) else None
            out["submission_mean"] = exact if exact is not None else _number(m.group(1))
        elif "Submission mean epochs" in text and (m := _FACTOR_LINE.search(text)) is not None:
            normalized_mean = _number(m.group(2))
    if out["submission_mean"] is None:
        out["submission_mean"] = normalized_mean
    return out


@dataclass
class Report:
    benchmark: str
    ruleset: str
    runs: list[RunLog]
    score: Score
    rcp: RCPResult
    ruleset_source: str = ""  # where `ruleset` came from: "--ruleset", or why the default

    @property
    def ok(self) -> bool:
        return self.score.valid and all(r.ok for r in self.runs) and self.rcp.passed is not False

    def to_dict(self) -> dict:
        return {
            "benchmark": self.benchmark, "ruleset": self.ruleset, "ruleset_source": self.ruleset_source,
            "ok": self.ok,
            "runs": [{"file": str(r.path), "seed": r.seed, "status": r.status, "minutes": r.minutes,
                      "samples_to_target": r.samples if r.converged else None,
                      "tokens_to_target": r.tokens if r.converged else None,
                      "model_flops_to_target": r.model_flops_to_target,
                      "samples_at_last_eval": r.samples, "tokens_at_last_eval": r.tokens,
                      "checker": None if r.check is None else ("pass" if r.check.passed else "fail"),
                      "checker_errors": [] if r.check is None else r.check.errors,
                      "restarts": r.restarts, "wall_clock_minutes": r.wall_minutes,
                      "scored_minutes": r.score_minutes if r.ok else None,
                      "counted": r.ok, "problem": r.problem} for r in self.runs],
            "score": self.score.__dict__,
            "rcp": self.rcp.__dict__,
        }


def one_benchmark(runs: list[RunLog]) -> str:
    """The benchmark all of `runs` are logs of (scored and packaged together), or a ScoreError naming
    the logs that name none or that differ."""
    nameless = [str(r.path) for r in runs if r.benchmark is None]
    if nameless:
        more = f" (and {len(nameless) - 3} more)" if len(nameless) > 3 else ""
        raise ScoreError(f"{', '.join(nameless[:3])}{more}: no submission_benchmark line; not an MLPerf result log")
    names = sorted({str(r.benchmark) for r in runs})
    if len(names) > 1:
        by = {n: next(str(r.path) for r in runs if r.benchmark == n) for n in names}
        raise ScoreError("logs of different benchmarks: " + "; ".join(f"{n} ({p})" for n, p in by.items()))
    return names[0]


# How the checker reports a key the rules require and the log lacks (mlperf-logging 4.1.68's
# mlp_compliance: EXACTLY_ONE, AT_LEAST_ONE, AT_LEAST(n), and the "'a' or 'b'" alternatives).
_MISSING_KEY = re.compile(r"^Required [A-Z_]+(?:\(\d+\))? occurrence of ('[^']+'(?: or '[^']+')*)(?: but found 0)?$")


def missing_keys_only(runs: list[RunLog]) -> list[str]:
    """The keys the rules require and the logs lack, when those are the only checker failures of
    `runs` (what an earlier round's log shows under newer rules); [] when any failure is another."""
    keys: list[str] = []
    for r in runs:
        if r.check is None or r.check.passed:
            continue
        for e in r.check.errors or ["(no message)"]:
            m = _MISSING_KEY.match(e)
            if m is None:
                return []
            keys.extend(k for k in re.findall(r"'([^']+)'", m.group(1)) if k not in keys)
    return keys


def score_dirs(dirs: list[Path], count_restarts: bool = False, ruleset: str | None = None) -> Report:
    """Check, score and RCP-check the result logs in `dirs` (one benchmark) against `ruleset`
    (default: `choose_ruleset`'s; a UsageError when the package has no rules for the benchmark
    there). A restarted run counts as failed unless `count_restarts`, which scores it at its whole
    wall clock."""
    paths = find_results(dirs)
    runs = [read_log(p) for p in paths]
    for r in runs:
        r.restarts, r.wall_minutes = restart_info(r)
        r.count_restarts = count_restarts
    benchmark = one_benchmark(runs)
    seen: dict[int, Path] = {}
    for r in runs:
        if r.seed is not None and r.seed in seen:
            raise ScoreError(f"seed {r.seed} appears in {seen[r.seed]} and {r.path}; MLPerf runs need distinct seeds")
        if r.seed is not None:
            seen[r.seed] = r.path
    ruleset, source = choose_ruleset(benchmark, ruleset)
    for r in runs:
        used, config = checker_rules(benchmark, r.path.parent, ruleset)
        r.check = check_log(r.path, used, config)
    required = required_runs(benchmark, runs[0].path.parent)
    good = [r for r in runs if r.ok]
    score = olympic_score([r.score_minutes for r in good], len(runs) - len(good), required)
    older = [rs for rs in ruleset_choices(benchmark) if rulesets.version_key(rs) < rulesets.version_key(ruleset)]
    lacking = missing_keys_only(runs)
    if lacking and older:
        more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
        score.message += (f"; the checker failures are all keys ruleset {ruleset} requires and the logs lack "
                          f"({', '.join(lacking[:3])}{more}): logs of an earlier round may need its ruleset "
                          f"(--ruleset {' / '.join(older)})")
    rcp = rcp_check(runs, benchmark, ruleset) if benchmark in OFFICIAL else RCPResult(
        False, None, f"no RCPs for {benchmark} (not an official benchmark)")
    if score.valid and rcp.passed and rcp.numbers.get("normalization", 1.0) > 1.0:
        score.minutes = score.raw_minutes * rcp.numbers["normalization"]
        score.message += f"; x{rcp.numbers['normalization']:.4f} RCP normalization"
    return Report(benchmark, ruleset, runs, score, rcp, source)
