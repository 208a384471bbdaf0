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
from trainperf.mlperf.rulesets import package_dir, package_rulesets, version_key


@dataclass(frozen=True)
class RCP:
    gbs: int
    mean: float  # olympic mean, in the benchmark's RCP unit (samples or tokens)
    points: int
    rel_sd: float = 0.0  # seed-to-seed standard deviation over the mean


def rcp_root() -> Path:
    return package_dir("rcp_checker")


def rulesets(benchmark: str) -> list[str]:
    """Rulesets ('5.1.0', ...) whose RCP folder has this benchmark, oldest first."""
    return package_rulesets("rcp_checker", f"rcps_{benchmark}.json")


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
    older = [r for r in have if version_key(r) <= version_key(want)]
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
        xs = [float(v) for v in vals]
        mu = sum(xs) / len(xs)
        sd = (sum((x - mu) ** 2 for x in xs) / len(xs)) ** 0.5
        pts.append(RCP(gbs=int(rec["BS"]), mean=olympic_mean(xs), points=len(xs), rel_sd=sd / mu))
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


def seed_spread(benchmark: str, ruleset: str) -> float:
    """Relative seed-to-seed spread of one run's samples to converge: the median over the RCP
    points of each point's standard deviation over its mean. The median, because one point can be
    wild (v4.1 GPT-3 at GBS 3072 runs from 0.40x to 4.6x its mean)."""
    sds = sorted(p.rel_sd for p in load_rcps(benchmark, ruleset))
    k = len(sds)
    return sds[k // 2] if k % 2 else (sds[k // 2 - 1] + sds[k // 2]) / 2


def gbs_range(benchmark: str, ruleset: str) -> tuple[int, int]:
    pts = load_rcps(benchmark, ruleset)
    return pts[0].gbs, pts[-1].gbs
