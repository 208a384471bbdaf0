"""Muon's Newton-Schulz over the `tiny` model's matrices: stacked by shape (one batched matmul per
product) against one call per matrix, in bf16 and fp32, side by side in one process.

    python bench/newton_schulz.py --rounds 6

The two ways take turns within each round, so load from other processes weighs on both; the figure
is the best round's milliseconds per optimizer step (all the matrices, `train.muon_ns_steps`
iterations). Run `uptime` beside it on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.train.muon import orthogonalize
from trainperf.train.optim import muon_params

COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's default


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    r = load_recipe("tiny")
    cfg = dataclasses.replace(r.model, vocab_size=r.data.bpe_vocab_size)
    with torch.device("meta"):
        model = Transformer(cfg)
    ids = muon_params(model)
    gen = torch.Generator().manual_seed(0)
    mats = [torch.randn(tuple(p.shape), generator=gen) for p in model.parameters() if id(p) in ids]
    steps = r.train.muon_ns_steps
    schedule = [COEFFICIENTS] * steps
    ways = {
        "one by one": lambda dt: orthogonalize(mats, schedule, 1e-7, dt, stack=False),
        "stacked": lambda dt: orthogonalize(mats, schedule, 1e-7, dt, stack=True),
    }
    print(f"# {len(mats)} matrices, {steps} iterations, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for dt in (torch.bfloat16, torch.float32):
        best = {k: float("inf") for k in ways}
        for _ in range(args.rounds):
            for name, fn in ways.items():
                t0 = time.perf_counter()
                fn(dt)
                best[name] = min(best[name], time.perf_counter() - t0)
        line = "  ".join(f"{k} {1e3 * v:.1f} ms" for k, v in best.items())
        ratio = best["stacked"] / best["one by one"]
        print(f"{str(dt).removeprefix('torch.'):<9} {line}  stacked/one-by-one {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
