"""Megatron's indexed dataset: the token format of Megatron-LM, NeMo and the MLPerf references.

A dataset is a path prefix P naming two files:

    P.bin   the tokens of every sequence back to back, one dtype
    P.idx   b"MMIDIDX\\x00\\x00", version (u64 = 1), dtype code (u8), sequence count S (u64),
            document count D + 1 (u64), then int32[S] sequence lengths, int64[S] byte pointers into
            P.bin, int64[D + 1] document boundaries (sequence indices, starting at 0)

(megatron/core/datasets/indexed_dataset.py; trainperf writes one sequence per document, as
Megatron's preprocess_data.py does without sentence splitting.) This module reads and writes that
format with numpy alone: no torch, no Megatron import at run time. tests/data prove it against
megatron-core's own IndexedDataset and IndexedDatasetBuilder, both ways.

Opening costs O(index): the .idx is memory-mapped, and the .bin's size is checked against what
the index says, so a truncated file is refused at once without reading its tokens.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainperf.atomic import temp_name
from trainperf.errors import DataError, file_error

HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
# Megatron's DType enum: the code stored in the .idx for each token dtype
DTYPES: dict[int, np.dtype] = {1: np.dtype(np.uint8), 2: np.dtype(np.int8), 3: np.dtype(np.int16),
                               4: np.dtype(np.int32), 5: np.dtype(np.int64), 6: np.dtype(np.float64),
                               7: np.dtype(np.float32), 8: np.dtype(np.uint16)}
CODES = {dt: code for code, dt in DTYPES.items()}
_FIXED = len(HEADER) + 8 + 1 + 8 + 8  # 34 bytes before the arrays


def token_dtype(vocab: int) -> np.dtype:
    """Megatron's choice for a vocabulary of this size (DType.optimal_dtype): uint16 below 65,500
    ids, else int32."""
    return np.dtype(np.uint16) if vocab < 65500 else np.dtype(np.int32)


def idx_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.idx")


def bin_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.bin")


def is_prefix(path: str | Path) -> bool:
    return idx_path(path).is_file()


@dataclass
class IndexedTokens:
    """One opened prefix: the index arrays (memory-mapped) and the tokens (a memmap)."""

    prefix: Path
    dtype: np.dtype
    lengths: np.ndarray  # int32[S]
    pointers: np.ndarray  # int64[S], bytes
    doc_index: np.ndarray  # int64[D + 1], sequence boundaries
    tokens: np.ndarray  # the .bin, memmap of dtype

    @property
    def n_sequences(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def n_documents(self) -> int:
        return int(self.doc_index.shape[0]) - 1

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])

    def sequence(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens of sequence i from `offset`, `length` of them (to its end when None); Megatron's
        IndexedDataset.get."""
        start = int(self.pointers[i]) // self.dtype.itemsize + offset
        n = int(self.lengths[i]) - offset if length is None else length
        return self.tokens[start:start + n]


def _read_header(path: Path) -> tuple[np.dtype, int, int]:
    try:
        with path.open("rb") as f:
            head = f.read(_FIXED)
    except FileNotFoundError:
        raise DataError(f"{path}: missing; a Megatron dataset prefix needs its .idx and .bin") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    if head[:len(HEADER)] != HEADER:
        raise DataError(f"{path}: not a Megatron index (header is not MMIDIDX)")
    if len(head) < _FIXED:
        raise DataError(f"{path}: truncated index header ({len(head)} bytes)")
    version, code, n_seq, n_doc = struct.unpack("<QBQQ", head[len(HEADER):])
    if version != VERSION:
        raise DataError(f"{path}: index version {version}, only version {VERSION} is known")
    if code not in DTYPES:
        raise DataError(f"{path}: unknown dtype code {code} (known: {', '.join(map(str, sorted(DTYPES)))})")
    return DTYPES[code], n_seq, n_doc


def open_prefix(prefix: str | Path) -> IndexedTokens:
    """Open prefix P (P.idx + P.bin); a missing file, a bad header, an unknown dtype or a file
    shorter than the index says is a one-line DataError naming the file."""
    prefix = Path(prefix)
    ipath, bpath = idx_path(prefix), bin_path(prefix)
    dtype, n_seq, n_doc = _read_header(ipath)
    want = _FIXED + n_seq * (4 + 8) + n_doc * 8
    have = ipath.stat().st_size
    if have < want:
        raise DataError(f"{ipath}: {have} bytes, the header promises {want} (truncated index)")
    if not bpath.is_file():
        raise DataError(f"{bpath}: missing; a Megatron dataset prefix needs its .idx and .bin")
    raw = np.memmap(ipath, dtype=np.uint8, mode="r")
    lengths = np.frombuffer(raw, dtype=np.int32, count=n_seq, offset=_FIXED)
    pointers = np.frombuffer(raw, dtype=np.int64, count=n_seq, offset=_FIXED + 4 * n_seq)
    docs = np.frombuffer(raw, dtype=np.int64, count=n_doc, offset=_FIXED + 12 * n_seq)
    # the last sequence's end is where the tokens end: O(1), no pass over the index
    n_tokens = int(pointers[-1]) // dtype.itemsize + int(lengths[-1]) if n_seq else 0
    size = bpath.stat().st_size
    if size < n_tokens * dtype.itemsize:
        raise DataError(f"{bpath}: {size} bytes, the index says {n_tokens * dtype.itemsize} (truncated tokens)")
    tokens = (np.memmap(bpath, dtype=dtype, mode="r", shape=(n_tokens,)) if n_tokens
              else np.zeros(0, dtype=dtype))
    return IndexedTokens(prefix, dtype, lengths, pointers, docs, tokens)


class IndexWriter:
    """Write prefix P one document at a time without holding the tokens: they stream to a temporary
    .bin; `close()` writes the .idx and renames both into place (.bin first, so an .idx never names
    a .bin that is not complete). Holds 4 bytes per document for the lengths."""

    def __init__(self, prefix: str | Path, dtype: np.dtype):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODES:
            raise DataError(f"{self.prefix}: dtype {self.dtype} has no Megatron code")
        # atomic's temporary names carry host and pid: writers on several machines can share a
        # folder, and a later run can tell a dead writer's leftovers from a live one's (atomic.temp_owner)
        self._tmp = {ext: temp_name(path(self.prefix)) for ext, path in (("bin", bin_path), ("idx", idx_path))}
        self._lengths: list[np.ndarray] = []
        # an OSError (disk full, permission) names the file being made, not its temporary
        try:
            self._bin = open(self._tmp["bin"], "wb")
        except OSError as e:
            raise file_error(e, "writing", bin_path(self.prefix)) from e

    def add(self, docs: list[np.ndarray] | list[list[int]]) -> None:
        """Append documents (one sequence each)."""
        if not docs:
            return
        arrays = [np.asarray(d, dtype=self.dtype) for d in docs]
        try:
            # not ndarray.tofile: it reports a short write (a full disk) without an errno
            self._bin.write(np.concatenate(arrays).data)
        except OSError as e:
            raise file_error(e, "writing", bin_path(self.prefix)) from e
        self._lengths.append(np.fromiter((a.size for a in arrays), dtype=np.int32, count=len(arrays)))

    def close(self) -> Path:
        name = bin_path(self.prefix)
        try:
            self._bin.flush()
            os.fsync(self._bin.fileno())
            self._bin.close()
            name = idx_path(self.prefix)
            lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32)
            write_index(self._tmp["idx"], self.dtype, lengths)
            os.replace(self._tmp["bin"], bin_path(self.prefix))
            os.replace(self._tmp["idx"], idx_path(self.prefix))
        except OSError as e:
            raise file_error(e, "writing", name) from e
        return self.prefix

    def abort(self) -> None:
        try:
            self._bin.close()
        except OSError:
            pass  # the buffered tail of a file being thrown away (a full disk refuses it again)
        for tmp in self._tmp.values():
            tmp.unlink(missing_ok=True)


def write_index(path: Path, dtype: np.dtype, lengths: np.ndarray, doc_index: np.ndarray | None = None) -> None:
    """An .idx for sequences of `lengths` (one per document unless `doc_index` says otherwise)."""
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size:
        np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    docs = np.arange(lengths.size + 1, dtype=np.int64) if doc_index is None else np.asarray(doc_index, np.int64)
    with open(path, "wb") as f:
        f.write(HEADER)
        f.write(struct.pack("<QBQQ", VERSION, CODES[np.dtype(dtype)], lengths.size, docs.size))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(docs.tobytes())
        f.flush()
        os.fsync(f.fileno())


def parse_blend(text: str) -> list[tuple[float, str]]:
    """Megatron's `--data-path w1 p1 w2 p2 ...` (or one bare prefix, weight 1) as (weight, prefix)
    pairs; a weight that is not a positive number is a DataError."""
    parts = text.split()
    if not parts:
        raise DataError(f"blend {text!r}: names no dataset (expected a prefix, or pairs 'w1 p1 w2 p2 ...')")
    if len(parts) == 1:
        return [(1.0, parts[0])]
    if len(parts) % 2:
        raise DataError(f"blend {text!r}: expected weight/prefix pairs 'w1 p1 w2 p2 ...'")
    out = []
    for w, p in zip(parts[::2], parts[1::2]):
        try:
            weight = float(w)
        except ValueError:
            raise DataError(f"blend {text!r}: weight {w!r} is not a number") from None
        if not weight > 0 or weight == float("inf"):
            raise DataError(f"blend {text!r}: weight {w!r} must be a positive number")
        out.append((weight, p))
    return out
