"""Megatron's GPT-dataset sampling, the way the MLPerf LLM references draw their training samples.

megatron/core/datasets/gpt_dataset.py builds three indices from the seed (numpy RandomState):
the document index (every document once per epoch, shuffled), the sample index (the shuffled
documents laid end to end and cut into windows of seq_len + 1 tokens that overlap by one, so
sample k starts at token k * seq_len of that stream; the last partial window dropped) and the
shuffle index (a permutation of the samples, drawn after the document shuffle from the same
RandomState). This module builds the same three with numpy; tests/data/test_gpt_sampling.py
checks the windows token for token against megatron-core's GPTDataset.
"""

from __future__ import annotations

import numpy as np
import torch

from trainperf.data.dataset import TokenStream
from trainperf.errors import DataError

_CHUNK = 1 << 22  # documents per step of the sample-index pass (bounds its temporary memory)


def num_epochs(tokens_per_epoch: int, num_samples: int | None, seq_len: int) -> int:
    """Megatron's _get_num_epochs: epochs whose tokens cover num_samples windows (+1 extra token)."""
    if num_samples is None:
        return 1
    want = num_samples * seq_len + 1
    return max(1, -(-want // tokens_per_epoch))


def document_index(n_docs: int, epochs: int, rng: np.random.RandomState, separate_final: bool) -> np.ndarray:
    """Megatron's _build_document_index: the documents of each epoch, shuffled together (int32)."""
    if not separate_final or epochs == 1:
        idx = np.tile(np.arange(n_docs, dtype=np.int32), epochs)
        rng.shuffle(idx)
        return idx
    first = document_index(n_docs, epochs - 1, rng, False)
    return np.concatenate([first, document_index(n_docs, 1, rng, False)])


def sample_index(lengths: np.ndarray, doc_idx: np.ndarray, seq_len: int, n_samples: int) -> np.ndarray:
    """Megatron's build_sample_idx (drop the last partial window): row k = (position in doc_idx,
    token offset in that document) of token k * seq_len of the shuffled stream, k = 0..n_samples."""
    out = np.empty((n_samples + 1, 2), dtype=np.int64)
    pos = np.arange(n_samples + 1, dtype=np.int64) * seq_len
    base, k = 0, 0
    for lo in range(0, doc_idx.size, _CHUNK):
        sizes = lengths[doc_idx[lo:lo + _CHUNK]].astype(np.int64)
        ends = base + np.cumsum(sizes)
        hi = int(np.searchsorted(pos, ends[-1], side="left")) if sizes.size else k
        p = pos[k:hi]
        j = np.searchsorted(ends, p, side="right")  # the document holding token p
        out[k:hi, 0] = lo + j
        out[k:hi, 1] = p - (ends[j] - sizes[j])
        base, k = int(ends[-1]), hi
    if k != n_samples + 1:
        raise DataError(f"the sample index needs {n_samples + 1} windows, the documents hold {k}")
    return out


def shuffle_index(n: int, total: int, rng: np.random.RandomState) -> np.ndarray:
    """Megatron's _build_shuffle_index: [0, n) shuffled, then [n, total) shuffled after it."""
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(n, dtype=dtype)
    rng.shuffle(first)
    if n == total:
        return first
    last = np.arange(n, total, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate([first, last])


class GPTSamples:
    """The windows of Megatron's GPTDataset over a token stream's documents, for one seed:
    `window(k)` is its k-th sample's seq_len + 1 tokens (inputs, then the shifted targets)."""

    def __init__(self, stream: TokenStream, seq_len: int, seed: int, num_samples: int | None = None):
        self.stream, self.seq_len = stream, seq_len
        lengths = stream.lengths()
        tokens = int(lengths.sum(dtype=np.int64))
        if tokens <= seq_len + 1:
            raise DataError(f"training split has {tokens} tokens, fewer than one window of {seq_len + 1}")
        epochs = num_epochs(tokens, num_samples, seq_len)
        separate = False
        if epochs > 1:
            sans = ((epochs - 1) * tokens - 1) // seq_len
            per_epoch = (tokens - 1) // seq_len
            separate = num_samples - sans < int(0.80 * per_epoch)
        rng = np.random.RandomState(seed)
        self.doc_idx = document_index(lengths.size, epochs, rng, separate)
        n = (epochs * tokens - 1) // seq_len
        self.sample_idx = sample_index(lengths, self.doc_idx, seq_len, n)
        self.shuffle_idx = shuffle_index(sans if separate else n, n, rng)
        self.lengths = lengths

    def __len__(self) -> int:
        return int(self.shuffle_idx.size)

    def window(self, k: int) -> np.ndarray:
        i = int(self.shuffle_idx[k])
        (d0, o0), (d1, o1) = self.sample_idx[i], self.sample_idx[i + 1]
        if d0 == d1:
            return np.asarray(self.stream.document(int(self.doc_idx[d0]), int(o0), int(o1 - o0 + 1)))
        parts = [self.stream.document(int(self.doc_idx[d0]), int(o0))]
        parts += [self.stream.document(int(self.doc_idx[d])) for d in range(d0 + 1, d1)]
        parts.append(self.stream.document(int(self.doc_idx[d1]), 0, int(o1 + 1)))
        return np.concatenate(parts)


class GPTBatches:
    """Step -> batch from Megatron's GPT sampling: global batch `step` is samples
    step*B .. step*B+B-1, as Megatron's pretraining sampler takes them; each rank its slice. Past
    the index's end (one epoch unless `num_samples` asks more), the next epoch is a fresh index
    with seed + epoch."""

    def __init__(self, stream: TokenStream, seq_len: int, global_batch: int, seed: int,
                 num_samples: int | None = None):
        self.stream, self.seq_len, self.global_batch, self.seed = stream, seq_len, global_batch, seed
        self._epochs = {0: GPTSamples(stream, seq_len, seed, num_samples)}

    def sample(self, k: int) -> np.ndarray:
        n = len(self._epochs[0])
        ep, k = divmod(k, n)
        if ep not in self._epochs:
            self._epochs[ep] = GPTSamples(self.stream, self.seq_len, self.seed + ep)
        s = self._epochs[ep]
        if k >= len(s):  # a later epoch's own index may hold a window fewer
            k %= len(s)
        return s.window(k)

    def scored_tokens(self, step: int) -> None:
        return None

    def get(self, step: int, rank: int = 0, world: int = 1, pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        per = self.global_batch // world
        first = step * self.global_batch + rank * per
        window = torch.from_numpy(np.stack([self.sample(first + i) for i in range(per)]).astype(np.int64))
        if pin:
            window = window.pin_memory()
        return window[:, :-1], window[:, 1:]
