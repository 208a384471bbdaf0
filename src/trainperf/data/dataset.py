"""Token datasets opened for training: a trainperf dataset folder, a Megatron prefix, or a blend.

    DIR/meta.json          format 2, kind "tokens": tokenizer, dtype, counts, and every piece with
                           the sha256 of its files (checked by `trainperf data verify`, not at open)
    DIR/tokenizer.json     (or tokenizer.model) the tokenizer the pieces were made with
    DIR/pieces/<name>_train.{bin,idx}, <name>_val.{bin,idx}   Megatron indexed datasets, one piece
                           per input file; DIR/pieces/<name>.json records a finished piece

A split (train or validation) is a TokenStream: the documents of one or more prefixes, in order.
Opening reads only metadata: the index files, and each .bin's size against its index.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainperf.data.corpus import VAL_THRESHOLD
from trainperf.data.indexed import IndexedTokens, is_prefix, open_prefix, parse_blend
from trainperf.data.tokenizer import Tokenizer, load_tokenizer
from trainperf.errors import DataError

FORMAT = 2
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


class TokenStream:
    """Documents of one or more prefixes (all of each, or the selected ones) as one token stream.
    `take` reads a span of the concatenated tokens (the random-window sampler); `lengths` and
    `document` serve the GPT sampler, which works on whole documents as Megatron does."""

    def __init__(self, parts: list[IndexedTokens], select: list[np.ndarray | None] | None = None):
        self.parts = parts
        self.select = select or [None] * len(parts)
        seg_part, seg_start, seg_len = [], [], []
        for i, (p, sel) in enumerate(zip(parts, self.select)):
            if sel is None:
                seg_part.append(np.array([i])), seg_start.append(np.array([0])), seg_len.append(np.array([p.n_tokens]))
                continue
            if sel.size == 0:
                continue
            # runs of consecutive selected documents read as one segment
            brk = np.flatnonzero(np.diff(sel) != 1) + 1
            s = sel[np.concatenate([[0], brk])]
            e = sel[np.concatenate([brk - 1, [sel.size - 1]])]
            starts = p.pointers[s] // p.dtype.itemsize
            ends = p.pointers[e] // p.dtype.itemsize + p.lengths[e]
            seg_part.append(np.full(s.size, i)), seg_start.append(starts), seg_len.append(ends - starts)
        self.seg_part = np.concatenate(seg_part).astype(np.int64) if seg_part else np.zeros(0, np.int64)
        self.seg_start = np.concatenate(seg_start).astype(np.int64) if seg_start else np.zeros(0, np.int64)
        lens = np.concatenate(seg_len).astype(np.int64) if seg_len else np.zeros(0, np.int64)
        self.cum = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        self.size = int(self.cum[-1])
        self._docs: np.ndarray | None = None  # documents before each part (cumulative)

    @property
    def dtype(self) -> np.dtype:
        return self.parts[0].dtype

    def take(self, start: int, n: int) -> np.ndarray:
        """Tokens start .. start+n-1 of the stream (a copy when they cross a segment)."""
        if len(self.parts) == 1 and self.select[0] is None:
            return self.parts[0].tokens[start:start + n]
        out = []
        s = int(np.searchsorted(self.cum, start, side="right")) - 1
        while n > 0 and s < self.seg_part.size:
            off = start - int(self.cum[s])
            k = min(n, int(self.cum[s + 1]) - start)
            base = int(self.seg_start[s]) + off
            out.append(self.parts[int(self.seg_part[s])].tokens[base:base + k])
            start, n, s = start + k, n - k, s + 1
        return np.concatenate(out) if len(out) != 1 else out[0]

    def windows(self, starts: np.ndarray, n: int) -> np.ndarray:
        """(len(starts), n) windows of the stream."""
        if len(self.parts) == 1 and self.select[0] is None:
            return self.parts[0].tokens[starts[:, None] + np.arange(n)[None, :]]
        return np.stack([self.take(int(s), n) for s in starts])

    def _doc_cum(self) -> np.ndarray:
        if self._docs is None:
            counts = [p.n_sequences if s is None else s.size for p, s in zip(self.parts, self.select)]
            self._docs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return self._docs

    def lengths(self) -> np.ndarray:
        """int32 tokens of every document, in stream order."""
        return np.concatenate([p.lengths if s is None else p.lengths[s] for p, s in zip(self.parts, self.select)])

    @property
    def n_documents(self) -> int:
        return int(self._doc_cum()[-1])

    def document(self, d: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Document d of the stream (its tokens from `offset`, `length` of them); O(log parts), no
        per-document table (a C4 partition has tens of millions of documents, on every rank)."""
        if len(self.parts) == 1:
            part, local = 0, d
        else:
            cum = self._doc_cum()
            part = int(np.searchsorted(cum, d, side="right")) - 1
            local = d - int(cum[part])
        sel = self.select[part]
        return self.parts[part].sequence(int(sel[local]) if sel is not None else local, offset, length)


@dataclass
class TokenData:
    """A token dataset opened for reading; `tokenizer` is None for a Megatron prefix given without
    data.tokenizer (training then needs model.vocab_size)."""

    path: Path
    meta: dict
    tokenizer: Tokenizer | None
    train: TokenStream
    val: TokenStream
    blend: list[tuple[float, TokenStream]] = field(default_factory=list)  # weighted training sources
    sampler: str = "random"  # data.sampler: how training draws windows (data/pipeline.py)

    @property
    def fingerprint(self) -> str:
        return self.meta["fingerprint"]

    @property
    def vocab_size(self) -> int:
        if self.tokenizer is not None:
            return self.tokenizer.vocab_size
        raise DataError(f"{self.path}: a Megatron dataset carries no tokenizer; set data.tokenizer "
                        "(or model.vocab_size)")


def read_meta(path: Path) -> dict:
    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise DataError(f"{meta_path}: missing; prepare the data with `trainperf data prepare`") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{meta_path}: unreadable or corrupt ({e})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: not a JSON object")
    return meta


def folder_tokenizer(path: Path) -> Tokenizer | None:
    for name in TOKENIZER_FILES:
        if (path / name).is_file():
            return load_tokenizer(path / name)
    return None


def open_folder(path: Path, meta: dict, tokenizer: Tokenizer | None = None) -> TokenData:
    """A folder trainperf prepared (meta.json format 2)."""
    if meta.get("format") != FORMAT:
        raise DataError(f"{path / 'meta.json'}: token data of format {meta.get('format')!r}, this trainperf reads "
                        f"format {FORMAT}; prepare it again with `trainperf data prepare`")
    try:
        pieces = meta["pieces"]
        train = [open_prefix(path / "pieces" / f"{p['name']}_train") for p in pieces]
        val = [open_prefix(path / "pieces" / f"{p['name']}_val") for p in pieces]
    except (KeyError, TypeError) as e:
        raise DataError(f"{path / 'meta.json'}: not a valid dataset record ({e})") from None
    if not pieces:
        raise DataError(f"{path / 'meta.json'}: lists no pieces")
    own = folder_tokenizer(path)
    if tokenizer is not None and own is not None and not _same_tokens(tokenizer, own):
        # the ids were written by the folder's tokenizer: another one would read them as other text
        raise DataError(f"data.tokenizer: not the tokenizer {path} was prepared with (its own: vocabulary "
                        f"{own.vocab_size}, given: {tokenizer.vocab_size}); drop data.tokenizer to use the folder's")
    return TokenData(path, meta, tokenizer or own, TokenStream(train), TokenStream(val))


def _same_tokens(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether two tokenizers give every id the same bytes (what training and the eval read)."""
    return a.vocab_size == b.vocab_size and np.array_equal(a.token_bytes(), b.token_bytes()) and all(
        a.decode([i]) == b.decode([i]) for i in range(a.vocab_size))


def held_out_indices(name: str, n: int) -> np.ndarray:
    """Which of a prefix's n documents are held out: the first byte of a 64-bit mix (splitmix64) of
    the document's index and the prefix's name below corpus.VAL_THRESHOLD (8/256, ~3%), as text
    documents are held out by the first byte of a hash of their id; vectorised, because a C4
    prefix has hundreds of millions of documents and every rank opens it."""
    seed = np.uint64(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))
    out = np.empty(n, dtype=bool)
    for lo in range(0, n, 1 << 24):  # a chunk at a time: bounded temporary memory
        x = np.arange(lo, min(n, lo + (1 << 24)), dtype=np.uint64) + seed
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        out[lo:lo + x.size] = (x >> np.uint64(56)) < VAL_THRESHOLD
    return out


def _prefix_fingerprint(prefixes: list[Path]) -> str:
    """A cheap identity of Megatron prefixes, for the run's log: each file's size and the first and
    last 64 KiB of each index (the header, the first lengths, the last document boundaries). A C4
    partition's .idx is near a gigabyte, too much to hash on every rank at every start."""
    h = hashlib.sha256()
    for p in prefixes:
        idx = Path(f"{p}.idx")
        size = idx.stat().st_size
        h.update(f"{size}:{Path(f'{p}.bin').stat().st_size}".encode())
        with idx.open("rb") as f:
            h.update(f.read(1 << 16))
            f.seek(max(0, size - (1 << 16)))
            h.update(f.read(1 << 16))
    return h.hexdigest()


def _prefixes_in(spec: str) -> list[tuple[float, list[Path]]]:
    """A blend spec's (weight, prefixes): a bare prefix, or a folder of prefixes (sorted), each."""
    out = []
    for w, p in parse_blend(spec):
        path = Path(p).expanduser()
        if is_prefix(path):
            out.append((w, [path]))
        elif path.is_dir():
            found = sorted(Path(str(f)[:-4]) for f in path.glob("*.idx"))
            if not found:
                raise DataError(f"{path}: holds no Megatron prefixes (*.idx) and no meta.json")
            out.append((w, found))
        elif Path(f"{path}.bin").is_file():
            raise DataError(f"{path}.idx: missing; a Megatron dataset prefix needs its .idx and .bin")
        else:
            raise DataError(f"{path}: neither a dataset folder nor a Megatron prefix (no {path}.idx)")
    return out


def check_token_source(spec: str) -> None:
    """That token data `spec` names is there: a prepared folder's meta.json, or each Megatron
    prefix's .idx and .bin (nothing is opened or read beyond that)."""
    path = Path(spec).expanduser()
    if len(spec.split()) == 1 and (path / "meta.json").is_file():
        read_meta(path)
        return
    for _, prefixes in _prefixes_in(spec):
        for prefix in prefixes:
            if not Path(f"{prefix}.bin").is_file():
                raise DataError(f"{prefix}.bin: missing; a Megatron dataset prefix needs its .idx and .bin")


def is_token_source(spec: str) -> bool:
    """Whether data.corpus names token data (a trainperf folder, Megatron prefixes, a blend) rather
    than text to tokenize."""
    parts = spec.split()
    if len(parts) > 1:
        return True
    p = Path(spec).expanduser()
    if (p / "meta.json").is_file() or is_prefix(p) or Path(f"{p}.bin").is_file():
        return True
    return p.is_dir() and any(p.glob("*.idx"))


def open_megatron(spec: str, val_spec: str = "", tokenizer: Tokenizer | None = None) -> TokenData:
    """Megatron prefixes as a dataset: `spec` is a prefix, a folder of them, or a blend 'w1 p1 w2 p2';
    `val_spec` the validation prefix(es). Without it, documents are held out by a hash of their
    index in the (first) source, as for text corpora."""
    blend = _prefixes_in(spec)
    sources = []
    for w, prefixes in blend:
        sources.append((w, [open_prefix(p) for p in prefixes]))
    if val_spec:
        val_prefixes = [p for _, ps in _prefixes_in(val_spec) for p in ps]
        val = TokenStream([open_prefix(p) for p in val_prefixes])
        streams = [(w, TokenStream(parts)) for w, parts in sources]
        val_source = "file"
    else:
        streams, val_parts, val_sel = [], [], []
        for w, parts in sources:
            train_sel = []
            for p in parts:
                is_val = held_out_indices(p.prefix.name, p.n_sequences)
                train_sel.append(np.flatnonzero(~is_val))
                val_parts.append(p), val_sel.append(np.flatnonzero(is_val))
            streams.append((w, TokenStream(parts, train_sel)))
        val = TokenStream(val_parts, val_sel)
        val_prefixes = []
        val_source = "hash split"
    all_prefixes = [p for _, ps in blend for p in ps] + val_prefixes
    dtypes = {s.dtype for _, s in streams} | {val.dtype}
    if len(dtypes) > 1:
        raise DataError(f"{spec}: prefixes of different token dtypes ({', '.join(sorted(map(str, dtypes)))})")
    meta = {"format": FORMAT, "kind": "tokens", "corpus": spec, "val_source": val_source,
            "fingerprint": _prefix_fingerprint(all_prefixes),
            "tokenizer": tokenizer.name if tokenizer is not None else "(none)",
            "vocab_size": tokenizer.vocab_size if tokenizer is not None else 0, "dtype": str(val.dtype),
            "documents": {"train": sum(s.n_documents for _, s in streams), "val": val.n_documents},
            "train": {"tokens": sum(s.size for _, s in streams)}, "val": {"tokens": val.size}}
    if val.size == 0:
        raise DataError(f"{spec}: the validation split is empty")
    train = streams[0][1] if len(streams) == 1 else TokenStream(
        [p for _, s in streams for p in s.parts], [x for _, s in streams for x in s.select])
    return TokenData(Path(spec.split()[-1]).expanduser(), meta, tokenizer, train, val,
                     blend=streams if len(streams) > 1 else [])
