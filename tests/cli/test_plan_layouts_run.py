"""Every layout `trainperf plan` ranks first for the four MLPerf benchmarks, on every GPU kind from 8
to 16,384 GPUs (powers of two, and the record systems' 5,120 and 10,752), is one the trainer accepts:
the layout applied to the recipe the way `run --layout` applies it (trainperf.layout), then the
trainer's whole layout check, `ParallelDims.for_recipe`, on that many ranks. Any refusal fails the
case: the trainer has no known gaps left among these layouts."""

import pytest

from trainperf.config import load_recipe
from trainperf.errors import PlanError
from trainperf.layout import merge_overrides, spec_of
from trainperf.parallel.dims import ParallelDims
from trainperf.plan.api import make_plan
from trainperf.plan.hardware import gpus

BENCHMARKS = ("gpt3_175b", "llama2_70b_lora", "llama31_405b", "llama31_8b")
COUNTS = tuple(2**k for k in range(3, 15)) + (5120, 10752)
GPUS = tuple(gpus())

@pytest.mark.parametrize("n", COUNTS)
@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("bench", BENCHMARKS)
def test_planners_first_layout_passes_the_trainers_check(bench, gpu, n):
    try:
        plan = make_plan(bench, gpu, n, top=1)
    except PlanError:
        pytest.skip(f"no layout of {bench} fits {n} x {gpu}: nothing to run")
    L = plan.best.layout
    spec = spec_of(L)
    del spec["precision"]  # the matmul format is not part of the layout check
    recipe = load_recipe(bench, merge_overrides(spec, []))
    dims = ParallelDims.for_recipe(recipe, n)
    assert (dims.tp, dims.pp, dims.cp, dims.dp, dims.world_size) == (L.tp, L.pp, L.cp, L.dp, n)
    geometry = dims.batch(recipe.train)
    assert (geometry.global_batch, geometry.micro, geometry.accum) == (L.gbs, L.mbs, L.microbatches)
