"""Live progress for `trainperf run` (rich) and the closing summary."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class RunDisplay:
    """Consumes the metrics rows the train loop emits; a live bar on a terminal, lines otherwise."""

    def __init__(self, enabled: bool = True, live: bool = True):
        self.enabled, self.live = enabled, live
        self.console = Console(stderr=False)
        self.progress: Progress | None = None
        self.task = None
        self.last_eval = "-"
        self.target = None

    def __enter__(self) -> "RunDisplay":
        if self.enabled and self.live:
            self.progress = Progress(
                TextColumn("[bold]step {task.completed:>5.0f}/{task.total:.0f}"), BarColumn(bar_width=24),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
                transient=False)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def update(self, row: dict) -> None:
        if not self.enabled:
            return
        kind = row.get("kind")
        if kind == "start":
            self.target = row["target"]
            if self.progress is not None:
                self.task = self.progress.add_task("train", total=row["max_steps"], info="initialising")
            return
        if kind == "eval":
            self.last_eval = f"{row['eval_loss']:.4f}"
            line = (f"eval  step {row['step']:>5}  samples {row['samples']:>8}  "
                    f"eval {row['eval_loss']:.4f} (target {self.target})  {row['elapsed_s']:.1f}s")
        elif kind == "train":
            info = (f"loss {row['loss']:.4f}  eval {self.last_eval} / {self.target}  "
                    f"{row['tokens_per_s']:,.0f} tok/s")
            if self.progress is not None:
                self.progress.update(self.task, completed=row["step"], info=info)
                return
            line = f"train step {row['step']:>5}  {info}  {row['elapsed_s']:.1f}s"
        else:
            return
        if self.progress is not None:
            self.progress.console.print(line, highlight=False)
        else:
            print(line, flush=True)

    def print_summary(self, s) -> None:
        t = Table(title=f"{s.benchmark}: {s.status}", show_header=False, box=None)
        verdict = "reached" if s.status == "success" else "NOT reached"
        t.add_row("time to train", f"{s.time_to_train_s:.1f} s ({s.time_to_train_s / 60:.2f} min, run_start -> run_stop)")
        t.add_row("target", f"{s.final_eval_loss:.4f} {s.metric} vs target {s.target} ({verdict})")
        t.add_row("steps / samples / tokens", f"{s.steps:,} / {s.samples:,} / {s.tokens:,}")
        if s.tokens_to_target is not None:
            t.add_row("to target", f"{s.tokens_to_target:,} tokens, {s.model_flops_to_target:.3g} model FLOPs "
                                   "(training; machine-independent)")
        choice = getattr(s, "precision_choice", {}) or {}
        if choice:
            t.add_row("precision", f"{choice['precision']} ({choice['reason']})")
        t.add_row("throughput", f"{s.tokens_per_s:,.0f} tokens/s on {s.world_size} x {s.device}")
        if s.mfu is None:  # no peak figure for this device: say so rather than print a made-up MFU
            t.add_row("MFU", f"none ({s.peak_source}); {s.flops_per_token:,} FLOPs/token")
        else:
            t.add_row("MFU", f"{100 * s.mfu:.1f}% of {s.peak_flops / 1e12:.2f} TFLOP/s per device "
                              f"({s.peak_source}); {s.flops_per_token:,} FLOPs/token")
        t.add_row("files", f"{s.out}/ (result_{s.seed}.txt, metrics.jsonl, summary.json, model.safetensors)")
        if getattr(s, "restarts", 0) or getattr(s, "resumed_from_step", 0):
            t.add_row("recovery", f"resumed from step {s.resumed_from_step}; {s.restarts} earlier attempt(s), "
                                  f"{s.lost_steps} steps redone")
        Console(file=sys.stdout).print(t)
