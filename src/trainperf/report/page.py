"""`trainperf report`: one self-contained HTML page (PNGs inlined as data URIs, and also written beside
it) about one or more finished runs, and optionally a `trainperf plan` scaling curve."""

from __future__ import annotations

import base64
import html
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import trainperf
from trainperf import atomic
from trainperf.report import plots
from trainperf.errors import UsageError, file_error
from trainperf.report.rundir import RunData, RunDirError, expand_run_dirs, load_run
from trainperf.report.scaling import load_plan, load_published, published_csv, read_published
from trainperf.report.verdict import Score, Verdict, compliance, score_runs


@dataclass
class Report:
    index: Path
    runs: list[Path] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)


def _fmt_time(s: float) -> str:
    if not math.isfinite(s):
        return "—"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.2f} min"
    return f"{s / 3600:.2f} h"


def _fmt_num(x: float) -> str:
    for div, suf in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suf}"
    return f"{x:.3g}"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;background:#f6f7f9;
color:#1d2329}
main{max-width:1180px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:1.5em;margin:0 0 4px} h2{font-size:1.15em;margin:28px 0 8px;border-bottom:1px solid #d6dae0;
padding-bottom:4px}
.meta{color:#5b6570;font-size:.88em}
.scroll{overflow-x:auto;background:#fff;border:1px solid #d6dae0;border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:.86em}
th,td{padding:6px 9px;border-bottom:1px solid #e8ebef;text-align:left;white-space:nowrap;vertical-align:top}
th{background:#eef1f4;font-weight:600;white-space:normal} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.wrap{white-space:normal;min-width:150px;max-width:380px;overflow-wrap:anywhere}
.pass{color:#0a7a35;font-weight:600}.fail{color:#b3261e;font-weight:600}.na{color:#6b7280}
figure{margin:10px 0;background:#fff;border:1px solid #d6dae0;border-radius:6px;padding:8px}
figure img{width:100%;height:auto;display:block} figcaption{font-size:.84em;color:#4b5560;margin-top:4px}
"""


def _verdict_cell(v: Verdict) -> str:
    cls = {"pass": "pass", "fail": "fail"}.get(v.status, "na")
    return f'<td class="wrap"><span class="{cls}">{html.escape(v.status)}</span> — {html.escape(v.detail)}</td>'


def _status(s: dict) -> str:
    """The run's status; a resumed or restarted run says how many attempts came before."""
    n = s.get("restarts") or 0
    return f"{s['status']} ({n} restart{'s' if n > 1 else ''})" if n else str(s["status"])


def _status_cell(s: dict) -> str:
    devs = [str(d) for d in s.get("deviations") or []]
    if not devs:
        return f"<td>{html.escape(_status(s))}</td>"
    # smoke runs list where they depart from the closed rules; the checker's verdict reflects them
    tip = html.escape("; ".join(devs), quote=True)
    return (f'<td title="{tip}">{html.escape(_status(s))}<br><span class="na">'
            f"{len(devs)} deviation{'s' if len(devs) > 1 else ''} from the rules</span></td>")


def _time_cell(s: dict) -> str:
    """Time to train; a restarted run's counts from its first attempt's run_start (as MLPerf's clock
    does), with its last attempt's alone below."""
    cell = _fmt_time(float(s["time_to_train_s"]))
    last = s.get("last_attempt_s")
    if s.get("restarts") and isinstance(last, (int, float)):
        cell += f'<br><span class="na">last attempt {_fmt_time(float(last))}</span>'
    return cell


def _runs_table(runs: list[RunData], verdicts: list[Verdict]) -> str:
    head = ["run", "benchmark", "device", "world size", "status", "time to train", "steps", "tokens",
            "final loss / target", "tokens/s", "MFU", "compliance (official checker)"]
    rows = []
    for run, v in zip(runs, verdicts):
        s = run.summary
        loss = s.get("final_eval_loss", math.nan)
        mfu = s.get("mfu")
        mfu_cell = f"{100 * mfu:.1f}%" if isinstance(mfu, (int, float)) else "—"
        peak = html.escape(str(s.get("peak_source", "")), quote=True)
        rows.append(
            "<tr>"
            f'<td title="{html.escape(str(run.path), quote=True)}">{html.escape(run.name)}</td>'
            f"<td>{html.escape(str(s['benchmark']))}</td><td>{html.escape(str(s.get('device', '?')))}</td>"
            f'<td class="num">{s.get("world_size", "?")}</td>{_status_cell(s)}'
            f'<td class="num">{_time_cell(s)}</td>'
            f'<td class="num">{s.get("steps", "—")}</td>'
            f'<td class="num">{_fmt_num(float(s.get("tokens", math.nan)))}</td>'
            f'<td class="num">{loss:.4g} / {run.target:g}</td>'
            f'<td class="num">{_fmt_num(float(s.get("tokens_per_s", math.nan)))}</td>'
            f'<td class="num" title="relative to {peak}">{mfu_cell}</td>'
            f"{_verdict_cell(v)}</tr>")
    return ('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _score_table(scores: list[Score]) -> str:
    rows = []
    for sc in scores:
        val = f"{sc.minutes:.3f} min" if sc.minutes is not None else "—"
        rows.append(f"<tr><td>{html.escape(sc.benchmark)}</td><td>{html.escape(sc.group)}</td>"
                    f'<td class="num">{sc.runs}</td><td class="num">{sc.required}</td>'
                    f'<td class="num">{val}</td><td class="wrap">{html.escape(sc.note)}</td></tr>')
    head = ["benchmark", "system (world size x device)", "runs", "runs required", "score", "how"]
    return ('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _figure(name: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption, quote=True)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)} ({html.escape(name)})</figcaption></figure>")


def _write_all(out: Path, files: list[tuple[str, bytes]]) -> None:
    """Write `files` into `out` so that they appear together or not at all: each is first written
    whole under a temporary name, and only when all are there are they renamed to their names
    (index.html last). On a failure (a full disk) the temporary files go, and `out` too when this
    call made it, so no partial report is left beside an earlier one or alone."""
    made = not out.exists()
    staged: list[tuple[Path, Path]] = []
    doing = ("creating", out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files:
            tmp = atomic.temp_name(out / name)
            staged.append((tmp, out / name))
            doing = ("writing", out / name)  # the error names the file the user would have got
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    except BaseException as e:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        if made:
            try:
                out.rmdir()  # only if empty: never anything this call did not write
            except OSError:
                pass
        if isinstance(e, OSError):
            raise file_error(e, *doing) from e
        raise
    for tmp, final in staged:  # renames within a folder: no space needed, nothing left half-done
        try:
            tmp.replace(final)
        except OSError as e:
            raise file_error(e, "writing", final) from e
    atomic.sync_dir(out)


def build_report(run_dirs: list[str | Path], out: str | Path, plans: list[str | Path] = (),
                 check: bool = True, force: bool = False, published: Path | None = None,
                 benchmarks: list[str] = ()) -> Report:
    """Write `out/index.html` and the PNGs it shows; returns what was written and the verdicts.

    `benchmarks` name the benchmark of plans whose JSON does not (one for all, or one per plan)."""
    _check_request(run_dirs, plans, published, benchmarks)
    out = Path(out)
    if (out / "index.html").exists() and not force:
        raise RunDirError(f"{out / 'index.html'}: exists; choose another --out or pass --force")
    runs = [load_run(p) for p in expand_run_dirs(run_dirs)]
    seen: dict[Path, str] = {}
    for run in runs:
        key = run.path.resolve()
        if key in seen:
            raise RunDirError(f"{run.path}: given twice")
        seen[key] = run.name
    plan_data = [load_plan(p) for p in plans]
    for j, (bench, _) in enumerate(plan_data):
        named = _named(benchmarks, j)
        if bench and named and named != bench:
            raise UsageError(f"report: --benchmark {named} for {plans[j]}, which names {bench}")
    if published is not None:
        read_published(Path(published))  # a file the user named is checked even where no plan needs it
    verdicts = [compliance(r) if check else Verdict("n/a", "not checked (--no-check)") for r in runs]
    scores = score_runs(runs, verdicts) if runs else []
    figures = _run_figures(runs) + _plan_figures(runs, plans, plan_data, benchmarks, published)
    index = out / "index.html"
    page = _page(runs, verdicts, scores, figures)
    _write_all(out, [(name, png) for name, png, _ in figures] + [(index.name, page.encode("utf-8"))])
    return Report(index=index, runs=[r.path for r in runs], images=[out / name for name, _, _ in figures],
                  verdicts=verdicts, scores=scores)


def _check_request(run_dirs: list, plans: list, published: Path | None, benchmarks: list[str]) -> None:
    """--benchmark and --published are about plans: without one they would be silently ignored."""
    if benchmarks and not plans:
        raise UsageError("report: --benchmark names the benchmark of a --plan JSON; no --plan given")
    if published is not None and not plans:
        raise UsageError("report: --published is drawn beside a --plan scaling curve; no --plan given")
    if benchmarks and len(benchmarks) not in (1, len(plans)):
        raise UsageError(f"report: {len(benchmarks)} --benchmark names for {len(plans)} --plan files "
                         "(give one for all, or one per plan)")
    if not run_dirs and not plans:
        raise RunDirError("report: give at least one run directory (or a --plan JSON)")


def _named(benchmarks: list[str], j: int) -> str | None:
    """The --benchmark the user gave for plan j: one for all, or one per plan."""
    return benchmarks[0] if len(benchmarks) == 1 else benchmarks[j] if benchmarks else None


def _run_figures(runs: list) -> list[tuple[str, bytes, str]]:
    """(file name, PNG, caption) of the runs' figures."""
    if not runs:
        return []
    return [("loss.png", plots.fig_loss(runs),
             "Validation loss (points) and, lighter, the training loss at each logged step, against "
             "wall-clock time since the first run_start and against training tokens; the training "
             "loss is per token, scaled to nats per byte by the validation set's tokens per byte "
             "where that is the metric; dashed line: the quality target; star: the evaluation that "
             "reached it; a restarted run draws its earlier attempts dashed, a dotted line where "
             "each restart resumed"),
            ("lr.png", plots.fig_lr(runs),
             "Learning rate at each logged step; earlier attempts of a restarted run dashed, a "
             "dotted line at the step each restart resumed from"),
            ("throughput.png", plots.fig_throughput(runs),
             "Training tokens/s and MFU per logging interval (evaluation time excluded); MFU is "
             "relative to the peak in each run's summary"),
            ("breakdown.png", plots.fig_breakdown(runs),
             "Time from run_start to run_stop split by the loop's timers, and the final save")]


def _plan_figures(runs: list, plans: list, plan_data: list, benchmarks: list[str],
                  published: Path | None) -> list[tuple[str, bytes, str]]:
    """(file name, PNG, caption) of each plan's scaling curve, beside the published results."""
    figures = []
    for j, (bench, points) in enumerate(plan_data):
        bench = bench or _named(benchmarks, j) or (runs[0].summary["benchmark"] if runs else None)
        kinds = {p.gpu for p in points}
        pub = load_published(bench, kinds, published)
        src = published or published_csv()
        note = (f"{len(pub)} published MLPerf results from {src.name}" if pub else
                "no published results for these GPU kinds" if src.is_file() else
                "no published results file in this installation")
        figures.append((f"scaling{'' if j == 0 else j + 1}.png", plots.fig_scaling(bench, points, pub),
                        f"Predicted time to train vs GPU count ({Path(plans[j]).name}); {note}"))
    return figures


def _page(runs: list, verdicts: list, scores: list, figures: list[tuple[str, bytes, str]]) -> str:
    """The report's HTML."""
    title = "trainperf report"
    if runs:
        title += ": " + ", ".join(sorted({str(r.summary["benchmark"]) for r in runs}))
    parts = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
             f"</title><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<style>{_CSS}</style></head><body><main>",
             f"<h1>{html.escape(title)}</h1>",
             f'<p class="meta">{len(runs)} run(s) · generated {time.strftime("%Y-%m-%d %H:%M:%S %Z")} by '
             f"trainperf {html.escape(trainperf.__version__)}</p>"]
    if runs:
        parts += ["<h2>Runs</h2>", _runs_table(runs, verdicts), "<h2>Score</h2>", _score_table(scores)]
    titles = {"loss.png": "Convergence", "lr.png": "Learning rate", "throughput.png": "Throughput",
              "breakdown.png": "Time breakdown"}
    for name, png, caption in figures:
        parts.append(f"<h2>{titles.get(name, 'Scaling')}</h2>")
        parts.append(_figure(name, png, caption))
    parts.append("</main></body></html>\n")
    return "\n".join(parts)
