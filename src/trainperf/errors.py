"""Every error trainperf expects to raise, under one base that carries the process exit code.

The CLI catches `TrainperfError` only: it prints the one-line message and exits with `exit_code`
(2: the user asked for something invalid, 1: the data or the run could not go on). Anything else is
a bug and keeps its traceback. This module imports nothing, so every part (the torch-free planner
included) can raise these without loading anything else.

Each class also keeps the builtin base it had before (ValueError, RuntimeError), so code that
caught those still does.
"""

from __future__ import annotations

EXIT_FAIL = 1  # the data or the run could not go on
EXIT_USAGE = 2  # bad configuration or arguments


class TrainperfError(Exception):
    """An expected failure with a one-line message; `exit_code` is what the CLI exits with."""

    exit_code: int = EXIT_FAIL


class UsageError(TrainperfError):
    """The command line or its inputs ask for something invalid (exit 2)."""

    exit_code = EXIT_USAGE


class RunError(TrainperfError):
    """The data, a file or the run could not go on (exit 1)."""

    exit_code = EXIT_FAIL


class ConfigError(UsageError, ValueError):
    """A recipe or override is invalid; the message names the key."""


class DataError(RunError, ValueError):
    """Unreadable corpus, missing or corrupt shard: the message names the file."""


class WeightsError(RunError, ValueError):
    """A weights file (start checkpoint, adapters, Hugging Face import) that is missing, unreadable or
    does not fit the model."""


class CheckpointError(RunError, RuntimeError):
    """A training checkpoint that cannot be used (missing, partial, corrupt, or from another recipe)."""


class TrainError(RunError, RuntimeError):
    """A run that cannot go on (NaN loss, bad batch layout, output exists)."""


class PlanError(RunError, ValueError):
    """Nothing can be planned (no layout fits, GBS cannot be split) or a plan JSON file is unusable."""


class ScoreError(RunError, ValueError):
    """Results that cannot be scored together (none, mixed benchmarks, duplicated seeds)."""


class RunDirError(RunError, ValueError):
    """A run directory that cannot be read (missing, half-written or malformed file)."""


class ExportError(RunError, ValueError):
    """A model layout or run directory the export cannot turn into a transformers checkpoint."""


class BrowserError(RunError, RuntimeError):
    """Chromium is missing, exited, or did not answer in time (the report's page check)."""
