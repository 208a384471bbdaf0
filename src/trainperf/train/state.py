"""What a checkpoint holds, as `Stateful` objects that DCP saves and loads by name.

`TrainState` is the trainer's own progress (step, evaluations done); `ModelState` and
`OptimizerState` wrap the (possibly sharded) model and its optimizer through DCP's state-dict API,
so tensors are keyed by the plain model's parameter names and a checkpoint written under one layout
loads under any other. The checkpointer saves {"model", "optim", "train"} and never builds the dict
by hand. (RNG streams stay with the checkpointer: restoring them depends on the world size.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful

from trainperf.parallel.apply import unwrap


@dataclass
class TrainState(Stateful):
    step: int = 0  # optimizer steps done; batches and the learning rate are pure functions of it
    n_evals: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": torch.tensor(self.step, dtype=torch.int64),
                "n_evals": torch.tensor(self.n_evals, dtype=torch.int64)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.step, self.n_evals = int(sd["step"]), int(sd["n_evals"])


class ModelState(Stateful):
    def __init__(self, model: torch.nn.Module):
        self.model = unwrap(model)

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.model)

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.model, sd)


class OptimizerState(Stateful):
    """Only the per-parameter state tensors: DCP would unpickle non-tensor entries on load
    (weights_only=False), and the param groups' hyperparameters come from the recipe anyway."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer):
        self.model, self.opt = unwrap(model), opt

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return {"state": get_optimizer_state_dict(self.model, self.opt)["state"]}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        full = get_optimizer_state_dict(self.model, self.opt)  # the live param groups
        full["state"] = sd["state"]
        set_optimizer_state_dict(self.model, self.opt, full)


def checkpoint_states(model: torch.nn.Module, opt: torch.optim.Optimizer, train: TrainState) -> dict[str, Stateful]:
    return {"model": ModelState(model), "optim": OptimizerState(model, opt), "train": train}
