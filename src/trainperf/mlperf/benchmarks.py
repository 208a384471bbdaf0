"""What differs between benchmarks in the MLPerf log: extra keys, eval metadata, smoke deviations.

The train loop calls these hooks and never branches on the benchmark's name itself.
"""

from __future__ import annotations

from trainperf.config import Recipe
from trainperf.mlperf.logger import MLPerfLog


class BenchmarkHooks:
    """Defaults: the 6.x LLM convention (samples_count everywhere)."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        """Keys beyond the common set the train loop logs (e.g. lora_rank, init_checkpoint_step)."""

    def eval_metadata(self, samples: int, tokens: int) -> dict:
        return {"samples_count": samples}

    def deviations(self) -> list[str]:
        """Where this run departs from the benchmark's closed rules (listed in the summary)."""
        return []


def benchmark_hooks(recipe: Recipe) -> BenchmarkHooks:
    return BenchmarkHooks(recipe)
