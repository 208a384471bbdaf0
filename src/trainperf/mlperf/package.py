"""Lay result logs out as an MLPerf Training submission and run the package checker over it.

    SUB/systems/<system>.json
    SUB/results/<system>/<benchmark>/result_<i>.txt

`systems/<system>.json` gets what this machine and the runs report (accelerator and count, host CPU,
memory, framework versions, OS); the fields only a person can know (availability status class,
interconnect and topology, cooling, storage, notes) are left empty and listed in `to_fill`.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import trainperf
from trainperf import atomic
from trainperf.mlperf.benchmarks import OFFICIAL
from trainperf.errors import OutError, UsageError
from trainperf.mlperf.score import RunLog, ScoreError, find_results, one_benchmark, read_log

# The fields `system_desc_checker` requires (mlperf-logging 4.1.68), in its order.
SYSTEM_FIELDS = (
    "submitter division status system_name number_of_nodes host_processors_per_node "
    "host_processor_model_name host_processor_core_count host_processor_vcpu_count host_processor_frequency "
    "host_processor_caches host_processor_interconnect host_memory_capacity host_storage_type "
    "host_storage_capacity host_networking host_networking_topology host_memory_configuration "
    "accelerators_per_node accelerator_model_name accelerator_host_interconnect accelerator_frequency "
    "accelerator_on-chip_memories accelerator_memory_configuration accelerator_memory_capacity "
    "accelerator_interconnect accelerator_interconnect_topology cooling hw_notes framework "
    "other_software_stack operating_system sw_notes"
).split()
STATUSES = ("Available on-premise", "Available cloud", "Research, Development, or Internal (RDI)", "Preview")


@dataclass
class PackageResult:
    out: Path
    files: list[Path]
    to_fill: list[str]
    checker_ran: bool
    checker_passed: bool | None
    checker_errors: list[str] = field(default_factory=list)
    checker_note: str = ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _mem_gb() -> str:
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        return f"{kb / 1024 ** 2:.0f} GB"
    except (OSError, AttributeError, ValueError):
        return ""


def system_description(name: str, submitter: str, status: str, runs: list[RunLog]) -> tuple[dict, list[str]]:
    """The systems/<name>.json fields this machine and the runs can fill, and the ones left to a person."""
    import torch

    summaries = []
    for r in runs:
        try:
            summaries.append(json.loads((r.path.parent / "summary.json").read_text()))
        except (OSError, ValueError):
            pass
    device = next((s.get("device") for s in summaries if s.get("device")), "")
    world = max((int(s.get("world_size", 1)) for s in summaries), default=1)
    # the loop records a GPU's name, or for a CPU run the processor / machine string
    on_gpu = device not in ("", "cpu", platform.processor(), platform.machine())
    desc = {k: "" for k in SYSTEM_FIELDS}
    desc.update({
        "submitter": submitter, "division": "closed", "status": status, "system_name": name,
        "number_of_nodes": "1", "host_processors_per_node": "1",
        "host_processor_model_name": _cpu_model(), "host_processor_core_count": str(os.cpu_count() or ""),
        "host_processor_vcpu_count": str(os.cpu_count() or ""), "host_memory_capacity": _mem_gb(),
        "accelerators_per_node": str(world if on_gpu else 0),
        "accelerator_model_name": device if on_gpu else "",
        "framework": f"PyTorch {torch.__version__}",
        "other_software_stack": f"trainperf {trainperf.__version__}, Python {platform.python_version()}"
                                + (f", CUDA {torch.version.cuda}" if torch.version.cuda else ""),
        "operating_system": platform.platform(),
    })
    if on_gpu and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        desc["accelerator_memory_capacity"] = f"{props.total_memory / 1024 ** 3:.0f} GB"
    to_fill = [k for k, v in desc.items() if v == ""]
    return desc, to_fill


def check_out(out: Path) -> None:
    """A submission tree goes to a new or empty folder, never into or over files: the package checker
    reads every file under it. Nor is it marked as trainperf's output (a `.trainperf` file would be
    one file too many in a submission), so `atomic.check_out` cannot tell an earlier package from
    someone else's folder; an earlier package is recognized by its layout instead."""
    if out.is_dir() and any(out.iterdir()):
        kind = atomic.out_kind(out)
        if kind:
            what = f"it is trainperf's {kind} folder, not a package folder"
        elif (out / "systems").is_dir() and (out / "results").is_dir():
            what = "it holds a submission tree (an earlier `trainperf package`)"
        else:
            what = "the folder holds files"
        raise OutError(f"--out {out}: {what}; a submission tree goes to a new or empty folder and is never "
                       "written over")
    atomic.check_out(out, "package")  # a file, or a place that cannot be written


def package(dirs: list[Path], system: str, out: Path, submitter: str = "", status: str = STATUSES[2],
            run_checker: bool = True) -> PackageResult:
    """Copy the logs into a new submission tree at `out` (a new or empty folder) and check it."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", system):
        raise UsageError(f"--system {system!r}: a name, not a path: letters, digits, '_', '-', '.', starting with "
                         "a letter or digit (it becomes a file name)")
    if status not in STATUSES:
        raise UsageError(f"--status {status!r}: one of {', '.join(STATUSES)}")
    check_out(out)
    runs = [read_log(p) for p in find_results(dirs)]
    bench = one_benchmark(runs)
    seeds = [r.seed for r in runs if r.seed is not None]
    if len(seeds) != len(set(seeds)):
        raise ScoreError("duplicated seeds among the runs; MLPerf runs need distinct seeds")
    desc, to_fill = system_description(system, submitter or os.environ.get("TRAINPERF_ORG", ""), status, runs)
    with atomic.atomic_dir(out) as stage:  # the tree appears whole or not at all
        res_dir = stage / "results" / system / bench
        res_dir.mkdir(parents=True)
        (stage / "systems").mkdir()
        for i, r in enumerate(runs):
            shutil.copyfile(r.path, res_dir / f"result_{i}.txt")
        (stage / "systems" / f"{system}.json").write_text(json.dumps(desc, indent=2) + "\n")
    files = sorted(p for p in out.rglob("*") if p.is_file())
    result = PackageResult(out, files, to_fill, False, None)
    if not run_checker:
        return result
    if bench not in OFFICIAL:
        result.checker_note = f"the package checker knows only official benchmarks; {bench} is checked by `trainperf score`"
        return result
    ruleset = OFFICIAL[bench][0]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(out.resolve()), "training",
                               ruleset, "--log_output", str(Path(tmp) / "pkg.log")],
                              capture_output=True, text=True, cwd=tmp)
    text = proc.stdout + proc.stderr
    result.checker_ran = True
    # the package checker exits 0 even when it finds errors: its verdict is a line of text
    result.checker_passed = "FOUND NO ERRORS" in text
    result.checker_errors = [re.sub(r"^ERROR - +", "", ln).strip() for ln in text.splitlines()
                             if ln.startswith("ERROR") and "FOUND ERRORS" not in ln][:20]
    if not result.checker_passed and not result.checker_errors:
        result.checker_errors = [ln for ln in text.strip().splitlines()[-3:]]
    return result
