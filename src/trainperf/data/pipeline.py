"""From a recipe's `[data]` section to batches: resolve the corpus, tokenize once (cached), sample.

Training batches are random windows of the train shard chosen by a generator seeded with
(seed, step): any rank can compute any step's batch without state, so a resumed run sees exactly the
batches the uninterrupted run saw, and every data-parallel rank takes its own slice of the same
global batch whatever the world size.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainperf.config import DataConfig
from trainperf.data.corpus import Document, file_documents, stdlib_documents
from trainperf.data.prepared import read_meta
from trainperf.data.samples import (IGNORE, SampleBatches, SampleData, open_samples, read_samples,
                                    samples_fingerprint, synthetic_samples, write_samples, _shift)
from trainperf.data.shards import dataset_fingerprint, open_tokens, write_dataset
from trainperf.data.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer, train_bpe
from trainperf.errors import DataError


def cache_root(cfg: DataConfig) -> Path:
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    return Path(os.environ.get("TRAINPERF_CACHE", Path.home() / ".cache" / "trainperf"))


def synthetic_documents(n_docs: int = 64, seed: int = 1234) -> list[Document]:
    """A small deterministic corpus for smoke runs: Python-like lines from a fixed vocabulary."""
    rng = np.random.default_rng(seed)
    words = ["def", "return", "self", "value", "data", "for", "in", "if", "else", "import", "class",
             "None", "True", "x", "y", "i", "len", "range", "print", "(", ")", ":", "=", "+", "[", "]"]
    docs = []
    for d in range(n_docs):
        lines = [" ".join(rng.choice(words, size=rng.integers(3, 12))) for _ in range(200)]
        docs.append(Document(f"synthetic/{d:04d}.py", "\n".join(lines) + "\n"))
    return docs


def _documents(cfg: DataConfig) -> tuple[str, list[Document]]:
    if cfg.synthetic:
        return "synthetic", synthetic_documents()
    if cfg.corpus == "stdlib":
        return "stdlib", stdlib_documents()
    return str(Path(cfg.corpus).resolve()), file_documents(cfg.corpus)


def _tokenizer_for(cfg: DataConfig, train_docs: list[Document]) -> Tokenizer:
    if cfg.tokenizer == "byte":
        return ByteTokenizer()
    if cfg.tokenizer == "bpe":
        return train_bpe((d.text for d in train_docs), cfg.bpe_vocab_size)
    return load_tokenizer(cfg.tokenizer)


def _tokenizer_key(cfg: DataConfig) -> str:
    if cfg.tokenizer in ("byte", "bpe"):
        return "byte" if cfg.tokenizer == "byte" else f"bpe{cfg.bpe_vocab_size}"
    import hashlib

    try:
        return "tok-" + hashlib.sha256(Path(cfg.tokenizer).read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise DataError(f"{cfg.tokenizer}: cannot read tokenizer file ({e.strerror})") from None


def open_dataset(path: str | Path, verify: bool = True):
    """Open a prepared folder of either kind (TokenData or SampleData, as its meta.json says); a
    missing, truncated or corrupt file is a DataError naming it."""
    path = Path(path)
    meta = read_meta(path)
    kind = meta.get("kind", "tokens")
    if kind == "samples":
        return open_samples(path, meta, verify)
    if kind == "tokens":
        return open_tokens(path, meta, verify)
    raise DataError(f"{path / 'meta.json'}: unknown kind {kind!r} (tokens or samples)")


def _check_kind(cfg: DataConfig, data):
    held = "samples" if isinstance(data, SampleData) else "tokens"
    if held != cfg.kind:
        raise DataError(f"{data.path}: holds {held} data, but data.kind is {cfg.kind!r}")
    return data


def prepare(cfg: DataConfig, out: Path | None = None, row_len: int = 0):
    """The prepared data for this config: a prepared folder as is, else tokenize into the cache
    (keyed by corpus fingerprint + tokenizer) unless it is already there. `row_len` is the length
    of a fine-tuning sample row (`data.kind = "samples"`; the model's sequence length)."""
    if not cfg.synthetic and cfg.corpus != "stdlib" and (Path(cfg.corpus) / "meta.json").exists():
        return _check_kind(cfg, open_dataset(cfg.corpus))
    if cfg.kind == "samples":
        return _prepare_samples(cfg, out, row_len)
    name, docs = _documents(cfg)
    if not docs:
        raise DataError(f"{cfg.corpus}: corpus holds no documents")
    val_docs = file_documents(cfg.val) if cfg.val else None
    train_docs = docs if val_docs is not None else [d for d in docs if not d.is_val]
    key = f"{dataset_fingerprint(docs, val_docs)[:16]}-{_tokenizer_key(cfg)}"
    if cfg.eod:
        key += "-eod" + hashlib.sha256(cfg.eod.encode()).hexdigest()[:8]
    target = out or cache_root(cfg) / key
    if out is None and (target / "meta.json").exists():
        try:
            return open_dataset(target)
        except DataError:
            pass  # a corrupt cache entry is rebuilt, not trusted
    write_dataset(target, docs, _tokenizer_for(cfg, train_docs), name, val_docs, cfg.eod)
    return open_dataset(target)


def _prepare_samples(cfg: DataConfig, out: Path | None, row_len: int) -> SampleData:
    if row_len < 2:
        raise DataError("fine-tuning samples need a row length (the model's seq_len, or --seq-len) of at least 2")
    if cfg.tokenizer == "bpe":
        raise DataError("data.tokenizer: fine-tuning samples need 'byte' or a tokenizer.json, not a BPE trained here")
    tok = _tokenizer_for(cfg, [])
    if cfg.synthetic:
        name, samples = "synthetic", synthetic_samples(tok, row_len)
        val = synthetic_samples(tok, row_len, n=64, seed=4321, prefix="synthetic-val")
    else:
        name = str(Path(cfg.corpus).resolve())
        samples = read_samples(cfg.corpus, tok, row_len)
        val = read_samples(cfg.val, tok, row_len) if cfg.val else None
    fp = samples_fingerprint(samples + (val or []))
    target = out or cache_root(cfg) / f"{fp[:16]}-{_tokenizer_key(cfg)}-samples{row_len}"
    if out is None and (target / "meta.json").exists():
        try:
            return _check_kind(cfg, open_dataset(target))
        except DataError:
            pass
    write_samples(target, samples, tok, name, row_len, val)
    return open_dataset(target)


def train_batches(data, seq_len: int, global_batch: int, seed: int):
    """The step -> batch source for prepared data of either kind."""
    if isinstance(data, SampleData):
        return SampleBatches(data, seq_len, global_batch, seed)
    return TrainBatches(data.train, seq_len, global_batch, seed)


def eval_set(data, seq_len: int, eval_bytes: int, eval_samples: int = 0, eval_documents: int = 0) -> "EvalSet":
    """The fixed validation set for prepared data of either kind."""
    if isinstance(data, SampleData):
        if eval_documents and data.val_ids.shape[0] != eval_documents:
            raise DataError(f"{data.path}: {data.val_ids.shape[0]} validation samples, "
                            f"eval.eval_documents={eval_documents} expects exactly that many")
        return build_sample_eval_set(data, seq_len, eval_samples or eval_documents)
    return build_eval_set(data, seq_len, eval_bytes, eval_samples, eval_documents)


class TrainBatches:
    """Deterministic random windows of the training shard."""

    def __init__(self, tokens: np.ndarray, seq_len: int, global_batch: int, seed: int):
        if tokens.size < seq_len + 2:
            raise DataError(f"training split has {tokens.size} tokens, fewer than one sequence of {seq_len}")
        self.tokens, self.seq_len, self.global_batch, self.seed = tokens, seq_len, global_batch, seed

    def scored_tokens(self, step: int) -> None:
        """None: every target of a window is scored, so the loss is a plain mean."""
        return None

    def global_offsets(self, step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, self.tokens.size - self.seq_len - 1, size=self.global_batch)

    def get(self, step: int, rank: int = 0, world: int = 1, pin: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for this rank's share of global batch `step`, int64 on the CPU; `pin`
        puts them in page-locked memory so the copy to a GPU can overlap compute (non_blocking)."""
        per = self.global_batch // world
        offs = self.global_offsets(step)[rank * per:(rank + 1) * per]
        idx = offs[:, None] + np.arange(self.seq_len + 1)[None, :]
        window = torch.from_numpy(self.tokens[idx].astype(np.int64))
        if pin:
            window = window.pin_memory()
        return window[:, :-1], window[:, 1:]


@dataclass
class EvalSet:
    """Fixed validation windows with the byte length of every target token."""

    inputs: list[torch.Tensor]  # (n, T) chunks, the last possibly shorter
    targets: list[torch.Tensor]
    target_bytes: int  # UTF-8 bytes the scored targets cover
    target_tokens: int
    samples: int  # sequences evaluated


def build_eval_set(data, seq_len: int, eval_bytes: int, eval_samples: int = 0, eval_documents: int = 0) -> EvalSet:
    """The held-out token stream from its start until the scored tokens cover `eval_bytes` of text
    (a fixed prefix, cut mid-document if need be: the stdlib's held-out split has one ~800 KB file,
    and cutting only at document ends made the eval 3.4x the asked size), in windows of seq_len
    (stride seq_len, so each token is scored once). With `eval_samples`, exactly that many full
    windows instead (MLPerf LLM benchmarks fix the count). With `eval_documents`, the whole split,
    which must hold exactly that many documents; `samples` is then that document count."""
    val = data.val
    if eval_documents:
        held = int(data.meta["documents"]["val"])
        if held != eval_documents:
            raise DataError(f"{data.path}: the validation split holds {held} documents, eval.eval_documents="
                            f"{eval_documents} expects exactly that many (prepare with --val FILE)")
        n_tokens = int(val.size)
    elif eval_samples:
        n_tokens = eval_samples * seq_len + 1
        if val.size < n_tokens:
            raise DataError(f"validation split has {val.size} tokens; {eval_samples} samples of {seq_len} need {n_tokens}")
    else:
        # bytes covered by tokens 1..i (token 0 is context only, never a target)
        covered = np.cumsum(data.tokenizer.token_bytes()[np.asarray(val[1:])])
        n_tokens = min(int(np.searchsorted(covered, eval_bytes)) + 2, int(val.size))
    toks = torch.from_numpy(np.asarray(val[:n_tokens]).astype(np.int64))
    nb = torch.from_numpy(data.tokenizer.token_bytes())
    n_full = (toks.numel() - 1) // seq_len
    inputs, targets = [], []
    if n_full:
        inputs.append(toks[: n_full * seq_len].view(n_full, seq_len))
        targets.append(toks[1: n_full * seq_len + 1].view(n_full, seq_len))
    rest = toks.numel() - 1 - n_full * seq_len
    if rest > 0 and not eval_samples:
        inputs.append(toks[n_full * seq_len: -1].view(1, rest))
        targets.append(toks[n_full * seq_len + 1:].view(1, rest))
    all_t = torch.cat([t.flatten() for t in targets])
    windows = n_full + (1 if rest > 0 and not eval_samples else 0)
    return EvalSet(inputs, targets, int(nb[all_t].sum()), all_t.numel(), eval_documents or windows)


def build_sample_eval_set(data: SampleData, seq_len: int, eval_samples: int = 0) -> EvalSet:
    """The first `eval_samples` validation rows (all with 0), scored where their labels say."""
    n = data.val_ids.shape[0]
    if eval_samples > n:
        raise DataError(f"{data.path}: {n} validation samples, fewer than eval.eval_samples={eval_samples}")
    n = eval_samples or n
    x, y = _shift(data.val_ids[:n], data.val_labels[:n], seq_len)
    scored = y[y != IGNORE]
    if scored.numel() == 0:
        raise DataError(f"{data.path}: the validation samples have no scored tokens")
    nb = torch.from_numpy(data.tokenizer.token_bytes())
    return EvalSet([x], [y], int(nb[scored].sum()), scored.numel(), n)
