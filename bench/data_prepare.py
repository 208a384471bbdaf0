"""`trainperf data prepare` against the plain streaming loop, on C4-style corpora made on the fly.

    python bench/data_prepare.py --sizes 64,256,1024 --files 8 --out /tmp/dp
    python bench/data_prepare.py --sizes 64 --out /tmp/dp          # the smallest size only

Each corpus is gzipped JSON lines with a `text` field (C4's layout), --files files, documents of
about 2 KB cut from the Python standard library's sources (real text, the same on every machine
with the same Python). One byte-level BPE tokenizer (--vocab, trained once on the first 8 MB) serves
both arms:
  prepare  `trainperf data prepare CORPUS --out DIR --tokenizer tok.json` (--workers: the cores)
  loop     the plain streaming loop: each file's lines parsed, 2,000 documents at a time through
           HF tokenizers' encode_batch (its own threads over the cores), tokens appended to a file
Both run as subprocesses; the peak RSS is the whole process tree's (the prepare's workers
included), read from /proc every 0.1 s. Both arms must give the same number of tokens.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

LOOP = r'''
import gzip, json, sys
import numpy as np
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
n = 0
with open(sys.argv[2], "wb") as out:
    for path in sys.argv[3:]:
        batch = []
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                batch.append(json.loads(line)["text"])
                if len(batch) == 2000:
                    for e in tok.encode_batch(batch, add_special_tokens=False):
                        np.asarray(e.ids, dtype=np.uint16).tofile(out); n += len(e.ids)
                    batch = []
        if batch:
            for e in tok.encode_batch(batch, add_special_tokens=False):
                np.asarray(e.ids, dtype=np.uint16).tofile(out); n += len(e.ids)
print(n)
'''


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()}"


def _tree_rss(root: int) -> int:
    """Bytes resident in process `root` and all its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def measure(cmd: list[str], env: dict) -> tuple[float, float, int, str]:
    """(seconds, CPU seconds, peak RSS of the process tree, stdout) of one command. The CPU seconds
    (user + system of the command and every child it waited for) are what to compare on a machine
    that other work shares: the wall time there depends on the neighbours."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def watch() -> None:
        while p.poll() is None:
            peak[0] = max(peak[0], _tree_rss(p.pid))
            time.sleep(0.1)

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    out, err = p.communicate()
    secs = time.perf_counter() - t0
    w.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed ({p.returncode}): {err.strip()[-400:]}")
    return secs, cpu, peak[0], out


def _stdlib_text() -> list[str]:
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for f in sorted(root.rglob("*.py")):
        try:
            out.append(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return out


def make_corpus(folder: Path, mb: int, files: int, sources: list[str]) -> int:
    """--files gzipped JSON-lines files holding `mb` MB of text in ~2 KB documents; the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(sources)
    per_file, total, pos = mb * 2**20 // files, 0, 0
    for i in range(files):
        written = 0
        with gzip.open(folder / f"c4-train.{i:05d}-of-{files:05d}.json.gz", "wt", encoding="utf-8", compresslevel=1) as f:
            while written < per_file:
                if pos + 2048 > len(text):
                    pos = (pos * 7919 + 1) % 4096  # wrap with a shifted start: documents differ
                doc = text[pos:pos + 2048]
                pos += 2048
                f.write(json.dumps({"text": doc}) + "\n")
                written += len(doc.encode("utf-8"))
        total += written
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256,1024", help="MB of text per corpus, comma-separated")
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=0, help="prepare's --workers (default: the cores)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    sources = _stdlib_text()
    tok_path = args.out / "tok.json"
    if not tok_path.exists():
        from trainperf.data.tokenizer import train_bpe

        sample, size = [], 0
        for s in sources:
            sample.append(s)
            size += len(s)
            if size > 8 << 20:
                break
        train_bpe(sample, args.vocab).save(tok_path)
    print(f"machine: {machine()}")
    rows = []
    for mb in (int(x) for x in args.sizes.split(",")):
        corpus = args.out / f"corpus_{mb}mb"
        if not corpus.exists():
            make_corpus(corpus, mb, args.files, sources)
        text_bytes = sum(len(json.loads(line)["text"].encode()) for f in sorted(corpus.iterdir())
                         for line in gzip.open(f, "rt", encoding="utf-8"))
        files = [str(f) for f in sorted(corpus.iterdir())]
        loop_s, loop_cpu, loop_rss, loop_out = measure([sys.executable, "-c", LOOP, str(tok_path), str(args.out / "loop.bin"),
                                              *files], env)
        ds = args.out / f"ds_{mb}mb"
        subprocess.run(["rm", "-rf", str(ds)], check=True)
        prep = [sys.executable, "-m", "trainperf", "data", "prepare", str(corpus), "--out", str(ds),
                "--tokenizer", str(tok_path)] + (["--workers", str(args.workers)] if args.workers else [])
        prep_s, prep_cpu, prep_rss, _ = measure(prep, env)
        meta = json.loads((ds / "meta.json").read_text())
        tokens = meta["train"]["tokens"] + meta["val"]["tokens"]
        if tokens != int(loop_out.strip()):
            raise SystemExit(f"token counts differ: prepare {tokens:,}, loop {int(loop_out):,}")
        row = {"text_mb": round(text_bytes / 2**20, 1), "files": args.files, "tokens": tokens,
               "prepare_s": round(prep_s, 1), "prepare_cpu_s": round(prep_cpu, 1),
               "prepare_peak_rss_gb": round(prep_rss / 2**30, 2),
               "loop_s": round(loop_s, 1), "loop_cpu_s": round(loop_cpu, 1), "loop_peak_rss_gb": round(loop_rss / 2**30, 2),
               "prepare_speed_vs_loop": round(loop_s / prep_s, 2), "prepare_cpu_vs_loop": round(prep_cpu / loop_cpu, 2),
               "load_average": os.getloadavg()[0]}
        rows.append(row)
        print(json.dumps(row))
    print("\n| text | files | tokens | prepare: wall, CPU, peak RSS | loop: wall, CPU, peak RSS | speed vs loop (wall) | CPU vs loop |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['text_mb']} MB | {r['files']} | {r['tokens']:,} | {r['prepare_s']} s, {r['prepare_cpu_s']} s, "
              f"{r['prepare_peak_rss_gb']} GB | {r['loop_s']} s, {r['loop_cpu_s']} s, {r['loop_peak_rss_gb']} GB | "
              f"{r['prepare_speed_vs_loop']} | {r['prepare_cpu_vs_loop']} |")


if __name__ == "__main__":
    main()
