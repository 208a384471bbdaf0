import pytest
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


def test_gpu_names_match_the_most_specific_part():
    from trainperf.train.peak import gpu_peak

    assert gpu_peak("NVIDIA GB200", "bf16").flops == 2500e12  # not B200's 2250
    assert gpu_peak("NVIDIA B200", "bf16").flops == 2250e12
    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16").flops == 989e12
    assert gpu_peak("NVIDIA H100 PCIe", "bf16").flops == 756.5e12  # not the SXM figure
    assert gpu_peak("NVIDIA H100 PCIe", "fp8").flops == 1513e12
    gh = gpu_peak("NVIDIA GH200 480GB", "bf16")  # a Grace Hopper: its own entry, not the H200 it spells
    assert gh.flops == 989e12 and "GH200" in gh.source and "H200 SXM" not in gh.source
    nvl = gpu_peak("NVIDIA H100 NVL", "bf16")  # differs from SXM, no sourced figure here: none
    assert nvl.flops is None and "no bf16 datasheet peak" in nvl.source


def test_fp32_is_the_true_fp32_rate_not_tf32():
    from trainperf.train.peak import gpu_peak

    assert gpu_peak("NVIDIA H100 80GB HBM3", "fp32").flops == pytest.approx(66.9e12)  # TF32 would be 494.7
    assert gpu_peak("NVIDIA H100 PCIe", "fp32").flops == pytest.approx(51e12)
    assert gpu_peak("NVIDIA B200", "fp32").flops is None  # no sourced FP32 figure: no MFU
    assert not torch.backends.cuda.matmul.allow_tf32  # the fp32 figure assumes TF32 stays off


def test_unknown_gpu_has_no_peak_and_no_mfu():
    from trainperf.train.peak import gpu_peak

    p = gpu_peak("NVIDIA GeForce RTX 4090", "bf16")
    assert p.flops is None and p.source.startswith("unknown GPU 'NVIDIA GeForce RTX 4090'")
    assert p.mfu(1e12) is None
    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16").mfu(989e12 / 2) == 0.5


def test_device_peak_on_cuda_never_falls_back_to_the_cpu_probe(monkeypatch):
    from trainperf.train import peak

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    monkeypatch.setattr(peak, "cpu_peak", lambda *a: (_ for _ in ()).throw(AssertionError("probed the CPU")))
    assert peak.device_peak(torch.device("cuda", 0), "bf16").flops is None


def test_a_cpu_peak_is_kept_and_a_later_run_only_looks_briefly_for_a_better_one(monkeypatch, tmp_path):
    from trainperf.train import peak

    looks = []
    rates = iter([100e9, 50e9, 200e9])
    monkeypatch.setattr(peak, "matmul_rate", lambda device, precision, n, seconds: looks.append(seconds) or next(rates))
    dev = torch.device("cpu")
    for expect in (100e9, 100e9, 200e9):  # a run under load (50) keeps the better figure; a faster one replaces it
        monkeypatch.setattr(peak, "_probe_cache", {})
        assert peak.measure_matmul_peak(dev, "bf16", cache=tmp_path).flops == expect
    assert looks == [0.5, peak.RECHECK_SECONDS, peak.RECHECK_SECONDS]
    assert "earlier runs" in peak.measure_matmul_peak(dev, "bf16", cache=tmp_path).source
