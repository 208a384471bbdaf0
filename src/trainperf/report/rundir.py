"""Read a finished run directory (what `trainperf run` writes) into one object the report draws from.

Every problem is a `RunDirError` whose message names the file, so the CLI can print one line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from trainperf.atomic import file_error, read_json
from trainperf.errors import RunDirError
from trainperf.mlperf.score import read_log


@dataclass
class Attempt:
    """One earlier attempt of a resumed or restarted run, as the checkpointer set it aside in
    `<run>/attempts/N/` (its metrics, result log and attempt.json)."""

    number: int
    train: list[dict]
    evals: list[dict]
    started_from_step: int  # 0 for the first attempt, else where the one before it resumed
    reached_step: int | None  # attempt.json: the last step it logged
    resumed_from_step: int | None  # attempt.json: the checkpoint step the next attempt went on from
    start_ms: float | None  # its result log's run_start (ms since the epoch), None without a log


@dataclass
class RunData:
    path: Path
    summary: dict
    train: list[dict] = field(default_factory=list)  # metrics rows of kind "train"
    evals: list[dict] = field(default_factory=list)  # metrics rows of kind "eval"
    start: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)  # config.json, when present
    attempts: list[Attempt] = field(default_factory=list)  # earlier attempts, oldest first
    start_ms: float | None = None  # the final attempt's run_start, from its result log

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def seq_len(self) -> int | None:
        model = self.config.get("trainperf_model") or {}
        return model.get("seq_len")

    @property
    def recipe(self) -> dict:
        return self.config.get("recipe") or {}

    @property
    def target(self) -> float:
        return float(self.summary.get("target", self.start.get("target", math.nan)))

    def eval_tokens(self, row: dict) -> float | None:
        """Training tokens seen before an evaluation (samples x sequence length)."""
        if self.seq_len is None or "samples" not in row:
            return None
        return float(row["samples"]) * self.seq_len

    def crossing(self) -> dict | None:
        """The first evaluation at or below the target: the moment the run reached it."""
        if self.summary.get("status") != "success":
            return None
        for row in self.evals:
            if row["eval_loss"] <= self.target:
                return row
        return None

    def result_logs(self) -> list[Path]:
        return sorted(self.path.glob("result_*.txt"))

    @property
    def gbs(self) -> int | None:
        return (self.recipe.get("train") or {}).get("global_batch_size")

    def step_tokens(self, step: int) -> float | None:
        """Training tokens after `step` optimizer steps (global batch x sequence length)."""
        if self.seq_len is None or self.gbs is None:
            return None
        return float(step) * self.gbs * self.seq_len

    def offsets(self) -> list[float]:
        """Seconds from the first attempt's run_start to each attempt's (earlier ones, then the final
        one), from the result logs' clocks; where a log is missing, an attempt starts where the one
        before it last logged."""
        out: list[float] = []
        anchor: tuple[float, float] | None = None  # (run_start ms, offset) of the first attempt with a log
        ends = 0.0
        for rows, start_ms in [(a.train + a.evals, a.start_ms) for a in self.attempts] + [([], self.start_ms)]:
            off = anchor[1] + (start_ms - anchor[0]) / 1000.0 if start_ms is not None and anchor else ends
            if start_ms is not None and anchor is None:
                anchor = (start_ms, off)
            out.append(off)
            ends = off + max((r["elapsed_s"] for r in rows), default=0.0)
        return out


def _read_metrics(path: Path) -> list[dict]:
    if not path.is_file():
        raise RunDirError(f"{path}: missing; not a trainperf run directory (no metrics)")
    rows = []
    try:
        with open(path, "rb") as f:  # bytes, decoded line by line, so a bad byte is named with its line
            for i, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise RunDirError(f"{path}:{i}: not UTF-8 text (a corrupt file?)") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise RunDirError(f"{path}:{i}: not a JSON line (a truncated or half-written file?)") from None
                if not isinstance(row, dict) or "kind" not in row:
                    raise RunDirError(f"{path}:{i}: a metrics row needs a 'kind'")
                rows.append(row)
    except OSError as e:
        raise file_error(e, "reading", path) from e
    return rows


# The keys each kind of metrics row must hold, and the numbers a row or summary may hold: the
# report draws and formats them as numbers. None: a value that may be null (no peak FLOPs, no MFU).
_NEEDS = {"train": ("step", "tokens_per_s", "mfu", "elapsed_s"),
          "eval": ("step", "eval_loss", "elapsed_s")}
_ROW_NUMBERS = {"step": False, "tokens_per_s": False, "mfu": True, "elapsed_s": False, "eval_loss": False,
                "loss": False, "lr": False, "samples": False, "nats_per_byte": True, "token_loss": True}
_SUMMARY_NUMBERS = {"time_to_train_s": False, "last_attempt_s": True, "final_eval_loss": False, "target": False,
                    "tokens": False, "tokens_per_s": False, "mfu": True, "restarts": True,
                    "resumed_from_step": True}


def _is_number(v, nullable: bool) -> bool:
    return (v is None and nullable) or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _check_rows(rows: list[dict], metrics_path: Path) -> None:
    for i, row in enumerate(rows, 1):
        for key in _NEEDS.get(row["kind"], ()):
            if key not in row:
                raise RunDirError(f"{metrics_path}: row {i} ({row['kind']}) lacks '{key}'")
        if row["kind"] in _NEEDS:
            for key, nullable in _ROW_NUMBERS.items():
                if key in row and not _is_number(row[key], nullable):
                    raise RunDirError(f"{metrics_path}: row {i} ({row['kind']}): '{key}' is {row[key]!r}, not a number")


def _check_summary(summary: dict, path: Path) -> None:
    for key in ("benchmark", "status", "time_to_train_s"):
        if key not in summary:
            raise RunDirError(f"{path}: lacks '{key}'")
    for key, nullable in _SUMMARY_NUMBERS.items():
        if key in summary and not _is_number(summary[key], nullable):
            raise RunDirError(f"{path}: '{key}' is {summary[key]!r}, not a number")
    breakdown = summary.get("time_breakdown_s")
    if breakdown is not None and not (isinstance(breakdown, dict)
                                      and all(_is_number(v, False) for v in breakdown.values())):
        raise RunDirError(f"{path}: 'time_breakdown_s' is {breakdown!r}, not an object of seconds")


def _run_start_ms(log: Path) -> float | None:
    return read_log(log).start_ms if log.is_file() else None


def _load_attempts(path: Path, seed) -> list[Attempt]:
    """Earlier attempts in `<run>/attempts/N/`; one stopped by a crash may lack its 'end' row."""
    root = path / "attempts"
    if not root.is_dir():
        return []
    out: list[Attempt] = []
    started = 0
    for n in sorted(int(d.name) for d in root.iterdir() if d.is_dir() and d.name.isdigit()):
        d = root / str(n)
        metrics = d / "metrics.jsonl"
        rows = _read_metrics(metrics) if metrics.is_file() else []
        _check_rows(rows, metrics)
        info = read_json(d / "attempt.json", RunDirError) if (d / "attempt.json").is_file() else {}
        for key in ("reached_step", "resumed_from_step"):
            if not _is_number(info.get(key), True):
                raise RunDirError(f"{d / 'attempt.json'}: '{key}' is {info[key]!r}, not a number")
        logs = sorted(d.glob(f"result_{seed}.txt" if seed is not None else "result_*.txt"))
        out.append(Attempt(number=n, train=[r for r in rows if r["kind"] == "train"],
                           evals=[r for r in rows if r["kind"] == "eval"], started_from_step=started,
                           reached_step=info.get("reached_step"), resumed_from_step=info.get("resumed_from_step"),
                           start_ms=_run_start_ms(logs[0]) if logs else None))
        started = int(info.get("resumed_from_step") or 0)
    return out


def load_run(path: str | Path) -> RunData:
    """A finished run: metrics.jsonl with its 'end' row, summary.json, and config.json if present."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    metrics_path = path / "metrics.jsonl"
    rows = _read_metrics(metrics_path)
    if not rows:
        raise RunDirError(f"{metrics_path}: empty; the run wrote no metrics")
    _check_rows(rows, metrics_path)
    if not any(r["kind"] == "end" for r in rows) or not (path / "summary.json").exists():
        n_evals = sum(r["kind"] == "eval" for r in rows)
        raise RunDirError(f"{path / 'summary.json'}: missing; the run is half-written (still running or "
                          f"stopped early: metrics.jsonl has {len(rows)} rows, {n_evals} evals, no 'end' row)")
    summary = read_json(path / "summary.json", RunDirError)
    _check_summary(summary, path / "summary.json")
    config = read_json(path / "config.json", RunDirError) if (path / "config.json").exists() else {}
    start = next((r for r in rows if r["kind"] == "start"), {})
    seed = summary.get("seed")
    log = path / f"result_{seed}.txt"
    return RunData(path=path, summary=summary, config=config, start=start,
                   train=[r for r in rows if r["kind"] == "train"],
                   evals=[r for r in rows if r["kind"] == "eval"],
                   attempts=_load_attempts(path, seed), start_ms=_run_start_ms(log))


def expand_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run directories as given, except that a folder of runs (e.g. `runs/`) stands for the runs in it."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not (p / "metrics.jsonl").exists():
            children = sorted(c for c in p.iterdir() if (c / "metrics.jsonl").is_file())
            if children:
                out.extend(children)
                continue
        out.append(p)
    return out
