"""The rows of `bench/gpu.sh`, each in its own process, each written out the moment it is measured.

    python bench/gpu_rows.py all --out OUT --data DATA [--dry]     # every row, in order, in budget
    python bench/gpu_rows.py row NAME --out OUT --data DATA [--dry]  # one row (what `all` runs)

Rows, in order (a lent GPU gives 15 minutes with its start; these take at most ~7):
  tiny           `trainperf run tiny` on the prepared stdlib corpus (DATA/tiny), to its target
  llama1b_bf16   a ~1.2B Llama (Llama 3.2 1B's shape) through the real trainer, 30 steps, bf16
  llama1b_fp8    the same with FP8 linears (torchao)
  hf_llama1b     throughput of Hugging Face's LlamaForCausalLM, same shape and batch (bench/throughput.py)
  tp_llama1b     trainperf's own throughput row beside it

A row fails when it has a graph break, a recompile after the trainer's warm-up (inside the timed
run), or attention that runs outside the fused SDPA kernels (flash, memory-efficient, cuDNN;
checked by running one layer of the same model under a dispatch spy), as well as on a non-finite
loss, a crash or its time limit. `--dry` runs every row on the CPU at toy sizes (the test of this
driver); a dry row checks the code path, not the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS = ["tiny", "llama1b_bf16", "llama1b_fp8", "hf_llama1b", "tp_llama1b"]
BUDGET_S = {"tiny": 80, "llama1b_bf16": 120, "llama1b_fp8": 120, "hf_llama1b": 50, "tp_llama1b": 50}
DRY_BUDGET_S = 240  # per row on a 2-core CPU, mostly torch's import

# what one GPU leaves untested: every path that crosses a process boundary
ONE_GPU_CANNOT_TEST = [
    "every NCCL path: FSDP2 all-gather / reduce-scatter, DDP all-reduce, HSDP",
    "tensor and sequence parallelism (DTensor collectives), and FP8 all-gathers under TP",
    "context parallelism: the ring (alltoall K/V rotation) and the all-gather K/V attention over NCCL",
    "pipeline send/recv and schedules across GPUs",
    "the sharded export and DCP checkpoints written by several ranks (one rank here)",
    "multi-node rendezvous, InfiniBand, torchrun restarts",
]

LLAMA_1B = ["model.family=llama", "model.n_layer=16", "model.d_model=2048", "model.n_head=32", "model.n_kv_head=8",
            "model.d_ff=8192", "model.seq_len=2048", "model.vocab_size=128256", "model.rope_theta=500000.0",
            "model.qk_norm=false", "train.global_batch_size=8", "train.micro_batch_size=4"]
LLAMA_TOY = ["model.family=llama", "model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.n_kv_head=2",
             "model.d_ff=192", "model.seq_len=64", "model.vocab_size=2048", "model.qk_norm=false",
             "train.global_batch_size=4", "train.micro_batch_size=2"]


# ---- what a row watches


class Watch:
    """Dynamo's graph breaks and the graphs compiled after the timed run started (a recompile
    there costs time the run is charged for), in this process."""

    def __init__(self):
        from torch._dynamo.utils import counters

        self.counters = counters
        self.graphs_at_start: int | None = None

    @contextlib.contextmanager
    def timed_run_marked(self):
        """Note the compiled-graph count when the trainer logs run_start (after its warm-up)."""
        from trainperf.mlperf import logger

        start = logger.MLPerfLog.start

        def marked(log, key, *args, **kwargs):
            if key == logger.C.RUN_START:
                self.graphs_at_start = self.graphs()
            return start(log, key, *args, **kwargs)

        logger.MLPerfLog.start = marked
        try:
            yield
        finally:
            logger.MLPerfLog.start = start

    def graphs(self) -> int:
        return int(self.counters["stats"]["unique_graphs"])

    def report(self) -> dict:
        breaks = dict(self.counters["graph_break"])
        late = None if self.graphs_at_start is None else self.graphs() - self.graphs_at_start
        return {"graph_breaks": sum(breaks.values()), "graph_break_reasons": sorted(breaks)[:5],
                "graphs_compiled": self.graphs(), "recompiles_in_timed_run": late}


def attention_kernels(model, x, y, device) -> list[str]:
    """The aten attention ops one forward and backward of `model` runs (eager, bf16 autocast)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket.__name__)
            if "attention" in name or "sdpa" in name or "softmax" in name:
                seen.add(name)
            return func(*args, **(kwargs or {}))

    with Spy(), torch.autocast(device.type, dtype=torch.bfloat16):
        loss = model(x, y)
        loss = loss if loss.dim() == 0 else loss.float().mean()
    loss.backward()
    return sorted(seen)


def fused(kernels: list[str], device: str = "cuda") -> bool | None:
    """SDPA ran in a fused kernel; the math fallback shows only as its softmax and matmuls. None on
    a CPU, where trainperf writes short bf16 attention out on purpose (EXPLICIT_ATTENTION_MAX_LEN)."""
    if device != "cuda":
        return None
    return any(k for k in kernels if "attention" in k and any(f in k for f in ("flash", "efficient", "cudnn")))


def probe_model(impl: str, cfg, device) -> list[str]:
    """One layer of the row's model (trainperf's, or Hugging Face's of the same shape) through the spy."""
    import dataclasses

    import torch

    one = dataclasses.replace(cfg, n_layer=1, lora_rank=0)
    x = torch.randint(0, one.vocab_size, (1, one.seq_len), device=device)
    if impl == "hf":
        sys.path.insert(0, str(Path(__file__).parent))
        import throughput

        hf = throughput.hf_model(one).to(device)
        return attention_kernels(lambda a, b: torch.nn.functional.cross_entropy(
            hf(input_ids=a).logits.float().flatten(0, 1), b.flatten()), x, x, device)
    from trainperf.model.transformer import Transformer

    m = Transformer(one).to(device)
    return attention_kernels(lambda a, b: m(a, b), x, x, device)


# ---- the rows


def _clean(row: dict) -> bool:
    return (row.get("graph_breaks", 0) == 0 and not row.get("recompiles_in_timed_run")
            and row.get("attention_fused") is not False)


def row_tiny(a) -> dict:
    """`trainperf run tiny` through the CLI's main(), in this process (so it can be watched)."""
    from trainperf.cli.main import main as cli

    out = a.work / "tiny-run"
    argv = ["run", "tiny", "--device", a.device, "--no-progress", "--out", str(out),
            "--set", f"data.corpus={a.data / 'tiny'}"]
    if a.dry:
        argv += ["--max-steps", "2", "--set", "parallel.compile=false", "--set", "model.n_layer=2",
                 "--set", "eval.eval_samples=8"]
    w = Watch()
    with w.timed_run_marked():
        rc = cli(argv)
    s = json.loads((out / "summary.json").read_text())
    row = {"exit": rc, "status": s["status"], "time_to_train_s": s["time_to_train_s"], "steps": s["steps"],
           "tokens_per_s": s["tokens_per_s"], "mfu": s["mfu"], "peak_source": s["peak_source"],
           "final_eval_loss": s["final_eval_loss"], "target": s["target"], **w.report(), **_memory(a)}
    row["ok"] = (rc == 0 or (a.dry and rc == 3)) and math.isfinite(s["final_eval_loss"]) and _clean(row)
    return row


def row_llama1b(a, fp8: bool) -> dict:
    """A ~1B Llama through the real trainer (train()): 30 steps, memory, MFU, finite losses."""
    import torch

    from trainperf.config import load_recipe
    from trainperf.parallel.env import init_env
    from trainperf.train.trainer import RunOptions, train

    shape = LLAMA_TOY if a.dry else LLAMA_1B
    overrides = shape + [f"data.corpus={a.data / 'tiny'}", "train.optimizer=adamw", "train.schedule=cosine",
                         "train.precision=bf16", "train.log_every=10", "eval.every_samples=1000000",
                         f"parallel.compile={'false' if a.dry else 'true'}"]
    if fp8:
        overrides.append("train.fp8_linear=true")
    if a.dry:
        overrides += ["eval.eval_samples=8"]
    r = load_recipe("tiny", overrides)
    kernels = probe_model("trainperf", r.model, torch.device(a.device))
    if a.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    losses: list[float] = []
    w = Watch()
    with w.timed_run_marked():
        s = train(r, init_env(a.device),
                  RunOptions(out=a.work / ("fp8" if fp8 else "bf16"), max_steps=2 if a.dry else 30, progress=False,
                             on_event=lambda e: losses.append(e["loss"]) if e.get("kind") == "train" else None))
    row = {"steps": s.steps, "params": s.params, "tokens_per_s": s.tokens_per_s, "mfu": s.mfu,
           "peak_source": s.peak_source, "train_losses": losses, "final_eval_loss": s.final_eval_loss,
           "time_breakdown_s": s.time_breakdown_s, "attention_kernels": kernels, "attention_fused": fused(kernels, a.device),
           **w.report(), **_memory(a)}
    finite = all(math.isfinite(v) for v in losses + [s.final_eval_loss]) and bool(losses)
    row["ok"] = finite and _clean(row)
    return row


def row_throughput(a, impl: str) -> dict:
    """One implementation's training throughput (bench/throughput.py's loop), beside the other's row."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import throughput

    name = "tiny" if a.dry else "llama-1b"
    cfg, batch = throughput.model_config(name)
    device = torch.device(a.device)
    steps, warmup = (2, 1) if a.dry else (10, 3)
    kernels = probe_model(impl, cfg, device)
    w = Watch()
    r = throughput.time_impl(impl, cfg, batch, "bf16", device, steps, warmup, compile=False)
    row = {**r, "config": name, "attention_kernels": kernels, "attention_fused": fused(kernels, a.device), **w.report()}
    row["ok"] = math.isfinite(r["loss"]) and _clean(row)
    return row


def _memory(a) -> dict:
    import torch

    if a.device != "cuda":
        return {}
    return {"max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
            "max_memory_reserved_gb": torch.cuda.max_memory_reserved() / 1e9}


RUN = {"tiny": row_tiny, "llama1b_bf16": lambda a: row_llama1b(a, False), "llama1b_fp8": lambda a: row_llama1b(a, True),
       "hf_llama1b": lambda a: row_throughput(a, "hf"), "tp_llama1b": lambda a: row_throughput(a, "trainperf")}


# ---- the driver


def run_row(a) -> int:
    t0 = time.perf_counter()
    try:
        row = RUN[a.name](a)
    except Exception as e:  # the row failed: say how, in its result
        row = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        import traceback

        traceback.print_exc()
    row = {"row": a.name, **row, "wall_s": round(time.perf_counter() - t0, 1)}
    (a.work / f"{a.name}.json").write_text(json.dumps(row, default=str))
    return 0 if row["ok"] else 1


def run_all(a) -> int:
    """Every row in its own process, in order, each under its share of the budget; a row's result
    is appended to OUT/rows.jsonl as soon as its process ends."""
    a.out.mkdir(parents=True, exist_ok=True)
    rows_file, log = a.out / "rows.jsonl", a.out / "rows.log"
    for f in (rows_file, log):  # this call's rows only (these two files are the driver's own)
        f.unlink(missing_ok=True)
    say = "one GPU cannot test: " + "; ".join(ONE_GPU_CANNOT_TEST)
    print(say, flush=True)
    failed = 0
    a.work = a.work / time.strftime("%Y%m%d-%H%M%S")  # each call's runs and results apart
    a.work.mkdir(parents=True)
    for name in (a.rows.split(",") if a.rows else ROWS):
        limit = DRY_BUDGET_S if a.dry else BUDGET_S[name]
        cmd = [sys.executable, __file__, "row", name, "--out", str(a.out), "--data", str(a.data),
               "--work", str(a.work), "--device", a.device] + (["--dry"] if a.dry else [])
        t0 = time.perf_counter()
        with open(log, "a") as f:
            f.write(f"\n==== {name} ({time.strftime('%H:%M:%S')}, limit {limit} s)\n")
            f.flush()
            try:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=limit).returncode
                why = f"exit {rc}"
            except subprocess.TimeoutExpired:
                rc, why = 124, f"over its {limit} s limit"
        result = a.work / f"{name}.json"
        row = json.loads(result.read_text()) if result.exists() else {"row": name, "ok": False, "error": why}
        row["process_s"] = round(time.perf_counter() - t0, 1)
        with open(rows_file, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        failed += not row["ok"]
        print(_line(row), flush=True)
    print(say, flush=True)
    return 1 if failed else 0


def _line(row: dict) -> str:
    bits = [f"{row['row']:<13}", "ok  " if row["ok"] else "FAIL"]
    for key, fmt in (("tokens_per_s", "{:,.0f} tok/s"), ("mfu", "MFU {:.1%}"), ("max_memory_allocated_gb", "{:.1f} GB"),
                     ("final_eval_loss", "eval {:.3f}"), ("status", "{}"), ("graph_breaks", "{} graph breaks"),
                     ("recompiles_in_timed_run", "{} recompiles in run"), ("error", "{}")):
        if row.get(key) is not None:
            bits.append(fmt.format(row[key]))
    if row.get("attention_fused") is False:
        bits.append(f"SDPA fallback: {row.get('attention_kernels')}")
    if row.get("mfu") is None and "peak_source" in row:
        bits.append(f"no MFU: {row['peak_source']}")
    return "  ".join(bits) + f"  ({row.get('process_s', row.get('wall_s'))} s)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["all", "row"])
    ap.add_argument("name", nargs="?", choices=ROWS)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True, help="folder holding tiny/ (trainperf data prepare)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/trainperf-gpu-rows"), help="runs and per-row results")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", default="", help="a comma-separated subset of the rows (all: every row)")
    ap.add_argument("--dry", action="store_true", help="toy sizes, for a CPU")
    a = ap.parse_args(argv)
    if not (a.data / "tiny" / "meta.json").exists():
        print(f"gpu_rows: {a.data / 'tiny'} is not a prepared dataset (see bench/gpu.sh)", file=sys.stderr)
        return 2
    a.work.mkdir(parents=True, exist_ok=True)
    if a.what == "row":
        return run_row(a)
    return run_all(a)


if __name__ == "__main__":
    sys.exit(main())
