"""What a run is asked to do (`RunOptions`) and what it reports (`Summary`, written as summary.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from trainperf import atomic



@dataclass
class RunOptions:
    out: Path
    seed: int = 0
    max_steps: int = 0  # 0 -> the recipe's
    progress: bool = True
    on_event: Callable[[dict], None] | None = None  # receives every metrics row (for live displays)
    resume: Path | None = None  # a run or checkpoint directory to continue from


@dataclass
class Summary:
    benchmark: str
    status: str
    # MLPerf's time-to-train: from the first attempt's run_start to the final run_stop, so a run that
    # restarted counts its lost attempts and the restart gaps (equal to last_attempt_s otherwise)
    time_to_train_s: float
    steps: int
    samples: int
    tokens: int
    tokens_per_s: float
    mfu: float | None  # None: no peak figure for the device (peak_source says why)
    peak_flops: float | None
    peak_source: str
    final_eval_loss: float
    target: float
    metric: str
    seed: int
    device: str
    world_size: int
    out: str
    flops_per_token: int
    params: int
    evals: int
    corpus_fingerprint: str
    # the machine-independent part of time-to-train: training tokens, and their model FLOPs (6N plus
    # attention per token, evaluation not counted), up to the evaluation that reached the target;
    # None when the run did not reach it
    tokens_to_target: int | None = None
    model_flops_to_target: float | None = None
    precision: str = ""  # the format the run trained in
    precision_choice: dict = field(default_factory=dict)  # why (train.precision = "auto": the probe's timings)
    last_attempt_s: float = 0.0  # run_start to run_stop of this attempt alone
    time_breakdown_s: dict = field(default_factory=dict)
    deviations: list = field(default_factory=list)
    restarts: int = 0  # earlier attempts of this run (torchrun restarts, --resume in place)
    lost_steps: int = 0  # steps those attempts ran past their last checkpoint (redone)
    resumed_from_step: int = 0
    checkpoints: list = field(default_factory=list)
    layout: dict = field(default_factory=dict)
    code: dict = field(default_factory=dict)  # trainperf version, git commit, dirty tree

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def write(self, out: Path) -> None:
        atomic.write_json(out / "summary.json", self.to_dict())

    @classmethod
    def read(cls, out: Path) -> Summary | None:
        """The summary.json a finished run left in `out`; None without a readable one."""
        try:
            d = json.loads((out / "summary.json").read_text())
            return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})
        except (OSError, ValueError, TypeError):
            return None
