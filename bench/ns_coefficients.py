"""Per-iteration Newton-Schulz coefficients for Muon (`train.muon_ns_coefficients`): what each
schedule does to a singular value, and how the shipped two-iteration one was derived.

    python bench/ns_coefficients.py --steps 2 --lower 0.02

Each iteration maps every singular value s of the Frobenius-normalised update (s in (0, 1]) through
p(s) = a s + b s^3 + c s^5; the schedule's map is the composition. torch's triple (3.4445, -4.7750,
2.0315) repeated 5 times sends [0.01, 1] into [0.68, 1.13]; 3 times (the `tiny` recipe before) 0.01
to 0.40 and [0.03, 1] into [0.68, 1.20]; 2 times 0.01 to only 0.12.

The derivation: start from the Polar Express schedule (Amsel et al. 2025, arXiv 2505.16932: each
iteration the odd quintic closest to 1 in the worst case over the current interval [l, u], the next
interval being that polynomial's range; one linear program per iteration here), then minimise the
composition's worst |log p(s)| over [lower, 1.02] (Nelder-Mead from it and three perturbed starts,
fixed seeds). Polar Express from the paper's lower bound 0.001 is a poor two-iteration schedule for
Muon: it sends 0.5 to 0.06 and 1 to 1.97 (`--lower 0.001`).
Needs scipy (not a trainperf dependency).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

TORCH_TRIPLE = (3.4445, -4.7750, 2.0315)
SAMPLES = (0.001, 0.003, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def compose(schedule, s: np.ndarray) -> np.ndarray:
    for a, b, c in schedule:
        s = a * s + b * s**3 + c * s**5
    return s


def polar_express_step(lo: float, hi: float, n: int = 1500) -> tuple[tuple[float, float, float], float, float]:
    """The odd quintic minimising max |1 - p(s)| over [lo, hi] (a linear program on a grid), and its range."""
    from scipy.optimize import linprog

    s = np.unique(np.concatenate([np.geomspace(lo, hi, n), np.linspace(lo, hi, n)]))
    basis = np.stack([s, s**3, s**5], 1)
    ones = np.ones((len(s), 1))
    res = linprog([0, 0, 0, 1], A_ub=np.vstack([np.hstack([-basis, -ones]), np.hstack([basis, -ones])]),
                  b_ub=np.concatenate([-np.ones(len(s)), np.ones(len(s))]),
                  bounds=[(None, None)] * 3 + [(0, None)], method="highs")
    coef = tuple(float(v) for v in res.x[:3])
    p = basis @ np.array(coef)
    return coef, float(p.min()), float(p.max())


def polar_express(lower: float, steps: int) -> list[tuple[float, float, float]]:
    schedule, lo, hi = [], lower, 1.0
    for _ in range(steps):
        coef, lo, hi = polar_express_step(lo, hi)
        schedule.append(coef)
    return schedule


def refine(lower: float, steps: int) -> list[tuple[float, float, float]]:
    """The schedule minimising the composition's worst |log p(s)| over [lower, 1.02]."""
    from scipy.optimize import minimize

    grid = np.geomspace(lower, 1.02, 3000)

    def worst(flat: np.ndarray) -> float:
        out = compose(flat.reshape(-1, 3), grid)
        return 10.0 if out.min() <= 0 else float(np.abs(np.log(out)).max())
    start = np.array(polar_express(lower, steps)).ravel()
    starts = [start] + [start * (1 + 0.02 * np.random.default_rng(k).standard_normal(start.size)) for k in (1, 2, 3)]
    best = min((minimize(worst, x0, method="Nelder-Mead",
                         options=dict(maxiter=20000, maxfev=20000, xatol=1e-7, fatol=1e-9)) for x0 in starts),
               key=lambda r: r.fun)
    return [tuple(float(v) for v in row) for row in best.x.reshape(-1, 3)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--lower", type=float, default=0.02, help="the smallest singular value the schedule is fitted for")
    args = ap.parse_args(argv)
    try:
        tuned = refine(args.lower, args.steps)
    except ImportError:
        print("bench/ns_coefficients.py: needs scipy (pip install scipy)", file=sys.stderr)
        return 2
    rows = {f"torch x{n}": [TORCH_TRIPLE] * n for n in (args.steps, 3, 5)}
    rows[f"polar express x{args.steps} (lower {args.lower:g})"] = polar_express(args.lower, args.steps)
    rows[f"tuned x{args.steps} (lower {args.lower:g})"] = tuned
    s = np.array(SAMPLES)
    print(f"{'singular value s ->':<34}" + "".join(f"{v:>7g}" for v in SAMPLES))
    for name, schedule in rows.items():
        print(f"{name:<34}" + "".join(f"{v:7.3f}" for v in compose(schedule, s)))
    print("\ntrain.muon_ns_coefficients = [" + ", ".join(f"{v:.4f}" for row in tuned for v in row) + "]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
