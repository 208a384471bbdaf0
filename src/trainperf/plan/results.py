"""The catalogue of published MLPerf results the planner is checked against (data/mlperf_results.csv),
and how its rows split: NVIDIA's rows are the fit set; every other submitter's rows are held out,
split again by submitter into the band-calibration and evaluation halves (band_half)."""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError

RESULTS = Path(__file__).parent / "data" / "mlperf_results.csv"
FIT_SUBMITTERS = ("NVIDIA",)
# one company under two names in the results repositories: the same side of the band split
SUBMITTER_ALIASES = {"qct": "quanta_cloud_technology", "smc": "supermicro"}
@dataclass(frozen=True)
class Result:
    round: str
    benchmark: str
    submitter: str
    system: str
    accelerator: str
    n_gpus: int
    gbs: int
    minutes: float
    source: str

    @property
    def fit(self) -> bool:
        return self.submitter in FIT_SUBMITTERS

    @property
    def band_split(self) -> str:
        """fit (NVIDIA's rows), or the held-out half this row's submitter is in: calibration or evaluation."""
        return "fit" if self.fit else band_half(self.submitter)

    @property
    def key(self) -> str:
        return f"{self.round} {self.benchmark} {self.submitter} {self.n_gpus}x{self.accelerator}"

    @property
    def folder(self) -> str:
        """The submitter's folder name in the results repository (from `source`)."""
        return self.source.split("/results/")[0].rsplit("/", 1)[-1]


def submitter_key(name: str) -> str:
    """The company a submitter column names: lower case, a joint submission (Azure+NVIDIA,
    IBM+CoreWeave+NVIDIA) by its first-named submitter, aliases (QCT, smc) merged."""
    k = name.strip().lower().split("+")[0]
    return SUBMITTER_ALIASES.get(k, k)


def band_half(submitter: str) -> str:
    """Which half of the held-out rows a submitter's rows are in: 'calibration' when the last byte
    of the SHA-256 of its submitter_key is even, else 'evaluation'. Fixed by the name alone (not by
    any error), so all rows of one submitter are on one side, and a new submitter does not move
    the others. On the 132 held-out catalog rows of 2026-12-04: 53 rows of 9 submitters calibrate
    the band, 79 rows of 11 submitters evaluate it."""
    return "calibration" if hashlib.sha256(submitter_key(submitter).encode()).digest()[-1] % 2 == 0 else "evaluation"


def csv_rows(path: Path) -> list[tuple[int, dict]]:
    """A CSV file's rows as dicts, each with its line number (the header is line 1), for one-line
    errors that name the file and line; a file that cannot be read is one ConfigError too."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(enumerate(csv.DictReader(f), start=2))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None


def load_results(path: Path | None = None) -> list[Result]:
    p = path or RESULTS
    out = []
    for i, r in csv_rows(p):
        try:
            out.append(Result(round=r["round"].lstrip("v"), benchmark=r["benchmark"], submitter=r["submitter"],
                              system=r["system"], accelerator=r["accelerator"],
                              n_gpus=int(r["num_accelerators"]), gbs=int(r["global_batch_size"]),
                              minutes=float(r["minutes"]), source=r["source"]))
        except (KeyError, ValueError) as e:
            raise ConfigError(f"{p}:{i}: bad results row ({e})") from None
    return out
