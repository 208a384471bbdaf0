"""Tokenizers: raw bytes (vocab 256), Hugging Face `tokenizers` files (byte-level BPE trained here,
or any tokenizer.json such as Llama 3.1's), and SentencePiece `.model` files (GPT-3's C4 model,
Llama 2's tokenizer.model) through the `sentencepiece` package.

Each knows how many bytes of text each token id stands for, which is what lets the validation
metric be nats per *byte* for any tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

from trainperf.errors import DataError


class Tokenizer(Protocol):
    name: str

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def token_id(self, token: str) -> int | None:
        """The id of a vocabulary entry spelled `token` (e.g. an end-of-text token), or None."""
        ...

    def token_bytes(self) -> np.ndarray:
        """Bytes of text per token id (int64, length vocab_size); 0 for special tokens."""
        ...

    def save(self, path: Path) -> None: ...


class ByteTokenizer:
    name = "byte"

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def token_id(self, token: str) -> int | None:
        return None  # 256 byte values, no special tokens

    def token_bytes(self) -> np.ndarray:
        return np.ones(256, dtype=np.int64)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"trainperf_tokenizer": "byte"}))


class HFTokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` (GPT-2 style byte alphabet)."""

    def __init__(self, tok, name: str = "bpe"):
        self.tok = tok
        self.name = name
        self._bytes: np.ndarray | None = None

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets: the same ids for about
        # 20% less CPU, measured on C4-style text
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def token_bytes(self) -> np.ndarray:
        if self._bytes is None:
            # Byte-level BPE spells each byte as one printable character, so a token's byte count is
            # the length of its string in that alphabet. Added (special) tokens cover no text.
            from tokenizers.pre_tokenizers import ByteLevel

            alphabet = set(ByteLevel.alphabet())
            special = {t.content for t in self.tok.get_added_tokens_decoder().values()}
            out = np.zeros(self.vocab_size, dtype=np.int64)
            for tok, i in self.tok.get_vocab(with_added_tokens=True).items():
                if tok in special:
                    continue
                if not all(c in alphabet for c in tok):
                    out[i] = len(self.decode([i]).encode("utf-8"))  # not byte-level: measure it
                else:
                    out[i] = len(tok)
            self._bytes = out
        return self._bytes

    def save(self, path: Path) -> None:
        self.tok.save(str(path))


class SentencePieceTokenizer:
    """A SentencePiece model, encoded as Megatron's SentencePiece tokenizer does (ids only, no BOS or
    EOS added)."""

    def __init__(self, model: bytes, name: str):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_proto=model)
        self.model, self.name = model, name
        self._bytes: np.ndarray | None = None

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def token_id(self, token: str) -> int | None:
        i = self.sp.piece_to_id(token)
        return i if self.sp.id_to_piece(i) == token else None

    def token_bytes(self) -> np.ndarray:
        if self._bytes is None:
            out = np.zeros(self.vocab_size, dtype=np.int64)
            for i in range(self.vocab_size):
                if self.sp.is_control(i) or self.sp.is_unknown(i):
                    continue
                piece = self.sp.id_to_piece(i)
                # byte-fallback pieces stand for one byte; "▁" is the space SentencePiece marks word
                # starts with (the one it puts before a text's first word is counted too)
                out[i] = 1 if self.sp.is_byte(i) else len(piece.replace("\u2581", " ").encode("utf-8"))
            self._bytes = out
        return self._bytes

    def save(self, path: Path) -> None:
        Path(path).write_bytes(self.model)


def train_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """Train a byte-level BPE on the given (training-split) texts; deterministic for the same input."""
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = _Tok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(tok, name=f"bpe{vocab_size}")


def tokenizer_file(tok: Tokenizer) -> str:
    """The file name a tokenizer is saved under in a run or dataset folder (`save()`'s format)."""
    return "tokenizer.model" if isinstance(tok, SentencePieceTokenizer) else "tokenizer.json"


def planned_vocab(tokenizer: str, bpe_vocab_size: int) -> int:
    """The vocabulary a run with data.tokenizer = `tokenizer` will have, without preparing any data:
    the byte tokenizer's, at most `bpe_vocab_size` for a BPE the run trains, or a tokenizer file's."""
    if tokenizer == "byte":
        return ByteTokenizer().vocab_size
    if tokenizer == "bpe":
        return bpe_vocab_size
    return load_tokenizer(tokenizer).vocab_size


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A tokenizer saved by `save()`: ours (byte), any HF `tokenizer.json`, or a SentencePiece `.model`."""
    path = Path(path)
    if path.suffix == ".model":
        try:
            return SentencePieceTokenizer(path.read_bytes(), name=f"file:{path.name}")
        except OSError as e:
            raise DataError(f"{path}: cannot read tokenizer ({e.strerror})") from None
        except RuntimeError as e:  # sentencepiece's parse failure
            raise DataError(f"{path}: not a valid SentencePiece model ({str(e).splitlines()[0]})") from None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read tokenizer ({e})") from None
    if raw.get("trainperf_tokenizer") == "byte":
        return ByteTokenizer()
    from tokenizers import Tokenizer as _Tok

    try:
        return HFTokenizer(_Tok.from_file(str(path)), name=f"file:{path.name}")
    except Exception as e:  # tokenizers raises a bare Exception on a malformed file
        raise DataError(f"{path}: not a valid tokenizer.json ({e})") from None
