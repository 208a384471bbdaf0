"""What `trainperf data prepare | info | verify` do; the CLI parses their arguments and calls these."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainperf.config import DataConfig
from trainperf.data.dataset import read_meta
from trainperf.data.indexed import is_prefix, open_prefix, parse_blend
from trainperf.errors import DataError, UsageError


def parse_shard(text: str) -> tuple[int, int] | None:
    """`--shard I/N` as (I, N), 0 <= I < N."""
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 3/16") from None
    if not (n >= 1 and 0 <= i < n):
        raise UsageError(f"--shard {text!r}: needs 0 <= I < N")
    return i, n


def refuse_unused_flags(cfg: DataConfig, seq_len: int, workers: int, shard: tuple[int, int] | None,
                        vocab_given: bool = False) -> None:
    """A `data prepare` flag that would change nothing for this kind of dataset or tokenizer is a bad
    argument: silently ignoring it would leave the user believing it took effect. `vocab_given`:
    --vocab-size was typed (its default value typed counts too)."""
    unused = []
    if cfg.tokenizer != "bpe" and vocab_given:
        unused.append(("--vocab-size", "applies only to --tokenizer bpe (a BPE trained here)"))
    if cfg.kind == "tokens" and seq_len:
        unused.append(("--seq-len", "applies only to --kind samples"))
    if cfg.kind == "samples":
        for flag, given in (("--eod", cfg.eod), ("--shard", shard), ("--workers", workers)):
            if given:
                unused.append((flag, "applies only to --kind tokens"))
    if unused:
        flag, why = unused[0]
        raise UsageError(f"{flag} {why}; drop it")


def prepare(cfg: DataConfig, out: Path, seq_len: int, workers: int, shard: tuple[int, int] | None,
            vocab_given: bool = False) -> int:
    refuse_unused_flags(cfg, seq_len, workers, shard, vocab_given)
    if cfg.kind == "tokens":
        # straight to the pieces: the training pipeline's imports (torch) would cost every prepare
        # seconds of start-up and memory
        from trainperf.data.dataset import open_folder, read_meta
        from trainperf.data.prepare import prepare_corpus

        done = prepare_corpus(out, cfg.corpus, cfg.tokenizer, cfg.bpe_vocab_size, cfg.val, cfg.eod, workers, shard,
                              corpus_name=cfg.corpus if cfg.corpus == "stdlib" else str(Path(cfg.corpus).resolve()))
        data = open_folder(done, read_meta(done)) if done is not None else None
    else:
        from trainperf.data.pipeline import prepare as _prepare

        data = _prepare(cfg, out=out, row_len=seq_len, workers=workers, shard=shard)
    if data is None:
        print(f"prepared shard {shard[0]}/{shard[1]} of {cfg.corpus}'s pieces in {out / 'pieces'}; run the same "
              "command without --shard to assemble the dataset")
        return 0
    m = data.meta
    _report_skipped(cfg.corpus)
    if cfg.val:
        _report_skipped(cfg.val)
    if m.get("kind") == "samples":
        size = (f"{m['train']['rows']:,} train / {m['val']['rows']:,} val samples of {m['row_len']} tokens "
                f"({m['val']['scored_tokens']:,} scored val tokens)")
    else:
        size = f"{m['train']['tokens']:,} train / {m['val']['tokens']:,} val tokens in {len(m['pieces'])} pieces"
    print(f"prepared {out}: {size}, validation from the {m['val_source']}, "
          f"{m['tokenizer']} (vocab {m['vocab_size']}), corpus sha256 {m['fingerprint'][:16]}...")
    return 0


def _report_skipped(src: str) -> None:
    """One line (stderr) for the files of a folder source that were not read, so that none is
    left out unnoticed."""
    from trainperf.data.corpus import SKIP_DIRS, SUFFIXES
    from trainperf.data.prepare import skipped_files

    skipped = skipped_files(src)
    if skipped:
        shown = ", ".join(p.relative_to(src).as_posix() for p in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        print(f"trainperf: warning: skipped {len(skipped)} file{'s' if len(skipped) > 1 else ''} in {src} ({shown}): "
              f"only {', '.join(SUFFIXES)} files are read, outside folders named {', '.join(sorted(SKIP_DIRS))}",
              file=sys.stderr)


def describe(path: str) -> dict:
    """Documents, tokens, dtype and tokenizer of a dataset folder, a Megatron prefix, a folder of
    prefixes or a blend; metadata only."""
    p = Path(path).expanduser()
    if len(path.split()) == 1 and (p / "meta.json").is_file():
        m = read_meta(p)
        if m.get("kind") == "samples":
            return {"path": str(p), "kind": "samples", "tokenizer": m.get("tokenizer"), "dtype": m.get("dtype"),
                    "row_len": m.get("row_len"), "rows": {s: m[s]["rows"] for s in ("train", "val")}}
        from trainperf.data.dataset import open_folder

        open_folder(p, m)  # sizes checked: a truncated piece is reported, not described
        return {"path": str(p), "kind": "trainperf dataset", "tokenizer": m["tokenizer"], "vocab_size": m["vocab_size"],
                "dtype": m["dtype"], "documents": m["documents"],
                "tokens": {s: m[s]["tokens"] for s in ("train", "val")}, "pieces": len(m["pieces"]),
                "val_source": m["val_source"], "eod": m.get("eod", ""), "fingerprint": m["fingerprint"]}
    sources = []
    for w, spec in parse_blend(path):
        q = Path(spec).expanduser()
        if is_prefix(q):
            prefixes = [q]
        elif q.is_dir() and any(q.glob("*.idx")):
            prefixes = sorted(Path(str(f)[:-4]) for f in q.glob("*.idx"))
        elif Path(f"{q}.bin").is_file():
            raise DataError(f"{q}.idx: missing; a Megatron dataset prefix needs its .idx and .bin")
        else:
            raise DataError(f"{q}: neither a dataset folder nor a Megatron prefix (no {q}.idx)")
        for pre in prefixes:
            t = open_prefix(pre)
            sources.append({"prefix": str(pre), "weight": w, "documents": t.n_documents,
                            "sequences": t.n_sequences, "tokens": t.n_tokens, "dtype": t.dtype.name})
    return {"path": path, "kind": "megatron", "tokenizer": "(none: a Megatron prefix carries no tokenizer)",
            "dtype": sources[0]["dtype"], "documents": sum(s["documents"] for s in sources),
            "tokens": sum(s["tokens"] for s in sources), "prefixes": sources}


def info(path: str, as_json: bool = False) -> int:
    d = describe(path)
    if as_json:
        print(json.dumps(d, indent=1))
        return 0
    if d["kind"] == "samples":
        print(f"{d['path']}: fine-tuning samples, {d['rows']['train']:,} train / {d['rows']['val']:,} val rows of "
              f"{d['row_len']} tokens, {d['dtype']}, tokenizer {d['tokenizer']}")
    elif d["kind"] == "trainperf dataset":
        print(f"{d['path']}: {d['documents']['train']:,} train / {d['documents']['val']:,} val documents, "
              f"{d['tokens']['train']:,} / {d['tokens']['val']:,} tokens, {d['dtype']}, {d['pieces']} pieces, "
              f"tokenizer {d['tokenizer']} (vocab {d['vocab_size']}), validation from the {d['val_source']}")
    else:
        for s in d["prefixes"]:
            w = f"weight {s['weight']:g}, " if len(d["prefixes"]) > 1 else ""
            print(f"{s['prefix']}: {w}{s['documents']:,} documents, {s['sequences']:,} sequences, "
                  f"{s['tokens']:,} tokens, {s['dtype']}")
        if len(d["prefixes"]) > 1:
            print(f"total: {d['documents']:,} documents, {d['tokens']:,} tokens")
        print(f"tokenizer: {d['tokenizer']}")
    return 0


def verify(path: Path) -> int:
    from trainperf.data.prepare import verify as _verify

    problems = _verify(path)
    if problems:
        raise DataError(f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    print(f"{path}: every file matches its recorded sha256")
    return 0
