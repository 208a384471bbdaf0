"""The prediction interval around a predicted time-to-train.

A published score differs from the model's minutes for two reasons the model does not see:
- **software and submitter efficiency**: how well this software stack, on this system, reaches the
  step time the model prices. Its spread is measured on the fit rows only (NVIDIA's own results):
  the standard deviation of log(published / predicted) after the fit, widened by sqrt(n/(n-k)) for
  the k fitted parameters, less the part the convergence spread below already explains;
- **convergence**: a score is the olympic mean of `runs_per_result` runs, each converging in a
  different number of samples. The seed-to-seed spread comes from the RCP files (the reference's
  own runs at each batch size); the olympic mean of n runs of a normal spread keeps a share of its
  variance (0.449 for 3 runs, 0.105 for 10: 2,000,000 seeded draws).

Both are taken as normal in log-minutes, so the band is minutes · exp(±1.2816·sd) for 10% and 90%.
The fit rows are all NVIDIA's, so the software term is NVIDIA's spread around the model, not the
spread between submitters: `plan validate` reports how much of the held-out rows the band covers.
"""

from __future__ import annotations

import math

from trainperf.plan.rcp import seed_spread

Z80 = 1.2816  # standard normal 90th percentile: p10..p90 is an 80% band
OLYMPIC_VAR_SHARE = {3: 0.449, 10: 0.105}  # variance of the olympic mean of n unit-normal draws


def olympic_var_share(n: int) -> float:
    """Share of one run's variance left in the olympic mean of n runs (1/(n-2) where not measured)."""
    if n in OLYMPIC_VAR_SHARE:
        return OLYMPIC_VAR_SHARE[n]
    return 1.0 if n < 3 else 1.0 / (n - 2)


def convergence_sd(mlperf: str, ruleset: str, runs: int) -> float:
    """Sd of log(samples to converge) of a score: one run's RCP seed spread, olympic-averaged."""
    return seed_spread(mlperf, ruleset) * math.sqrt(olympic_var_share(runs))


def total_sd(software_sd: float, conv_sd: float) -> float:
    return math.sqrt(software_sd ** 2 + conv_sd ** 2)


def band(minutes: float, sd: float) -> tuple[float, float]:
    """(p10, p90) minutes."""
    return minutes * math.exp(-Z80 * sd), minutes * math.exp(Z80 * sd)


def software_sd(log_residuals: list[float], conv_sds: list[float], n_params: int) -> float:
    """The software/submitter spread from fit rows: their residual variance (about 0: the fit
    minimises absolute log error, so the mean is taken out too), widened for the fitted
    parameters, less the rows' own convergence variance."""
    n = len(log_residuals)
    if n <= n_params + 1:
        raise ValueError(f"interval: {n} fit rows cannot estimate a spread with {n_params} fitted parameters")
    mu = sum(log_residuals) / n
    var = sum((r - mu) ** 2 for r in log_residuals) / (n - n_params)
    conv = sum(c * c for c in conv_sds) / n
    return math.sqrt(max(0.0, var - conv))
