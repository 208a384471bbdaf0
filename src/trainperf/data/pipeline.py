"""From a recipe's `[data]` section to batches: resolve the data, tokenize once (cached), sample.

`data.corpus` is text to tokenize (the stdlib, or local files: prepared once into the cache, keyed
by the files' names, sizes and times and the tokenizer), or token data as it is: a folder
`trainperf data prepare` wrote, a Megatron `.bin/.idx` prefix, a folder of prefixes, or a blend
`w1 p1 w2 p2`. Two samplers (`data.sampler`): "random", windows at random offsets of the
training stream drawn from (seed, step); "gpt", Megatron's GPT-dataset windows (data/gpt.py), as
the MLPerf references sample. Either way any rank can compute any step's batch without state, so
a resumed run sees exactly the batches the uninterrupted run saw, and every data-parallel rank
takes its own slice of the same global batch whatever the world size.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainperf.config import DataConfig
from trainperf.data.dataset import (TokenData, check_token_source, is_token_source, open_folder, open_megatron,
                                    read_meta)
from trainperf.data.gpt import GPTBatches
from trainperf.data.prepare import dataset_kind, list_inputs, prepare_corpus, refuse_foreign, tokenizer_key
from trainperf.data.prepared import FORMAT as SAMPLES_FORMAT
from trainperf.data.samples import (IGNORE, SampleBatches, SampleData, open_samples, read_samples,
                                    samples_fingerprint, synthetic_samples, write_samples, _shift)
from trainperf.data.corpus import corpus_files
from trainperf.data.corpus import synthetic_documents  # noqa: F401  (re-exported: tests and tools use it here)
from trainperf.data.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer
from trainperf.errors import DataError


def cache_root(cfg: DataConfig) -> Path:
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    return Path(os.environ.get("TRAINPERF_CACHE", Path.home() / ".cache" / "trainperf"))


def _corpus_spec(cfg: DataConfig) -> str:
    return "synthetic" if cfg.synthetic else cfg.corpus


def open_dataset(path: str | Path, tokenizer: Tokenizer | None = None):
    """Open a prepared folder of either kind (token pieces or fine-tuning samples, as its meta.json
    says). Opening reads metadata only; sizes are checked, checksums are `trainperf data verify`'s."""
    path = Path(path)
    meta = read_meta(path)
    kind = meta.get("kind", "tokens")
    if kind == "samples":
        if meta.get("format") != SAMPLES_FORMAT:
            raise DataError(f"{path / 'meta.json'}: samples of format {meta.get('format')!r}, expected {SAMPLES_FORMAT}")
        return open_samples(path, meta, verify=False)
    if kind == "tokens":
        return open_folder(path, meta, tokenizer)
    raise DataError(f"{path / 'meta.json'}: unknown kind {kind!r} (tokens or samples)")


def _check_kind(cfg: DataConfig, data):
    held = "samples" if isinstance(data, SampleData) else "tokens"
    if held != cfg.kind:
        raise DataError(f"{data.path}: holds {held} data, but data.kind is {cfg.kind!r}")
    return data


def _given_tokenizer(cfg: DataConfig) -> Tokenizer | None:
    """data.tokenizer for token data that carries none (a Megatron prefix): a file, or 'byte'."""
    if cfg.tokenizer == "byte":
        return ByteTokenizer()
    if cfg.tokenizer == "bpe":
        return None
    return load_tokenizer(cfg.tokenizer)


def check_source(cfg: DataConfig) -> None:
    """That data.corpus, data.val and data.tokenizer name data that is there (paths, metadata and
    the tokenizer file; no tokens read), so a run refuses a wrong path before it makes its folder."""
    if cfg.synthetic:
        return
    for spec in (cfg.corpus, cfg.val):
        if not spec or spec == "stdlib":
            continue
        if is_token_source(spec):
            check_token_source(spec)
        else:
            corpus_files(spec)
    if cfg.tokenizer not in ("byte", "bpe"):
        load_tokenizer(cfg.tokenizer)


def open_tokens_source(cfg: DataConfig):
    """data.corpus as token data, read as it is."""
    folder = Path(cfg.corpus).expanduser()
    if len(cfg.corpus.split()) == 1 and (folder / "meta.json").is_file():
        if cfg.val:
            raise DataError(f"data.val: {folder} is a prepared folder with its own validation split; prepare it "
                            "with --val instead")
        given = _given_tokenizer(cfg) if cfg.tokenizer not in ("bpe", "byte") else None
        return open_dataset(folder, given)
    return open_megatron(cfg.corpus, cfg.val, _given_tokenizer(cfg))


def prepare(cfg: DataConfig, out: Path | None = None, row_len: int = 0, workers: int = 0,
            shard: tuple[int, int] | None = None):
    """The prepared data for this config: token data as it is, else tokenize into `out` or the
    cache unless it is already there. `row_len` is the length of a fine-tuning sample row
    (`data.kind = "samples"`; the model's sequence length). With `shard`, only that share of the
    pieces is made and None is returned."""
    if not cfg.synthetic and cfg.corpus != "stdlib" and is_token_source(cfg.corpus):
        data = _check_kind(cfg, open_tokens_source(cfg))
    elif cfg.kind == "samples":
        data = _prepare_samples(cfg, out, row_len)
    else:
        corpus = _corpus_spec(cfg)
        name = corpus if corpus in ("stdlib", "synthetic") else str(Path(corpus).resolve())
        target = out
        if target is None:
            key = hashlib.sha256(json.dumps([name, [i.stamp for i in list_inputs(corpus, cfg.val)], cfg.val,
                                             tokenizer_key(cfg.tokenizer, cfg.bpe_vocab_size), cfg.eod]).encode())
            target = cache_root(cfg) / f"{key.hexdigest()[:16]}-{tokenizer_key(cfg.tokenizer, cfg.bpe_vocab_size)}"
        done = prepare_corpus(target, corpus, cfg.tokenizer, cfg.bpe_vocab_size, cfg.val, cfg.eod,
                              workers=workers, shard=shard, corpus_name=name)
        if done is None:
            return None
        data = open_dataset(done)
    if isinstance(data, TokenData):
        data.sampler = cfg.sampler
    return data


def _prepare_samples(cfg: DataConfig, out: Path | None, row_len: int) -> SampleData:
    if row_len < 2:
        raise DataError("fine-tuning samples need a row length (the model's seq_len, or --seq-len) of at least 2")
    if cfg.tokenizer == "bpe":
        raise DataError("data.tokenizer: fine-tuning samples need 'byte' or a tokenizer file, not a BPE trained here")
    if out is not None:
        refuse_foreign(out, kind="samples")
    tok = ByteTokenizer() if cfg.tokenizer == "byte" else load_tokenizer(cfg.tokenizer)
    if cfg.synthetic:
        name, samples = "synthetic", synthetic_samples(tok, row_len)
        val = synthetic_samples(tok, row_len, n=64, seed=4321, prefix="synthetic-val")
    else:
        name = str(Path(cfg.corpus).resolve())
        samples = read_samples(cfg.corpus, tok, row_len)
        val = read_samples(cfg.val, tok, row_len) if cfg.val else None
    fp = samples_fingerprint(samples + (val or []))
    target = out or cache_root(cfg) / f"{fp[:16]}-{tokenizer_key(cfg.tokenizer, 0)}-samples{row_len}"
    if out is None and (target / "meta.json").exists():
        try:
            return _check_kind(cfg, open_dataset(target))
        except DataError:
            pass
    write_samples(target, samples, tok, name, row_len, val, out_kind=dataset_kind("samples") if out else None)
    return open_dataset(target)


def train_batches(data, seq_len: int, global_batch: int, seed: int, num_samples: int | None = None):
    """The step -> batch source for prepared data of either kind; token data is sampled as
    `data.sampler` says (random windows, or Megatron's GPT dataset: with `num_samples`, the index
    Megatron builds for that many training samples, else one epoch's)."""
    if isinstance(data, SampleData):
        return SampleBatches(data, seq_len, global_batch, seed)
    if data.blend:
        from trainperf.data.blend import BlendBatches

        return BlendBatches(data.blend, seq_len, global_batch, seed)
    if getattr(data, "sampler", "random") == "gpt":
        return GPTBatches(data.train, seq_len, global_batch, seed, num_samples)
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

    def __init__(self, tokens, seq_len: int, global_batch: int, seed: int):
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
        window = torch.from_numpy(np.asarray(self.tokens.windows(offs, self.seq_len + 1)).astype(np.int64))
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
    tok = data.tokenizer
    if tok is None:
        raise DataError(f"{data.path}: the eval counts bytes of text, so it needs the tokenizer: set data.tokenizer")
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
        # bytes covered by tokens 1..i (token 0 is context only, never a target), read a chunk at a
        # time until they reach eval_bytes: a large validation split is not read whole
        per_token, covered, start = tok.token_bytes(), 0, 1
        n_tokens = int(val.size)
        while start < val.size:
            chunk = np.cumsum(per_token[np.asarray(val.take(start, min(1 << 20, val.size - start)))]) + covered
            i = int(np.searchsorted(chunk, eval_bytes))
            if i < chunk.size:
                n_tokens = min(start + i + 1, int(val.size))
                break
            covered, start = int(chunk[-1]), start + chunk.size
    toks = torch.from_numpy(np.asarray(val.take(0, n_tokens)).astype(np.int64))
    nb = torch.from_numpy(tok.token_bytes())
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
