"""Run the official compliance checker (the package's, in a subprocess) on one result log."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class CheckResult:
    passed: bool
    errors: list[str]  # the checker's WARNING/ERROR lines, first failure first
    output: str


def check_log(log: Path, ruleset: str, config: Path | None = None) -> CheckResult:
    """`python -m mlperf_logging.compliance_checker` on `log`; `config` = an absolute custom YAML."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
               "--ruleset", ruleset, "--log_output", str(Path(tmp) / "cc.log")]
        if config is not None:
            cmd += ["--config", str(Path(config).resolve())]
        proc = subprocess.run(cmd + [str(log)], capture_output=True, text=True, cwd=tmp)
    out = proc.stdout + proc.stderr
    errors = [ln.split(" - ", 1)[-1] for ln in out.splitlines()
              if ln.startswith(("WARNING", "ERROR")) and "FAILED" not in ln]
    return CheckResult(proc.returncode == 0 and "SUCCESS" in out, errors, out)
