"""trainperf's reader/writer of Megatron's indexed dataset against megatron-core's, both ways."""

import struct

import numpy as np
import pytest
import torch

from trainperf.data.indexed import IndexWriter, open_prefix, parse_blend, token_dtype
from trainperf.errors import DataError

# megatron-core's builder converts tensors with numpy.array(copy=False) semantics numpy 2 warns about
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _docs(n=50, seed=0, vocab=1000):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(0, 300))) for _ in range(n)]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megatron_reads_what_trainperf_writes(tmp_path, mcore, dtype):
    indexed, _, _ = mcore
    docs = _docs()
    w = IndexWriter(tmp_path / "ours", np.dtype(dtype))
    w.add(docs[:20])
    w.add(docs[20:])
    w.close()
    ds = indexed.IndexedDataset(str(tmp_path / "ours"))
    assert len(ds) == len(docs) and ds.index.dtype == dtype
    for i, d in enumerate(docs):
        assert np.array_equal(ds[i], d)
    assert np.array_equal(ds.document_indices, np.arange(len(docs) + 1))
    # Megatron's builder over the same documents writes byte-identical files
    b = indexed.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype)
    for d in docs:
        b.add_item(torch.from_numpy(d.astype(np.int64)))
        b.end_document()
    b.finalize(str(tmp_path / "theirs.idx"))
    for ext in ("bin", "idx"):
        assert (tmp_path / f"ours.{ext}").read_bytes() == (tmp_path / f"theirs.{ext}").read_bytes()


def test_trainperf_reads_what_megatron_writes(tmp_path, mcore):
    indexed, _, _ = mcore
    docs = _docs(seed=1, vocab=70000)  # over 65,500 ids: Megatron's int32
    dtype = token_dtype(70000)
    assert dtype == np.int32
    b = indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.int32)
    # one document made of two sequences (sentence-split data), the rest one each
    b.add_document(torch.from_numpy(np.concatenate(docs[:2])), [len(docs[0]), len(docs[1])])
    for d in docs[2:]:
        b.add_document(torch.from_numpy(d), [len(d)])
    b.finalize(str(tmp_path / "m.idx"))
    t = open_prefix(tmp_path / "m")
    ref = indexed.IndexedDataset(str(tmp_path / "m"))
    assert t.dtype == np.int32 and t.n_sequences == len(docs) and t.n_documents == len(docs) - 1
    assert np.array_equal(t.doc_index, ref.document_indices)
    assert np.array_equal(t.lengths, ref.sequence_lengths)
    for i in range(len(docs)):
        assert np.array_equal(t.sequence(i), ref.get(i))
        if len(docs[i]) >= 8:
            assert np.array_equal(t.sequence(i, 3, 5), ref.get(i, offset=3, length=5))
    assert t.n_tokens == sum(map(len, docs))


def _write(tmp_path, name="p"):
    w = IndexWriter(tmp_path / name, np.dtype(np.uint16))
    w.add(_docs(10))
    return w.close()


def test_errors_are_one_line(tmp_path):
    p = _write(tmp_path)
    (tmp_path / "p.idx").rename(tmp_path / "q.idx")
    with pytest.raises(DataError, match=r"p\.idx: missing"):
        open_prefix(p)
    (tmp_path / "q.idx").rename(tmp_path / "p.idx")
    raw = (tmp_path / "p.idx").read_bytes()
    (tmp_path / "p.idx").write_bytes(b"NOTANIDX\x00" + raw[9:])
    with pytest.raises(DataError, match="header is not MMIDIDX"):
        open_prefix(p)
    (tmp_path / "p.idx").write_bytes(raw[:17] + struct.pack("<B", 42) + raw[18:])
    with pytest.raises(DataError, match="unknown dtype code 42"):
        open_prefix(p)
    (tmp_path / "p.idx").write_bytes(raw)
    data = (tmp_path / "p.bin").read_bytes()
    (tmp_path / "p.bin").write_bytes(data[:-2])
    with pytest.raises(DataError, match=r"p\.bin: .* bytes, the index says .*truncated"):
        open_prefix(p)
    (tmp_path / "p.bin").write_bytes(data)
    assert open_prefix(p).n_documents == 10


@pytest.mark.parametrize("bad", ["0 a", "-1 a", "x a", "nan a 1 b", "inf a", "1 a 2"])
def test_blend_weights_must_be_positive_numbers(bad):
    with pytest.raises(DataError, match="blend"):
        parse_blend(bad)


def test_blend_parses_pairs():
    assert parse_blend("0.3 a 0.7 b") == [(0.3, "a"), (0.7, "b")]
    assert parse_blend("a") == [(1.0, "a")]
