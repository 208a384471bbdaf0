"""Muon's step over the `tiny` model's matrices, side by side in one process: trainperf's step (the
Nesterov update written straight into the bf16 stack, one foreach add per step size) against the
unfused form it replaced (fp32 Nesterov updates first, stacked and orthogonalised, widened back to
fp32, one add per matrix). Both compute the same numbers; blocks of 10 steps alternate, so load from
other processes weighs on both.

    python bench/muon_step.py --blocks 4
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
from trainperf.train.muon import _adjust_lr, orthogonalize
from trainperf.train.optim import build_optimizer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=4)
    args = ap.parse_args(argv)
    r = load_recipe("tiny", ["train.precision=bf16"])
    model = Transformer(dataclasses.replace(r.model, vocab_size=r.data.bpe_vocab_size))
    muon = build_optimizer(model, r, torch.device("cpu"))[1]
    ps = muon.param_groups[0]["params"]
    gen = torch.Generator().manual_seed(0)
    for p in ps:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    muon.step()  # the momentum buffers made, as after a run's first step
    g = muon.param_groups[0]
    grads, bufs = [p.grad for p in ps], [muon.state[p]["momentum_buffer"] for p in ps]
    ns = [tuple(g["ns_coefficients"])] * g["ns_steps"], g["eps"], torch.bfloat16

    @torch.no_grad()
    def unfused() -> None:
        lr, mu = g["lr"], g["momentum"]
        torch._foreach_lerp_(bufs, grads, 1 - mu)
        orthos = [o.to(p.dtype) for o, p in zip(orthogonalize(torch._foreach_lerp(grads, bufs, mu), *ns), ps)]
        torch._foreach_mul_(ps, 1 - lr * g["weight_decay"])
        for p, o in zip(ps, orthos):
            p.add_(o, alpha=-_adjust_lr(lr, g["adjust_lr_fn"], p.shape))

    ways = {"trainperf": muon.step, "unfused": unfused}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.blocks):
        for name in ("unfused", "trainperf", "trainperf", "unfused"):
            for _ in range(10):
                t0 = time.perf_counter()
                ways[name]()
                times[name].append(time.perf_counter() - t0)
    print(f"# {len(ps)} matrices, {g['ns_steps']} iterations, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for name, t in times.items():
        print(f"{name:<9} min {1e3 * min(t):.1f} ms  median {1e3 * statistics.median(t):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
