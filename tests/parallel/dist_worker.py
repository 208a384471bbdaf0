"""Run several short trainings in one torchrun process group (one launch pays the start-up once).

Usage (under torchrun): dist_worker.py JOBS.json, where JOBS.json is a list of
{"out": dir, "overrides": [...], "max_steps": n, "resume": dir-or-null}.

Before the jobs, it records the sequence chunks PyTorch's context_parallel gives each rank
(OUT/ring_layout{world}.json). Every job also counts FSDP2's gradient reductions (calls of its `foreach_reduce`, one per parameter
group that reduce-scatters) and rank 0 writes the count to OUT/reductions.json.
"""

import json
import sys
from pathlib import Path

import torch.distributed.fsdp._fully_shard._fsdp_param_group as fsdp_group

from trainperf.config import load_recipe
from trainperf.parallel.env import init_env
from trainperf.train.trainer import RunOptions, train


COUNT = {"reductions": 0}
_reduce = fsdp_group.foreach_reduce


def _counting_reduce(*args, **kwargs):
    COUNT["reductions"] += 1
    return _reduce(*args, **kwargs)


fsdp_group.foreach_reduce = _counting_reduce


def ring_layout(env, out: Path) -> None:
    """The positions PyTorch's context_parallel hands each rank of a cp mesh over the whole world
    (a 32-token sequence), gathered into OUT: the ring attention must see the chunks trainperf holds."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from trainperf.parallel.context import ring_positions

    mesh = init_device_mesh("cpu", (env.world_size,), mesh_dim_names=("cp",))
    got = [None] * env.world_size
    dist.all_gather_object(got, ring_positions(mesh, 32).tolist())
    if env.is_main:
        out.write_text(json.dumps(got))


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    env = init_env("cpu")
    ring_layout(env, Path(sys.argv[1]).with_name(f"ring_layout{env.world_size}.json"))
    for job in jobs:
        r = load_recipe("tiny", job["overrides"])
        resume = Path(job["resume"]) if job.get("resume") else None
        COUNT["reductions"] = 0
        s = train(r, env, RunOptions(out=Path(job["out"]), max_steps=job["max_steps"], progress=False, resume=resume))
        if env.is_main:
            (Path(job["out"]) / "reductions.json").write_text(json.dumps({**COUNT, "steps": s.steps}))
    env.close()  # as `trainperf run` does: a group torn down by interpreter exit can abort a worker


if __name__ == "__main__":
    main()
