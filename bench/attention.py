"""Causal attention on a CPU, forward and backward: torch's fused kernel (scaled_dot_product_attention)
against the explicit form (scores, mask, softmax, weighted sum) as torch.compile builds it, side by
side in one process, per sequence length and format. The model's `explicit_attention` rule comes
from this table.

    python bench/attention.py --lengths 128,256,512,1024,2048 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from trainperf.model.transformer import causal_attention


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="128,256,512,1024,2048")
    ap.add_argument("--tokens", type=int, default=1024, help="batch x length per call (tiny's step: 4 x 256)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--formats", default="bf16,fp32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    forms = {"fused": torch.compile(fused), "explicit": torch.compile(causal_attention)}
    print(f"# {args.heads} heads x {args.head_dim}, {args.tokens} tokens per call, forward + backward, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}; ms per call, best / median of {args.rounds} x {args.reps}")
    print("| length | format | fused | explicit | explicit / fused |")
    print("|---|---|---|---|---|")
    for fmt in args.formats.split(","):
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[fmt]
        for t in map(int, args.lengths.split(",")):
            b = max(1, args.tokens // t)
            gen = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(b, args.heads, t, args.head_dim, generator=gen).to(dtype).requires_grad_()
                       for _ in range(3))
            times: dict[str, list[float]] = {name: [] for name in forms}
            for _ in range(args.rounds):
                for name, f in forms.items():  # alternating, so load weighs on both
                    f(q, k, v).sum().backward()  # compiled (first round) and warm
                    for _ in range(args.reps):
                        start = time.perf_counter()
                        f(q, k, v).sum().backward()
                        times[name].append(time.perf_counter() - start)
            best = {n: min(ts) * 1e3 for n, ts in times.items()}
            med = {n: statistics.median(ts) * 1e3 for n, ts in times.items()}
            print(f"| {t} | {fmt} | {best['fused']:.2f} / {med['fused']:.2f} | {best['explicit']:.2f} / {med['explicit']:.2f} "
                  f"| {med['explicit'] / med['fused']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
