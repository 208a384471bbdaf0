"""PNG figures for `trainperf plan sweep --plot`: scaling curves per GPU kind and the stacked
step-time breakdown of the first kind across GPU counts."""

from __future__ import annotations

from pathlib import Path

from trainperf import atomic

CATEGORIES = [("compute", "compute"), ("tp", "exposed TP"), ("cp", "exposed CP"), ("pp_bubble", "PP bubble"),
              ("dp", "exposed DP"), ("other", "other")]


def plot_sweep(points, bench: str, out: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    kinds = list(dict.fromkeys(p.gpu for p in points))
    for k in kinds:
        pts = [p for p in points if p.gpu == k and p.estimate is not None]
        if pts:
            ax1.plot([p.n_gpus for p in pts], [p.estimate.minutes for p in pts], marker="o", label=k)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("predicted time-to-train (min)")
    ax1.set_title(f"{bench}: scaling")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    first = [p for p in points if p.gpu == kinds[0] and p.estimate is not None]
    xs = [str(p.n_gpus) for p in first]
    bottom = [0.0] * len(first)
    for key, label in CATEGORIES:
        vals = [p.estimate.breakdown[key] / p.estimate.step_time_s * 100 for p in first]
        ax2.bar(xs, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_xlabel("GPUs")
    ax2.set_ylabel("share of step time (%)")
    ax2.set_title(f"{kinds[0]}: where the step time goes")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return out
