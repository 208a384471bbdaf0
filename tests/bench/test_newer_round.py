"""bench/newer_round.py: scoring a newer round's results from their run numbers, against plan."""

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nr():
    spec = importlib.util.spec_from_file_location("newer_round", ROOT / "bench" / "newer_round.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["newer_round"] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def folders(nr):
    return nr.load()


def test_the_rcp_normalization_matches_every_published_scaling_json(nr, folders):
    published = [f for f in folders if f.published_scaling is not None]
    assert len(published) == 3
    for f in published:
        assert nr.rcp_normalization(f, "6.0.0") == pytest.approx(f.published_scaling, abs=1e-12), f.system


def test_a_score_is_the_mean_of_the_middle_runs_times_the_normalization(nr, folders):
    f = next(f for f in folders if f.system == "theia_ngpu512_ngc26.04_nemo" and f.benchmark == "llama2_70b_lora")
    mins = f.minutes
    assert len(mins) == 10
    raw, norm, sc = nr.score(f, "6.0.0")
    assert raw == pytest.approx(sum(mins[1:-1]) / 8)
    assert sc == pytest.approx(raw * norm) and norm == pytest.approx(f.published_scaling)
    # 405B: three runs, the olympic mean keeps the middle one
    g = next(f for f in folders if f.benchmark == "llama31_405b" and f.gpus == 2048)
    assert nr.score(g, "6.0.0")[0] == pytest.approx(g.minutes[1])


def test_a_folder_whose_log_count_disagrees_is_refused(nr, tmp_path):
    rows = list(csv.DictReader(nr.RUNS.open()))
    out = tmp_path / "runs.csv"
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows[1:])  # drop one log of the first folder
    with pytest.raises(SystemExit, match="lists 10 logs"):
        nr.load(nr.FOLDERS, out)


def test_summary_counts_errors_band_and_trend_range(nr):
    rows = [{"score": 10.0, "minutes": 11.0, "p10": 9.0, "p90": 12.0, "trend_minutes": 9.0, "trend_range": [8.0, 10.5]},
            {"score": 10.0, "minutes": 8.0, "p10": 8.5, "p90": 9.5, "trend_minutes": 7.0, "trend_range": [6.0, 8.0]}]
    s = nr.summarize(rows)
    assert s["plan"]["mape_pct"] == 15.0 and s["plan"]["signed_pct"] == -5.0 and s["plan"]["inside_band"] == 1
    assert s["trend"]["mape_pct"] == 20.0 and s["trend"]["inside_range"] == 1
    assert s["plan"]["geomean_ratio"] == pytest.approx((1.1 * 0.8) ** 0.5, abs=1e-3)


def test_prediction_is_plans_for_that_round_with_its_trend(nr, folders):
    f = next(f for f in folders if f.system == "theia_ngpu72_ngc26.04_nemo" and f.benchmark == "llama2_70b_lora")
    p = nr.predict(f, "6.0")
    assert p["gpu"] == "gb300" and p["p10"] < p["minutes"] < p["p90"]
    lo, hi = p["trend_range"]
    assert lo <= p["trend_minutes"] <= hi < p["minutes"]  # 6.0 is after the newest logs: the trend applies


def test_the_other_submitters_405b_rows_load_and_score(nr):
    """The three other submitters' v6.0 405B folders: every log listed is there, each converged,
    and the olympic mean of three runs is the middle one."""
    fs = nr.load(nr.RESULTS / "v6_0_other_405b_folders.csv", nr.RESULTS / "v6_0_other_405b_runs.csv")
    assert sorted(f.gpus for f in fs) == [72, 4096, 8192]
    for f in fs:
        assert f.benchmark == "llama31_405b" and len(f.minutes) == 3 and f.published_scaling is None
        raw, norm, sc = nr.score(f, "6.0.0")
        assert raw == pytest.approx(f.minutes[1]) and norm >= 1.0 and sc == pytest.approx(raw * norm)


def test_the_other_submitters_lora_and_8b_rows_load_with_every_log(nr):
    fs = nr.load(nr.RESULTS / "v6_0_other_folders.csv", nr.RESULTS / "v6_0_other_runs.csv")
    assert len(fs) == 25 and {f.benchmark for f in fs} == {"llama2_70b_lora", "llama31_8b"}
    assert all(len(f.minutes) == 10 for f in fs)  # every run converged
    assert "NVIDIA" not in {f.submitter for f in fs}


@pytest.mark.parametrize("argv, says", [
    (["--folders", "bench/results/v6_0_more4_folders.csv"], "give one --runs per --folders"),  # its runs left out
    (["--runs", "bench/results/v6_0_more4_runs.csv"], "give one --runs per --folders"),
    (["--folders", "bench/results/no_such_folders.csv", "--runs", "bench/results/v6_0_more4_runs.csv"],
     "no_such_folders.csv: no such file"),
])
def test_a_folders_file_without_its_runs_or_a_missing_file_is_a_usage_error(nr, argv, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exc:
        nr.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "error: " in err and says in err and "Traceback" not in err


def test_every_v6_0_folder_file_pairs_with_its_runs_file(nr):
    """The forward check's rows: each `v6_0_*_folders.csv` loads with its runs, every run converged."""
    pairs = sorted(p for p in nr.RESULTS.glob("v6_0_*_folders.csv") if "index" not in p.name)
    total = 0
    for p in pairs:
        fs = nr.load(p, p.with_name(p.name.replace("_folders", "_runs")))
        assert fs and all(f.minutes for f in fs), p.name
        total += len(fs)
    assert total == 104
