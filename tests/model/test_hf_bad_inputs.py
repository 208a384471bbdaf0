"""Hugging Face checkpoints that must be refused in one line, naming the file and the tensor or key:
an index pointing out of its folder, tensors the model has no place for, values no parameter can
hold; and `import-hf`'s output that cannot be written (a full disk, a file where a folder should be).
The checkpoints are trainperf's own export of a tiny random model (no transformers needed)."""

import json
import os

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from trainperf.cli.main import main
from trainperf.config import ModelConfig
from trainperf.errors import WeightsError
from trainperf.model.hf import hf_config, read_hf_checkpoint, to_hf
from trainperf.model.transformer import Transformer
from trainperf.model.weights import load_base_weights

LLAMA = ModelConfig(family="llama", n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, tie_embeddings=True)
GPT = ModelConfig(family="gpt", n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, bias=True)


def _hf_dir(path, cfg=LLAMA, change=None):
    """An HF folder of a random `cfg` model; `change(sd)` edits its HF state dict before it is saved."""
    torch.manual_seed(0)
    model = Transformer(cfg)
    sd = {k: v.contiguous() for k, v in to_hf(cfg, model.state_dict()).items()}
    if change:
        change(sd)
    path.mkdir(parents=True)
    save_file(sd, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(hf_config(cfg)))
    return path


def _index(folder, name_of):
    """Replace the single file by an index that names the file `name_of(key)` for each tensor."""
    keys = list(load_file(str(folder / "model.safetensors")))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: name_of(k) for k in keys}}))
    return keys


@pytest.mark.parametrize("name", ["../outside.safetensors", "sub/model.safetensors", "/abs/model.safetensors",
                                  "..", ""])
def test_index_names_only_files_in_its_folder(tmp_path, name):
    hf = _hf_dir(tmp_path / "hf")
    (tmp_path / "outside.safetensors").write_bytes((hf / "model.safetensors").read_bytes())
    keys = _index(hf, lambda k: name if k == "model.norm.weight" else "model.safetensors")
    assert "model.norm.weight" in keys
    with pytest.raises(WeightsError, match=r"index.json: weight_map\['model.norm.weight'\] = .* is not a file "
                                           r"name in .*hf$"):
        read_hf_checkpoint(hf)


def test_index_shard_linked_out_of_the_folder_is_refused(tmp_path):
    hf = _hf_dir(tmp_path / "hf")
    os.replace(hf / "model.safetensors", tmp_path / "elsewhere.safetensors")
    (hf / "shard.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    keys = list(load_file(str(tmp_path / "elsewhere.safetensors")))
    (hf / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: "shard.safetensors" for k in keys}}))
    with pytest.raises(WeightsError, match=r"= 'shard.safetensors' is a link out of .*hf \(to .*elsewhere"):
        read_hf_checkpoint(hf)


def test_links_inside_the_folder_and_a_hub_cache_snapshot_are_read(tmp_path):
    # huggingface_hub's cache: snapshots/<rev>/<file> are links to ../../blobs/<hash>
    repo = tmp_path / "models--org--tiny"
    src = _hf_dir(tmp_path / "src")
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    os.replace(src / "model.safetensors", repo / "blobs" / "f00d")
    (snap / "model-00001-of-00001.safetensors").symlink_to("../../blobs/f00d")
    os.replace(src / "config.json", snap / "config.json")
    keys = list(load_file(str(repo / "blobs" / "f00d")))
    (snap / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: "model-00001-of-00001.safetensors" for k in keys}}))
    cfg, sd = read_hf_checkpoint(snap)
    assert cfg.n_layer == 1 and "tok_emb.weight" in sd


def test_a_head_beside_a_tied_embedding_must_be_its_copy(tmp_path):
    def other_head(sd):
        sd["lm_head.weight"] = torch.randn_like(sd["model.embed_tokens.weight"])

    def same_head(sd):
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()

    with pytest.raises(WeightsError, match=r"model.safetensors: 'lm_head.weight' differs from "
                                           r"'model.embed_tokens.weight', but config.json ties them"):
        read_hf_checkpoint(_hf_dir(tmp_path / "a", change=other_head))
    with pytest.raises(WeightsError, match=r"'lm_head.weight' differs"):
        load_base_weights(Transformer(LLAMA), tmp_path / "a")
    cfg, sd = read_hf_checkpoint(_hf_dir(tmp_path / "b", change=same_head))  # some exporters write the copy
    assert cfg.tie_embeddings and "output.weight" not in sd


def test_tensors_the_config_has_no_place_for_are_refused(tmp_path):
    def extra_layer(sd):
        for k in [k for k in sd if k.startswith("model.layers.0.")]:
            sd[k.replace(".0.", ".5.", 1)] = sd[k].clone()

    with pytest.raises(WeightsError, match=r"model.safetensors: 9 tensor\(s\) config.json has no place for, "
                                           r"e.g. 'model.layers.5.input_layernorm.weight'"):
        read_hf_checkpoint(_hf_dir(tmp_path / "a", change=extra_layer))


def test_computed_buffers_some_exporters_save_are_not_weights(tmp_path):
    # GPT-2's causal mask as old transformers saved it; Llama's RoPE frequencies likewise
    def gpt_mask(sd):
        sd["transformer.h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 8, 8))

    cfg, _ = read_hf_checkpoint(_hf_dir(tmp_path / "g", GPT, change=gpt_mask))
    assert cfg.family == "gpt"

    def inv_freq(sd):
        sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)

    cfg, _ = read_hf_checkpoint(_hf_dir(tmp_path / "l", change=inv_freq))
    assert cfg.family == "llama"


@pytest.mark.parametrize("change, msg", [
    (lambda sd: sd.update({"model.embed_tokens.weight": sd["model.embed_tokens.weight"].to(torch.int32)}),
     r"'model.embed_tokens.weight' is int32, not a floating-point tensor"),
    (lambda sd: sd["model.norm.weight"].__setitem__(0, float("nan")), r"'model.norm.weight' holds NaN or infinite"),
    (lambda sd: sd["model.layers.0.mlp.up_proj.weight"].__setitem__((0, 0), float("-inf")),
     r"'model.layers.0.mlp.up_proj.weight' holds NaN or infinite"),
])
def test_values_no_parameter_can_hold_are_refused(tmp_path, change, msg):
    hf = _hf_dir(tmp_path / "hf", change=change)
    with pytest.raises(WeightsError, match=r"model.safetensors: " + msg):
        read_hf_checkpoint(hf)
    with pytest.raises(WeightsError, match=msg):
        load_base_weights(Transformer(LLAMA), hf)


def test_a_trainperf_start_checkpoint_with_nan_is_refused(tmp_path):
    sd = {k: v.clone() for k, v in Transformer(LLAMA).state_dict().items() if k != "output.weight"}
    sd["norm.weight"][1] = float("nan")
    save_file(sd, str(tmp_path / "start.safetensors"))
    with pytest.raises(WeightsError, match=r"start.safetensors: 'norm.weight' holds NaN or infinite values"):
        load_base_weights(Transformer(LLAMA), tmp_path / "start.safetensors")


def test_import_hf_on_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    hf = _hf_dir(tmp_path / "hf")
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def full(sd, filename, metadata=None):
        open(filename, "wb").write(b"half")  # safetensors may leave a partial file before it fails
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("trainperf.model.weights.save_file", full)
    assert main(["import-hf", str(hf), "--out", str(out_dir / "x.safetensors")]) == 1
    err = capsys.readouterr().err
    assert err == f"trainperf: error: no space left on the device while writing {out_dir / 'x.safetensors'}\n"
    assert list(out_dir.iterdir()) == []


def test_import_hf_out_under_a_file_says_so(tmp_path, capsys):
    hf = _hf_dir(tmp_path / "hf")
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile" / "x.safetensors", tmp_path / "afile" / "a" / "x.safetensors"):
        assert main(["import-hf", str(hf), "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert err == f"trainperf: error: --out {out}: {tmp_path / 'afile'} is a file, not a folder\n"
