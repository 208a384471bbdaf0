"""The prediction interval around a predicted time-to-train.

A published score differs from the model's minutes for three reasons the model does not see:
- **NVIDIA's software spread** (`software_sd`): how far NVIDIA's own results, the fit rows, lie
  from the model: the standard deviation of log(published / predicted) after the fit, widened by
  sqrt(n/(n-k)) for the k fitted parameters, less the part the convergence spread below explains;
- **the spread of configurations NVIDIA did not submit** (`config_sd`): other submitters' systems,
  sizes, software versions and layouts scatter more around the model than NVIDIA's rows do (on the
  same system in the same round submitters differ little, so this is mostly the model's error away
  from its fit rows). It is calibrated split-conformally on one half of the held-out rows, split by
  submitter (validate.band_half), per benchmark where that half has 4 of its rows (Mondrian), else
  pooled; coverage is reported on the other half only;
- **convergence**: a score is the olympic mean of `runs_per_result` runs, each converging in a
  different number of samples. The seed-to-seed spread comes from the RCP files (the reference's
  own runs at each batch size); the olympic mean of n runs of a normal spread keeps a share of its
  variance (0.449 for 3 runs, 0.105 for 10: 2,000,000 seeded draws).

All three are taken as independent normal spreads in log-minutes, so the band is
minutes · exp(±1.2816·sd) for 10% and 90% with sd = sqrt(software² + config² + convergence²).

The configuration term is signed: it is calibrated in variance, and where a benchmark's
band-calibration rows lie closer to the model than NVIDIA's pooled spread says (the 405B's), the
quantile is negative and the band narrows, config_sd = -sqrt(|variance|). The band is never
narrower than the row's own convergence spread, which no calibration removes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainperf.plan.rcp import seed_spread

Z80 = 1.2816  # standard normal 90th percentile: p10..p90 is an 80% band
COVER = 0.8  # the band's nominal coverage
OLYMPIC_VAR_SHARE = {3: 0.449, 10: 0.105}  # variance of the olympic mean of n unit-normal draws


def olympic_var_share(n: int) -> float:
    """Share of one run's variance left in the olympic mean of n runs (1/(n-2) where not measured)."""
    if n in OLYMPIC_VAR_SHARE:
        return OLYMPIC_VAR_SHARE[n]
    return 1.0 if n < 3 else 1.0 / (n - 2)


def convergence_sd(mlperf: str, ruleset: str, runs: int) -> float:
    """Sd of log(samples to converge) of a score: one run's RCP seed spread, olympic-averaged."""
    return seed_spread(mlperf, ruleset) * math.sqrt(olympic_var_share(runs))


def sd_log(software: float, config: float, convergence: float) -> float:
    """The band's sd of log minutes; `config` is signed (a negative one narrows the band, down to
    the convergence spread at the least)."""
    var = software * software + math.copysign(config * config, config) + convergence * convergence
    return math.sqrt(max(var, convergence * convergence))


def band(minutes: float, sd: float) -> tuple[float, float]:
    """(p10, p90) minutes."""
    return minutes * math.exp(-Z80 * sd), minutes * math.exp(Z80 * sd)


@dataclass(frozen=True)
class Band:
    """The three spreads (sd of log minutes) around one prediction."""

    software_sd: float = 0.0  # NVIDIA's own results around the model
    config_sd: float = 0.0  # configurations NVIDIA did not submit (signed)
    convergence_sd: float = 0.0  # samples to converge (0 when they are given)

    @property
    def sd_log(self) -> float:
        return sd_log(self.software_sd, self.config_sd, self.convergence_sd)

    def around(self, minutes: float) -> tuple[float, float]:
        """(p10, p90) minutes around `minutes`."""
        return band(minutes, self.sd_log)

    def to_dict(self) -> dict:
        return {"sd_log": round(self.sd_log, 4), "software_sd": round(self.software_sd, 4),
                "config_sd": round(self.config_sd, 4), "convergence_sd": round(self.convergence_sd, 4)}


def _binom_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X >= k) (upper) or P(X <= k) for X ~ Binomial(n, p)."""
    ks = range(k, n + 1) if upper else range(0, k + 1)
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in ks)


def coverage_interval(inside: int, n: int, conf: float = 0.9) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided `conf` interval for a coverage of `inside` of `n` rows: the
    true coverages under which so few or so many rows inside would not be rarer than (1-conf)/2.
    Rows are taken as independent; rows of one submitter are not quite, so it is if anything narrow."""
    if not 0 <= inside <= n or n < 1:
        raise ValueError(f"coverage_interval: {inside} inside of {n} rows")
    tail = (1 - conf) / 2

    def solve(f, target: float) -> float:  # f rises with p: bisect for f(p) = target
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return (lo + hi) / 2

    # low: P(X >= inside) reaches the tail; high: P(X <= inside) falls to it
    low = 0.0 if inside == 0 else solve(lambda p: _binom_tail(inside, n, p, upper=True), tail)
    high = 1.0 if inside == n else solve(lambda p: 1 - _binom_tail(inside, n, p, upper=False), 1 - tail)
    return low, high


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


def config_score(log_residual: float, conv_sd: float, software: float) -> float:
    """The smallest (signed) configuration spread whose band (with `software` and this row's
    convergence spread) still contains a row `log_residual` = log(published / predicted) away: the
    row's conformity score. Negative when the row would sit inside a band narrower than NVIDIA's
    spread alone gives. The band is not re-centred, so a bias of the model counts against it.
    A row whose score is at most q is inside the band built with spread q (sd_log; its floor only
    widens), which is what makes the quantile below conformal."""
    need = (log_residual / Z80) ** 2 - software ** 2 - conv_sd ** 2
    return math.copysign(math.sqrt(abs(need)), need)


def config_sd(log_residuals: list[float], conv_sds: list[float], software: float, cover: float = COVER) -> float:
    """Split-conformal configuration spread from the band-calibration rows: the
    ceil((n+1)·cover)-th smallest conformity score. Bands built with it contain a new row that is
    exchangeable with the calibration rows with probability at least `cover` (and, the scores
    being continuous, at most cover + 1/(n+1))."""
    n = len(log_residuals)
    k = math.ceil(round((n + 1) * cover, 9))  # round: a product a hair above an integer is that integer
    if k > n:
        raise ValueError(f"interval: {n} band-calibration rows are too few for a {100 * cover:.0f}% band "
                         f"(split-conformal needs at least {math.ceil(cover / (1 - cover))})")
    scores = sorted(config_score(r, c, software) for r, c in zip(log_residuals, conv_sds, strict=True))
    return scores[k - 1]
