"""The training rulesets the installed `mlperf-logging` package ships, in numeric order: one place
for the compliance checker's rules (`trainperf score`) and the RCP files (the planner)."""

from __future__ import annotations

import re
from pathlib import Path


def version_key(v: str) -> tuple[int, ...]:
    """'v5.1' / '5.1.0' -> (5, 1) / (5, 1, 0): rounds and rulesets in numeric order."""
    return tuple(int(x) for x in v.lstrip("v").split("."))


def package_dir(checker: str) -> Path:
    """`checker`'s folder in the installed package: 'compliance_checker' or 'rcp_checker'."""
    import mlperf_logging

    return Path(mlperf_logging.__file__).parent / checker


def package_rulesets(checker: str, filename: str) -> list[str]:
    """The training rulesets ('5.1.0', ...), oldest first, whose `checker` folder holds `filename`
    (e.g. 'closed_llama31_8b.yaml', 'rcps_gpt3.json'). Variants such as training_0.7.0_warn are not
    a ruleset a round used, and are left out."""
    found = [p.parent.name.removeprefix("training_") for p in package_dir(checker).glob(f"training_*/{filename}")]
    return sorted((r for r in found if re.fullmatch(r"\d+\.\d+\.\d+", r)), key=version_key)
