"""Run several short trainings in one torchrun process group (one launch pays the start-up once).

Usage (under torchrun): dist_worker.py JOBS.json, where JOBS.json is a list of
{"out": dir, "overrides": [...], "max_steps": n, "resume": dir-or-null}.
"""

import json
import sys
from pathlib import Path

from trainperf.config import load_recipe
from trainperf.parallel.env import init_env
from trainperf.train.loop import RunOptions, train


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    env = init_env("cpu")
    for job in jobs:
        r = load_recipe("tiny", job["overrides"])
        resume = Path(job["resume"]) if job.get("resume") else None
        train(r, env, RunOptions(out=Path(job["out"]), max_steps=job["max_steps"], progress=False, resume=resume))


if __name__ == "__main__":
    main()
