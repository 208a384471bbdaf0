"""`run --tensorboard` writes the same numbers as metrics.jsonl; the report renders in a real browser."""

import json
import os

import pytest

from trainperf.report.browser import check_page, find_browser
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


# .ci/run installs chromium and sets this, so there the test fails rather than skips without one
_REQUIRED = os.environ.get("TRAINPERF_REQUIRE_BROWSER") == "1"


@pytest.mark.skipif(find_browser() is None and not _REQUIRED, reason="no chromium installed")
def test_report_renders_in_headless_chromium(run_dir, tmp_path):
    """What a person checks on the page: every section there and drawn, every image decoded, no
    console errors, nothing fetched from the network."""
    import matplotlib.image as mpimg

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"gpu": "h100", "gpus": n, "minutes": 600 / n} for n in (8, 64, 512)]))
    rep = build_report([run_dir], tmp_path / "rep", plans=[plan], check=False)
    page = check_page(rep.index, width=1280, height=2400, screenshot=True)
    assert page.title.startswith("trainperf report")
    assert [s["title"] for s in page.sections] == ["Runs", "Score", "Convergence", "Learning rate", "Throughput",
                                                   "Time breakdown", "Scaling"]
    for s in page.sections:
        assert s["height"] > 0, s
        assert (s["body_height"] > 100) if s["images"] else (s["body_text"] > 0), s
    assert [s["images"] for s in page.sections] == [0, 0, 1, 1, 1, 1, 1]
    assert len(page.images) == len(rep.images) == 5
    for im in page.images:
        assert im["complete"] and im["natural_width"] > 0 and im["natural_height"] > 0 and im["width"] > 0, im
    assert page.console_errors == []
    assert page.requests == []
    (tmp_path / "shot.png").write_bytes(page.png)
    img = mpimg.imread(tmp_path / "shot.png")
    assert img.shape[1] == 1280
    # the charts drew: many distinct colours, not a blank or error page
    assert len({tuple(px) for px in img[::8, ::8, :3].reshape(-1, 3).round(2).tolist()}) > 50


@pytest.mark.skipif(find_browser() is None and not _REQUIRED, reason="no chromium installed")
def test_browser_check_sees_a_broken_page(tmp_path):
    """The check can fail: a missing image, a console error and an exception are all reported."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!doctype html><title>x</title><h2>A</h2><div><img src="missing.png" alt="m"></div>'
                   '<script>console.error("boom"); nope();</script>')
    page = check_page(bad)
    assert [s["title"] for s in page.sections] == ["A"]
    assert page.images[0]["natural_width"] == 0
    errors = "\n".join(page.console_errors)
    assert "boom" in errors and "nope is not defined" in errors and "ERR_FILE_NOT_FOUND" in errors
