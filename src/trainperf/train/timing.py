"""Seconds per phase of the hot loop (data wait, forward/backward, optimizer).

On a CPU the host clock is the truth. On a GPU the host only queues kernels, so host timers would
credit the whole step to whichever phase happens to wait for the queue; there each boundary records
a CUDA event on the stream instead, and the intervals are read when the loop syncs anyway (at its
log interval), so measuring never adds a host sync.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch


def synced_clock(device: torch.device) -> float:
    """The host clock once the device has run everything queued so far: the one place an interval
    that must include the device's work (throughput per log interval) ends. On a GPU the host runs
    ahead of the kernels, so a clock read before the sync times the launches, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class PhaseClock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.totals: dict[str, float] = defaultdict(float)
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._last: float | torch.cuda.Event | None = None

    def _now(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        """A phase boundary whose preceding interval is not counted (checkpoints, bookkeeping)."""
        self._last = self._now()

    def lap(self, phase: str) -> None:
        """Credit the time since the previous boundary to `phase`."""
        now = self._now()
        if self.cuda:
            self._pending.append((phase, self._last, now))
        else:
            self.totals[phase] += now - self._last
        self._last = now

    def flush(self, sync: bool = False) -> None:
        """Read the recorded GPU intervals; call after a host sync (or pass sync=True)."""
        if not self._pending:
            return
        if sync:
            torch.cuda.synchronize()
        for phase, a, b in self._pending:
            self.totals[phase] += a.elapsed_time(b) / 1000.0
        self._pending.clear()
