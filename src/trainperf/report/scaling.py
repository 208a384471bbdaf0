"""Points for the scaling chart: `trainperf plan` predictions and published MLPerf results.

The plan JSON is read leniently: any list of objects with a GPU count and minutes counts as points
(`plan sweep --json`: `[{"gpu": "h100", "gpus": 512, "minutes": 64.2, ...}, ...]`; one `plan --json`
object, with its `vs` plan; or such lists nested under keys, where a key may name the GPU kind).
`plan sweep` does not name the benchmark in its JSON, so `report --benchmark` can.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import trainperf
from trainperf.atomic import file_error, read_json
from trainperf.errors import PlanError
from trainperf.plan.hardware import CATALOG_NAMES, catalog_kind


@dataclass(frozen=True)
class Point:
    gpu: str  # canonical kind, e.g. "h100"
    gpus: int
    minutes: float
    label: str = ""  # submitter / system for published results


# The planner's catalog GPUs and the other accelerators published results name.
KNOWN_KINDS = (*CATALOG_NAMES, "mi300x", "mi325x", "mi350x", "mi355x", "gaudi2", "l40s", "tpuv5p", "tpuv5e", "trillium")
_COUNT_KEYS = ("gpus", "num_gpus", "gpu_count", "count", "num_accelerators", "n_gpus")
_MINUTE_KEYS = ("minutes", "predicted_minutes", "time_to_train_min", "ttt_minutes")
# runners-up of one plan are other layouts at the same GPU count, not points of a scaling curve
_NOT_POINTS = ("layouts", "search", "calibration", "layout", "breakdown_s", "memory_breakdown_gb")


def canonical_kind(name: str) -> str:
    return catalog_kind(name, KNOWN_KINDS) or re.sub(r"[^a-z0-9]", "", name.lower())


def _first(d: dict, keys: tuple[str, ...]):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def _walk(obj, gpu_hint: str | None, bench_hint: str | None, out: list[tuple[str | None, Point]]) -> None:
    if isinstance(obj, list):
        for item in obj:
            _walk(item, gpu_hint, bench_hint, out)
        return
    if not isinstance(obj, dict):
        return
    named = _first(obj, ("mlperf_benchmark", "benchmark"))
    bench = named if isinstance(named, str) else bench_hint
    gpu = obj.get("gpu") if isinstance(obj.get("gpu"), str) else gpu_hint
    count, minutes = _first(obj, _COUNT_KEYS), _first(obj, _MINUTE_KEYS)
    if gpu and isinstance(count, (int, float)) and isinstance(minutes, (int, float)) and count > 0 and minutes > 0:
        out.append((bench, Point(canonical_kind(gpu), int(count), float(minutes))))
        gpu = None  # a nested plan (e.g. "vs") names its own GPU
    for key, value in obj.items():
        if key in _NOT_POINTS:
            continue
        if isinstance(value, (list, dict)):
            # a key like "h100" under which a list of points sits names their GPU kind
            hint = key if canonical_kind(key) in KNOWN_KINDS else gpu
            _walk(value, hint, bench, out)


def load_plan(path: str | Path) -> tuple[str | None, list[Point]]:
    """(benchmark named in the file or None, predicted points) from `trainperf plan ... --json` output."""
    path = Path(path)
    raw = read_json(path, PlanError, object_only=False)  # a sweep is a list of points
    found: list[tuple[str | None, Point]] = []
    _walk(raw, None, None, found)
    if not found:
        raise PlanError(f"{path}: no points with a GPU kind, a GPU count and minutes "
                        f"(expected e.g. [{{\"gpu\": \"h100\", \"gpus\": 512, \"minutes\": 64.2}}])")
    benches = {b for b, _ in found if b}
    bench = benches.pop() if len(benches) == 1 else None
    return bench, sorted({p for _, p in found}, key=lambda p: (p.gpu, p.gpus))


def published_csv() -> Path:
    """The package's copy of published MLPerf results (kept by `trainperf.plan`)."""
    return Path(trainperf.__file__).parent / "plan" / "data" / "mlperf_results.csv"


def _bench_matches(plan_bench: str, csv_bench: str) -> bool:
    # recipes are named after the model size (gpt3_175b); MLPerf's tables by family (gpt3)
    a, b = plan_bench.lower(), csv_bench.lower()
    return a == b or a.startswith(b + "_") or b.startswith(a + "_")


# The columns a published-results CSV must have (the package's copy has them), besides a GPU count
# under one of _COUNT_KEYS: without them no row could be drawn, so the file is refused, not ignored.
PUBLISHED_COLUMNS = ("benchmark", "accelerator", "minutes")


def read_published(path: Path) -> list[dict]:
    """The rows of a published-results CSV, or a PlanError naming the file: missing, unreadable, not
    UTF-8 text, not CSV, or lacking PUBLISHED_COLUMNS or a GPU count column."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise PlanError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not UTF-8 text; not a CSV of published results") from None
    except csv.Error as e:
        raise PlanError(f"{path}: not a CSV of published results ({e})") from None
    except OSError as e:
        raise file_error(e, "reading", path) from e
    missing = [c for c in PUBLISHED_COLUMNS if c not in header]
    if not any(k in header for k in _COUNT_KEYS):
        missing.append("a GPU count (" + " / ".join(_COUNT_KEYS) + ")")
    if missing:
        shown = ", ".join(h[:40] for h in header[:8]) + (", ..." if len(header) > 8 else "")
        raise PlanError(f"{path}: not a CSV of published results: no column {', '.join(missing)} "
                        f"(its columns: {shown or 'none'})")
    return rows


def load_published(benchmark: str | None, kinds: set[str], path: Path | None = None) -> list[Point]:
    """Published results of `benchmark` on the GPU kinds in `kinds`; [] when the package's CSV is
    absent. A CSV that is there but is not one is a PlanError (`read_published`)."""
    path = path or published_csv()
    if not path.is_file() or benchmark is None:
        return []
    points = []
    for row in read_published(path):
        try:
            count = int(float(_first(row, _COUNT_KEYS) or 0))
            minutes = float(row.get("minutes") or 0)
        except (ValueError, OverflowError):  # a row without numbers (or "inf") is not a result
            continue
        # a short row holds None in its missing columns
        kind = canonical_kind(row.get("accelerator") or "")
        if count <= 0 or not 0 < minutes < math.inf or kind not in kinds:
            continue
        if not _bench_matches(benchmark, row.get("benchmark") or ""):
            continue
        label = f"{row.get('submitter', '')} {row.get('version') or row.get('round', '')}".strip()
        points.append(Point(kind, count, minutes, label))
    return points
