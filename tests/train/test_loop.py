import json
import math

import pytest

from trainperf.parallel.env import DistEnv
from trainperf.train.trainer import RunOptions, TrainError, lr_at, train


def _losses(out):
    return [json.loads(l)["loss"] for l in (out / "metrics.jsonl").read_text().splitlines()
            if json.loads(l)["kind"] == "train"]


def test_lr_schedule(small_recipe):
    r = small_recipe("train.warmup_steps=4", "train.decay_steps=10", "train.lr=1.0", "train.end_lr=0.1")
    assert lr_at(0, r) == pytest.approx(0.25)
    assert lr_at(3, r) == pytest.approx(1.0)
    assert lr_at(4 + 5, r) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_at(100, r) == pytest.approx(0.1)


def test_loss_decreases_and_files_written(small_recipe, tmp_path):
    r = small_recipe()
    s = train(r, DistEnv(), RunOptions(out=tmp_path / "run", max_steps=24))
    losses = _losses(tmp_path / "run")
    assert losses[-1] < losses[0] - 0.5
    assert s.status == "aborted" and s.steps == 24 and math.isfinite(s.final_eval_loss)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for k in ("benchmark", "status", "time_to_train_s", "steps", "samples", "tokens", "tokens_per_s", "mfu",
              "peak_flops", "final_eval_loss", "target", "seed", "device", "world_size"):
        assert k in summary
    tb = summary["time_breakdown_s"]
    for k in ("data", "fwd_bwd", "optimizer", "eval"):  # the report's stacked bar draws these
        assert tb[k] > 0, k
    assert tb["data"] + tb["fwd_bwd"] + tb["optimizer"] + tb["eval"] <= summary["time_to_train_s"]
    assert (tmp_path / "run" / "model.safetensors").exists() and (tmp_path / "run" / "config.json").exists()


def test_same_seed_same_losses(small_recipe, tmp_path):
    a = train(small_recipe(), DistEnv(), RunOptions(out=tmp_path / "a", max_steps=8, seed=1))
    b = train(small_recipe(), DistEnv(), RunOptions(out=tmp_path / "b", max_steps=8, seed=1))
    c = train(small_recipe(), DistEnv(), RunOptions(out=tmp_path / "c", max_steps=8, seed=2))
    assert _losses(tmp_path / "a") == _losses(tmp_path / "b")
    assert _losses(tmp_path / "a") != _losses(tmp_path / "c")
    assert a.final_eval_loss == b.final_eval_loss


def test_reaches_easy_target_with_success(small_recipe, tmp_path):
    s = train(small_recipe("eval.target=4.0"), DistEnv(), RunOptions(out=tmp_path / "ok"))
    assert s.status == "success" and s.final_eval_loss <= 4.0
    # the machine-independent part: the tokens trained up to the evaluation that reached the target
    assert s.tokens_to_target == s.tokens > 0
    assert s.model_flops_to_target == s.tokens * s.flops_per_token
    from trainperf.mlperf.score import read_log  # the scorer reads the same from the log and summary
    run = read_log(tmp_path / "ok" / "result_0.txt")
    assert run.tokens == s.tokens_to_target and run.model_flops_to_target == s.model_flops_to_target
    aborted = train(small_recipe(), DistEnv(), RunOptions(out=tmp_path / "no", max_steps=2))
    assert aborted.tokens_to_target is None and aborted.model_flops_to_target is None


def test_muon_and_wsd_train_and_log_what_ran(small_recipe, tmp_path, monkeypatch):
    from trainperf.train import precision

    # the probe's path on any CPU: one without bf16 arithmetic would take fp32 without timing
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: "AMX")
    s = train(small_recipe("train.optimizer=muon", "train.schedule=wsd", "train.precision=auto"), DistEnv(),
              RunOptions(out=tmp_path / "m", max_steps=16))
    losses = _losses(tmp_path / "m")
    assert losses[-1] < losses[0] - 0.5
    log = (tmp_path / "m" / "result_0.txt").read_text()
    assert '"key": "opt_name", "value": "muon"' in log
    assert '"key": "opt_learning_rate_decay_schedule", "value": "warmup-stable-decay"' in log
    assert '"key": "precision_choice"' in log and s.precision in ("fp32", "bf16")
    assert set(s.precision_choice["seconds_per_step"]) == {"fp32", "bf16"}  # auto timed both


def test_finished_run_is_never_overwritten(small_recipe, tmp_path):
    train(small_recipe(), DistEnv(), RunOptions(out=tmp_path / "r", max_steps=2))
    before = (tmp_path / "r" / "summary.json").read_text()
    with pytest.raises(TrainError, match="already holds a finished run"):
        train(small_recipe(), DistEnv(), RunOptions(out=tmp_path / "r", max_steps=2))
    assert (tmp_path / "r" / "summary.json").read_text() == before


def test_nan_loss_stops_with_clear_error(small_recipe, tmp_path):
    with pytest.raises(TrainError, match="loss became (nan|inf|-inf)"):
        train(small_recipe("train.lr=1e30", "train.end_lr=1e30", "train.grad_clip=0"), DistEnv(),
              RunOptions(out=tmp_path / "nan", max_steps=20))


def test_interval_throughput_is_timed_after_the_sync(small_recipe, tmp_path, monkeypatch):
    """On a GPU the host queues a step's kernels and waits for them at the log interval's sync (the
    loss read back). Here the sync is made to take 0.5 s, standing for the queued work draining: an
    interval must end after it, so each logged interval of 2 steps lasts at least that long."""
    import time

    wait = 0.5
    real = DistEnv.all_reduce_sum

    def slow_sync(self, t, group=None):
        time.sleep(wait)
        return real(self, t, group=group)

    monkeypatch.setattr(DistEnv, "all_reduce_sum", slow_sync)
    r = small_recipe("train.log_every=2")
    train(r, DistEnv(), RunOptions(out=tmp_path / "run", max_steps=4))
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if row["kind"] == "train"]
    assert len(rows) == 2
    tokens = 2 * r.train.global_batch_size * r.model.seq_len
    for row in rows:
        assert tokens / row["tokens_per_s"] >= wait


def test_eval_windows_pad_to_full_batches_of_unscored_rows():
    """The last evaluation batch is filled with unscored rows, so every evaluation forward has one
    shape (compile makes no second, dynamic graph) and the loss sum is the same as without them."""
    import torch

    from trainperf.config import ModelConfig
    from trainperf.model.transformer import Transformer
    from trainperf.train.trainer import pad_windows

    torch.manual_seed(0)
    m = Transformer(ModelConfig(family="llama", n_layer=1, d_model=16, n_head=2, seq_len=8, vocab_size=30))
    x = torch.randint(0, 30, (5, 6))
    y = torch.randint(0, 30, (5, 6))
    px, py = pad_windows(x, y, seq_len=8, rows=4)
    assert px.shape == py.shape == (8, 8)
    assert (py[5:] == -100).all() and (py[:, 6:] == -100).all() and torch.equal(px[:5, :6], x)
    with torch.no_grad():
        torch.testing.assert_close(m(px, py).sum(), m(x, y).sum())
    assert pad_windows(x, y, seq_len=6, rows=5)[0].shape == (5, 6)  # already whole: unchanged
