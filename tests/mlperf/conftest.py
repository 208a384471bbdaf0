"""Smoke runs shared by the mlperf tests: each is trained once per session (a few seconds each)."""

import json
from pathlib import Path

import pytest

from trainperf.config import load_recipe
from trainperf.parallel.env import DistEnv
from trainperf.train.benchmark import run_benchmark
from trainperf.train.trainer import RunOptions


def _smoke(tmp_path_factory, name: str, seed: int = 0) -> Path:
    root = tmp_path_factory.mktemp(name)
    r = load_recipe(name, [f"data.cache_dir={root / 'cache'}"], smoke=True)
    run_benchmark(r, DistEnv(), RunOptions(out=root / "run", seed=seed, progress=False))
    return root / "run"


@pytest.fixture(scope="session")
def gpt3_smoke(tmp_path_factory) -> Path:
    return _smoke(tmp_path_factory, "gpt3_175b")


@pytest.fixture(scope="session")
def lora_smoke(tmp_path_factory) -> Path:
    return _smoke(tmp_path_factory, "llama2_70b_lora")


def log_lines(path: Path) -> list[dict]:
    return [json.loads(ln.split(":::MLLOG", 1)[1]) for ln in path.read_text().splitlines() if ":::MLLOG" in ln]
