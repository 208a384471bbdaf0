"""Muon's step over the `tiny` model's matrices in bf16, side by side in one process, five ways:
the direct Newton-Schulz iteration on whole matrices (the step before the Gram form), the Gram form
on whole matrices, the Gram form per attention head (`train.muon_per_head`), per head with the
gate and up projections as one matrix (`train.muon_joint_gate_up`), each with 3 iterations on the
Frobenius-normalised momentum; and the recipe's: that with 2 iterations on the Schatten-8-normalised
one (`train.muon_ns_norm`). Blocks of 10 steps alternate, so load from other processes weighs on all.

    python bench/muon_step.py --blocks 4
    python bench/muon_step.py --blocks 4 --keep-freed-memory   # as `trainperf run` sets a CPU run
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import torch

from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.train.host import keep_freed_memory
from trainperf.train.optim import build_optimizer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--keep-freed-memory", action="store_true", help="glibc keeps freed blocks (trainperf run's setting)")
    args = ap.parse_args(argv)
    if args.keep_freed_memory:
        keep_freed_memory()
    ways = {}
    three = ["train.muon_ns_steps=3", "train.muon_ns_norm=frobenius", "train.muon_ns_coefficients="]
    for name, per_head, joint, iterations in (
            ("direct, whole", False, False, three), ("gram, whole", False, False, three),
            ("gram, per head", True, False, three), ("+ joint gate/up", True, True, three),
            ("recipe: 2, S8", True, True, [])):
        r = load_recipe("tiny", ["train.precision=bf16", f"train.muon_per_head={str(per_head).lower()}",
                                 f"train.muon_joint_gate_up={str(joint).lower()}", *iterations])
        model = Transformer(dataclasses.replace(r.model, vocab_size=r.data.bpe_vocab_size))
        muon = build_optimizer(model, r, torch.device("cpu"))[1]
        gen = torch.Generator().manual_seed(0)
        for p in muon.param_groups[0]["params"]:
            p.grad = torch.randn(p.shape, generator=gen) * 1e-3
        if name.startswith("direct"):
            muon.form["gram"] = False  # the form before the Gram form
        ways[name] = muon

    def step(name: str) -> None:
        ways[name].step()

    for name in ways:
        step(name)  # the momentum buffers made, as after a run's first step
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.blocks):
        for name in [*ways, *reversed(ways)]:
            for _ in range(10):
                t0 = time.perf_counter()
                step(name)
                times[name].append(time.perf_counter() - t0)
    g = ways["direct, whole"].param_groups[0]
    print(f"# {len(g['params'])} matrices, bf16, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, freed memory kept: {args.keep_freed_memory}")
    for name, t in times.items():
        print(f"{name:<15} min {1e3 * min(t):.1f} ms  median {1e3 * statistics.median(t):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
