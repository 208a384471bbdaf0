"""Nothing lost, nothing half-done (issue 24): one test per class of failure, each through the real CLI.

- an OS refusal on a user's path (full disk, read-only, a file where a folder goes) is one line, exit 1
- a command that refuses does so before it changes anything on disk
- `--out` is a new folder, an empty one, or one trainperf made for the same output; never anyone else's
- counts that must be positive are refused at parse time (exit 2, one line naming the flag)
- SIGTERM is treated as Ctrl-C: one line, the last complete checkpoint intact, exit 143
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainperf.cli.main import build_parser, main
from trainperf.train.checkpoint import committed, verify

SMALL = ["--set", "data.synthetic=true", "--set", "parallel.compile=false", "--set", "data.tokenizer=byte",
         "--set", "data.eval_bytes=4096", "--set", "model.n_layer=2", "--set", "model.d_model=64",
         "--set", "model.seq_len=32", "--set", "train.global_batch_size=8", "--set", "train.micro_batch_size=8",
         "--set", "train.precision=fp32", "--set", "eval.every_samples=64", "--set", "train.warmup_steps=2"]


def _cli(*args: str, cwd: Path, cache: Path, fsize: int | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRAINPERF_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}

    def limit():  # a file-size limit: writes past it fail as a full disk does (EFBIG; Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "trainperf", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, preexec_fn=limit if fsize else None, timeout=300, **kw)


def _one_line_error(p: subprocess.CompletedProcess, code: int) -> str:
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("trainperf: error: "), p.stderr
    return lines[0]


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` with a hash of its bytes: what "nothing changed" means."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run8(tmp_path_factory):
    """A finished run (aborted by --max-steps at step 8) with checkpoints at steps 4 and 8."""
    base = tmp_path_factory.mktemp("rel")
    p = _cli("run", *SMALL, "--max-steps", "8", "--checkpoint-every", "4", "--out", "run", "--no-progress",
             cwd=base, cache=base / "cache")
    assert p.returncode == 3, p.stderr
    return base, base / "run"


def _unshare_ok() -> bool:
    """Whether this machine lets a test mount its own small tmpfs (a user namespace, no root needed)."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True).returncode == 0


def _in_tmpfs(folder: Path, opts: str, args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    """`trainperf ARGS` with a fresh tmpfs (mount options `opts`) mounted over `folder`."""
    folder.mkdir(exist_ok=True)
    cmd = " ".join(["exec", sys.executable, "-m", "trainperf", *(f"'{a}'" for a in args)])
    script = f"mount -t tmpfs -o {opts} tmpfs '{folder}' && {cmd}"
    env = {**os.environ, "TRAINPERF_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


# ---- an OS error on a user's path: one line naming the file and the cause, exit 1

def test_disk_full_while_saving_a_checkpoint_is_one_line(run8):
    base, _ = run8
    # every checkpoint (~1.2 MB here) is over the limit; the result log and metrics are not
    p = _cli("run", *SMALL, "--max-steps", "12", "--checkpoint-every", "4", "--out", "efbig", "--no-progress",
             cwd=base, cache=base / "cache", fsize=256 << 10)
    line = _one_line_error(p, 1)
    assert "while saving the checkpoint efbig/checkpoints/step_00000004" in line
    assert not list((base / "efbig" / "checkpoints").glob(".step_*"))  # the half-written folder is gone


@pytest.mark.skipif(not _unshare_ok(), reason="cannot mount a private tmpfs here")
def test_no_space_left_keeps_the_last_complete_checkpoint(run8, tmp_path):
    base, _ = run8
    # room for the first checkpoint, not for the second (measured: each takes ~620 KiB of tmpfs pages)
    p = _in_tmpfs(tmp_path / "disk", "size=1300k", ["run", *SMALL, "--max-steps", "12", "--checkpoint-every", "4",
                                                   "--out", str(tmp_path / "disk" / "r"), "--no-progress"],
                  cwd=base, cache=base / "cache")
    line = _one_line_error(p, 1)
    assert line.startswith("trainperf: error: no space left on the device while saving the checkpoint ")
    assert line.endswith("checkpoints/step_00000008")


def test_disk_full_while_writing_a_report_is_one_line(run8):
    base, run = run8
    _cli("report", str(run), "--no-check", "--out", "rep_ok", cwd=base, cache=base / "cache")  # warms caches
    p = _cli("report", str(run), "--no-check", "--out", "rep", cwd=base, cache=base / "cache", fsize=2048)
    line = _one_line_error(p, 1)
    assert "while writing rep/" in line and "(ulimit -f)" in line
    # nothing partial: the folder this call made is removed with its temporaries
    assert not (base / "rep").exists()


@pytest.mark.skipif(not _unshare_ok(), reason="cannot mount a private tmpfs here")
@pytest.mark.parametrize("cmd", ["run", "report", "export", "package"])
def test_output_on_a_read_only_file_system_is_one_line(run8, tmp_path, cmd):
    base, run = run8
    out = str(tmp_path / "ro" / "out")
    args = {"run": ["run", *SMALL, "--out", out, "--no-progress"], "report": ["report", str(run), "--out", out],
            "export": ["export", str(run), "--out", out],
            "package": ["package", str(run), "--system", "box", "--out", out]}[cmd]
    p = _in_tmpfs(tmp_path / "ro", "size=64k,ro", args, cwd=base, cache=base / "cache")
    assert _one_line_error(p, 1) == f"trainperf: error: read-only file system while creating {out}"


@pytest.mark.parametrize("err", [
    OSError(28, "No space left on device", "/data/x.bin"), PermissionError(13, "Permission denied", "/data/x.bin"),
    PermissionError(1, "Operation not permitted", "/data/x.bin"), NotADirectoryError(20, "Not a directory", "/data/x.bin"),
    IsADirectoryError(21, "Is a directory", "/data/x.bin"), FileExistsError(17, "File exists", "/data/x.bin"),
    OSError(30, "Read-only file system", "/data/x.bin"), OSError(122, "Disk quota exceeded", "/data/x.bin")])
def test_any_os_error_escaping_a_command_is_one_line(err, monkeypatch, capsys):
    """The one place: whatever command meets an OS refusal on a named file."""
    import trainperf.cli.main as cli_main

    def handler(args):
        raise err

    monkeypatch.setattr(cli_main, "cmd_recipes", handler)
    assert main(["recipes"]) == 1
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and line.startswith("trainperf: error: ") and line.rstrip().endswith(" /data/x.bin")
    assert " while " in line
    with pytest.raises(OSError):
        main(["--debug", "recipes"])  # --debug keeps the traceback


# ---- validate, then act: a refused command leaves the disk as it found it

@pytest.mark.parametrize("why, extra", [
    ("another recipe", ["--set", "train.lr=0.5", "--max-steps", "16"]),
    ("another seed", ["--seed", "5", "--max-steps", "16"]),
    ("another model (as a smoke run's checkpoint resumed without --smoke)", ["--set", "model.d_model=32",
                                                                             "--max-steps", "16"]),
    ("nothing left to train", ["--max-steps", "4"]),
    ("nothing left to train at the same step", ["--max-steps", "8"]),
    ("a bad override", ["--set", "model.n_head=3"]),
])
def test_refused_resume_changes_nothing(run8, why, extra):
    base, run = run8
    before = _tree(run)
    p = _cli("run", *SMALL, "--resume", str(run), "--no-progress", *extra, cwd=base, cache=base / "cache")
    assert p.returncode in (1, 2), (why, p.stderr)
    _one_line_error(p, p.returncode)
    assert _tree(run) == before, why
    assert not (run / "attempts").exists()


def test_a_resume_that_fails_before_training_puts_the_folder_back(run8, monkeypatch, capsys):
    """What cannot be checked before the run's files are set aside (the data, say) and fails before
    a step is trained leaves the folder as it was: the finished run still scores."""
    import trainperf.train.trainer as trainer_mod
    from trainperf.errors import DataError

    def gone(r, env):
        raise DataError("the corpus is gone")

    base, run = run8
    before = _tree(run)
    monkeypatch.setattr(trainer_mod, "open_data", gone)
    assert main(["run", *SMALL, "--resume", str(run), "--max-steps", "16", "--no-progress"]) == 1
    assert "the corpus is gone" in capsys.readouterr().err
    assert _tree(run) == before and not (run / "attempts").exists()


# ---- --out: a new folder, an empty one, or one trainperf made for the same output

def _out_args(cmd: str, run: Path, out: str) -> list[str]:
    return {"run": ["run", *SMALL, "--max-steps", "2", "--no-progress"], "report": ["report", str(run), "--no-check"],
            "export": ["export", str(run)], "package": ["package", str(run), "--system", "box"],
            "seeds": ["run", *SMALL, "--seeds", "2", "--max-steps", "2"]}[cmd] + ["--out", out]


@pytest.mark.parametrize("cmd", ["run", "report", "export", "package", "seeds"])
def test_out_never_writes_into_someone_elses_files(run8, tmp_path, cmd):
    base, run = run8
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (tmp_path / "afile").write_text("a file")
    for out, code in ((mine, 1), (tmp_path / "afile", 1), (tmp_path / "afile" / "sub", 1)):
        p = _cli(*_out_args(cmd, run, str(out)), cwd=base, cache=base / "cache")
        line = _one_line_error(p, code)
        assert str(out) in line or "afile" in line
    assert _tree(mine) == {"thesis.tex": hashlib.sha256(b"years of work").hexdigest()}
    assert (tmp_path / "afile").read_text() == "a file"


def test_report_may_rewrite_its_own_folder_only(run8, tmp_path):
    base, run = run8
    out = tmp_path / "rep"
    assert main(["report", str(run), "--no-check", "--out", str(out)]) == 0
    assert main(["report", str(run), "--no-check", "--out", str(out), "--force"]) == 0  # trainperf's own report
    assert main(["export", str(run), "--out", str(out)]) == 1  # ... but not another kind of output


# ---- counts that must be positive, names that must not be paths: exit 2 at parse time

@pytest.mark.parametrize("argv, flag", [
    (["run", "--nproc", "0"], "--nproc"), (["run", "--max-steps", "0"], "--max-steps"),
    (["run", "--seeds", "0"], "--seeds"), (["run", "--max-restarts", "-1"], "--max-restarts"),
    (["run", "--checkpoint-every", "-2"], "--checkpoint-every"), (["run", "--seed", "-1"], "--seed"),
    (["run", "--max-steps", "two"], "--max-steps"),
    (["sample", "r", "--top-k", "-5"], "--top-k"), (["sample", "r", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["sample", "r", "--num-samples", "0"], "--num-samples"),
    (["package", "r", "--out", "o", "--system", "../../etc"], "--system"),
    (["package", "r", "--out", "o", "--system", ""], "--system"),
    (["package", "r", "--out", "o", "--system", ".."], "--system"),
])
def test_bad_argument_values_exit_2_in_one_line(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trainperf: error: ") and flag in err


def test_no_count_argument_is_a_plain_int():
    """Every integer option of the commands here goes through cli.args' types (positive or >= 0), so
    a 0 or a negative count is never read as "the default" or silently clamped."""
    plain = []

    def walk(parser, name):
        for a in parser._actions:
            if a.type is int and a.option_strings:
                plain.append(f"{name} {a.option_strings[0]}")
            for sub_name, sub in (getattr(a, "choices", None) or {}).items() if hasattr(a, "add_parser") else ():
                walk(sub, f"{name} {sub_name}".strip())

    walk(build_parser(), "")
    assert not plain, plain


def test_micro_batch_larger_than_global_batch_is_refused(tmp_path, capsys):
    rc = main(["run", *SMALL, "--set", "train.micro_batch_size=16", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and "train.micro_batch_size" in err and "train.global_batch_size" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_sample_on_cuda_without_cuda_is_one_line(run8, capsys):
    _, run = run8
    assert main(["sample", str(run), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda" in err


# ---- SIGTERM: what Slurm and Kubernetes send before they kill

def _start(args: list[str], base: Path) -> subprocess.Popen:
    env = {**os.environ, "TRAINPERF_CACHE": str(base / "cache"), "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "trainperf", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=base, env=env)


def _wait_for_checkpoint(proc: subprocess.Popen, ckpts: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not committed(ckpts):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < end, "no checkpoint in time"
        time.sleep(0.2)


@pytest.mark.parametrize("sig, nproc", [(signal.SIGTERM, 1), (signal.SIGTERM, 2), (signal.SIGINT, 1)])
def test_sigterm_stops_like_ctrl_c(run8, tmp_path, sig, nproc):
    """A real run (one process, or torchrun's two workers under `--nproc 2`) stopped mid-run."""
    base, _ = run8
    out = tmp_path / "term"
    args = ["run", *SMALL, "--set", "eval.target=0.01", "--max-steps", "100000", "--checkpoint-every", "2", "--out", str(out), "--no-progress",
            "--device", "cpu"] + (["--nproc", str(nproc)] if nproc > 1 else [])
    proc = _start(args, base)
    _wait_for_checkpoint(proc, out / "checkpoints")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err  # 143 / 130
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("trainperf: ")]
    said = "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"
    assert lines and lines[-1].startswith(f"trainperf: {said}"), err
    assert f"--resume {out}" in lines[-1]
    last = committed(out / "checkpoints")[-1]
    verify(last)  # the last complete checkpoint is whole
    log = (out / "result_0.txt").read_text().splitlines()
    assert '"run_stop"' in log[-1] and '"aborted"' in log[-1]  # the run logged its stop
