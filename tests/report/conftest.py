import pytest

from trainperf.cli.main import main

SMALL = ["--set", "data.synthetic=true", "--set", "parallel.compile=false", "--set", "data.tokenizer=byte", "--set", "data.eval_bytes=4096",
         "--set", "model.n_layer=2", "--set", "model.d_model=64", "--set", "model.seq_len=32",
         "--set", "train.global_batch_size=8", "--set", "train.micro_batch_size=8",
         "--set", "train.precision=fp32", "--set", "eval.every_samples=64", "--set", "train.warmup_steps=2",
         "--set", "train.log_every=2", "--set", "eval.target=4.0"]


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """One real `trainperf run --tensorboard` to the target, shared by the report tests (read-only)."""
    base = tmp_path_factory.mktemp("report_run")
    out = base / "run0"
    rc = main(["run", *SMALL, "--set", f"data.cache_dir={base / 'cache'}", "--out", str(out),
               "--no-progress", "--tensorboard"])
    assert rc == 0
    return out
