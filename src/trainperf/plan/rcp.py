"""Samples to reach the quality target at a global batch size, from the RCP files shipped in the
installed `mlperf-logging` package (`rcp_checker/training_X.Y.0/rcps_<benchmark>.json`).

Olympic mean (drop min and max) per batch size and linear interpolation between batch sizes, as the
RCP checker does. Unlike the checker, which prunes points slower than their neighbours' line for its
pass/fail test, every point is kept: a run at a listed batch size converges like that point's runs."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError


@dataclass(frozen=True)
class RCP:
    gbs: int
    mean: float  # olympic mean, in the benchmark's RCP unit (samples or tokens)
    points: int


def rcp_root() -> Path:
    import mlperf_logging

    return Path(mlperf_logging.__file__).parent / "rcp_checker"


def rulesets(benchmark: str) -> list[str]:
    """Rulesets ('5.1.0', ...) whose RCP folder has this benchmark, oldest first."""
    found = [p.parent.name.removeprefix("training_") for p in rcp_root().glob(f"training_*/rcps_{benchmark}.json")]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def ruleset_for(benchmark: str, round_: str | None) -> str:
    """The RCP ruleset of MLPerf round 'v5.1' (or the newest one that has the benchmark)."""
    have = rulesets(benchmark)
    if not have:
        raise ConfigError(f"rcp: no RCP file for {benchmark} in {rcp_root()}")
    if round_ is None:
        return have[-1]
    want = round_.lstrip("v") + ".0"
    if want in have:
        return want
    older = [r for r in have if tuple(map(int, r.split("."))) <= tuple(map(int, want.split(".")))]
    return older[-1] if older else have[0]


def olympic_mean(xs: list[float]) -> float:
    """MLPerf's rule: drop the single lowest and highest, average the rest (plain mean under 3)."""
    xs = sorted(xs)
    if len(xs) > 2:
        xs = xs[1:-1]
    return sum(xs) / len(xs)


@functools.lru_cache(maxsize=None)
def load_rcps(benchmark: str, ruleset: str) -> tuple[RCP, ...]:
    path = rcp_root() / f"training_{ruleset}" / f"rcps_{benchmark}.json"
    if not path.is_file():
        raise ConfigError(f"rcp: {path} not found")
    raw = json.loads(path.read_text())
    pts = []
    for rec in raw.values():
        vals = rec.get("samples to converge") or rec.get("Epochs to converge")
        pts.append(RCP(gbs=int(rec["BS"]), mean=olympic_mean([float(v) for v in vals]), points=len(vals)))
    pts.sort(key=lambda r: r.gbs)
    return tuple(pts)


def samples_to_converge(benchmark: str, gbs: int, ruleset: str, unit: str = "samples",
                        seq_len: int = 1) -> tuple[float, bool]:
    """(sequences to reach the target at `gbs`, whether gbs lies inside the RCP range)."""
    pts = load_rcps(benchmark, ruleset)
    inside = pts[0].gbs <= gbs <= pts[-1].gbs
    if len(pts) == 1 or gbs <= pts[0].gbs:
        # below the smallest RCP batch: at least as many samples as there (MLPerf would ask for new RCPs)
        mean = pts[0].mean
    else:
        lo = min(max(i for i in range(len(pts)) if pts[i].gbs <= gbs), len(pts) - 2)
        a, b = pts[lo], pts[lo + 1]
        mean = a.mean + (b.mean - a.mean) * (gbs - a.gbs) / (b.gbs - a.gbs)
    if unit == "tokens":
        mean /= seq_len
    return mean, inside


def gbs_range(benchmark: str, ruleset: str) -> tuple[int, int]:
    pts = load_rcps(benchmark, ruleset)
    return pts[0].gbs, pts[-1].gbs
