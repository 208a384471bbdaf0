"""The GPU catalog: peaks at the power a GPU runs at."""

import math

import pytest

from trainperf.plan.hardware import POWER_EXPONENT, gpus


def test_a_power_capped_gpu_sustains_a_share_of_its_datasheet_peaks():
    """torchtitan's H100s run at 500 W of the SXM part's 700 W: every peak scales by the same
    share; GPUs at their rated power keep the datasheet's."""
    g = gpus()
    capped, full = g["h100_96gb"], g["h100"]
    share = (500 / 700) ** POWER_EXPONENT
    for p in ("bf16", "fp8"):
        assert capped.peak(p) == pytest.approx(full.peak(p) * share)
    assert 0.8 < share < 0.87
    assert all(x.power_scale == 1.0 for k, x in g.items() if k != "h100_96gb")


def test_the_power_exponent_is_within_nvidias_own_same_die_pairs():
    """The exponent the cap uses lies among those NVIDIA's datasheets imply for one die sold at two
    power ratings (B200 / GB200, B300 / GB300), format by format."""
    g = gpus()
    ks = [math.log(g[a].tflops[p] / g[b].tflops[p]) / math.log(g[a].tdp_w / g[b].tdp_w)
          for a, b in (("b200", "gb200"), ("b300", "gb300")) for p in ("bf16", "fp8", "fp4")]
    assert min(ks) <= POWER_EXPONENT <= max(ks)
