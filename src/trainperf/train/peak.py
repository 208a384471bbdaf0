"""Peak FLOP/s an MFU is relative to.

GPUs: dense (no sparsity) datasheet figures per precision. CPUs: no datasheet figure means anything
for a 2-core slice of a server, so the peak is *measured*: the best of a few large matmuls in the
run's precision, and every report says it was measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

# Dense TFLOP/s per GPU (NVIDIA datasheets; SXM parts). bf16 / fp8.
GPU_PEAKS_TFLOPS: dict[str, dict[str, float]] = {
    "H100": {"bf16": 989.4, "fp8": 1978.9, "fp32": 494.7},
    "H200": {"bf16": 989.4, "fp8": 1978.9, "fp32": 494.7},
    "B200": {"bf16": 2250.0, "fp8": 4500.0, "fp32": 1125.0},
    "GB200": {"bf16": 2500.0, "fp8": 5000.0, "fp32": 1250.0},
    "A100": {"bf16": 312.0, "fp8": 312.0, "fp32": 156.0},
}


@dataclass(frozen=True)
class Peak:
    flops: float  # FLOP/s
    source: str  # human-readable: what the figure is and where it comes from


_probe_cache: dict[tuple[str, str], Peak] = {}


def measure_matmul_peak(device: torch.device, precision: str, n: int = 1024, seconds: float = 0.5) -> Peak:
    key = (str(device), precision)
    if key in _probe_cache:
        return _probe_cache[key]
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
    peak = Peak(best, f"measured: best {precision} {n}x{n} matmul on this {device.type} "
                      f"({torch.get_num_threads()} threads)")
    _probe_cache[key] = peak
    return peak


def device_peak(device: torch.device, precision: str) -> Peak:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for kind, peaks in GPU_PEAKS_TFLOPS.items():
            if kind in name.upper().replace(" ", ""):
                p = peaks.get(precision, peaks["bf16"])
                return Peak(p * 1e12, f"datasheet: {kind} dense {precision} {p:g} TFLOP/s")
    return cpu_peak(device, precision)


def cpu_peak(device: torch.device, precision: str) -> Peak:
    """The best of the run's precision and fp32. A CPU without AMX multiplies bf16 matrices through a
    slow path (0.7 vs 34 GFLOP/s at one thread on this machine, measured) while a model under
    autocast still reaches fp32-like rates in its small matmuls, so a bf16-only probe gave MFUs
    over 100%. The hardware can always do the work in fp32, so that rate bounds what it offers."""
    own = measure_matmul_peak(device, precision)
    if precision == "fp32":
        return own
    f32 = measure_matmul_peak(device, "fp32")
    best = max(own, f32, key=lambda p: p.flops)
    return Peak(best.flops, f"measured: best of {precision} ({own.flops / 1e9:.1f} GFLOP/s) and fp32 "
                            f"({f32.flops / 1e9:.1f} GFLOP/s) 1024x1024 matmuls on this {device.type} "
                            f"({torch.get_num_threads()} threads)")
