"""Corpora as lists of documents, split into train / validation by a stable hash of each document's id.

The default corpus is the Python standard library's own `.py` sources: every machine with Python has
them, so results compare across machines and tools. User corpora are local `.txt`, `.jsonl` / `.jsonl.gz`
/ `.json.gz` (JSON lines with a `text` field: C4's layout) or `.parquet` (a `text` column) files, or
folders of them. A separate validation source (`data.val`) replaces the hash split's held-out part.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainperf.errors import DataError

SKIP_DIRS = frozenset({"test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__"})
# A document is held out when the first byte of sha256(id) is below this: 8/256 ~ 3% of documents.
VAL_THRESHOLD = 8


def held_out(doc_id: str) -> bool:
    """Whether a document (or fine-tuning sample) with this id belongs to the validation split."""
    return hashlib.sha256(doc_id.encode("utf-8")).digest()[0] < VAL_THRESHOLD


@dataclass(frozen=True)
class Document:
    id: str  # stable identifier: path relative to the corpus root (plus a row/line number)
    text: str

    @property
    def is_val(self) -> bool:
        return held_out(self.id)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _walk_sorted(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(suffixes))
    return out


def stdlib_documents() -> list[Document]:
    """Every `.py` file under the stdlib folder, folders walked in sorted order, test folders skipped."""
    root = stdlib_root()
    docs = []
    for path in _walk_sorted(root, (".py",)):
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a handful of stdlib files are not UTF-8; skipping them is part of the definition
        docs.append(Document(path.relative_to(root).as_posix(), text))
    return docs


SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".json.gz", ".parquet")


def _is(path: Path, *suffixes: str) -> bool:
    return path.name.endswith(suffixes)


def _parquet_rows(path: Path, columns: list[str] | None):
    """Parquet rows a record batch at a time (memory bounded by one batch, not the file)."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    names = f.schema_arrow.names
    missing = [c for c in columns or [] if c not in names]
    if missing:
        shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise DataError(f"{path}: no {missing[0]!r} column (it has: {shown})")
    i = 0
    for batch in f.iter_batches(columns=columns, batch_size=1024):
        for row in batch.to_pylist():
            yield i, row
            i += 1


def read_rows(path: Path, columns: list[str] | None = None):
    """(row number, row dict) for every record of a `.jsonl`, `.jsonl.gz` / `.json.gz` (JSON lines,
    the layout C4's files have) or `.parquet` file, streamed; `columns` limits what parquet reads
    (and a parquet file without them is an error)."""
    try:
        if _is(path, ".jsonl", ".jsonl.gz", ".json.gz"):
            import gzip

            gz = path.name.endswith(".gz")
            if gz and path.stat().st_size == 0:
                raise DataError(f"{path}: empty file, not gzip data (truncated?)")
            opener = gzip.open if gz else open
            with opener(path, "rt", encoding="utf-8") as f:
                for i, line in enumerate(f):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(f"{path}:{i + 1}: not valid JSON ({e.msg})") from None
                    if not isinstance(row, dict):
                        raise DataError(f"{path}:{i + 1}: expected a JSON object per line")
                    yield i, row
            return
        if _is(path, ".parquet"):
            yield from _parquet_rows(path, columns)
            return
    except DataError:
        raise
    except (OSError, EOFError, UnicodeDecodeError, KeyError) as e:
        raise DataError(f"{path}: cannot read corpus file ({e})") from None
    except Exception as e:  # pyarrow raises its own types for a corrupt file
        raise DataError(f"{path}: cannot read corpus file ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    raise DataError(f"{path}: unsupported file type (use {', '.join(SUFFIXES)})")


def iter_documents(path: Path, rel: str) -> Iterator[Document]:
    """The documents of one corpus file, streamed (a `.txt` file is one document)."""
    if _is(path, ".txt"):
        try:
            yield Document(rel, path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: cannot read corpus file ({e})") from None
        return
    for i, row in read_rows(path, columns=["text"]):
        text = row.get("text")
        if not isinstance(text, str):
            if text is None and _is(path, ".parquet"):
                continue  # parquet nulls: empty rows
            raise DataError(f"{path}:{i + 1}: expected a string 'text' field")
        if text:
            yield Document(f"{rel}#{i}", text)


def _read_file(path: Path, rel: str) -> list[Document]:
    return list(iter_documents(path, rel))


def corpus_files(src: str | Path) -> list[tuple[Path, str]]:
    """(file, id prefix) for a corpus file or every corpus file under a folder, in sorted order."""
    src = Path(src)
    if src.is_file():
        return [(src, src.name)]
    if not src.is_dir():
        raise DataError(f"{src}: corpus path does not exist or is not readable")
    files = _walk_sorted(src, SUFFIXES)
    if not files:
        raise DataError(f"{src}: no {', '.join(SUFFIXES)} files found")
    return [(f, f.relative_to(src).as_posix()) for f in files]


def file_documents(src: str | Path) -> list[Document]:
    """Documents from a local corpus file or a folder of them (sorted order)."""
    docs: list[Document] = []
    for f, rel in corpus_files(src):
        docs.extend(_read_file(f, rel))
    return docs


def split(docs: list[Document]) -> tuple[list[Document], list[Document]]:
    train = [d for d in docs if not d.is_val]
    val = [d for d in docs if d.is_val]
    if not train or not val:
        raise DataError(f"corpus of {len(docs)} documents gives an empty train or validation split; "
                        "it needs more documents")
    return train, val


def fingerprint(docs: list[Document]) -> str:
    """sha256 over every document's id and text: changes whenever the corpus does."""
    h = hashlib.sha256()
    for d in docs:
        for part in (d.id, d.text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


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
