"""examples/slurm/train.sbatch on a real one-node Slurm (examples/slurm/local_cluster.sh): two
training processes (one torchrun, gloo on CPU) train a small `tiny` to its target with checkpoints.
Runs where Slurm is installed and we are root (slurmd must start jobs); skips elsewhere."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "examples" / "slurm"
SMALL = ["--set", "data.synthetic=true", "--set", "parallel.compile=false", "--set", "data.tokenizer=byte",
         "--set", "data.eval_bytes=4096", "--set", "model.n_layer=2", "--set", "model.d_model=64",
         "--set", "model.seq_len=32", "--set", "train.global_batch_size=8", "--set", "train.micro_batch_size=4",
         "--set", "train.precision=fp32", "--set", "eval.every_samples=32", "--set", "eval.target=4.0",
         "--set", "train.warmup_steps=2"]

pytestmark = pytest.mark.skipif(
    not (shutil.which("sbatch") and shutil.which("slurmctld") and shutil.which("munged") and os.geteuid() == 0),
    reason="needs Slurm (slurm-wlm + munge) and root to start slurmctld/slurmd")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURM_LOCAL_DIR": str(d), "SLURM_CONF": str(d / "slurm.conf")}
    p = subprocess.run([str(SLURM / "local_cluster.sh"), "start"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    yield env
    subprocess.run([str(SLURM / "local_cluster.sh"), "stop"], env=env, capture_output=True, timeout=60)


def _wait(job: str, env: dict, timeout: float = 600) -> str:
    """The job's final state, polled every half second (`sbatch --wait` polls with a back-off that
    reaches 30 s, which was most of this test's time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True)
        m = re.search(r"JobState=(\w+)", q.stdout)
        if m and m.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return m.group(1)
        time.sleep(0.5)
    raise AssertionError(f"job {job} still running after {timeout} s")


def test_sbatch_example_trains_tiny_on_two_processes(cluster, tmp_path):
    run = tmp_path / "run"
    env = {**cluster, "BENCH": "tiny", "GPUS_PER_NODE": "2", "RUN_DIR": str(run), "CKPT_EVERY": "2",
           "TRAINPERF_CACHE": str(tmp_path / "cache"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    out = tmp_path / "job.out"
    p = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2", "--no-requeue",
                        f"--output={out}", str(SLURM / "train.sbatch"), *SMALL],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    state = _wait(p.stdout.strip().split(";")[0], env)
    log = out.read_text() if out.exists() else ""
    assert state == "COMPLETED", state + "\n" + log[-3000:]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "success" and s["restarts"] == 0, log[-3000:]
    assert s["layout"]["world_size"] == 2, s["layout"]
    assert "tiny: success in" in log  # the sbatch script's own last line
    assert list((run / "checkpoints").glob("step_*/trainperf-checkpoint.json"))
    assert '"key": "world_size", "value": 2,' in (run / "result_0.txt").read_text()
