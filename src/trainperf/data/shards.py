"""Token shards: a prepared data folder that training reads through numpy memmaps.

    DIR/meta.json       corpus fingerprint, tokenizer, dtype, token counts and sha256 of each shard
    DIR/tokenizer.json  the tokenizer the shards were made with
    DIR/train.bin       training tokens, uint16 (vocab <= 65536) or uint32, documents back to back
    DIR/val.bin         held-out tokens, same layout
    DIR/val_index.npy   per held-out document: [tokens, bytes] (so eval can take a fixed prefix)

Folders are written aside and renamed into place, so a crash never leaves one that looks complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainperf import atomic
from trainperf.data.corpus import Document, fingerprint, split
from trainperf.data.prepared import FORMAT, PreparedData, dtype_for, sha256_file, with_val
from trainperf.data.tokenizer import Tokenizer, load_tokenizer
from trainperf.errors import DataError


def _encode(tok: Tokenizer, docs: list[Document], dtype: np.dtype,
            eod_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    ids = tok.encode_batch([d.text for d in docs])
    if eod_id is not None:
        ids = [x + [eod_id] for x in ids]
    index = np.array([[len(x), len(d.text.encode("utf-8"))] for x, d in zip(ids, docs)], dtype=np.int64)
    flat = np.fromiter((i for x in ids for i in x), dtype=dtype, count=int(index[:, 0].sum()))
    return flat, index


def dataset_fingerprint(docs: list[Document], val_docs: list[Document] | None = None) -> str:
    """The corpus fingerprint; with a separate validation source, over both (train first)."""
    return with_val(fingerprint(docs), fingerprint(val_docs) if val_docs is not None else None)


def write_dataset(out: Path, docs: list[Document], tok: Tokenizer, corpus_name: str,
                  val_docs: list[Document] | None = None, eod: str = "") -> Path:
    """Tokenize `docs` into `out`, atomically, split by id hash, or with `val_docs` as the validation
    split (all of `docs` then train; the MLPerf benchmarks evaluate on a fixed validation file).
    `eod` names a token put after every document, as Megatron's `--append-eod` (the MLPerf
    references' C4 data) does. Returns `out`."""
    if val_docs is None:
        train, val = split(docs)
    elif not docs or not val_docs:
        raise DataError(f"empty {'training' if not docs else 'validation'} corpus")
    else:
        train, val = docs, val_docs
    dtype = dtype_for(tok.vocab_size)
    eod_id = tok.token_id(eod) if eod else None
    if eod and eod_id is None:
        raise DataError(f"data.eod: {eod!r} is not a token of the tokenizer ({tok.name})")
    out = Path(out)
    with atomic.atomic_dir(out, overwrite=True) as tmp:  # a corrupt cache entry is replaced
        meta: dict = {"format": FORMAT, "kind": "tokens", "corpus": corpus_name,
                      "fingerprint": dataset_fingerprint(docs, val_docs),
                      "val_source": "hash split" if val_docs is None else "file", "eod": eod,
                      "tokenizer": tok.name, "vocab_size": tok.vocab_size, "dtype": dtype.name,
                      "documents": {"train": len(train), "val": len(val)}}
        for name, part in (("train", train), ("val", val)):
            flat, index = _encode(tok, part, dtype, eod_id)
            flat.tofile(tmp / f"{name}.bin")
            meta[name] = {"tokens": int(flat.size), "bytes": int(index[:, 1].sum()),
                          "sha256": sha256_file(tmp / f"{name}.bin")}
            if name == "val":
                np.save(tmp / "val_index.npy", index)
        tok.save(tmp / "tokenizer.json")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return out


@dataclass
class TokenData(PreparedData):
    """A prepared token-stream folder opened for reading."""

    train: np.ndarray  # memmap
    val: np.ndarray  # memmap
    val_index: np.ndarray  # (docs, 2): tokens, bytes


def open_tokens(path: Path, meta: dict, verify: bool = True) -> TokenData:
    """Open a token-shard folder whose meta.json is `meta`; a missing, truncated or corrupt shard is a
    DataError naming the file."""
    dtype = np.dtype(meta["dtype"])
    arrays = {}
    for name in ("train", "val"):
        f = path / f"{name}.bin"
        if not f.is_file():
            raise DataError(f"{f}: missing data shard")
        want = meta[name]["tokens"] * dtype.itemsize
        if f.stat().st_size != want:
            raise DataError(f"{f}: {f.stat().st_size} bytes, expected {want} (truncated or corrupt shard)")
        if verify and sha256_file(f) != meta[name]["sha256"]:
            raise DataError(f"{f}: checksum mismatch (corrupt shard)")
        arrays[name] = np.memmap(f, dtype=dtype, mode="r")
    try:
        val_index = np.load(path / "val_index.npy", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"{path / 'val_index.npy'}: missing or corrupt ({e})") from None
    tok = load_tokenizer(path / "tokenizer.json")
    return TokenData(path, meta, tok, arrays["train"], arrays["val"], val_index)
