"""A blend of token sources (Megatron's `--data-path w1 p1 w2 p2`), drawn as Megatron's
BlendedDataset draws: sample k comes from the source whose share lags its weight most
(build_blending_indices: error_i = w_i * max(k, 1) - taken_i, first maximum), and the j-th sample
taken from a source is that source's own GPT-dataset sample j (data/gpt.py, seed as given)."""

from __future__ import annotations

import numpy as np
import torch

from trainperf.data.dataset import TokenStream
from trainperf.data.gpt import GPTBatches


class BlendOrder:
    """Which source each blended sample comes from, computed as far as asked and kept."""

    def __init__(self, weights: list[float]):
        total = sum(weights)
        self.weights = [w / total for w in weights]
        self._which: list[int] = []  # source of each blended sample so far
        self._nth: list[int] = []  # its sample number within that source
        self._taken = [0] * len(weights)

    def source_of(self, k: int) -> tuple[int, int]:
        """(source, its sample number) of blended sample k."""
        w, taken = self.weights, self._taken
        for i in range(len(self._which), k + 1):
            x = max(float(i), 1.0)
            best = max(range(len(w)), key=lambda j: (w[j] * x - taken[j], -j))
            self._which.append(best)
            self._nth.append(taken[best])
            taken[best] += 1
        return self._which[k], self._nth[k]


class BlendBatches:
    def __init__(self, sources: list[tuple[float, TokenStream]], seq_len: int, global_batch: int, seed: int):
        self.order = BlendOrder([w for w, _ in sources])
        self.parts = [GPTBatches(s, seq_len, global_batch, seed) for _, s in sources]
        self.global_batch = global_batch

    def source_of(self, k: int) -> tuple[int, int]:
        return self.order.source_of(k)

    def scored_tokens(self, step: int) -> None:
        return None

    def get(self, step: int, rank: int = 0, world: int = 1, pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        per = self.global_batch // world
        first = step * self.global_batch + rank * per
        rows = [self.parts[s].sample(j) for s, j in (self.source_of(first + i) for i in range(per))]
        window = torch.from_numpy(np.stack(rows).astype(np.int64))
        if pin:
            window = window.pin_memory()
        return window[:, :-1], window[:, 1:]
