"""`run --tensorboard` writes the same numbers as metrics.jsonl; the report renders in a real browser."""

import json

import pytest

from trainperf.report.browser import find_browser, screenshot
from trainperf.report.page import build_report


def test_tensorboard_scalars_match_metrics(run_dir):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    assert list(run_dir.glob("events.out.tfevents.*"))
    ea = ea_mod.EventAccumulator(str(run_dir))
    ea.Reload()
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval_loss"]) for r in rows if r["kind"] == "eval"]
    got = [(e.step, e.value) for e in ea.Scalars("eval/loss")]
    assert [s for s, _ in got] == [s for s, _ in evals]
    assert [v for _, v in got] == pytest.approx([v for _, v in evals], rel=1e-6)
    train = [r for r in rows if r["kind"] == "train"]
    assert len(ea.Scalars("train/tokens_per_s")) == len(train)


@pytest.mark.skipif(find_browser() is None, reason="no chromium installed")
def test_report_renders_in_headless_chromium(run_dir, tmp_path):
    import matplotlib.image as mpimg

    rep = build_report([run_dir], tmp_path / "rep", check=False)
    png = screenshot(rep.index, tmp_path / "shot.png", width=1280, height=2400)
    img = mpimg.imread(png)
    assert img.shape[1] == 1280
    # the charts drew: many distinct colours, not a blank or error page
    assert len({tuple(px) for px in img[::8, ::8, :3].reshape(-1, 3).round(2).tolist()}) > 50
