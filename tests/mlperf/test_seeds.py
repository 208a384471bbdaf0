import json

from trainperf.cli.main import main

SMALL = ["data.synthetic=true", "parallel.compile=false", "data.tokenizer=byte", "data.eval_bytes=2048", "model.n_layer=1",
         "model.d_model=32", "model.n_head=2", "model.seq_len=32", "train.global_batch_size=8",
         "train.micro_batch_size=8", "train.warmup_steps=2", "train.decay_steps=20", "train.precision=fp32",
         "eval.every_samples=32", "eval.target=4.5", "benchmark.runs_per_result=3"]


def test_run_seeds_then_score_tiny(tmp_path, capsys):
    args = ["run", "tiny", "--seeds", "3", "--out", str(tmp_path / "out"), "--no-progress", "--tensorboard"]
    for s in SMALL + [f"data.cache_dir={tmp_path / 'cache'}"]:
        args += ["--set", s]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "score:" in out and "pass" in out
    for i in range(3):
        d = tmp_path / "out" / f"seed_{i}"
        assert (d / f"result_{i}.txt").is_file() and (d / "compliance.yaml").is_file()
        assert json.loads((d / "summary.json").read_text())["seed"] == i
        assert list(d.glob("events.out.tfevents.*")), d  # --tensorboard: one event file per seed
    assert main(["score", "--json", str(tmp_path / "out")]) == 0
    rep = json.loads(capsys.readouterr().out)
    mins = sorted(r["minutes"] for r in rep["runs"])
    assert rep["score"]["valid"] and rep["score"]["minutes"] == mins[1]  # 3 runs: the median
    # a second --seeds into the same folder is refused and leaves it as it was
    before = (tmp_path / "out" / "seed_0" / "result_0.txt").read_text()
    assert main(args) == 2
    assert (tmp_path / "out" / "seed_0" / "result_0.txt").read_text() == before
