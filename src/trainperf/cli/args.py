"""Argument types every subcommand shares, and the parser that reports a bad argument in one line.

A count that must be positive is typed `positive_int` (`--nproc 0`, `--max-steps 0`, `--seeds 0`
are refused, not read as "default"), one that may be zero `non_negative_int`, a name that becomes a
file name `file_name`, a real number `finite_float`. argparse reports a bad value as `trainperf <cmd>: error: argument --flag: ...`
on one line and exits 2.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import NoReturn

from trainperf.errors import EXIT_USAGE


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    n = _int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    n = _int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def finite_float(text: str) -> float:
    """A finite number (`nan` and `inf` parse as floats, and would price or cost as such)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return x


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def file_name(text: str) -> str:
    """A name that becomes one file or folder name: letters, digits, '_', '-', '.', not starting
    with '.' or '-' (so never a path, '..' or a hidden file)."""
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a name: use letters, digits, '_', '-', '.' "
                                         "and start with a letter or digit (it becomes a file name)")
    return text


class Parser(argparse.ArgumentParser):
    """argparse, with its complaint on one line (no usage block) and exit 2; `-h` still shows usage."""

    def error(self, message: str) -> NoReturn:
        cmd = self.prog.removeprefix("trainperf").strip()  # "run", "data prepare", "" for the top level
        print(f"trainperf: error: {cmd + ': ' if cmd else ''}{message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
