"""The report's charts, drawn with matplotlib (Agg: no display needed) and returned as PNG bytes."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

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
           "other": "other (logging, loop)", "restarts": "earlier attempts and restarts",
           "save": "save weights (after the timed run)"}


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


@dataclass
class Segment:
    """One attempt of a run on the shared axes: earlier attempts of a restarted run, then the last."""

    label: str
    offset_s: float  # from the first attempt's run_start
    train: list[dict]
    evals: list[dict]
    final: bool
    resumed_from_step: int  # where this attempt started (0: from scratch)


def segments(run: RunData) -> list[Segment]:
    offs = run.offsets()
    out = [Segment(f"attempt {a.number}", off, a.train, a.evals, False, a.started_from_step)
           for a, off in zip(run.attempts, offs)]
    out.append(Segment(f"attempt {len(run.attempts) + 1}" if run.attempts else "", offs[-1], run.train,
                       run.evals, True, int(run.summary.get("resumed_from_step") or 0) if run.attempts else 0))
    return out


def train_loss_scale(run: RunData) -> float:
    """Factor that puts the training loss (nats per token) in the validation metric's unit: 1 for
    log perplexity; for nats per byte, the validation set's tokens per byte, read off the logged
    evaluations (exactly 1 with the byte tokenizer)."""
    if run.summary.get("metric", "nats_per_byte") != "nats_per_byte":
        return 1.0
    for r in run.evals:
        if r.get("token_loss") and r.get("nats_per_byte") is not None:
            return float(r["nats_per_byte"]) / float(r["token_loss"])
    return 1.0


def _style(seg: Segment) -> dict:
    return {"ls": "-" if seg.final else "--", "alpha": 1.0 if seg.final else 0.7}


def _mark_restarts(run: RunData, segs: list[Segment], c, ax_t, ax_n, div: float) -> None:
    """A dotted line where each later attempt started: at its run_start on the time axis, at the
    tokens of the checkpoint it resumed from on the tokens axis."""
    for k, seg in enumerate(segs[1:], 1):
        ax_t.axvline(seg.offset_s / div, color=c, ls=":", lw=1.2)
        ax_t.annotate(f"restart {k}: from step {seg.resumed_from_step}", (seg.offset_s / div, 1.0),
                      xycoords=("data", "axes fraction"), textcoords="offset points", xytext=(3, -12 - 10 * k),
                      fontsize=7, color=c)
        tok = run.step_tokens(seg.resumed_from_step)
        if tok is not None:
            ax_n.axvline(tok, color=c, ls=":", lw=1.2)


def _target_lines(targets, ax_t, ax_n) -> None:
    """Each finite quality target as a dashed line on both axes, named on the first."""
    for target in targets:
        if math.isfinite(target):
            for ax in (ax_t, ax_n):
                ax.axhline(target, color="black", ls="--", lw=1)
            ax_t.annotate(f"target {target:g}", (0, target), xycoords=("axes fraction", "data"),
                          textcoords="offset points", xytext=(4, -11), fontsize=8)


def fig_loss(runs: list[RunData]) -> bytes:
    """Validation loss (and, lighter, the training loss per logged step) vs wall-clock and vs
    tokens; target lines; each run's crossing marked; every attempt of a restarted run drawn."""
    fig, (ax_t, ax_n) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    all_segs = [segments(run) for run in runs]
    tmax = max((seg.offset_s + r["elapsed_s"] for segs in all_segs for seg in segs for r in seg.evals + seg.train),
               default=1.0)
    div, unit = time_unit(tmax)
    metrics = {run.summary.get("metric", "nats_per_byte") for run in runs}
    ylabel = METRIC_LABEL.get(metrics.pop(), "validation loss") if len(metrics) == 1 else "validation loss"
    targets: dict[float, int] = {}
    for i, (run, segs) in enumerate(zip(runs, all_segs)):
        c = color(i)
        scale = train_loss_scale(run)
        for seg in segs:
            st = _style(seg)
            label = run.name + (f" ({seg.label})" if seg.label else "")
            tt = [(seg.offset_s + r["elapsed_s"]) / div for r in seg.train]
            tl = [r["loss"] * scale for r in seg.train if "loss" in r]
            if len(tl) == len(tt) and tl:
                ax_t.plot(tt, tl, color=c, lw=0.9, ls=st["ls"], alpha=0.35 * st["alpha"])
                tok = [run.step_tokens(r["step"]) for r in seg.train]
                if all(v is not None for v in tok):
                    ax_n.plot(tok, tl, color=c, lw=0.9, ls=st["ls"], alpha=0.35 * st["alpha"])
            t = [(seg.offset_s + r["elapsed_s"]) / div for r in seg.evals]
            y = [r["eval_loss"] for r in seg.evals]
            ax_t.plot(t, y, marker="o", color=c, ms=3, lw=1.5, label=label, **st)
            tok = [run.eval_tokens(r) for r in seg.evals]
            if all(v is not None for v in tok):
                ax_n.plot(tok, y, marker="o", color=c, ms=3, lw=1.5, label=label, **st)
        _mark_restarts(run, segs, c, ax_t, ax_n, div)
        targets.setdefault(run.target, i)
        hit = run.crossing()
        if hit is not None:
            at = (segs[-1].offset_s + hit["elapsed_s"]) / div
            ax_t.plot(at, hit["eval_loss"], "*", color=c, ms=13, mec="black", mew=0.6, zorder=5)
            ax_t.annotate(f"{at:.3g} {unit}", (at, hit["eval_loss"]),
                          textcoords="offset points", xytext=(6, 6 + 11 * (i % 3)), fontsize=8, color=c)
            if run.eval_tokens(hit) is not None:
                ax_n.plot(run.eval_tokens(hit), hit["eval_loss"], "*", color=c, ms=13, mec="black", mew=0.6,
                          zorder=5)
    _target_lines(targets, ax_t, ax_n)
    # the lighter lines need no legend entry per run: one grey sample says what they are
    ax_t.plot([], [], color="grey", lw=0.9, alpha=0.35, label="training loss (lighter)")
    ax_t.set_xlabel(f"wall-clock time since run start ({unit})")
    ax_n.set_xlabel("training tokens")
    ax_n.xaxis.set_major_formatter(EngFormatter(sep=""))
    for ax in (ax_t, ax_n):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    ax_t.set_title("Loss over time (★ = target reached)", fontsize=10)
    ax_n.set_title("Loss over training tokens", fontsize=10)
    if not ax_n.lines:
        ax_n.text(0.5, 0.5, "no sequence length in config.json", ha="center", transform=ax_n.transAxes)
    _legend(ax_t, len(ax_t.get_legend_handles_labels()[0]))
    return _png(fig)


def fig_lr(runs: list[RunData]) -> bytes:
    """The learning rate at each logged step, every attempt of a restarted run included."""
    fig, ax = plt.subplots(figsize=(11, 3.2), constrained_layout=True)
    for i, run in enumerate(runs):
        segs = segments(run)
        for seg in segs:
            rows = [r for r in seg.train if "lr" in r]
            label = run.name + (f" ({seg.label})" if seg.label else "")
            ax.plot([r["step"] for r in rows], [r["lr"] for r in rows], color=color(i), lw=1.4, label=label,
                    **_style(seg))
        for seg in segs[1:]:
            ax.axvline(seg.resumed_from_step, color=color(i), ls=":", lw=1.2)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.yaxis.set_major_formatter(EngFormatter(sep=""))
    top = max((r["lr"] for run in runs for seg in segments(run) for r in seg.train if "lr" in r), default=0.0)
    if top > 0:
        ax.set_ylim(0, top * 1.08)  # a constant LR at the top would otherwise sit on the frame
    ax.set_title("Learning rate per logged step (dotted: where a restart resumed)", fontsize=10)
    ax.grid(alpha=0.3)
    if not ax.lines:
        ax.text(0.5, 0.5, "no learning rate in metrics.jsonl", ha="center", transform=ax.transAxes)
    _legend(ax, len(ax.get_legend_handles_labels()[0]))
    return _png(fig)


def fig_throughput(runs: list[RunData]) -> bytes:
    """Training tokens/s and MFU over the run, as logged every `train.log_every` steps."""
    fig, (ax_s, ax_m) = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
    all_segs = [segments(run) for run in runs]
    tmax = max((seg.offset_s + r["elapsed_s"] for segs in all_segs for seg in segs for r in seg.train), default=1.0)
    div, unit = time_unit(tmax)
    for i, (run, segs) in enumerate(zip(runs, all_segs)):
        for seg in segs:
            t = [(seg.offset_s + r["elapsed_s"]) / div for r in seg.train]
            label = run.name + (f" ({seg.label})" if seg.label else "")
            st = _style(seg)
            ax_s.plot(t, [r["tokens_per_s"] for r in seg.train], color=color(i), lw=1.3, label=label, **st)
            ax_m.plot(t, [100 * r["mfu"] if r["mfu"] is not None else float("nan") for r in seg.train], color=color(i), lw=1.3, label=label, **st)
    ax_s.set_ylabel("training throughput (tokens/s)")
    ax_s.yaxis.set_major_formatter(EngFormatter(sep=""))
    ax_m.set_ylabel("MFU (% of peak FLOP/s)")
    ax_s.set_title("Throughput (eval time excluded)", fontsize=10)
    ax_m.set_title("Model FLOPs utilization", fontsize=10)
    for ax in (ax_s, ax_m):
        ax.set_xlabel(f"wall-clock time since run start ({unit})")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    _legend(ax_s, len(ax_s.get_legend_handles_labels()[0]))
    return _png(fig)


def breakdown(run: RunData) -> dict[str, float]:
    """Seconds per phase; 'other' is the timed run not covered by the loop's timers. The timers are
    the last attempt's; for a restarted run (time to train from the first attempt's run_start) the
    time before that attempt is 'restarts'."""
    tb = {k: float(v) for k, v in (run.summary.get("time_breakdown_s") or {}).items()}
    timed = sum(v for k, v in tb.items() if k != "save")
    total = float(run.summary["time_to_train_s"])
    last = float(run.summary.get("last_attempt_s") or total)
    if total - last > 0:
        tb["restarts"] = total - last
    rest = last - timed
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
