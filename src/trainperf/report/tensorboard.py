"""Live TensorBoard scalars for `trainperf run --tensorboard`, written next to `metrics.jsonl`.

The train loop hands every metrics row to `RunOptions.on_event`; this turns those rows into scalars,
so the event files are a view of metrics.jsonl and never a second source of numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from trainperf.config import ConfigError

# row kind -> (field, TensorBoard tag)
_SCALARS = {
    "train": (("loss", "train/loss"), ("lr", "train/lr"), ("tokens_per_s", "train/tokens_per_s"),
              ("mfu", "train/mfu")),
    "eval": (("eval_loss", "eval/loss"), ("nats_per_byte", "eval/nats_per_byte"),
             ("token_loss", "eval/token_loss")),
}


class TensorBoardWriter:
    """Callable on metrics rows; opens the event file in `run_dir` at the first row (the loop creates
    the directory), x axis = optimizer step."""

    def __init__(self, run_dir: Path, then: Callable[[dict], None] | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        except ImportError:
            raise ConfigError("--tensorboard needs the tensorboard package: pip install 'trainperf[tensorboard]'") from None
        self._cls = SummaryWriter
        self.run_dir = Path(run_dir)
        self.then = then
        self._w = None

    def __call__(self, row: dict) -> None:
        kind = row.get("kind")
        if self._w is None and kind in ("start", "train", "eval"):
            self._w = self._cls(log_dir=str(self.run_dir), flush_secs=10)  # live: seconds, not minutes
        if self._w is not None:
            step = int(row.get("step", 0))
            for key, tag in _SCALARS.get(kind, ()):
                if isinstance(row.get(key), (int, float)):
                    self._w.add_scalar(tag, row[key], step)
            if kind == "eval":
                self._w.add_scalar("eval/loss_vs_samples", row["eval_loss"], int(row.get("samples", 0)))
                self._w.flush()  # an eval is rare and what people watch for
            elif kind == "end":
                self.close()
        if self.then is not None:
            self.then(row)

    def close(self) -> None:
        if self._w is not None:
            self._w.close()
            self._w = None
