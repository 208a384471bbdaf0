"""Read a finished run directory (what `trainperf run` writes) into one object the report draws from.

Every problem is a `RunDirError` whose message names the file, so the CLI can print one line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from trainperf.errors import RunDirError


@dataclass
class RunData:
    path: Path
    summary: dict
    train: list[dict] = field(default_factory=list)  # metrics rows of kind "train"
    evals: list[dict] = field(default_factory=list)  # metrics rows of kind "eval"
    start: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)  # config.json, when present

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


def _read_json(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunDirError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(raw, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    return raw


def _read_metrics(path: Path) -> list[dict]:
    if not path.is_file():
        raise RunDirError(f"{path}: missing; not a trainperf run directory (no metrics)")
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise RunDirError(f"{path}:{i}: not a JSON line (a truncated or half-written file?)") from None
            if not isinstance(row, dict) or "kind" not in row:
                raise RunDirError(f"{path}:{i}: a metrics row needs a 'kind'")
            rows.append(row)
    return rows


_NEEDS = {"train": ("step", "tokens_per_s", "mfu", "elapsed_s"),
          "eval": ("step", "eval_loss", "elapsed_s")}


def load_run(path: str | Path) -> RunData:
    """A finished run: metrics.jsonl with its 'end' row, summary.json, and config.json if present."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    metrics_path = path / "metrics.jsonl"
    rows = _read_metrics(metrics_path)
    if not rows:
        raise RunDirError(f"{metrics_path}: empty; the run wrote no metrics")
    for i, row in enumerate(rows, 1):
        for key in _NEEDS.get(row["kind"], ()):
            if key not in row:
                raise RunDirError(f"{metrics_path}: row {i} ({row['kind']}) lacks '{key}'")
    if not any(r["kind"] == "end" for r in rows) or not (path / "summary.json").exists():
        n_evals = sum(r["kind"] == "eval" for r in rows)
        raise RunDirError(f"{path / 'summary.json'}: missing; the run is half-written (still running or "
                          f"stopped early: metrics.jsonl has {len(rows)} rows, {n_evals} evals, no 'end' row)")
    summary = _read_json(path / "summary.json")
    for key in ("benchmark", "status", "time_to_train_s"):
        if key not in summary:
            raise RunDirError(f"{path / 'summary.json'}: lacks '{key}'")
    config = _read_json(path / "config.json") if (path / "config.json").exists() else {}
    start = next((r for r in rows if r["kind"] == "start"), {})
    return RunData(path=path, summary=summary, config=config, start=start,
                   train=[r for r in rows if r["kind"] == "train"],
                   evals=[r for r in rows if r["kind"] == "eval"])


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
