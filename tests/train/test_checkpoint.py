"""Distributed checkpoints on one process: bitwise resume, atomic commit, retention, clear refusals."""

import json
import os
import shutil
import signal

import pytest
import torch
from safetensors.torch import load_file

import trainperf.train.checkpoint as ck
from trainperf.config import load_recipe
from trainperf.errors import Terminated
from trainperf.parallel.env import DistEnv
from trainperf.train.checkpoint import MARKER, CheckpointError, committed, resolve
from trainperf.train.trainer import RunOptions, train


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """These models are tiny: on a busy 2-core machine a second intra-op thread only adds contention."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


def _recipe(small_recipe, *extra):
    return small_recipe("train.log_every=1", "checkpoint.every_steps=4", *extra)


@pytest.fixture(scope="module")
def _full(tmp_path_factory):
    """8 uninterrupted steps, checkpoints at 4 and 8 (trained once; tests get a copy)."""
    root = tmp_path_factory.mktemp("full")
    base = ["data.synthetic=true", "parallel.compile=false", "data.tokenizer=byte", f"data.cache_dir={root / 'cache'}",
            "data.eval_bytes=4096", "model.n_layer=2", "model.d_model=64", "model.n_head=4",
            "model.seq_len=32", "train.global_batch_size=8", "train.micro_batch_size=4",
            "train.warmup_steps=2", "train.decay_steps=20", "train.lr=3e-3", "train.log_every=1",
            "train.precision=fp32", "eval.every_samples=64", "eval.target=0.5", "checkpoint.every_steps=4",
            "train.optimizer=adamw", "train.schedule=cosine", "model.qk_norm=false", "train.end_lr=3e-4"]
    s = train(load_recipe("tiny", base), DistEnv(), RunOptions(out=root / "full", max_steps=8))
    return root / "full", s


@pytest.fixture
def full_run(_full, tmp_path):
    shutil.copytree(_full[0], tmp_path / "full")
    return tmp_path / "full", _full[1]


def test_resume_is_bitwise_identical(small_recipe, full_run, tmp_path):
    full, s_full = full_run
    assert [p.name for p in committed(full / "checkpoints")] == ["step_00000004", "step_00000008"]
    out = tmp_path / "resumed"
    s = train(_recipe(small_recipe), DistEnv(),
              RunOptions(out=out, max_steps=8, resume=full / "checkpoints" / "step_00000004"))
    a, b = _losses(full), _losses(out)
    assert sorted(b) == [5, 6, 7, 8]
    assert [b[k] for k in b] == [a[k] for k in b]  # exact float equality, not approx
    assert s.final_eval_loss == s_full.final_eval_loss and s.resumed_from_step == 4
    wa, wb = load_file(str(full / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_keeps_last_k(small_recipe, tmp_path):
    out = tmp_path / "k"
    train(small_recipe("checkpoint.every_steps=2", "checkpoint.keep=2"), DistEnv(), RunOptions(out=out, max_steps=7))
    assert [p.name for p in committed(out / "checkpoints")] == ["step_00000006", "step_00000007"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000006", "step_00000007"]


def test_crash_during_save_is_never_picked_up(small_recipe, full_run, tmp_path, monkeypatch):
    full, _ = full_run
    # a real save that dies at the commit (after every file was written)
    out = tmp_path / "crash"
    shutil.copytree(full, out)
    (out / "summary.json").unlink()

    def boom(self, tmp, final, step):  # dies after DCP wrote every shard, before the commit
        raise OSError("simulated crash")

    monkeypatch.setattr(ck.Checkpointer, "_commit", boom)
    with pytest.raises(OSError, match="simulated crash"):
        train(_recipe(small_recipe), DistEnv(), RunOptions(out=out, max_steps=12, resume=out))
    monkeypatch.undo()
    # written, never committed; a save that fails with an exception (a full disk) removes it at once
    assert not (out / "checkpoints" / ".step_00000012.tmp").exists()
    shutil.copytree(out / "checkpoints" / "step_00000008", out / "checkpoints" / ".step_00000012.tmp")  # as a SIGKILL leaves it
    # ... and a step folder that lost its marker (copied half-way by hand, say)
    broken = out / "checkpoints" / "step_00000016"
    shutil.copytree(out / "checkpoints" / "step_00000008", broken)
    (broken / MARKER).unlink()
    assert resolve(out).name == "step_00000008"
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        ck.verify(broken)
    # the next save into that folder clears what the crash left (a fresh --out, same checkpoint.dir)
    shutil.rmtree(broken)
    s = train(_recipe(small_recipe, f"checkpoint.dir={out / 'checkpoints'}"), DistEnv(),
              RunOptions(out=tmp_path / "next", max_steps=10, resume=out))
    assert s.resumed_from_step == 8
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000004", "step_00000008", "step_00000010"]


def test_corrupt_checkpoint_refused_before_training(small_recipe, full_run, tmp_path):
    full, _ = full_run
    ckpt = full / "checkpoints" / "step_00000008"
    shard = next(ckpt.glob("*.distcp"))
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    with pytest.raises(CheckpointError, match="corrupt checkpoint"):
        train(_recipe(small_recipe), DistEnv(), RunOptions(out=tmp_path / "x", max_steps=12, resume=ckpt))
    assert not (tmp_path / "x").exists()  # refused before anything was written
    # same size, garbage bytes: DCP itself fails to read it, still before any step
    shard.write_bytes(b"\0" * (2 * (shard.stat().st_size or 1)))
    json_meta = json.loads((ckpt / MARKER).read_text())
    json_meta["files"][shard.name] = shard.stat().st_size
    (ckpt / MARKER).write_text(json.dumps(json_meta))
    with pytest.raises(CheckpointError, match="corrupt or incompatible"):
        train(_recipe(small_recipe), DistEnv(), RunOptions(out=tmp_path / "y", max_steps=12, resume=ckpt))
    assert not (tmp_path / "y" / "metrics.jsonl").exists()


def test_checkpoint_of_another_model_refused(small_recipe, full_run, tmp_path):
    full, _ = full_run
    before = sorted(os.listdir(full / "checkpoints"))
    with pytest.raises(CheckpointError, match="another model or recipe.*model.d_model"):
        train(_recipe(small_recipe, "model.d_model=32"), DistEnv(),
              RunOptions(out=tmp_path / "other", max_steps=12, resume=full))
    with pytest.raises(CheckpointError, match="train.lr"):
        train(_recipe(small_recipe, "train.lr=1e-3"), DistEnv(),
              RunOptions(out=tmp_path / "other2", max_steps=12, resume=full))
    assert sorted(os.listdir(full / "checkpoints")) == before


def test_resume_needs_a_checkpoint_and_a_fresh_run_needs_an_empty_dir(small_recipe, tmp_path):
    with pytest.raises(CheckpointError, match="no such"):
        train(_recipe(small_recipe), DistEnv(), RunOptions(out=tmp_path / "a", resume=tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no complete checkpoint"):
        train(_recipe(small_recipe), DistEnv(), RunOptions(out=tmp_path / "a", resume=tmp_path / "empty"))
    (tmp_path / "b" / "checkpoints" / "step_00000004").mkdir(parents=True)
    (tmp_path / "b" / "checkpoints" / "step_00000004" / MARKER).write_text("{}")
    with pytest.raises(CheckpointError, match="already holds checkpoints"):
        train(_recipe(small_recipe), DistEnv(), RunOptions(out=tmp_path / "b", max_steps=2))


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated])
def test_stop_inside_the_writer_is_still_a_stop(small_recipe, tmp_path, monkeypatch, stop):
    """DCP wraps whatever its writer raises, a Ctrl-C or SIGTERM too: that must stay the stop the user
    asked for (exit 130/143 in the CLI), not turn into 'the checkpoint could not be written' (exit 1)."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    def stopped(self, plan, planner):
        raise stop()

    monkeypatch.setattr(FileSystemWriter, "write_data", stopped)
    out = tmp_path / "stop"
    with pytest.raises(stop):
        train(small_recipe("checkpoint.every_steps=2"), DistEnv(), RunOptions(out=out, max_steps=4))
    assert list((out / "checkpoints").iterdir()) == []  # the half-written save is gone


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_save_waits_for_the_commit(small_recipe, tmp_path, monkeypatch, sig):
    """A real Ctrl-C or SIGTERM arriving while DCP writes: raised inside torch's C++ file writer it
    would come back as a bogus write error and lose the checkpoint. Held, the save commits and the
    stop follows (the CLI's SIGTERM handler raises `Terminated`; installed here the same way)."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    real = FileSystemWriter.write_data

    def signalled(self, plan, planner):
        os.kill(os.getpid(), sig)
        return real(self, plan, planner)

    def terminated(signum, frame):
        raise Terminated()

    monkeypatch.setattr(FileSystemWriter, "write_data", signalled)
    before = signal.signal(signal.SIGTERM, terminated)
    out = tmp_path / "held"
    try:
        with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Terminated):
            train(small_recipe("checkpoint.every_steps=2"), DistEnv(), RunOptions(out=out, max_steps=4))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert [p.name for p in committed(out / "checkpoints")] == ["step_00000002"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
