"""`trainperf export --format hf`: transformers loads the checkpoint without custom code and computes
the same logits as trainperf's own model; and `trainperf sample`."""

import json
from types import SimpleNamespace

import pytest
import torch

from trainperf.cli.main import main
from trainperf.config import load_recipe
from trainperf.data.tokenizer import ByteTokenizer
from trainperf.model.transformer import Transformer
from trainperf.parallel.env import DistEnv
from trainperf.errors import RunDirError
from trainperf.report.export import ExportError, export_hf, load_model
from trainperf.train.save import save_final

transformers = pytest.importorskip("transformers")


def _hf_logits(path, x, dtype=None):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path))
    if dtype is not None:
        model = model.to(dtype)
    with torch.no_grad():
        return type(model).__name__, model(x).logits


def test_trained_run_exports_with_same_logits(run_dir, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out)]) == 0
    assert "from_pretrained" in capsys.readouterr().out
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = load_model(run_dir)(x)
    name, theirs = _hf_logits(out, x)
    assert name == "Qwen3ForCausalLM"  # tiny's QK-norm: Llama's blocks plus per-head query/key norms
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)
    # the byte tokenizer becomes a plain byte-level tokenizer.json with the same ids
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "def f(x):\n    return 'é'\n"
    assert tok(text)["input_ids"] == ByteTokenizer().encode(text)
    assert tok.decode(ByteTokenizer().encode(text)) == text


# Layouts beyond the default: grouped-query attention, biases, an untied head, QK-norm, both families.
CASES = {
    "llama_gqa_bias_untied": ["model.family=llama", "model.n_kv_head=2", "model.bias=true",
                              "model.tie_embeddings=false", "model.qk_norm=false"],
    "gpt_tied": ["model.family=gpt", "model.qk_norm=false"],
    # the per-head query/key RMSNorm: Llama's blocks plus two norms, which is Qwen 3
    "qwen3_qk_norm_gqa_untied": ["model.family=llama", "model.qk_norm=true", "model.n_kv_head=2",
                                 "model.tie_embeddings=false"],
    "gpt_gqa_bias_untied": ["model.family=gpt", "model.n_kv_head=2", "model.bias=true",
                            "model.tie_embeddings=false", "model.qk_norm=false"],
}


def _saved_model(tmp_path, overrides, tokenizer=None):
    """A model with random (not init-small) weights, saved the way a finished run saves it."""
    r = load_recipe("tiny", ["model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.seq_len=32",
                             "model.vocab_size=256", *overrides])
    torch.manual_seed(0)
    model = Transformer(r.model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # large enough that attention patterns matter
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (tokenizer or ByteTokenizer()).save(data_dir / "tokenizer.json")
    run = tmp_path / "run"
    run.mkdir()
    save_final(model, r, run, DistEnv(), SimpleNamespace(path=data_dir))
    return model.eval(), run


@pytest.mark.parametrize("case", list(CASES))
def test_layouts_export_with_same_logits(tmp_path, case):
    model, run = _saved_model(tmp_path, CASES[case])
    out = export_hf(run, tmp_path / "hf")
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(x)
    name, theirs = _hf_logits(out, x)
    assert name == ("Qwen3ForCausalLM" if "qwen3" in case else "LlamaForCausalLM" if "llama" in case
                    else "GPT2LMHeadModel")
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_bpe_tokenizer_is_exported_with_the_same_ids(tmp_path):
    from trainperf.data.tokenizer import train_bpe

    texts = [f"def f{i}(x):\n    return x * {i} + len('abc')\n" for i in range(200)]
    bpe = train_bpe(texts, 300)
    _, run = _saved_model(tmp_path, ["model.vocab_size=300"], tokenizer=bpe)
    out = export_hf(run, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "def f7(x):\n    return x * 7 + len('abc')\n"
    ids = bpe.encode(text)
    assert len(ids) < len(text.encode())  # merges were learned, so this checks more than bytes
    assert tok(text)["input_ids"] == ids and tok.decode(ids) == text


def test_lora_run_exports_with_adapters_merged(tmp_path):
    """A LoRA run saves merged weights; the export must give the adapted model's logits, not the base's.
    Both sides compute in float64: in float32 each is ~1.5e-4 off the exact logits of this sharp
    random model (measured), which is the tolerance itself, so float32 would test the rounding and
    not the mapping. What is left in float64 (under 1e-4, measured) is the merged weights' float32
    storage and transformers' RoPE, which it computes in float32 whatever the model's dtype."""
    model, run = _saved_model(tmp_path, ["model.lora_rank=4", "model.lora_targets=wq,wv,w2"])
    model = model.double()
    x = torch.randint(0, 256, (1, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model(x)
        base = model.state_dict()
        for k in [k for k in base if k.endswith("lora_b")]:
            base[k].zero_()
        plain = model(x)
    assert (ours - plain).abs().max() > 1e-2  # the adapters do change the function
    _, theirs = _hf_logits(export_hf(run, tmp_path / "hf"), x, torch.float64)
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_export_refuses_unknown_layout_and_existing_dir(tmp_path, capsys):
    _, run = _saved_model(tmp_path, [])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    assert main(["export", str(run), "--out", str(tmp_path / "full")]) == 1
    assert "full" in capsys.readouterr().err and (tmp_path / "full" / "keep.txt").read_text() == "x"
    cfg = json.loads((run / "config.json").read_text())
    cfg["trainperf_model"]["family"] = "mamba"
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RunDirError, match="trainperf_model.family: must be 'llama' or 'gpt', got 'mamba'"):
        export_hf(run, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    assert main(["export", str(tmp_path / "nope"), "--out", str(tmp_path / "hf2")]) == 1
    assert "config.json" in capsys.readouterr().err


def test_sample_continues_the_prompt_reproducibly(run_dir, capsys):
    args = ["sample", str(run_dir), "--prompt", "def ", "--max-new-tokens", "20", "--seed", "3"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert first.startswith("def ") and len(first.rstrip("\n")) > len("def ")
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert main(["sample", str(run_dir), "--prompt", "", "--max-new-tokens", "5"]) == 2  # a bad argument
    assert "prompt" in capsys.readouterr().err


def test_greedy_sample_follows_the_argmax(run_dir):
    from trainperf.report.sample import generate

    model = load_model(run_dir)
    ids = list(b"def ")
    out = generate(model, ids, 3, temperature=0)
    seq = ids[:]
    with torch.no_grad():
        for _ in range(3):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[len(ids):]
