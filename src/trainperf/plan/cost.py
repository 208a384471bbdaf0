"""GPU-hours, energy and price of one predicted run.

Energy is an upper bound on the GPUs' share: every GPU at its catalog TDP (hardware.toml, each
with its datasheet source) for the whole time-to-train, times a facility overhead (PUE) for
cooling and power distribution. Hosts, NICs and switches are not counted; GPUs in MLPerf LLM
runs draw close to TDP but not above it, so the bound holds for the GPUs. The PUE default is an
assumption, not a measurement: 1.2, about what recent large GPU data centres report; `--pue`
changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.config import ConfigError

DEFAULT_PUE = 1.2
# GPU-hours list at 1-15 USD; a thousand times that is a typo (or a node's price), and a price near
# the float limit made the cost infinite, which JSON cannot hold
MAX_PRICE = 10_000.0


@dataclass(frozen=True)
class Cost:
    gpu_hours: float
    energy_kwh: float  # GPUs at TDP x time x PUE
    tdp_w: float
    pue: float
    price_per_gpu_hour: float | None
    gpu_hours_p10: float
    gpu_hours_p90: float

    @property
    def cost_usd(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    def to_dict(self) -> dict:
        d = {"gpu_hours": round(self.gpu_hours, 3), "gpu_hours_p10": round(self.gpu_hours_p10, 3),
             "gpu_hours_p90": round(self.gpu_hours_p90, 3), "energy_kwh": round(self.energy_kwh, 2),
             "energy_basis": f"{self.tdp_w:.0f} W TDP per GPU x time x PUE {self.pue} (GPUs only, upper bound)",
             "pue": self.pue}
        if self.price_per_gpu_hour is not None:
            d["price_usd_per_gpu_hour"] = self.price_per_gpu_hour
            d["cost_usd"] = round(self.cost_usd, 2)
        return d


def check(price: float | None, pue: float | None) -> None:
    if price is not None and not 0 < price <= MAX_PRICE:
        raise ConfigError(f"--price: must be a positive USD per GPU-hour up to {MAX_PRICE:g}, got {price:g}")
    if pue is not None and not 1.0 <= pue <= 3.0:
        raise ConfigError(f"--pue: a facility overhead between 1.0 and 3.0, got {pue}")


def cost_of(est, gpu, n_gpus: int, price: float | None = None, pue: float | None = None) -> Cost:
    """The cost of `est` (a perf.Estimate) on `n_gpus` x `gpu` (a hardware.GPU)."""
    pue = DEFAULT_PUE if pue is None else pue
    hours = est.minutes / 60 * n_gpus
    return Cost(gpu_hours=hours, energy_kwh=gpu.tdp_w * hours * pue / 1000, tdp_w=gpu.tdp_w, pue=pue,
                price_per_gpu_hour=price, gpu_hours_p10=est.minutes_p10 / 60 * n_gpus,
                gpu_hours_p90=est.minutes_p90 / 60 * n_gpus)
