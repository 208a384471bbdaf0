"""`train.precision = "auto"`: the number format that trains this model fastest on this machine.

A GPU has bf16 tensor cores, so auto is bf16 there. A CPU may or may not: AMX tiles (Sapphire Rapids
and newer) run bf16 matmuls several times faster than fp32, while a CPU without them converts bf16
through fp32 units and is slower than plain fp32 (the probe measured bf16 at 0.05x fp32's speed on a
2-core AVX2 EPYC, with compile; 0.62x eager earlier). Having bf16 instructions does not say that
bf16 wins (AVX512-BF16 only adds dot products; small matmuls may not gain), so where the CPU has
them (AVX512-BF16 or AMX) auto times it: a few training steps (forward and
backward, no optimizer step) of the run's own model, micro-batch and sequence, in fp32 and under
bf16 autocast, on random tokens during init (untimed; MLPerf lets init run the model on synthetic
data). The faster one wins if its loss is sound: finite, and within `LOSS_RTOL` of fp32's on the
same weights and tokens (bf16 rounds activations to 8 mantissa bits, so a difference of a few tenths
of a percent is expected; more means the format is breaking the model). The main rank decides and
every rank takes its answer, so all ranks run one format.

A CPU with neither has nothing that could make bf16 faster, so auto takes fp32 without probing:
the bf16 probe's three slow steps cost about 90 s of start-up on that EPYC for a known answer.

A clear verdict (one format at least `DECISIVE` times the other's speed) is kept in the data cache
(`data.cache_dir`, `TRAINPERF_CACHE`), keyed by this CPU (model name, feature flags, cores), torch's
version and threads and the model, micro-batch and sequence timed: a later run of the same shape on
the same machine takes it without probing (1-2 s of start-up on an idle 2-core Zen 4, 20-47 s while
other processes held its cores, bench/results/tiny_records_2026-12-06_to_07.md). A close call is measured again every run, so
a probe thrown off by a busy neighbour is not kept.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from trainperf.config import ModelConfig
from trainperf.train import machine_cache
from trainperf.model.transformer import Transformer

LOSS_RTOL = 0.02
MAX_PROBE_PARAMS = 1_000_000_000
FORMATS = ("fp32", "bf16")
DECISIVE = 1.25  # a probe's verdict is kept for later runs when the winner was at least this much faster


@dataclass
class PrecisionChoice:
    precision: str
    reason: str
    seconds_per_step: dict[str, float] = field(default_factory=dict)  # what the probe measured, by format
    loss: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"precision": self.precision, "reason": self.reason,
                "seconds_per_step": {k: round(v, 5) for k, v in self.seconds_per_step.items()},
                "loss": {k: round(v, 5) for k, v in self.loss.items()}}


def pick(seconds: dict[str, float], loss: dict[str, float]) -> PrecisionChoice:
    """The faster format whose loss is sound; fp32 (the reference) when bf16 is not."""
    ref = loss["fp32"]
    sound = {f for f in FORMATS if f in seconds and torch.isfinite(torch.tensor(loss[f]))
             and abs(loss[f] - ref) <= LOSS_RTOL * abs(ref)}
    if "fp32" not in sound:
        return PrecisionChoice("bf16" if "bf16" in sound else "fp32", "fp32 probe loss not finite", seconds, loss)
    best = min(sound, key=lambda f: seconds[f])
    ratio = seconds["fp32"] / seconds["bf16"]
    why = f"bf16 step {ratio:.2f}x the speed of fp32 on this CPU"
    if "bf16" not in sound:
        why = f"bf16 loss {loss['bf16']:.4f} vs fp32 {ref:.4f}: off by more than {LOSS_RTOL:.0%}"
    return PrecisionChoice(best, why, seconds, loss)


def probe(cfg: ModelConfig, batch: int, seq: int, device: torch.device, steps: int = 2, seed: int = 0,
          clock: Callable[[], float] = time.perf_counter) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per forward+backward (the best of `steps`, after one warm-up) and the first step's
    loss, per format, on a plain copy of the model with random weights and tokens."""
    torch.manual_seed(seed)
    model = Transformer(cfg).to(device)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen).to(device)
    seconds, loss = {f: float("inf") for f in FORMATS}, {}
    # the formats take turns, so a load that comes or goes while probing (other processes on a
    # shared CPU) weighs on both alike rather than on whichever ran second
    for i in range(steps + 1):
        for fmt in FORMATS:
            t0 = clock()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=fmt == "bf16"):
                step_loss = model(x, x).mean()
            step_loss.backward()
            model.zero_grad(set_to_none=True)
            if i == 0:
                loss[fmt] = float(step_loss.detach())
            else:
                seconds[fmt] = min(seconds[fmt], clock() - t0)
    return seconds, loss


def cpu_bf16_units() -> str | None:
    """The CPU's bf16 arithmetic ("AMX", "AVX512-BF16"), or None when it has none. torch's own
    checks (private names, present in 2.11-2.13); where they are missing, assume there may be some."""
    checks = (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
    found = [(name, getattr(torch.cpu, fn, None)) for name, fn in checks]
    if any(fn is None for _, fn in found):
        return "unknown"
    return next((name for name, fn in found if fn()), None)


def probe_or_cached(cfg: ModelConfig, batch: int, seq: int, device: torch.device, cache: Path | None) -> PrecisionChoice:
    """The probe's verdict: an earlier run's from `cache` when it has one for this machine and shape,
    else measured now (and kept there when decisive)."""
    what = {"model": dataclasses.asdict(cfg), "batch": batch, "seq": seq}
    path = machine_cache.cache_file(cache, "precision", what) if cache is not None else None
    kept = machine_cache.read(path) if path is not None else None
    if kept is not None and kept.get("precision") in FORMATS:
        return PrecisionChoice(kept["precision"], f"{kept.get('reason', '')}, measured by an earlier run (delete "
                                                  f"{path} to measure again)", kept.get("seconds_per_step", {}),
                               kept.get("loss", {}))
    choice = pick(*probe(cfg, batch, seq, device))
    secs = choice.seconds_per_step
    if path is not None and max(secs.values()) >= DECISIVE * min(secs.values()):
        machine_cache.write(path, choice.to_dict())
    return choice


def choose_precision(cfg: ModelConfig, batch: int, seq: int, device: torch.device,
                     share: Callable[[int], int] = lambda code: code, cache: Path | None = None) -> PrecisionChoice:
    """auto's answer for this model on `device`. `share(code)` returns the main rank's code (a
    broadcast in a distributed run) so every rank agrees; non-main ranks' own probes are discarded.
    `cache`: the folder whose verdicts are reused (`probe_or_cached`); None probes every time."""
    if device.type == "cuda":
        return PrecisionChoice("bf16", "CUDA device: bf16 tensor cores")
    with torch.device("meta"):
        n_params = sum(p.numel() for p in Transformer(cfg).parameters())
    if device.type == "cpu" and cpu_bf16_units() is None:
        choice = PrecisionChoice("fp32", "this CPU has no bf16 arithmetic (no AMX, no AVX512-BF16): bf16 would "
                                         "run through fp32 units, so it was not probed")
    elif n_params > MAX_PROBE_PARAMS:  # a whole copy would not fit beside the run's own model
        choice = PrecisionChoice("fp32", f"{n_params / 1e9:.1f}B parameters: too large to probe a copy on the CPU")
    else:
        choice = probe_or_cached(cfg, batch, seq, device, cache)
    # every rank takes part in the broadcast whichever way it decided, so mixed nodes cannot deadlock
    code = share(FORMATS.index(choice.precision))
    if FORMATS[code] != choice.precision:
        choice = PrecisionChoice(FORMATS[code], "the main rank's choice", choice.seconds_per_step, choice.loss)
    return choice
