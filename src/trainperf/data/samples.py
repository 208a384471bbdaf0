"""Fine-tuning samples: fixed-length token rows whose loss counts only some positions.

MLPerf's `llama2_70b_lora` trains on SCROLLS GovReport as (document, summary) pairs and its eval
loss is the mean cross-entropy over the summary tokens only. A prepared samples folder holds:

    DIR/meta.json            kind "samples", row length, counts and sha256 of each array
    DIR/tokenizer.json
    DIR/{train,val}_ids.bin     (rows, L) token ids, uint16 or uint32
    DIR/{train,val}_labels.bin  (rows, L) int32 labels aligned with the ids; -100 = not scored

Labels follow the Hugging Face convention (aligned with `input_ids`; the model predicts labels[t+1]
from ids[:t+1]), so the reference's pre-tokenized rows (`input_ids` + `labels`) load as they are.
Text pairs (`input` + `output` fields, SCROLLS' own column names) are tokenized here: the summary is
scored, the document is context, and a document too long for the row is cut at its end.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainperf import atomic
from trainperf.data.corpus import corpus_files, held_out, read_rows
from trainperf.data.prepared import FORMAT, PreparedData, dtype_for, sha256_file, with_val
from trainperf.data.tokenizer import Tokenizer, load_tokenizer
from trainperf.errors import DataError

IGNORE = -100  # the label of a position that is not scored (F.cross_entropy's ignore_index)


@dataclass(frozen=True)
class Sample:
    id: str
    ids: list[int]
    labels: list[int]  # aligned with ids; IGNORE where not scored

    @property
    def is_val(self) -> bool:
        return held_out(self.id)


def pair_sample(sid: str, tok: Tokenizer, document: str, summary: str, row_len: int) -> Sample:
    """One (document, summary) pair as a row of at most `row_len` tokens, summary scored."""
    doc, summ = tok.encode(document), tok.encode(summary)
    summ = summ[:row_len - 1]  # at least one token of context
    doc = doc[:row_len - len(summ)]
    return Sample(sid, doc + summ, [IGNORE] * len(doc) + summ)


def read_samples(src: str | Path, tok: Tokenizer | None, row_len: int) -> list[Sample]:
    """Rows of a `.jsonl(.gz)` / `.parquet` file or folder: pre-tokenized (`input_ids`, and `labels`
    or every token scored) or text pairs (`input`, `output`, tokenized with `tok`)."""
    out: list[Sample] = []
    for path, rel in corpus_files(src):
        for i, row in read_rows(path):
            where = f"{path}:{i + 1}"
            if "input_ids" in row:
                ids = row["input_ids"]
                labels = row.get("labels", ids)
                if not (isinstance(ids, list) and isinstance(labels, list) and len(ids) == len(labels)):
                    raise DataError(f"{where}: 'input_ids' and 'labels' must be lists of the same length")
                if not all(type(x) is int for x in ids) or not all(type(x) is int for x in labels):
                    raise DataError(f"{where}: 'input_ids' and 'labels' must hold integer token ids")
                if len(ids) > row_len:
                    raise DataError(f"{where}: {len(ids)} tokens, longer than the row length {row_len}")
                out.append(Sample(f"{rel}#{i}", [int(x) for x in ids], [int(x) for x in labels]))
            elif isinstance(row.get("input"), str) and isinstance(row.get("output"), str):
                if tok is None:
                    raise DataError(f"{where}: text pairs need a tokenizer (data.tokenizer)")
                out.append(pair_sample(f"{rel}#{i}", tok, row["input"], row["output"], row_len))
            else:
                raise DataError(f"{where}: expected 'input_ids' (+ 'labels') or 'input' and 'output' text fields")
    if not out:
        raise DataError(f"{src}: no samples found")
    return out


def synthetic_samples(tok: Tokenizer, row_len: int, n: int = 256, seed: int = 1234,
                      prefix: str = "synthetic") -> list[Sample]:
    """Deterministic (document, summary) pairs for smoke runs: the summary is the first word of each
    of the document's lines, so it can be learned from the document."""
    rng = np.random.default_rng(seed)
    words = ["def", "return", "self", "value", "data", "for", "in", "if", "else", "import", "class",
             "None", "True", "len", "range", "print"]
    out = []
    for k in range(n):
        lines = [" ".join(rng.choice(words, size=rng.integers(2, 6))) for _ in range(rng.integers(2, 6))]
        summary = " ".join(line.split()[0] for line in lines) + "."
        out.append(pair_sample(f"{prefix}/{k:04d}", tok, "\n".join(lines) + "\nsummary: ", summary, row_len))
    return out


def samples_fingerprint(samples: list[Sample]) -> str:
    h = hashlib.sha256()
    for s in samples:
        h.update(s.id.encode("utf-8") + b"\0")
        h.update(np.asarray(s.ids, dtype=np.int64).tobytes())
        h.update(np.asarray(s.labels, dtype=np.int64).tobytes())
    return h.hexdigest()


def _pad(samples: list[Sample], row_len: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((len(samples), row_len), dtype=dtype)
    labels = np.full((len(samples), row_len), IGNORE, dtype=np.int32)
    for i, s in enumerate(samples):
        ids[i, :len(s.ids)] = s.ids
        labels[i, :len(s.labels)] = s.labels
    return ids, labels


def write_samples(out: Path, samples: list[Sample], tok: Tokenizer, corpus_name: str, row_len: int,
                  val_samples: list[Sample] | None = None, out_kind: str | None = None) -> Path:
    """Write a samples folder atomically; validation rows are `val_samples` or the id-hash split.
    out_kind: a user's `--out`, marked as trainperf's output of that kind inside the same atomic
    replace (so a rerun may write there again)."""
    if val_samples is None:
        train = [s for s in samples if not s.is_val]
        val = [s for s in samples if s.is_val]
    else:
        train, val = samples, val_samples
    if not train or not val:
        raise DataError(f"{len(samples)} samples give an empty train or validation split; "
                        "give more samples or a validation file (--val)")
    vocab = tok.vocab_size
    for s in train + val:
        if s.ids and max(s.ids) >= vocab:
            raise DataError(f"sample {s.id}: token id {max(s.ids)} is outside the tokenizer's vocabulary ({vocab})")
    dtype = dtype_for(vocab)
    fp = with_val(samples_fingerprint(samples), samples_fingerprint(val_samples) if val_samples is not None else None)
    with atomic.atomic_dir(Path(out), overwrite=True) as tmp:
        if out_kind:
            atomic.mark_out(tmp, out_kind)
        meta: dict = {"format": FORMAT, "kind": "samples", "corpus": corpus_name, "fingerprint": fp,
                      "val_source": "hash split" if val_samples is None else "file",
                      "tokenizer": tok.name, "vocab_size": vocab, "dtype": dtype.name, "row_len": row_len}
        for name, part in (("train", train), ("val", val)):
            ids, labels = _pad(part, row_len, dtype)
            ids.tofile(tmp / f"{name}_ids.bin")
            labels.tofile(tmp / f"{name}_labels.bin")
            meta[name] = {"rows": len(part), "scored_tokens": int((labels != IGNORE).sum()),
                          "sha256": {f"{name}_ids.bin": sha256_file(tmp / f"{name}_ids.bin"),
                                     f"{name}_labels.bin": sha256_file(tmp / f"{name}_labels.bin")}}
        tok.save(tmp / "tokenizer.json")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return Path(out)


@dataclass
class SampleData(PreparedData):
    """A prepared samples folder opened for reading (memmaps)."""

    train_ids: np.ndarray
    train_labels: np.ndarray
    val_ids: np.ndarray
    val_labels: np.ndarray

    @property
    def row_len(self) -> int:
        return int(self.meta["row_len"])


def open_samples(path: Path, meta: dict, verify: bool = True) -> SampleData:
    try:
        row_len, dtype = int(meta["row_len"]), np.dtype(meta["dtype"])
        arrays = {}
        for name in ("train", "val"):
            rows = int(meta[name]["rows"])
            for part, dt in (("ids", dtype), ("labels", np.dtype(np.int32))):
                f = path / f"{name}_{part}.bin"
                if not f.is_file():
                    raise DataError(f"{f}: missing data file")
                want = rows * row_len * dt.itemsize
                if f.stat().st_size != want:
                    raise DataError(f"{f}: {f.stat().st_size} bytes, expected {want} (truncated or corrupt)")
                if verify and sha256_file(f) != meta[name]["sha256"][f.name]:
                    raise DataError(f"{f}: checksum mismatch (corrupt file)")
                arrays[f"{name}_{part}"] = np.memmap(f, dtype=dt, mode="r", shape=(rows, row_len))
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"{path / 'meta.json'}: not a valid samples folder ({e})") from None
    return SampleData(path, meta, load_tokenizer(path / "tokenizer.json"), **arrays)


def _shift(ids: np.ndarray, labels: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets for rows of `seq_len`: targets[t] = labels[t + 1], the last
    position unscored (as Hugging Face's loss shift does)."""
    x = torch.from_numpy(np.asarray(ids[:, :seq_len]).astype(np.int64))
    y = torch.full_like(x, IGNORE)
    y[:, :-1] = torch.from_numpy(np.asarray(labels[:, 1:seq_len]).astype(np.int64))
    return x, y


class SampleBatches:
    """Deterministic shuffled passes over the training rows: step k takes rows k·B .. k·B+B-1 of an
    endless sequence of permutations, each seeded by (seed, epoch), so any rank can compute any
    step's batch without state (resume, any world size) and every row is seen once per epoch."""

    def __init__(self, data: SampleData, seq_len: int, global_batch: int, seed: int):
        if seq_len > data.row_len:
            raise DataError(f"model.seq_len={seq_len} is longer than the prepared rows ({data.row_len} tokens)")
        self.data, self.seq_len, self.global_batch, self.seed = data, seq_len, global_batch, seed
        self.n = data.train_ids.shape[0]
        self._last: tuple[int, np.ndarray] | None = None

    def rows(self, step: int) -> np.ndarray:
        if self._last is not None and self._last[0] == step:
            return self._last[1]  # the loop asks twice per step (scored count, then the batch)
        pos = step * self.global_batch + np.arange(self.global_batch)
        epochs, within = pos // self.n, pos % self.n
        out = np.empty(self.global_batch, dtype=np.int64)
        for ep in np.unique(epochs):
            perm = np.random.default_rng([self.seed, int(ep)]).permutation(self.n)
            sel = epochs == ep
            out[sel] = perm[within[sel]]
        self._last = (step, out)
        return out

    def scored_tokens(self, step: int) -> int:
        """Scored targets in the whole global batch: each rank's loss is its sum over this count."""
        r = np.sort(self.rows(step))
        return int((np.asarray(self.data.train_labels[r, 1:self.seq_len]) != IGNORE).sum())

    def get(self, step: int, rank: int = 0, world: int = 1, pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        per = self.global_batch // world
        r = self.rows(step)[rank * per:(rank + 1) * per]
        x, y = _shift(self.data.train_ids[r], self.data.train_labels[r], self.seq_len)
        if pin:
            x, y = x.pin_memory(), y.pin_memory()
        return x, y
