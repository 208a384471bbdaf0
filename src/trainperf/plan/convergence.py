"""Samples to reach the target when the RCP mean is not the right answer.

The planner's default is the RCP mean at the chosen global batch: how the reference converges. A
submitter's own hyperparameters (base learning rate, warm-up) can converge in fewer or more samples;
the published Llama 2 70B LoRA anchors differ by about 2,000 samples at the same batch for that
reason. When the convergence is known, from a user's own runs or a submitter's result logs, the
planner takes it instead: `--samples N` or `--samples-from LOGS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.plan.rcp import olympic_mean


@dataclass(frozen=True)
class Convergence:
    samples: float  # training samples (sequences) to the target
    gbs: int | None  # the global batch the runs converged at; None when given by hand
    runs: int  # converged runs it summarises (0: given by hand)
    source: str

    def to_dict(self) -> dict:
        return {"samples": round(self.samples, 1), "global_batch": self.gbs, "runs": self.runs, "source": self.source}


# Far beyond any training run (Llama 3 405B: 15.6e12 tokens, about 2e9 samples of 8,192): a larger
# budget is a typo, and priced it would only print an absurd time
MAX_SAMPLES = 1e15
MAX_TOKENS = 1e18


def given(samples: float) -> Convergence:
    if not 0 < samples <= MAX_SAMPLES:
        raise ConfigError(f"--samples: must be a positive number of training samples up to {MAX_SAMPLES:.0e}, got {samples}")
    return Convergence(samples=float(samples), gbs=None, runs=0, source="given (--samples)")


def from_logs(paths: list[str | Path], benchmark: str, seq_len: int) -> Convergence:
    """Olympic mean of the samples at the last evaluation of each converged run in MLPerf result
    logs (`result_*.txt` files, or folders of them such as a `trainperf run --seeds` output).

    The runs must be of `benchmark` (the MLPerf name) and share one global batch, since samples to
    converge depend on it. A run whose log counts training tokens instead of samples (GPT-3's
    `epoch_num`) is converted at `seq_len` tokens per sample."""
    from trainperf.mlperf.score import ScoreError, find_results, read_log

    try:
        logs = [read_log(p) for p in find_results([Path(p) for p in paths])]
    except ScoreError as e:
        raise ConfigError(f"--samples-from: {e}") from None
    where = ", ".join(str(p) for p in paths)
    other = sorted({r.benchmark for r in logs if r.benchmark and r.benchmark != benchmark})
    if other:
        raise ConfigError(f"--samples-from: the logs in {where} are of {', '.join(other)}, not {benchmark}")
    done = [r for r in logs if r.converged]
    counts = []
    for r in done:
        n = float(r.samples) if r.samples else r.tokens / seq_len if r.tokens else None
        if n is None:
            continue
        # a converged run trained at least one step of its batch
        if r.gbs is not None and not 1 <= r.gbs <= n <= MAX_SAMPLES:
            raise ConfigError(f"--samples-from: {r.path}: {n:g} samples to the target at global batch {r.gbs} "
                              f"is not a run (it needs at least one step, at most {MAX_SAMPLES:.0e} samples)")
        if not 0 < n <= MAX_SAMPLES:
            raise ConfigError(f"--samples-from: {r.path}: {n:g} samples to the target is not a run")
        counts.append(n)
    if not counts:
        raise ConfigError(f"--samples-from: none of the {len(logs)} logs in {where} has a converged run "
                          "(run_stop status success) with a sample count at its last evaluation")
    batches = sorted({r.gbs for r in done if r.gbs})
    if len(batches) > 1:
        raise ConfigError(f"--samples-from: the runs used different global batches {batches}; "
                          "samples to converge depend on it, so give runs of one batch")
    return Convergence(samples=olympic_mean(counts), gbs=batches[0] if batches else None, runs=len(counts),
                       source=f"olympic mean of {len(counts)} converged runs in {where}")
