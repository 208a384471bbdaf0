"""The report's charts, drawn with matplotlib (Agg: no display needed) and returned as PNG bytes."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter, FuncFormatter  # noqa: E402

from trainperf.report.rundir import RunData  # noqa: E402
from trainperf.report.scaling import Point  # noqa: E402

DPI = 110
_COLORS = plt.get_cmap("tab10").colors

METRIC_LABEL = {"nats_per_byte": "validation loss (nats/byte)",
                "log_perplexity": "validation log perplexity (nats/token)"}

# Fixed order and words for the loop's timers; keys the loop may add later still get drawn.
_PHASES = {"data": "data wait", "compute": "forward/backward + optimizer", "fwd_bwd": "forward/backward",
           "optimizer": "optimizer", "eval": "evaluation", "checkpoint": "checkpoints",
           "other": "other (logging, loop)", "save": "save weights (after the timed run)"}


def color(i: int):
    return _COLORS[i % len(_COLORS)]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def time_unit(max_seconds: float) -> tuple[float, str]:
    """(divisor, unit) so the wall-clock axis reads in seconds, minutes or hours."""
    if max_seconds < 180:
        return 1.0, "s"
    if max_seconds < 3 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def _legend(ax, n: int) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best", ncol=1 if n < 6 else 2, framealpha=0.85)


def fig_loss(runs: list[RunData]) -> bytes:
    """Validation loss vs wall-clock and vs tokens; target lines; each run's crossing marked."""
    fig, (ax_t, ax_n) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    tmax = max((r["elapsed_s"] for run in runs for r in run.evals), default=1.0)
    div, unit = time_unit(tmax)
    metrics = {run.summary.get("metric", "nats_per_byte") for run in runs}
    ylabel = METRIC_LABEL.get(metrics.pop(), "validation loss") if len(metrics) == 1 else "validation loss"
    targets: dict[float, int] = {}
    for i, run in enumerate(runs):
        c = color(i)
        t = [r["elapsed_s"] / div for r in run.evals]
        y = [r["eval_loss"] for r in run.evals]
        ax_t.plot(t, y, "o-", color=c, ms=3, lw=1.5, label=run.name)
        tok = [run.eval_tokens(r) for r in run.evals]
        if all(v is not None for v in tok):
            ax_n.plot(tok, y, "o-", color=c, ms=3, lw=1.5, label=run.name)
        targets.setdefault(run.target, i)
        hit = run.crossing()
        if hit is not None:
            ax_t.plot(hit["elapsed_s"] / div, hit["eval_loss"], "*", color=c, ms=13, mec="black", mew=0.6, zorder=5)
            ax_t.annotate(f"{hit['elapsed_s'] / div:.3g} {unit}", (hit["elapsed_s"] / div, hit["eval_loss"]),
                          textcoords="offset points", xytext=(6, 6 + 11 * (i % 3)), fontsize=8, color=c)
            if run.eval_tokens(hit) is not None:
                ax_n.plot(run.eval_tokens(hit), hit["eval_loss"], "*", color=c, ms=13, mec="black", mew=0.6,
                          zorder=5)
    for target in targets:
        if math.isfinite(target):
            for ax in (ax_t, ax_n):
                ax.axhline(target, color="black", ls="--", lw=1)
            ax_t.annotate(f"target {target:g}", (0, target), xycoords=("axes fraction", "data"),
                          textcoords="offset points", xytext=(4, -11), fontsize=8)
    ax_t.set_xlabel(f"wall-clock time since run start ({unit})")
    ax_n.set_xlabel("training tokens")
    ax_n.xaxis.set_major_formatter(EngFormatter(sep=""))
    for ax in (ax_t, ax_n):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    ax_t.set_title("Validation loss over time (★ = target reached)", fontsize=10)
    ax_n.set_title("Validation loss over training tokens", fontsize=10)
    if not ax_n.lines:
        ax_n.text(0.5, 0.5, "no sequence length in config.json", ha="center", transform=ax_n.transAxes)
    _legend(ax_t, len(runs))
    return _png(fig)


def fig_throughput(runs: list[RunData]) -> bytes:
    """Training tokens/s and MFU over the run, as logged every `train.log_every` steps."""
    fig, (ax_s, ax_m) = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
    tmax = max((r["elapsed_s"] for run in runs for r in run.train), default=1.0)
    div, unit = time_unit(tmax)
    for i, run in enumerate(runs):
        t = [r["elapsed_s"] / div for r in run.train]
        ax_s.plot(t, [r["tokens_per_s"] for r in run.train], "-", color=color(i), lw=1.3, label=run.name)
        ax_m.plot(t, [100 * r["mfu"] for r in run.train], "-", color=color(i), lw=1.3, label=run.name)
    ax_s.set_ylabel("training throughput (tokens/s)")
    ax_s.yaxis.set_major_formatter(EngFormatter(sep=""))
    ax_m.set_ylabel("MFU (% of peak FLOP/s)")
    ax_s.set_title("Throughput (eval time excluded)", fontsize=10)
    ax_m.set_title("Model FLOPs utilization", fontsize=10)
    for ax in (ax_s, ax_m):
        ax.set_xlabel(f"wall-clock time since run start ({unit})")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    _legend(ax_s, len(runs))
    return _png(fig)


def breakdown(run: RunData) -> dict[str, float]:
    """Seconds per phase; 'other' is the timed run not covered by the loop's timers."""
    tb = {k: float(v) for k, v in (run.summary.get("time_breakdown_s") or {}).items()}
    timed = sum(v for k, v in tb.items() if k != "save")
    rest = float(run.summary["time_to_train_s"]) - timed
    if rest > 0:
        tb["other"] = rest
    return tb


def fig_breakdown(runs: list[RunData]) -> bytes:
    """Where each run's time went, one stacked horizontal bar per run."""
    parts = [breakdown(run) for run in runs]
    present = {k for p in parts for k, v in p.items() if v > 0}
    keys = [k for k in _PHASES if k in present] + sorted(present - set(_PHASES))
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.45 * len(runs)), constrained_layout=True)
    names = [run.name for run in runs]
    tmax = max((sum(p.values()) for p in parts), default=1.0)
    div, unit = time_unit(tmax)
    left = [0.0] * len(runs)
    cmap = plt.get_cmap("Set2").colors
    for j, k in enumerate(keys):
        vals = [p.get(k, 0.0) / div for p in parts]
        ax.barh(names, vals, left=left, color=cmap[j % len(cmap)], edgecolor="white", label=_PHASES.get(k, k))
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title("Where the time went (run start to finish, plus the final save)", fontsize=10)
    # beside the bars, so it never covers them or the axis label whatever the number of runs
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def fig_scaling(benchmark: str | None, predicted: list[Point], published: list[Point]) -> bytes:
    """Predicted minutes vs GPU count per GPU kind (lines), published MLPerf results (points)."""
    fig, ax = plt.subplots(figsize=(11, 4.6), constrained_layout=True)
    kinds = sorted({p.gpu for p in predicted} | {p.gpu for p in published})
    for i, kind in enumerate(kinds):
        pred = sorted((p for p in predicted if p.gpu == kind), key=lambda p: p.gpus)
        if pred:
            ax.plot([p.gpus for p in pred], [p.minutes for p in pred], "-", color=color(i), lw=1.8,
                    label=f"{kind.upper()} predicted (trainperf plan)")
        pub = [p for p in published if p.gpu == kind]
        if pub:
            ax.plot([p.gpus for p in pub], [p.minutes for p in pub], "o", color=color(i), ms=6, mec="black",
                    mew=0.6, label=f"{kind.upper()} published MLPerf results ({len(pub)})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.4g}"))
    ax.set_xlabel("GPUs (count, log scale)")
    ax.set_ylabel("time to train (minutes, log scale)")
    ax.set_title(f"Scaling: {benchmark or 'plan'}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    _legend(ax, len(kinds) * 2)
    return _png(fig)
