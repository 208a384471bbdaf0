"""A blend of token sources (Megatron's `--data-path w1 p1 w2 p2`), drawn as Megatron's
BlendedDataset draws: sample k comes from the source whose share lags its weight most
(build_blending_indices: error_i = w_i * max(k, 1) - taken_i, first maximum), and the j-th sample
taken from a source is that source's own GPT-dataset sample j (data/gpt.py, seed as given)."""

from __future__ import annotations

import numpy as np
import torch

from trainperf.data.dataset import TokenStream
from trainperf.data.gpt import GPTBatches


class BlendBatches:
    def __init__(self, sources: list[tuple[float, TokenStream]], seq_len: int, global_batch: int, seed: int,
                 num_samples: int | None = None):
        total = sum(w for w, _ in sources)
        self.weights = [w / total for w, _ in sources]
        self.parts = [GPTBatches(s, seq_len, global_batch, seed) for _, s in sources]
        self.global_batch = global_batch
        self._which: list[int] = []  # source of each blended sample so far
        self._nth: list[int] = []  # its sample number within that source
        self._taken = [0] * len(sources)

    def _extend(self, n: int) -> None:
        w, taken = self.weights, self._taken
        for k in range(len(self._which), n):
            x = max(float(k), 1.0)
            best = max(range(len(w)), key=lambda i: (w[i] * x - taken[i], -i))
            self._which.append(best)
            self._nth.append(taken[best])
            taken[best] += 1

    def source_of(self, k: int) -> tuple[int, int]:
        """(source, its sample number) of blended sample k."""
        self._extend(k + 1)
        return self._which[k], self._nth[k]

    def scored_tokens(self, step: int) -> None:
        return None

    def get(self, step: int, rank: int = 0, world: int = 1, pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        per = self.global_batch // world
        first = step * self.global_batch + rank * per
        rows = [self.parts[s]._sample(j) for s, j in (self.source_of(first + i) for i in range(per))]
        window = torch.from_numpy(np.stack(rows).astype(np.int64))
        if pin:
            window = window.pin_memory()
        return window[:, :-1], window[:, 1:]
