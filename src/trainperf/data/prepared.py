"""What prepared folders share: checksums, the token dtype, the fingerprint rule, and the
fine-tuning samples folder's meta.json (format 1). Token data is Megatron's indexed dataset
(data/dataset.py, format 2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainperf.data.tokenizer import Tokenizer

FORMAT = 1


@dataclass
class PreparedData:
    """What every prepared folder has, whatever it holds: its meta.json and its tokenizer."""

    path: Path
    meta: dict
    tokenizer: Tokenizer

    @property
    def fingerprint(self) -> str:
        return self.meta["fingerprint"]

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def dtype_for(vocab: int) -> np.dtype:
    """The smallest unsigned dtype that holds every token id of a `vocab`-sized tokenizer."""
    return np.dtype(np.uint16) if vocab <= 2**16 else np.dtype(np.uint32)


def with_val(train_fp: str, val_fp: str | None) -> str:
    """A dataset's fingerprint: the training source's, combined with a separate validation source's."""
    if val_fp is None:
        return train_fp
    return hashlib.sha256(f"{train_fp}+val:{val_fp}".encode()).hexdigest()
