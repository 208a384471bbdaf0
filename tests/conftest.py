import pytest

from trainperf.config import load_recipe


@pytest.fixture
def small_recipe(tmp_path):
    """A recipe that trains in seconds: synthetic corpus, byte tokenizer, a 2-layer model."""

    def make(*overrides: str):
        base = [
            "data.synthetic=true", "parallel.compile=false", "data.tokenizer=byte", f"data.cache_dir={tmp_path / 'cache'}",
            "data.eval_bytes=4096", "model.n_layer=2", "model.d_model=64", "model.n_head=4",
            "model.seq_len=32", "train.global_batch_size=8", "train.micro_batch_size=4",
            "train.warmup_steps=2", "train.decay_steps=20", "train.lr=3e-3", "train.log_every=2",
            "train.precision=fp32", "eval.every_samples=64", "eval.target=0.5",
            # the optimizer these tests were sized for (tiny itself trains with Muon and QK-norm)
            "train.optimizer=adamw", "train.schedule=cosine", "model.qk_norm=false", "train.end_lr=3e-4",
        ]
        return load_recipe("tiny", base + list(overrides))

    return make
