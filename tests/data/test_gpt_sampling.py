"""trainperf's GPT-dataset windows against megatron-core's GPTDataset, token for token."""

import numpy as np
import pytest

from trainperf.config import DataConfig
from trainperf.data.dataset import TokenStream
from trainperf.data.gpt import GPTSamples
from trainperf.data.indexed import IndexWriter, open_prefix
from trainperf.data.pipeline import prepare, train_batches


class _Tok:
    """What GPTDataset asks of a tokenizer here: its size and end-of-document id."""

    vocab_size = 1000
    eod = 0
    pad = 999
    unique_identifiers = {"class": "test"}


def _prefix(path, n_docs=60, seed=0):
    rng = np.random.default_rng(seed)
    w = IndexWriter(path, np.dtype(np.uint16))
    w.add([rng.integers(1, 990, size=int(rng.integers(1, 120))) for _ in range(n_docs)])
    return w.close()


def _megatron(mcore, prefix, seq_len, seed, num_samples, cache):
    indexed, gpt, Split = mcore
    cfg = gpt.GPTDatasetConfig(random_seed=seed, sequence_length=seq_len, tokenizer=_Tok(),
                               reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                               path_to_cache=str(cache))
    ds = indexed.IndexedDataset(str(prefix))
    return gpt.GPTDataset(ds, str(prefix), np.arange(len(ds), dtype=np.int32), num_samples, Split.train, cfg)


@pytest.mark.parametrize("seed,seq_len,num_samples", [
    (1234, 32, None),  # one epoch
    (7, 16, 692),  # 3 epochs, 200 of 246 windows from the last: shuffled with the others
    (7, 16, 542),  # 3 epochs, 50 from the last (under Megatron's 80%): the last epoch shuffled apart
])
def test_windows_equal_megatron_core(tmp_path, mcore, seed, seq_len, num_samples):
    prefix = _prefix(tmp_path / "c")
    ref = _megatron(mcore, prefix, seq_len, seed, num_samples, tmp_path / "cache")
    ours = GPTSamples(TokenStream([open_prefix(prefix)]), seq_len, seed, num_samples)
    assert len(ours) == len(ref)
    assert np.array_equal(ours.doc_idx, ref.document_index)
    assert np.array_equal(ours.sample_idx, ref.sample_index)
    assert np.array_equal(ours.shuffle_idx, ref.shuffle_index)
    for k in range(len(ref)):
        item = ref[k]
        w = ours.window(k)
        assert np.array_equal(w[:-1], item["tokens"].numpy()) and np.array_equal(w[1:], item["labels"].numpy()), k


def test_training_batches_from_a_prepared_folder_equal_megatron_on_the_merged_prefix(tmp_path, mcore):
    """A trainperf folder's pieces train as the one dataset Megatron's merge of them would be."""
    indexed, _, _ = mcore
    src = tmp_path / "c"
    src.mkdir()
    rng = np.random.default_rng(3)
    for f in range(3):
        rows = "".join('{"text": "%s"}\n' % ("".join(rng.choice(list("abcdefgh"), size=int(rng.integers(5, 90)))))
                       for _ in range(70))
        (src / f"{f}.jsonl").write_text(rows)
    cfg = DataConfig(corpus=str(src), tokenizer="byte", cache_dir=str(tmp_path / "cache"), sampler="gpt")
    data = prepare(cfg)
    assert len(data.train.parts) == 3
    merged = indexed.IndexedDatasetBuilder(str(tmp_path / "merged.bin"), dtype=np.uint16)
    for p in data.train.parts:
        merged.add_index(str(p.prefix))
    merged.finalize(str(tmp_path / "merged.idx"))
    seq_len, gbs, seed = 24, 8, 11
    ref = _megatron(mcore, tmp_path / "merged", seq_len, seed, None, tmp_path / "mcache")
    batches = train_batches(data, seq_len, gbs, seed)
    for step in range(len(ref) // gbs):
        x, y = batches.get(step)
        for i in range(gbs):
            item = ref[step * gbs + i]
            assert np.array_equal(x[i].numpy(), item["tokens"].numpy())
            assert np.array_equal(y[i].numpy(), item["labels"].numpy())
    # ranks split the same global batch
    halves = [batches.get(2, r, 2)[0] for r in (0, 1)]
    assert np.array_equal(np.concatenate(halves), batches.get(2)[0].numpy())
