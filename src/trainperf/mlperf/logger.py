"""MLPerf result logs through the official `mlperf_logging.mllog` package.

Only rank 0 writes. The shared mllog logger is pointed at a private `logging.Logger` with one file
handler, so the `:::MLLOG` lines go to `result_<seed>.txt` and not to the terminal.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlperf_logging import mllog
from mlperf_logging.mllog import constants as C

from trainperf import atomic

RULES_DIR = Path(__file__).parent / "rules"


class _StrictFileHandler(logging.FileHandler):
    """A file handler whose write errors reach the caller: logging's default prints "--- Logging
    error ---" and goes on, so a full disk would silently drop lines from a result log, which then
    no longer scores. Raised, the OS error becomes the CLI's one line (cli.main)."""

    def handleError(self, record: logging.LogRecord) -> None:
        raise  # re-raises the exception emit() is handling


class MLPerfLog:
    _count = 0

    def __init__(self, path: Path | None, enabled: bool = True):
        self.enabled = enabled and path is not None
        self._handler: logging.Handler | None = None
        if not self.enabled:
            return
        # a fresh name per log: mllog refuses to be re-pointed at the logger it already uses, and
        # logging.getLogger would hand back the previous run's logger for the same path
        MLPerfLog._count += 1
        logger = logging.getLogger(f"trainperf.mllog.{MLPerfLog._count}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        for h in list(logger.handlers):
            logger.removeHandler(h)
        self._handler = _StrictFileHandler(path, mode="x", encoding="utf-8")  # never append to a result
        logger.addHandler(self._handler)
        self._logger_name = logger.name
        # stack offset 2: the call site recorded in the log is our caller, not this wrapper.
        mllog.config(logger=logger, default_stack_offset=2, root_dir=str(Path(__file__).parents[2]))
        self._m = mllog.get_mllogger()

    def event(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self.enabled:
            self._m.event(key=key, value=value, metadata=metadata or None)

    def start(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self.enabled:
            self._m.start(key=key, value=value, metadata=metadata or None)

    def end(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self.enabled:
            self._m.end(key=key, value=value, metadata=metadata or None)

    def close(self) -> None:
        if self._handler is not None:
            self._handler.flush()
            self._handler.close()
            logging.getLogger(self._logger_name).removeHandler(self._handler)
            self._handler = None


def render_rules(benchmark: str, target: float, out: Path) -> Path | None:
    """Our benchmark's compliance YAML with the run's quality target, written to `out`. None for
    the official benchmarks, whose rules are the package's own and are not copied."""
    own = RULES_DIR / f"{benchmark}.yaml"
    if not own.is_file():
        return None
    src = own.read_text()
    lines = src.splitlines()
    for i, line in enumerate(lines):
        if "ATLEAST_ONE_CHECK" in line:
            lines[i] = f"    ATLEAST_ONE_CHECK: \"(v['value'] <= {target!r}) and v['value'] > 0.0\""
    atomic.write_text(out, "\n".join(lines) + "\n")
    return out


__all__ = ["MLPerfLog", "C", "RULES_DIR", "render_rules"]
