"""The stage after the search: each Estimate with its prediction band and the published evidence
for its layout. The search ranks by the model alone; this stage reads the calibration's spreads
(plan/interval.py) and the published configurations (plan/evidence.py)."""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.plan.evidence import Published, evidence
from trainperf.plan.interval import Band
from trainperf.plan.perf import Estimate, Layout, Model


@dataclass(frozen=True)
class Prediction:
    estimate: Estimate
    band: Band
    evidence: Published | None = None  # a submission that ran this (tp, pp, cp); None: none did

    @property
    def layout(self) -> Layout:
        return self.estimate.layout

    @property
    def minutes(self) -> float:
        return self.estimate.minutes

    @property
    def minutes_p10(self) -> float:
        return self.band.around(self.estimate.minutes)[0]

    @property
    def minutes_p90(self) -> float:
        return self.band.around(self.estimate.minutes)[1]

    def to_dict(self) -> dict:
        ev = self.evidence
        est = self.estimate.to_dict()
        return {
            "minutes": est.pop("minutes"), "minutes_p10": round(self.minutes_p10, 4),
            "minutes_p50": round(self.minutes, 4), "minutes_p90": round(self.minutes_p90, 4),
            "interval": self.band.to_dict(),
            "evidence": (None if ev is None else {
                "submitter": ev.submitter, "round": ev.round, "gpus": ev.gpus, "gpu": ev.gpu, "tp": ev.tp,
                "pp": ev.pp, "cp": ev.cp, "source": ev.source}),
            **est,
        }


def band_of(model: Model) -> Band:
    """The band every layout of `model`'s benchmark on its cluster gets."""
    cal = model.cal
    return Band(cal.software_sd, cal.config_sd_for(model.b.mlperf), model.sd_conv)


def predict(model: Model, est: Estimate) -> Prediction:
    """`est` with its band and the published evidence for its (tp, pp, cp)."""
    b, g = model.b, model.gpu
    ev = evidence(b.mlperf, g.generation, *est.layout.shape, model.cl.n_gpus, b.round, gpu=g.key)
    return Prediction(est, band_of(model), ev)


__all__ = ["Prediction", "predict", "band_of"]
