"""`trainperf export` and `trainperf sample` on a run whose config.json does not hold or fit its
weights, with arguments no sampling can honour, and onto a full disk: one line naming the file and
key (exit 1) or the argument (exit 2), no traceback, nothing half-written."""

import json
import re
from types import SimpleNamespace

import pytest
import torch
from safetensors import SafetensorError

from trainperf.cli.main import main
from trainperf.config import load_recipe
from trainperf.data.tokenizer import ByteTokenizer
from trainperf.model.transformer import Transformer
from trainperf.parallel.env import DistEnv
from trainperf.train.save import save_final


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A tiny random model saved as a finished run saves it (read-only: tests edit copies)."""
    base = tmp_path_factory.mktemp("bad_inputs")
    r = load_recipe("tiny", ["model.n_layer=1", "model.d_model=16", "model.n_head=2", "model.seq_len=16",
                             "model.vocab_size=256"])
    torch.manual_seed(0)
    model = Transformer(r.model)
    (base / "data").mkdir()
    (base / "run").mkdir()
    ByteTokenizer().save(base / "data" / "tokenizer.json")
    save_final(model, r, base / "run", DistEnv(), SimpleNamespace(path=base / "data"))
    return base / "run"


def _run_with(tmp_path, saved_run, **model):
    """A copy of the saved run whose config.json's trainperf_model has `model`'s values."""
    run = tmp_path / "run"
    run.mkdir()
    for f in saved_run.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    raw = json.loads((run / "config.json").read_text())
    raw["trainperf_model"].update(model)
    (run / "config.json").write_text(json.dumps(raw))
    return run


@pytest.mark.parametrize("model, msg", [
    ({"vocab_size": 10}, r"model.safetensors: 'tok_emb.weight' has shape \(256, 16\), config.json's trainperf_model "
                         r"gives \(10, 16\)"),
    ({"n_layer": -3}, r"config.json: trainperf_model.n_layer: must be >= 1, got -3"),
    ({"n_layer": 2}, r"model.safetensors: holds 1 layers, config.json's trainperf_model.n_layer=2"),
    ({"d_model": "abc"}, r"config.json: trainperf_model.d_model: expected an integer, got 'abc'"),
    ({"family": "bert"}, r"config.json: trainperf_model.family: must be 'llama' or 'gpt', got 'bert'"),
    ({"n_head": 0}, r"config.json: trainperf_model.n_head: must be >= 1, got 0"),
])
@pytest.mark.parametrize("cmd", ["export", "sample"])
def test_a_config_that_does_not_fit_its_weights_is_one_line(tmp_path, saved_run, capsys, model, msg, cmd):
    run = _run_with(tmp_path, saved_run, **model)
    out = tmp_path / "hf"
    args = ["export", str(run), "--out", str(out)] if cmd == "export" else ["sample", str(run), "--max-new-tokens", "2"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("trainperf: error: ") and err.count("\n") == 1
    assert re.search(msg, err), err
    assert not out.exists()


def test_a_config_json_without_a_model_is_one_line(tmp_path, saved_run, capsys):
    run = _run_with(tmp_path, saved_run)
    (run / "config.json").write_text(json.dumps({"trainperf_model": [1, 2]}))
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 1
    assert "config.json: trainperf_model: missing or not a JSON object" in capsys.readouterr().err


@pytest.mark.parametrize("arg, msg", [
    (["--temperature", "nan"], "--temperature nan: must be a finite number >= 0"),
    (["--temperature", "inf"], "--temperature inf: must be a finite number >= 0"),
    (["--seed", "99999999999999999999"], "--seed 99999999999999999999: must be in [0, 9223372036854775807]"),
    (["--prompt", ""], "--prompt is empty"),
])
def test_sample_arguments_it_cannot_honour_are_usage_errors(saved_run, capsys, arg, msg):
    assert main(["sample", str(saved_run), "--max-new-tokens", "2", *arg]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainperf: error: ") and msg in err and err.count("\n") == 1


def test_sample_at_the_largest_seed_and_a_tiny_temperature(saved_run, capsys):
    assert main(["sample", str(saved_run), "--max-new-tokens", "4", "--seed", str(2**63 - 1)]) == 0
    capsys.readouterr()
    assert main(["sample", str(saved_run), "--max-new-tokens", "4", "--temperature", "0"]) == 0
    greedy = capsys.readouterr().out
    # a temperature this small is greedy, not NaN probabilities (every logit divided into infinity)
    assert main(["sample", str(saved_run), "--max-new-tokens", "4", "--temperature", "1e-300"]) == 0
    assert capsys.readouterr().out == greedy


def test_export_on_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, saved_run, monkeypatch, capsys):
    def full(sd, filename, metadata=None):
        open(filename, "wb").write(b"half")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("trainperf.model.weights.save_file", full)
    out = tmp_path / "hf"
    assert main(["export", str(saved_run), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"trainperf: error: no space left on the device while writing {out / 'model.safetensors'}\n"
    assert list(tmp_path.iterdir()) == []  # neither `out` nor its temporary folder
