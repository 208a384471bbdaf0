import torch

from trainperf.train.peak import cpu_peak, measure_matmul_peak


def test_cpu_peak_is_never_below_the_fp32_probe():
    # the probes are cached per (device, precision), so both calls see the same measurements
    dev = torch.device("cpu")
    p = cpu_peak(dev, "bf16")
    assert p.flops >= measure_matmul_peak(dev, "fp32").flops
    assert p.flops >= measure_matmul_peak(dev, "bf16").flops
    assert p.source.startswith("measured: best of bf16")
    assert cpu_peak(dev, "fp32").flops == measure_matmul_peak(dev, "fp32").flops
