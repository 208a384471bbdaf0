"""PNG figures for `trainperf plan sweep --plot`: scaling curves per GPU kind and the stacked
step-time breakdown of the first kind across GPU counts."""

from __future__ import annotations

from pathlib import Path

from trainperf import atomic
from trainperf.config import ConfigError

CATEGORIES = [("compute", "compute"), ("tp", "exposed TP"), ("cp", "exposed CP"), ("pp_bubble", "PP bubble"),
              ("dp", "exposed DP"), ("other", "other")]


def check_path(out: str | Path) -> None:
    """Refuse, before a sweep is computed, a file name whose suffix matplotlib cannot write."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(out).suffix.lstrip(".").lower()
    if suffix not in kinds:
        raise ConfigError(f"--plot: {out}: give a file name ending in a format matplotlib writes "
                          f"({', '.join(sorted(kinds))}), e.g. scaling.png")


def plot_sweep(points, bench: str, out: str | Path, cost_panel: bool = False) -> Path:
    """Scaling curves with their 80% bands, the step-time breakdown of the first GPU kind, and with
    `cost_panel` the cost (USD with --price, else GPU-hours) against time-to-train."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    if cost_panel:
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(19, 5))
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    kinds = list(dict.fromkeys(p.gpu for p in points))
    for k in kinds:
        pts = [p for p in points if p.gpu == k and p.prediction is not None]
        if pts:
            xs = [p.n_gpus for p in pts]
            line, = ax1.plot(xs, [p.prediction.minutes for p in pts], marker="o", label=k)
            ax1.fill_between(xs, [p.prediction.minutes_p10 for p in pts], [p.prediction.minutes_p90 for p in pts],
                             color=line.get_color(), alpha=0.15, linewidth=0)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("predicted time-to-train (min)")
    ax1.set_title(f"{bench}: scaling (band: 80% interval)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    first = [p for p in points if p.gpu == kinds[0] and p.prediction is not None]
    xs = [str(p.n_gpus) for p in first]
    bottom = [0.0] * len(first)
    for key, label in CATEGORIES:
        vals = [p.prediction.estimate.breakdown[key] / p.prediction.estimate.step_time_s * 100 for p in first]
        ax2.bar(xs, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_xlabel("GPUs")
    ax2.set_ylabel("share of step time (%)")
    ax2.set_title(f"{kinds[0]}: where the step time goes")
    ax2.legend(fontsize=8)
    if cost_panel:
        _cost_panel(ax3, points, kinds)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return out


def _cost_panel(ax, points, kinds: list[str]) -> None:
    """Cost (USD when priced, else GPU-hours) against predicted minutes, one line per GPU kind."""
    priced = any(p.cost is not None and p.cost.cost_usd is not None for p in points)
    for k in kinds:
        pts = [p for p in points if p.gpu == k and p.prediction is not None and p.cost is not None]
        if not pts:
            continue
        ys = [p.cost.cost_usd if priced else p.cost.gpu_hours for p in pts]
        ax.plot([p.prediction.minutes for p in pts], ys, marker="o", label=k)
        for p, y in zip(pts, ys):
            ax.annotate(str(p.n_gpus), (p.prediction.minutes, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted time-to-train (min)")
    ax.set_ylabel("cost (USD)" if priced else "GPU-hours")
    ax.set_title("cost against time (labels: GPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
