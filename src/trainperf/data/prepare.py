"""`trainperf data prepare`: text corpus -> a dataset of Megatron indexed pieces, streamed.

Each input file becomes one piece (its training and held-out documents as two prefixes), written
by one worker a batch of documents at a time, so memory stays bounded whatever the corpus size.
A piece appears whole or not at all: its .bin/.idx are renamed into place, then its record
`pieces/<name>.json`, which names the settings it was made with. A rerun of the same command
keeps the pieces whose record matches and makes only the rest, so a killed prepare resumes, and
separate processes (`--shard I/N`, e.g. a Slurm array) can make the pieces of one corpus. The
last step (any run that finds every piece) writes meta.json: an index over the pieces, no token
rewritten.

`--out` may name a new or empty folder, or one trainperf made (it has prepare.json); any other
existing folder is refused and left as it was. Everything that can be refused (the inputs, the
tokenizer, --eod, an empty split) is checked before anything is written. A complete dataset already
in `--out` is never touched until its replacement is complete: a prepare that would change it builds
the new one in a staging folder inside `--out` (`.next-<settings>`; a rerun of the same command
resumes there, its unchanged pieces hard-linked from the old dataset) and swaps it in at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Iterator

from trainperf import atomic
from trainperf.data.corpus import (SUFFIXES, Document, corpus_files, held_out, iter_documents, stdlib_documents,
                                   synthetic_documents)
from trainperf.data.dataset import FORMAT, TOKENIZER_FILES, open_folder, read_meta
from trainperf.data.indexed import IndexWriter, token_dtype
from trainperf.data.prepared import sha256_file, with_val
from trainperf.data.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer, train_bpe
from trainperf.errors import DataError, UsageError, file_error

BATCH_DOCS = 2000  # documents per encode_batch call (the tokenizer threads over a batch)
BATCH_BYTES = 16 << 20  # ... or this much text, whichever comes first: bounds a worker's memory
_PIECE_FILE = re.compile(r"^[tv]\d{5}(?:_train|_val)?\.(?:bin|idx|json)$")
# the file a piece's temporary becomes: its .bin or .idx, or its record
_PIECE_TEMP = re.compile(r"^\.([tv]\d{5}(?:_(?:train|val)\.(?:bin|idx)|\.json))\.")
_STAGING = re.compile(r"^\.next-[0-9a-f]{16}$")  # a staging folder inside --out (see the module doc)


@dataclass(frozen=True)
class Input:
    """One input of the corpus, which becomes one piece."""

    name: str  # piece name: t00000 (training source), v00000 (validation source)
    kind: str  # "file", "stdlib" or "synthetic"
    path: str  # the file ("" for the built-in corpora)
    rel: str  # document id prefix
    role: str  # "split" (held out by hash), "train" or "val"
    stamp: str  # size and mtime of the file: a changed file is prepared again


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def list_inputs(corpus: str, val: str = "") -> list[Input]:
    """The pieces of a corpus (and of a separate validation source), in order."""
    role = "train" if val else "split"
    if corpus in ("stdlib", "synthetic"):
        # the built-in corpora are one piece each: their documents are many small files
        ins = [Input("t00000", corpus, "", corpus, role, corpus)]
    else:
        ins = [Input(f"t{i:05d}", "file", str(f), rel, role, _stamp(f)) for i, (f, rel) in enumerate(_files(corpus))]
    if val:
        ins += [Input(f"v{i:05d}", "file", str(f), rel, "val", _stamp(f)) for i, (f, rel) in enumerate(_files(val))]
    if len(ins) > 99999:
        raise DataError(f"{corpus}: {len(ins)} files; at most 99,999 inputs (merge small files)")
    return ins


def _files(src: str) -> list[tuple[Path, str]]:
    # a folder's other files are skipped (`skipped_files` lists them); a file named on its own must be
    # one the corpus reader takes: asking for another kind is a bad argument
    files = corpus_files(src)
    if Path(src).is_file() and not src.endswith(SUFFIXES):
        raise UsageError(f"{src}: unsupported corpus file type (use {', '.join(SUFFIXES)})")
    return files


def skipped_files(src: str) -> list[Path]:
    """The files under a folder source that the prepare does not read (not corpus files, or in a
    folder the corpus walk skips, corpus.SKIP_DIRS); none for a file or a built-in corpus."""
    root = Path(src)
    if src in ("stdlib", "synthetic") or not root.is_dir():
        return []
    read = {f for f, _ in corpus_files(src)}
    return sorted(Path(d, f) for d, _, fs in os.walk(root) for f in fs if Path(d, f) not in read)


def documents_of(inp: Input) -> Iterator[Document]:
    if inp.kind == "stdlib":
        return iter(stdlib_documents())
    if inp.kind == "synthetic":
        return iter(synthetic_documents())
    return iter_documents(Path(inp.path), inp.rel)


def tokenizer_key(spec: str, vocab: int) -> str:
    if spec in ("byte", "bpe"):
        return "byte" if spec == "byte" else f"bpe{vocab}"
    try:
        return "tok-" + hashlib.sha256(Path(spec).read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise DataError(f"{spec}: cannot read tokenizer file ({e.strerror})") from None


def _tokenizer_file(spec: str) -> str:
    return "tokenizer.model" if spec.endswith(".model") else "tokenizer.json"


# --- the --out rule -----------------------------------------------------------------------------

def refuse_foreign(out: Path, kind: str = "tokens") -> None:
    """`data prepare --out` follows the one rule for every output folder (`atomic.check_out`): new,
    empty, or one trainperf made for this kind of dataset; anything else is refused, untouched."""
    atomic.check_out(out, dataset_kind(kind))


def dataset_kind(kind: str) -> str:
    """The `--out` marker's kind for a prepared folder of `kind` ("tokens" or "samples")."""
    return f"{kind} dataset"


def _settings_of(folder: Path) -> dict | None:
    """The settings the prepare in `folder` was made with (its prepare.json); None when it has none."""
    marker = folder / "prepare.json"
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"{marker}: unreadable ({e})") from None


def _work_folder(out: Path, settings: dict, jobs: list[Job]) -> Path:
    """Where this prepare builds: `out` itself, unless `out` holds a complete dataset (meta.json)
    other than the one asked for; that one stays whole while the new one is built in a staging
    folder inside `out` (named by the settings, so a rerun resumes there)."""
    if not (out / "meta.json").exists() or (_settings_of(out) == settings and _assembled(out, jobs)):
        return out
    return out / f".next-{jobs[0].settings_key[:16]}"


def _claim(folder: Path, settings: dict) -> None:
    """Make `folder` hold a prepare with these settings. Files of a prepare with other settings (or of
    one whose prepare.json is gone: a swap cut short) are removed, nothing else; a complete dataset
    is never here when they differ (`_work_folder`)."""
    if _settings_of(folder) == settings:
        _mkdir(folder / "pieces")
        return
    _remove_ours(folder)
    _mkdir(folder / "pieces")
    atomic.write_json(folder / "prepare.json", settings)


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise file_error(e, "creating", folder) from e


def _remove_ours(out: Path) -> None:
    """The files a prepare with other settings made (and only those)."""
    (out / "meta.json").unlink(missing_ok=True)
    (out / "prepare.json").unlink(missing_ok=True)
    for name in TOKENIZER_FILES:
        (out / name).unlink(missing_ok=True)
    pieces = out / "pieces"
    if pieces.is_dir():
        for p in pieces.iterdir():
            if _PIECE_FILE.match(p.name):
                p.unlink()


def _link(src: Path, dst: Path) -> None:
    """`dst` becomes the finished file `src` (a hard link; a copy where links are refused)."""
    tmp = atomic.temp_name(dst)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise file_error(e, "writing", dst) from e


def _link_finished(out: Path, work: Path, jobs: list[Job]) -> None:
    """Into a staging folder: the pieces of `out`'s dataset that this prepare would make again as
    they are (same settings, unchanged file)."""
    for j in jobs:
        name = j.inp.name
        if (piece_record(work, name) or {}).get("key") == j.key or (piece_record(out, name) or {}).get("key") != j.key:
            continue
        # the record last: a record names a whole piece
        for f in [f"{name}_{s}.{e}" for s in ("train", "val") for e in ("bin", "idx")] + [f"{name}.json"]:
            _link(out / "pieces" / f, work / "pieces" / f)


def _swap_in(out: Path, new: Path) -> None:
    """Replace the dataset in `out` by the complete one in staging folder `new`. Cut short, it leaves
    `out` without meta.json (nothing presented as complete) and either without prepare.json (a rerun
    starts over) or with the new one (a rerun keeps the pieces already moved)."""
    try:
        (out / "meta.json").unlink(missing_ok=True)
        (out / "prepare.json").unlink(missing_ok=True)  # its tokenizer is about to be replaced
        for name in TOKENIZER_FILES:
            if (new / name).is_file():
                os.replace(new / name, out / name)
            else:
                (out / name).unlink(missing_ok=True)
        os.replace(new / "prepare.json", out / "prepare.json")
        pieces = out / "pieces"
        pieces.mkdir(exist_ok=True)
        fresh = sorted((p.name for p in (new / "pieces").iterdir() if _PIECE_FILE.match(p.name)),
                       key=lambda n: n.endswith(".json"))  # records last
        for p in pieces.iterdir():
            if _PIECE_FILE.match(p.name) and p.name not in fresh:
                p.unlink()
        for name in fresh:
            os.replace(new / "pieces" / name, pieces / name)
        atomic.sync_dir(pieces)
        os.replace(new / "meta.json", out / "meta.json")
        atomic.sync_dir(out)
    except OSError as e:
        raise file_error(e, "replacing", e.filename or out) from e


def _remove_staging(out: Path) -> None:
    """Every staging folder in `out`, once a dataset is put in place: other settings' were abandoned
    for it. One that cannot be removed is only a leftover, not a failure of the prepare."""
    for p in out.iterdir():
        if _STAGING.match(p.name) and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


# --- one piece ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    out: str
    inp: Input
    settings_key: str
    tokenizer: str  # "byte", or the tokenizer file inside out
    eod: str

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.settings_key}|{self.inp.rel}|{self.inp.stamp}|{self.inp.role}".encode()).hexdigest()


def piece_record(out: Path, name: str) -> dict | None:
    try:
        return json.loads((out / "pieces" / f"{name}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def make_piece(job: Job) -> dict:
    """Tokenize one input into pieces/<name>_{train,val}.{bin,idx} and record it; returns the record."""
    out, inp = Path(job.out), job.inp
    tok: Tokenizer = ByteTokenizer() if job.tokenizer == "byte" else load_tokenizer(out / job.tokenizer)
    eod = eod_id(tok, job.eod)
    dtype = token_dtype(tok.vocab_size)
    base = out / "pieces" / inp.name
    writers = {s: IndexWriter(Path(f"{base}_{s}"), dtype) for s in ("train", "val")}
    fp = hashlib.sha256()  # corpus.fingerprint's hash over every document of the input, streamed
    count = {s: {"documents": 0, "tokens": 0, "bytes": 0} for s in ("train", "val")}

    def flush(batch: list[Document]) -> None:
        ids = tok.encode_batch([d.text for d in batch])
        raw = [d.text.encode("utf-8") for d in batch]
        for d, r in zip(batch, raw):
            for part in (d.id.encode("utf-8"), r):
                fp.update(len(part).to_bytes(8, "little"))
                fp.update(part)
        splits = [_split_of(d, inp.role) for d in batch]
        for split in ("train", "val"):
            keep = [i for i, s in enumerate(splits) if s == split]
            if not keep:
                continue
            docs = [ids[i] + [eod] for i in keep] if eod is not None else [ids[i] for i in keep]
            writers[split].add(docs)
            c = count[split]
            c["documents"] += len(docs)
            c["tokens"] += sum(map(len, docs))
            c["bytes"] += sum(len(raw[i]) for i in keep)

    try:
        batch: list[Document] = []
        size = 0
        for doc in documents_of(inp):
            batch.append(doc)
            size += len(doc.text)
            if len(batch) >= BATCH_DOCS or size >= BATCH_BYTES:
                flush(batch)
                batch, size = [], 0
        if batch:
            flush(batch)
        for w in writers.values():
            w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    rec = {"name": inp.name, "source": inp.rel, "role": inp.role, "key": job.key, "dtype": dtype.name,
           "fingerprint": fp.hexdigest(),
           **{s: {**count[s],
                  "sha256": {ext: sha256_file(Path(f"{base}_{s}.{ext}")) for ext in ("bin", "idx")}}
              for s in ("train", "val")}}
    atomic.write_json(out / "pieces" / f"{inp.name}.json", rec)
    return rec


def eod_id(tok: Tokenizer, eod: str) -> int | None:
    """The id of the --eod token (None without one); a token the tokenizer lacks is a bad argument."""
    if not eod:
        return None
    i = tok.token_id(eod)
    if i is None:
        raise UsageError(f"--eod (data.eod) {eod!r}: not a token of the tokenizer ({tok.name})")
    return i


def _split_of(doc: Document, role: str) -> str:
    if role == "split":
        return "val" if held_out(doc.id) else "train"
    return role


def _init_worker(threads: int) -> None:
    # each worker's tokenizer threads share the cores with the other workers
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


# --- the whole prepare --------------------------------------------------------------------------

def prepare_corpus(out: Path, corpus: str, tokenizer: str = "bpe", vocab: int = 4096, val: str = "",
                   eod: str = "", workers: int = 0, shard: tuple[int, int] | None = None,
                   corpus_name: str = "") -> Path | None:
    """Prepare `corpus` into `out` (see the module doc). Returns `out` once meta.json is written;
    None when `shard` made only its share of the pieces."""
    out = Path(out)
    inputs = list_inputs(corpus, val)
    tok_key = tokenizer_key(tokenizer, vocab)
    # what the pieces share; each piece's own key adds its file's size and time, so a changed
    # file remakes its piece only
    settings = {"format": FORMAT, "corpus": corpus_name or corpus, "val": val, "tokenizer": tok_key, "eod": eod,
                "inputs": [[i.name, i.rel, i.role] for i in inputs]}
    settings_key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    refuse_foreign(out)
    if tokenizer != "bpe":  # a bad tokenizer file or --eod fails here, in one line
        eod_id(ByteTokenizer() if tokenizer == "byte" else load_tokenizer(tokenizer), eod)
    _check_splits(inputs, settings["corpus"], val)
    jobs = [Job(str(out), inp, settings_key, "", eod) for inp in inputs]
    work = _work_folder(out, settings, jobs)
    if work == out and shard is None and _assembled(out, jobs) and _settings_of(out) == settings:
        return out
    trained = _train_bpe(out, work, settings, vocab, inputs, eod) if tokenizer == "bpe" else None
    # nothing was written before this line
    atomic.mark_out(out, dataset_kind("tokens"))
    _claim(work, settings)
    tok_file = _place_tokenizer(out, work, tokenizer, settings, trained)
    jobs = [Job(str(work), inp, settings_key, tok_file, eod) for inp in inputs]
    if work != out:
        _link_finished(out, work, jobs)
    todo = [j for j in jobs if (piece_record(work, j.inp.name) or {}).get("key") != j.key]
    if not todo and shard is None and _assembled(work, jobs):
        return _put_in_place(out, work)
    if todo:
        (work / "meta.json").unlink(missing_ok=True)  # it would describe pieces about to change
    _sweep_temp(work / "pieces")
    if shard is not None:
        todo = [j for j in todo if jobs.index(j) % shard[1] == shard[0]]
    _run_jobs(todo, workers)
    if shard is not None:
        return None
    records = [piece_record(work, j.inp.name) for j in jobs]
    missing = [j.inp.name for j, r in zip(jobs, records) if (r or {}).get("key") != j.key]
    if missing:
        raise DataError(f"{work}: pieces {', '.join(missing[:5])} are not finished")
    assemble(work, records, settings, tokenizer_name(tokenizer, vocab))
    return _put_in_place(out, work)


def _put_in_place(out: Path, work: Path) -> Path:
    if work != out:
        _swap_in(out, work)
    _remove_staging(out)
    return out


def _check_splits(inputs: list[Input], corpus: str, val: str) -> None:
    """Refuse, before anything is written, a corpus that leaves the training or the validation split
    empty; reads only until it meets a document of each."""
    for split in ("train", "val"):
        ins = [i for i in inputs if i.role in ("split", split)]
        if any(i.kind != "file" for i in ins):
            continue  # the built-in corpora have both
        docs = (d for i in ins for d in documents_of(i) if _split_of(d, i.role) == split)
        if next(docs, None) is None:
            raise _empty_split(split, corpus, val)


def _empty_split(split: str, corpus: str, val: str) -> DataError:
    if split == "val" and val:
        return DataError(f"{val}: the validation split is empty; the validation source has no documents")
    return DataError(f"{corpus}: the {'training' if split == 'train' else 'validation'} split is empty; "
                     "the corpus needs more documents")


def _assembled(out: Path, jobs: list[Job]) -> bool:
    try:
        meta = json.loads((out / "meta.json").read_text())
        return [p.get("key") for p in meta["pieces"]] == [j.key for j in jobs]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def tokenizer_name(spec: str, vocab: int) -> str:
    if spec in ("byte", "bpe"):
        return "byte" if spec == "byte" else f"bpe{vocab}"
    return f"file:{Path(spec).name}"


def _kept_tokenizer(out: Path, work: Path, settings: dict, name: str) -> Path | None:
    """The tokenizer file a prepare with these settings already placed (in `work`, or in `out` for a
    staging folder): pieces kept from that prepare were made with it."""
    for folder in dict.fromkeys((work, out)):
        if _settings_of(folder) == settings and (folder / name).is_file():
            return folder / name
    return None


def _train_bpe(out: Path, work: Path, settings: dict, vocab: int, inputs: list[Input], eod: str) -> Tokenizer | None:
    """A BPE trained on the training documents only, streamed file by file, with --eod checked; None
    when one made with these settings is kept."""
    if _kept_tokenizer(out, work, settings, "tokenizer.json"):
        return None
    texts = (d.text for inp in inputs if inp.role != "val" for d in documents_of(inp)
             if _split_of(d, inp.role) == "train")
    tok = train_bpe(texts, vocab)
    eod_id(tok, eod)
    return tok


def _place_tokenizer(out: Path, work: Path, spec: str, settings: dict, trained: Tokenizer | None) -> str:
    """The tokenizer file inside `work` that the workers load ("byte" for the byte tokenizer)."""
    name = _tokenizer_file(spec)
    kept = _kept_tokenizer(out, work, settings, name)
    if kept is not None and kept.parent != work:
        _link(kept, work / name)
    elif kept is None:
        with atomic.atomic_path(work / name) as tmp:
            if spec == "byte":
                ByteTokenizer().save(tmp)
            elif trained is not None:
                trained.save(tmp)
            else:
                tmp.write_bytes(Path(spec).read_bytes())
    return "byte" if spec == "byte" else name


def _sweep_temp(pieces: Path) -> None:
    """Half-written piece files (a piece's .bin/.idx, or its record) of writers on this machine
    that are no longer running (a killed prepare's); another machine's, or a live writer's (a
    concurrent --shard), are left alone."""
    host = socket.gethostname()
    for p in pieces.iterdir():
        piece = _PIECE_TEMP.match(p.name)
        owner = atomic.temp_owner(p.name, piece.group(1)) if piece else None
        if owner and owner[0] == host and not _alive(owner[1]):
            p.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed worker whose parent died too can linger as a zombie until someone reaps it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _run_jobs(jobs: list[Job], workers: int) -> None:
    n = min(workers or os.cpu_count() or 1, len(jobs))
    if n <= 1:
        for j in jobs:
            make_piece(j)
        return
    cores = os.cpu_count() or 1
    with ProcessPoolExecutor(n, mp_context=get_context("spawn"), initializer=_init_worker,
                             initargs=(max(1, cores // n),)) as pool:
        try:
            for f in [pool.submit(make_piece, j) for j in jobs]:
                f.result()  # the first failure (a DataError naming its file) ends the prepare
        except BrokenProcessPool:
            raise DataError("a prepare worker died (out of memory, or killed); run the same command again: "
                            "the finished pieces are kept") from None


def assemble(out: Path, records: list[dict], settings: dict, tok_name: str) -> None:
    """meta.json over the finished pieces: counts, checksums, the dataset fingerprint."""
    tok = load_tokenizer(out / "tokenizer.json") if (out / "tokenizer.json").is_file() else None
    if tok is None and (out / "tokenizer.model").is_file():
        tok = load_tokenizer(out / "tokenizer.model")
    total = {s: {k: sum(r[s][k] for r in records) for k in ("documents", "tokens", "bytes")} for s in ("train", "val")}
    for s in ("train", "val"):
        if total[s]["documents"] == 0:  # _check_splits refused this up front; a file changed since
            raise _empty_split(s, settings["corpus"], settings["val"])

    def fp(roles: set[str]) -> str:
        hs = [r["fingerprint"] for r in records if r["role"] in roles]
        return hs[0] if len(hs) == 1 else hashlib.sha256("".join(hs).encode()).hexdigest()

    val_file = bool(settings["val"])
    # one input keeps the value a whole-corpus sha256 over its documents gives (corpus.fingerprint)
    fingerprint = with_val(fp({"train"}), fp({"val"})) if val_file else fp({"split"})
    meta = {"format": FORMAT, "kind": "tokens", "corpus": settings["corpus"], "fingerprint": fingerprint,
            "val_source": "file" if val_file else "hash split", "eod": settings["eod"], "tokenizer": tok_name,
            "vocab_size": tok.vocab_size if tok else 0, "dtype": records[0]["dtype"],
            "documents": {s: total[s]["documents"] for s in ("train", "val")},
            "train": {k: total["train"][k] for k in ("tokens", "bytes")},
            "val": {k: total["val"][k] for k in ("tokens", "bytes")},
            "pieces": [{"name": r["name"], "source": r["source"], "role": r["role"], "key": r["key"],
                        "documents": {s: r[s]["documents"] for s in ("train", "val")},
                        "tokens": {s: r[s]["tokens"] for s in ("train", "val")},
                        "sha256": {f"{r['name']}_{s}.{e}": r[s]["sha256"][e] for s in ("train", "val") for e in ("bin", "idx")}}
                       for r in records]}
    atomic.write_json(out / "meta.json", meta)


def verify(path: Path) -> list[str]:
    """Every file of a prepared folder against the sha256 that prepare recorded; the problems found."""
    meta = read_meta(path)
    problems = []
    if meta.get("kind") == "samples":
        for split in ("train", "val"):
            for name, want in meta[split]["sha256"].items():
                f = path / name
                if not f.is_file():
                    problems.append(f"{f}: missing")
                elif sha256_file(f) != want:
                    problems.append(f"{f}: checksum mismatch (corrupt file)")
        return problems
    open_folder(path, meta)  # sizes and headers first: one line for a truncated file
    for piece in meta["pieces"]:
        for name, want in piece["sha256"].items():
            f = path / "pieces" / name
            if not f.is_file():
                problems.append(f"{f}: missing")
            elif sha256_file(f) != want:
                problems.append(f"{f}: checksum mismatch (corrupt file)")
    return problems
