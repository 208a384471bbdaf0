"""Peak FLOP/s an MFU is relative to.

GPUs: dense (no sparsity) datasheet figures per precision, matched on the device's name (the most
specific name wins: "GB200" before "B200", "H100 PCIe" before "H100"). The SXM parts' bf16/fp8
figures are the planner's catalog (`plan/hardware.toml`, each with its source); parts the catalog
lacks carry their own figures and source here. fp32 is the non-tensor-core FP32 rate: trainperf
never enables TF32, so an fp32 run on a GPU multiplies in true fp32 (what the CPU parity tests and
a user asking for fp32 expect), and its MFU is relative to that rate, not to the TF32 tensor cores.
A GPU without a figure has no peak: its MFU is not reported (a CPU probe would be a made-up number
for a GPU). CPUs: no datasheet figure means anything for a 2-core slice of a server, so the peak is
*measured*: the best of a few large matmuls in the run's precision, and every report says so. With
the data cache at hand the best figure is kept per machine (`train.machine_cache`), and a later run
only looks briefly (`RECHECK_SECONDS`) for a better one: 0.2 s of start-up instead of 1 s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from trainperf.plan.hardware import catalog_kind, gpus
from trainperf.train import machine_cache

RECHECK_SECONDS = 0.1  # with an earlier run's figure kept: a short look that can only raise it

# FP32 (non-tensor-core) dense TFLOP/s, where a datasheet gives it, by catalog GPU.
FP32_TFLOPS: dict[str, tuple[float, str]] = {
    "h100": (66.9, "glennklockwood.com/garden/processors/h100 (H100 SXM5 FP32 VFMA 66.9)"),
    "h200": (66.9, "same GH100 SXM compute as H100 (glennklockwood.com/garden/processors/h100)"),
    "gh200": (66.9, "same GH100 compute as H100 (glennklockwood.com/garden/processors/h100)"),
}

# Parts the catalog lacks: (dense TFLOP/s per precision, source). An entry of None names a part whose
# figures differ from the catalog's SXM part and are not known here: no peak rather than the wrong one.
OWN_PARTS: dict[str, tuple[dict[str, float], str] | None] = {
    "H100PCIE": ({"bf16": 756.5, "fp8": 1513.0, "fp32": 51.0},
                 "NVIDIA H100 PCIe datasheet (table at archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html): "
                 "BF16 1,513 / FP8 3,026 TFLOPS with sparsity -> dense 756.5 / 1513; FP32 51"),
    "H100NVL": None,
    "H200NVL": None,
}


@dataclass(frozen=True)
class Peak:
    flops: float | None  # FLOP/s; None: no figure for this device, and no MFU
    source: str  # human-readable: what the figure is and where it comes from, or why there is none
    kept: bool = False  # a measured figure that earlier runs' kept measurements take part in

    def mfu(self, model_flops_per_s: float) -> float | None:
        """The share of this peak that `model_flops_per_s` (per device) is; None without a peak."""
        return None if not self.flops else model_flops_per_s / self.flops


_probe_cache: dict[tuple[str, str], Peak] = {}


def measure_matmul_peak(device: torch.device, precision: str, n: int = 1024, seconds: float = 0.5,
                        cache: Path | None = None) -> Peak:
    """The best `precision` n x n matmul rate over `seconds`; with `cache`, the best of that and the
    figure earlier runs kept (then measured for only RECHECK_SECONDS), kept in turn."""
    key = (str(device), precision)
    if key in _probe_cache:
        return _probe_cache[key]
    path = machine_cache.cache_file(cache, "peak", {"device": device.type, "precision": precision, "n": n}) \
        if cache is not None else None
    kept = float((machine_cache.read(path) or {}).get("flops", 0.0)) if path is not None else 0.0
    best = matmul_rate(device, precision, n, RECHECK_SECONDS if kept > 0 else seconds)
    if path is not None and best > kept:
        machine_cache.write(path, {"flops": best})
    peak = Peak(max(best, kept), f"measured: best {precision} {n}x{n} matmul on this {device.type} "
                                 f"({torch.get_num_threads()} threads){', this and earlier runs' if kept else ''}",
                kept=kept > 0)
    _probe_cache[key] = peak
    return peak


def matmul_rate(device: torch.device, precision: str, n: int, seconds: float) -> float:
    """FLOP/s of the fastest of repeated rounds of four n x n matmuls over `seconds`."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = 0.0
    a @ b  # warm-up
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t0))
    return best


def gpu_peak(name: str, precision: str) -> Peak:
    """The datasheet peak of the CUDA device called `name`, or a Peak without flops saying why none."""
    key = name.upper().replace(" ", "").replace("-", "").replace("_", "")
    # a part of its own (a PCIe or NVL card) before the catalog's SXM part whose name it holds
    kind = max((k for k in OWN_PARTS if k in key), key=len, default=None) or catalog_kind(name)
    if kind is None:
        return Peak(None, f"unknown GPU '{name}': no datasheet peak in trainperf's table, so no MFU")
    if kind in OWN_PARTS:
        own = OWN_PARTS[kind]
        if own is None or precision not in own[0]:
            return Peak(None, f"{name}: no {precision} datasheet peak for {kind} in trainperf's table, so no MFU")
        tflops, source = own[0][precision], own[1]
    elif precision == "fp32":
        if kind not in FP32_TFLOPS:
            return Peak(None, f"{name}: no fp32 (non-tensor-core) datasheet peak for {kind.upper()}, so no MFU")
        tflops, source = FP32_TFLOPS[kind]
    else:
        gpu = gpus()[kind]
        if not gpu.tflops.get(precision):
            return Peak(None, f"{name}: {gpu.name} has no {precision} tensor cores, so no MFU")
        tflops, source = gpu.tflops[precision], f"{gpu.name}, plan/hardware.toml [gpu.{gpu.key}]"
    return Peak(tflops * 1e12, f"datasheet: {kind.upper()} dense {precision} {tflops:g} TFLOP/s ({source})")


def device_peak(device: torch.device, precision: str, cache: Path | None = None) -> Peak:
    """The peak MFU is relative to; `cache` keeps a CPU's measured figure for later runs."""
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), precision)
    return cpu_peak(device, precision, cache)


def cpu_peak(device: torch.device, precision: str, cache: Path | None = None) -> Peak:
    """The best of the run's precision and fp32. A CPU without AMX multiplies bf16 matrices through a
    slow path (0.7 vs 34 GFLOP/s at one thread on this machine, measured) while a model under
    autocast still reaches fp32-like rates in its small matmuls, so a bf16-only probe gave MFUs
    over 100%. The hardware can always do the work in fp32, so that rate bounds what it offers."""
    own = measure_matmul_peak(device, precision, cache=cache)
    if precision == "fp32":
        return own
    f32 = measure_matmul_peak(device, "fp32", cache=cache)
    best = max(own, f32, key=lambda p: p.flops)
    kept = own.kept or f32.kept
    return Peak(best.flops, f"measured: best of {precision} ({own.flops / 1e9:.1f} GFLOP/s) and fp32 "
                            f"({f32.flops / 1e9:.1f} GFLOP/s) 1024x1024 matmuls on this {device.type} "
                            f"({torch.get_num_threads()} threads{', this and earlier runs' if kept else ''})",
                kept=kept)
