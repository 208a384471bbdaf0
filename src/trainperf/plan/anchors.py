"""The article's checks: published results predicted three ways (searched, at the submitted
layout, and as run with the submitter's own convergence), and the speed-up between two of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.plan.calibration import Calibration
from trainperf.plan.perf import Estimate
from trainperf.plan.workload import max_precision

ANCHORS = Path(__file__).parent / "data" / "anchors.toml"


@dataclass(frozen=True)
class AnchorCheck:
    """One published result predicted three ways: as `plan` would (layout searched, RCP-mean
    convergence), with the submitted layout, and as run (submitted layout, the submitter's own
    convergence and evaluation count read from its logs)."""

    name: str
    published: float
    searched: Estimate
    submitted: Estimate
    as_run_minutes: float | None  # None when the logs were not read
    logged_step_s: float | None
    logged_samples: float | None

    def to_dict(self) -> dict:
        err = lambda m: None if m is None else round(100 * (m / self.published - 1), 2)  # noqa: E731
        return {
            "name": self.name, "published_minutes": self.published,
            "searched": {"minutes": round(self.searched.minutes, 4), "error_pct": err(self.searched.minutes),
                         "layout": self.searched.layout.short(), "samples": round(self.searched.samples, 1)},
            "submitted_layout": {"minutes": round(self.submitted.minutes, 4), "error_pct": err(self.submitted.minutes),
                                 "layout": self.submitted.layout.short(),
                                 "step_time_s": round(self.submitted.step_time_s, 4),
                                 "logged_step_s": self.logged_step_s},
            "as_run": None if self.as_run_minutes is None else {
                "minutes": round(self.as_run_minutes, 4), "error_pct": err(self.as_run_minutes),
                "samples": self.logged_samples},
        }


def load_anchors(path: Path | None = None) -> dict:
    import tomllib

    p = path or ANCHORS
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"anchors {p}: {e}") from None


def check_anchors(calib: Calibration, path: Path | None = None) -> tuple[list[AnchorCheck], dict | None]:
    """Each anchor predicted three ways, and the speed-up between the two named in [speedup]."""
    from trainperf.plan.api import make_plan
    from trainperf.plan.search import parse_layout

    data = load_anchors(path)
    out = []
    for a in data.get("anchor", []):
        kw = dict(gbs=a["gbs"], round_=a["round"], ceiling=max_precision(a["round"]), calib=calib, top=1)
        searched = make_plan(a["benchmark"], a["gpu"], a["gpus"], **kw).best.estimate
        lay = parse_layout(a["submitted_layout"])
        submitted = make_plan(a["benchmark"], a["gpu"], a["gpus"], layout=lay, **kw).best.estimate
        as_run = None
        if "logged_samples" in a:
            # the same layout, so the same step and evaluation times: only the step count (the
            # submitter's own samples) and the evaluation count (it may evaluate before the rules'
            # skip ends) change
            e = submitted
            lo, hi = a["logged_evals"]
            as_run = (a["logged_samples"] / e.layout.gbs * e.step_time_s + (lo + hi) / 2 * e.eval_s / e.evals
                      + e.overhead_s) / 60
        out.append(AnchorCheck(a["name"], a["published_minutes"], searched, submitted, as_run,
                               a.get("logged_step_s"), a.get("logged_samples")))
    sp = data.get("speedup")
    speed = None
    if sp:
        by = {c.name: c for c in out}
        f, s = by[sp["faster"]], by[sp["slower"]]
        speed = {"name": sp["name"], "published": sp["published"],
                 "searched": round(s.searched.minutes / f.searched.minutes, 3),
                 "submitted_layout": round(s.submitted.minutes / f.submitted.minutes, 3),
                 "as_run": (round(s.as_run_minutes / f.as_run_minutes, 3)
                            if f.as_run_minutes and s.as_run_minutes else None)}
    return out, speed
