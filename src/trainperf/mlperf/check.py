"""Run the official compliance checker (the package's, in a subprocess) on one result log."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# How the checker starts each failure message (mlperf-logging 4.1.68); the first one is prefixed
# with "WARNING - ", the rest follow separator lines or each other.
_STARTS = ("CHECK for ", "Failed checks for ", "Required ", "Failed executing", "Found parsing errors",
           "Log lines had parsing errors", "Could not find config file")
_PREFIX = re.compile(r"^(WARNING|ERROR|INFO) - +")


@dataclass
class CheckResult:
    passed: bool
    errors: list[str]  # one line per failed rule, in the checker's order
    output: str

    @property
    def first_error(self) -> str:
        return self.errors[0] if self.errors else ""


def parse_messages(output: str) -> list[str]:
    """One line per failure from the checker's output; a CHECK failure gets its failed test appended."""
    msgs: list[str] = []
    lines = output.splitlines()
    if any(ln.startswith("Traceback") for ln in lines):
        last = next((ln for ln in reversed(lines) if ln.strip()), "")
        if "FileNotFoundError" in last and "closed_" in last:
            return [f"no rules for this benchmark in this ruleset ({last.strip()})"]
        return [f"checker crashed: {last.strip()}"]
    for ln in lines:
        text = _PREFIX.sub("", ln).strip()
        if text.startswith(_STARTS):
            msgs.append(text.rstrip(":"))
        elif text.startswith("failed test:") and msgs:
            msgs[-1] += f" ({text.replace('  ', ' ')})"
    return msgs


def check_log(log: Path, ruleset: str, config: Path | None = None) -> CheckResult:
    """`python -m mlperf_logging.compliance_checker` on `log`; `config` = an absolute custom YAML."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
               "--ruleset", ruleset, "--log_output", str(Path(tmp) / "cc.log")]
        if config is not None:
            cmd += ["--config", str(Path(config).absolute())]
        # absolute, not resolved: the checker runs in `tmp`, and resolve() raises on a symlink loop
        proc = subprocess.run(cmd + [str(Path(log).absolute())], capture_output=True, text=True, cwd=tmp)
    out = proc.stdout + proc.stderr
    passed = proc.returncode == 0 and "SUCCESS" in out
    errors = [] if passed else (parse_messages(out) or [out.strip().splitlines()[-1] if out.strip() else "no output"])
    return CheckResult(passed, errors, out)
