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
from trainperf.train.optim import Optimizers


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
    """The tensors of this rank's model parts (one, or its pipeline stages), by plain parameter name."""

    def __init__(self, parts: list[torch.nn.Module]):
        self.parts = [unwrap(p) for p in parts]

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        out: dict[str, Any] = {}
        for part in self.parts:
            out.update(get_model_state_dict(part))
        return out

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        for part in self.parts:
            mine = get_model_state_dict(part).keys()
            set_model_state_dict(part, {k: sd[k] for k in mine})


def _head_alone(part: torch.nn.Module) -> bool:
    """A pipeline's last stage holding a tied head without the embedding it copies."""
    return part.cfg.tie_embeddings and part.tok_emb is None and part.output is not None


class OptimizerState(Stateful):
    """Only the per-parameter state tensors: DCP would unpickle non-tensor entries on load
    (weights_only=False), and the param groups' hyperparameters come from the recipe anyway.
    A tied head alone on the last pipeline stage keeps its state under the embedding's name, as one
    process does (the two are one parameter there), so checkpoints load across pipeline layouts."""

    def __init__(self, parts: list[torch.nn.Module], opts: Optimizers):
        self.parts, self.opts = [unwrap(p) for p in parts], opts.opts

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state: dict[str, Any] = {}
        for part, opt in zip(self.parts, self.opts):
            for k, v in get_optimizer_state_dict(part, opt)["state"].items():
                state[_saved_name(part, k)] = v
        return {"state": state}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        for part, opt in zip(self.parts, self.opts):
            full = get_optimizer_state_dict(part, opt)  # the live param groups
            full["state"] = {k: sd["state"][_saved_name(part, k)] for k in full["state"]}
            set_optimizer_state_dict(part, opt, full)


def _saved_name(part: torch.nn.Module, name: str) -> str:
    return "tok_emb.weight" if name == "output.weight" and _head_alone(part) else name


def checkpoint_states(parts: list[torch.nn.Module], opts: Optimizers, train: TrainState) -> dict[str, Stateful]:
    return {"model": ModelState(parts), "optim": OptimizerState(parts, opts), "train": train}
