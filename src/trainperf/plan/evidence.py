"""Which parallel layouts and formats published MLPerf submissions ran, per benchmark and GPU.

`data/published_layouts.csv` lists the tensor-, pipeline- and context-parallel sizes named in the
configuration scripts (`config_<system>_<nodes>x<gpus>x<batch>xtp<T>pp<P>cp<C>.sh`, GPT-3's
`..._<nodes>x<gpus>x<m>x<TP>x<PP>_mbs<M>.sh`) of the submissions in MLCommons' results
repositories v3.1-v5.1, each with its link. `precision` is fp4 where the name or the script
mentions FP4 (NVIDIA's FP4 configs source `config_common_fp4.sh`), fp8 where the script mentions
FP8 or sources the NeMo `config_common.sh` that sets `FP8=True`.

The search ranks layouts whose (tp, pp, cp) was published for the GPU family above those that were
not, unless asked to explore: the model has no term for what makes untried layouts slow
(ring-attention hops on short chunks, small GEMMs at tp 1 with a huge dp), so a layout no one ran
rests on the model alone. What counts as published for a plan under the rules of round R: NVIDIA's
configurations of R and before (NVIDIA's results are the fit rows), and any submitter's of an
earlier round (public before R's results were). A held-out row is never ranked by its own round's
configurations, nor by a later round's. A configuration published on a GPU kind with less memory
also vouches for the same pipeline and context split at a smaller tp (`proven_shapes`).

Formats the same way, per GPU kind: where NVIDIA published the benchmark on that GPU kind in R,
the formats it ran there at the GPU count closest to the plan's rank first (in v5.1 it ran the 405B
in FP4 on GB200 and GB300, in FP8 on the HGX B200; the 8B in FP4 on 8 GB200s, in FP8 on 72 and 512);
where it did not, no format is preferred.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.mlperf.rulesets import version_key
from trainperf.plan.results import csv_rows

LAYOUTS = Path(__file__).parent / "data" / "published_layouts.csv"
EVIDENCE_SUBMITTERS = ("NVIDIA",)


@dataclass(frozen=True)
class Published:
    round: str
    submitter: str
    benchmark: str  # MLPerf name
    gpu: str  # catalog key the config's name names (h100, gb200, ...)
    gpu_family: str  # hardware generation: hopper, blackwell, blackwell_ultra
    gpus: int
    tp: int
    pp: int
    cp: int
    precision: str  # "fp4" when the config's name says so, else "" (not stated)
    source: str

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.tp, self.pp, self.cp


@functools.lru_cache(maxsize=1)
def published() -> tuple[Published, ...]:
    out = []
    for i, r in csv_rows(LAYOUTS):
        try:
            out.append(Published(round=r["round"], submitter=r["submitter"], benchmark=r["benchmark"],
                                 gpu=r["gpu"], gpu_family=r["gpu_family"], gpus=int(r["gpus"]), tp=int(r["tp"]),
                                 pp=int(r["pp"]), cp=int(r["cp"]), precision=r["precision"],
                                 source=r["source"]))
        except (KeyError, ValueError) as e:
            raise ConfigError(f"{LAYOUTS}:{i}: bad layout row ({e})") from None
    return tuple(out)


def _counts(p: Published, round_: str | None) -> bool:
    """Whether `p` is evidence for a plan under round `round_` (None: every published round): an
    evidence submitter's configuration of that round or before, or any submitter's from an earlier
    round (public before the round's results were)."""
    if round_ is None:
        return True
    r, at = version_key(p.round), version_key(round_)
    return r < at or (r == at and p.submitter in EVIDENCE_SUBMITTERS)


@functools.lru_cache(maxsize=None)
def envelope(benchmark: str, family: str, round_: str | None = None) -> dict[tuple[int, int, int], tuple[Published, ...]]:
    """(tp, pp, cp) -> the published configurations that ran it on this GPU family, as evidence for
    a plan under `round_` (see `_counts`)."""
    out: dict = {}
    for p in published():
        if p.benchmark == benchmark and p.gpu_family == family and _counts(p, round_):
            out.setdefault(p.shape, []).append(p)
    return {k: tuple(v) for k, v in out.items()}


def _less_memory(p: Published, gpu: str) -> bool:
    """Whether `p` ran on a GPU kind with less memory than `gpu` (catalog figures)."""
    from trainperf.plan.hardware import gpus

    cat = gpus()
    return p.gpu in cat and gpu in cat and cat[p.gpu].hbm_gb < cat[gpu].hbm_gb


def _from_smaller_gpu(benchmark: str, family: str, gpu: str, tp: int, pp: int, cp: int,
                      round_: str | None) -> list[Published]:
    """Configurations that ran this pipeline and context split at a larger tensor-parallel size on
    a GPU kind with less memory than `gpu`."""
    return [q for (t, p, c), pubs in envelope(benchmark, family, round_).items()
            if p == pp and c == cp and t > tp and t % tp == 0 for q in pubs if _less_memory(q, gpu)]


@functools.lru_cache(maxsize=None)
def proven_shapes(benchmark: str, gpu: str, family: str, round_: str | None = None) -> frozenset:
    """The (tp, pp, cp) that count as proven for `benchmark` on GPU kind `gpu`: those published on
    its family (`envelope`), and, from a configuration published on a GPU kind with less memory,
    the same pipeline and context split at a smaller tensor-parallel size. The smaller GPU's tp was
    the least that fit it; submitters on a bigger one cut it where memory allows (v4.1 LoRA: tp 4
    on the 80 GB H100, tp 1 on the 141 GB H200; v5.1 405B: tp 8 on the H100, tp 4 on the H200)."""
    env = envelope(benchmark, family, round_)
    cut = {(t, pp, cp) for (_, pp, cp) in env for t in (1, 2, 4, 8)
           if _from_smaller_gpu(benchmark, family, gpu, t, pp, cp, round_)}
    return frozenset(env) | cut


def evidence(benchmark: str, family: str, tp: int, pp: int, cp: int, n_gpus: int,
             round_: str | None = None, gpu: str | None = None) -> Published | None:
    """The published configuration closest in GPU count with this (tp, pp, cp); with `gpu`, where
    there is none, one that ran this pp and cp at a larger tp on a GPU kind with less memory
    (`proven_shapes`); else None."""
    cands = envelope(benchmark, family, round_).get((tp, pp, cp))
    if not cands and gpu is not None:
        cands = _from_smaller_gpu(benchmark, family, gpu, tp, pp, cp, round_)
    if not cands:
        return None
    return min(cands, key=lambda p: (abs(p.gpus - n_gpus), p.round, p.tp))


def proven_precisions(benchmark: str, gpu: str, round_: str, n_gpus: int | None = None) -> frozenset[str] | None:
    """The matmul formats NVIDIA ran `benchmark` in on GPU kind `gpu` in round `round_`, or None
    when it published no configuration of it there (then no format is preferred). With `n_gpus`,
    those of its configurations closest in GPU count: in v5.1 NVIDIA ran the 8B and the LoRA in
    FP4 on 8 GB200/GB300 but in FP8 on 72 and 512, so the kind alone would price those as FP4."""
    pubs = [p for p in published() if p.benchmark == benchmark and p.gpu == gpu
            and p.submitter in EVIDENCE_SUBMITTERS and p.precision and version_key(p.round) == version_key(round_)]
    if pubs and n_gpus is not None:
        near = min(abs(p.gpus - n_gpus) for p in pubs)
        pubs = [p for p in pubs if abs(p.gpus - n_gpus) == near]
    return frozenset(p.precision for p in pubs) or None


def submitted(round_: str, submitter: str, benchmark: str, gpu: str, n_gpus: int) -> list[Published]:
    """The configurations one submission shipped for its GPU kind and count (several: it shipped
    more than one, e.g. an FP8 and an FP4 variant, or configs for another system of the same kind)."""
    return [p for p in published() if p.round == round_ and p.submitter == submitter
            and p.benchmark == benchmark and p.gpu == gpu and p.gpus == n_gpus]
