"""Distributed checkpoints with torch.distributed.checkpoint (DCP): save every N steps, resume, recover.

A checkpoint holds the trainer's `Stateful`s (`train/state.py`: the (sharded) model and optimizer state
keyed by parameter name, and the `TrainState`: the step, which *is* the data and scheduler position
because batches and the learning rate are pure functions of it, and the evaluations done), plus
every rank's RNG state. Because DCP stores
tensors by name and global shape, a checkpoint written by 2-way FSDP loads into 1 process or into TP.

On disk, under `checkpoint.dir` (default `<run>/checkpoints`):

    step_00000040/           committed: DCP files + `.metadata` + trainperf-checkpoint.json
    .step_00000048.tmp/      being written, or left by a crash: never read, removed by the next save

All ranks write into the hidden folder; rank 0 then writes the marker (step, recipe, layout, the size
of every file) and renames the folder. A crash at any moment leaves the previous checkpoints and at
most a hidden folder, never a `step_*` folder that looks complete but is not.

DCP's `.metadata` is a pickle: load checkpoints you (or your cluster) wrote, not ones from strangers.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import time
import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint.stateful import Stateful

from trainperf import atomic
from trainperf.config import Recipe
from trainperf.mlperf.score import read_log

try:
    import resource  # POSIX: the file-size limit a failed write may have hit
except ImportError:
    resource = None
from trainperf.errors import CheckpointError, ScoreError, Terminated, file_error
from trainperf.parallel.dims import ParallelDims
from trainperf.parallel.env import DistEnv

MARKER = "trainperf-checkpoint.json"
FORMAT = 1
# Recipe values a resumed run must share with its checkpoint: they decide the model, the data and the
# optimizer's trajectory. The rest (max_steps, eval cadence, layout, micro batch, ...) may change.
_SAME_TRAIN = ("seed", "global_batch_size", "lr", "end_lr", "warmup_steps", "decay_steps", "weight_decay",
               "beta1", "beta2", "eps", "grad_clip", "precision", "optimizer")
_ATTEMPT_FILES = ("metrics.jsonl", "summary.json")
_NEARLY_FULL = 1 << 20  # bytes left on a disk that a failed checkpoint write is blamed on


@contextlib.contextmanager
def _stops_held():
    """Ctrl-C and SIGTERM wait while a checkpoint is written, then stop the run as they would have.
    Raised inside torch's file writer, a stop is swallowed by its C++ code and comes back as a bogus
    write error ("unexpected pos ..."), and the checkpoint is lost; held, the save commits and the
    resume hint names it. A second signal does not wait. Yields the signals held so far (empty where
    signals cannot be set: not the main thread)."""
    held: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM)

    def hold(signum, frame):
        held.append(signum)
        if len(held) > 1:
            for s, h in previous.items():
                signal.signal(s, h)
            signal.raise_signal(signum)

    try:
        previous = {s: signal.signal(s, hold) for s in stops}
    except ValueError:
        yield held
        return
    try:
        yield held
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if held:
            signal.raise_signal(held[0])


def _step_of(path: Path) -> int:
    try:
        return int(path.name.split("_", 1)[1])
    except (IndexError, ValueError):
        return -1


def committed(ckpt_dir: Path) -> list[Path]:
    """The committed checkpoints in `ckpt_dir`, oldest first (hidden temp folders never count)."""
    if not ckpt_dir.is_dir():
        return []
    found = [p for p in ckpt_dir.glob("step_*") if p.is_dir() and (p / MARKER).is_file() and _step_of(p) >= 0]
    return sorted(found, key=_step_of)


def verify(path: Path) -> dict:
    """The checkpoint's marker, after checking every file it lists is there with its size."""
    try:
        meta = json.loads((path / MARKER).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not a complete checkpoint (no {MARKER}; a save that never finished?)") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable checkpoint marker ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("files"), dict):
        raise CheckpointError(f"{path}: not a trainperf checkpoint (format {meta.get('format') if isinstance(meta, dict) else '?'})")
    for name, size in meta["files"].items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"{path}: corrupt checkpoint: {name} is missing")
        if f.stat().st_size != size:
            raise CheckpointError(f"{path}: corrupt checkpoint: {name} has {f.stat().st_size} bytes, "
                                  f"the marker says {size}")
    return meta


def resolve(path: Path) -> Path:
    """A checkpoint folder from what the user gave: a `step_*` folder, a checkpoints folder or a run."""
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint or run directory")
    if (path / MARKER).exists() or path.name.startswith(("step_", ".step_")):
        return path
    for cand in (path / "checkpoints", path):
        found = committed(cand)
        if found:
            return found[-1]
    raise CheckpointError(f"{path}: holds no complete checkpoint (set checkpoint.every_steps to write some)")


def run_dir_of(path: Path) -> Path:
    """The run directory a `--resume` argument belongs to (where the resumed run keeps writing)."""
    if (path / MARKER).exists() or path.name.startswith("step_"):
        path = path.parent
    if path.name == "checkpoints":
        path = path.parent
    return path


def _as_resolved(now: dict, saved: dict) -> dict:
    """The recipe as it will be once the run has resolved what it leaves open until the data and the
    machine are known (precision "auto", vocab_size 0), taking the checkpoint's values for those, so
    that a resume can be compared before anything is opened; `load` compares again after."""
    now = {k: dict(v) if isinstance(v, dict) else v for k, v in now.items()}
    if now.get("train", {}).get("precision") == "auto" and "precision" in saved.get("train", {}):
        now["train"]["precision"] = saved["train"]["precision"]
    if now.get("model", {}).get("vocab_size") == 0 and "vocab_size" in saved.get("model", {}):
        now["model"]["vocab_size"] = saved["model"]["vocab_size"]
    return now


def _compare(saved: dict, now: dict, seed: int, saved_seed: int) -> list[str]:
    diffs = []
    if seed != saved_seed:
        diffs.append(f"seed is {saved_seed} there, {seed} here")
    for section, keys in (("model", None), ("data", None), ("train", _SAME_TRAIN)):
        a, b = saved.get(section, {}), now.get(section, {})
        for k in keys or sorted(set(a) | set(b)):
            if section == "data" and k == "cache_dir":
                continue
            if a.get(k) != b.get(k):
                diffs.append(f"{section}.{k} is {a.get(k)!r} there, {b.get(k)!r} here")
    return diffs


_AT_EXIT = -1  # TRAINPERF_FAULT=RANK:exit


def _fault() -> tuple[int, int] | None:
    """TRAINPERF_FAULT=RANK:STEP: that rank SIGKILLs itself before STEP on the first attempt;
    RANK:exit, after the finished run has left its process group (recovery drills)."""
    spec = os.environ.get("TRAINPERF_FAULT", "")
    if not spec:
        return None
    try:
        rank, step = spec.split(":")
        return int(rank), (_AT_EXIT if step == "exit" else int(step))
    except ValueError:
        raise CheckpointError(f"TRAINPERF_FAULT={spec!r}: expected RANK:STEP or RANK:exit") from None


def exit_fault(env: DistEnv) -> None:
    """The RANK:exit drill: a worker that dies after its run finished, as a crash in process
    teardown does; torchrun then restarts a group whose run is already done."""
    f = _fault()
    if f is not None and env.restart_count == 0 and f == (env.rank, _AT_EXIT):
        os.kill(os.getpid(), signal.SIGKILL)


class Checkpointer:
    """Everything the train loop needs for checkpoints: pick what to resume from, load, save, prune."""

    def __init__(self, r: Recipe, out: Path, env: DistEnv, seed: int, resume: Path | None = None):
        self.r, self.out, self.env, self.seed = r, out, env, seed
        self.states: dict[str, Stateful] = {}
        self.layout: dict = {}
        self.every, self.keep = r.checkpoint.every_steps, r.checkpoint.keep
        self.dir = Path(r.checkpoint.dir) if r.checkpoint.dir else out / "checkpoints"
        self.seconds = 0.0
        self.saved_step = -1
        self.fault = _fault()
        self.restarts = 0
        self.lost_steps = 0
        self.source: Path | None = None
        self._set_aside: tuple[Path, list[str]] | None = None  # where an earlier attempt's files went, and which
        own = committed(self.dir)
        if env.restart_count > 0 and own:
            self.source = own[-1]  # torchrun restarted us: carry on from our own last checkpoint
        elif resume is not None:
            self.source = resolve(resume)
        elif env.restart_count == 0 and own:
            raise CheckpointError(f"{self.dir}: already holds checkpoints of another run; pass --resume {self.out} "
                                  f"to continue it, or choose another --out")
        self.meta = verify(self.source) if self.source is not None else None
        if self.source is not None and self.source.resolve().parent == self.dir.resolve():
            newer = [p for p in own if _step_of(p) > _step_of(self.source)]
            if newer:
                raise CheckpointError(f"{self.source}: {newer[-1].name} is newer in the same run; resuming from an "
                                      f"older step would overwrite it (use --out NEW to branch off)")
        self.resume_step = int(self.meta["step"]) if self.meta else 0
        if self.meta is not None:
            # refused here, before the run puts the previous attempt's files aside (validate, then act)
            diffs = _compare(self.meta.get("recipe", {}), _as_resolved(r.to_dict(), self.meta.get("recipe", {})),
                             seed, self.meta.get("seed", -1))
            if diffs:
                raise CheckpointError(f"{self.source}: checkpoint of another model or recipe: " + "; ".join(diffs[:3]))
        if resume is not None and (out / "summary.json").exists():
            try:
                status = json.loads((out / "summary.json").read_text()).get("status")
            except (OSError, ValueError):
                status = None
            if status == "success":
                raise CheckpointError(f"{out}: this run already reached its target; nothing to resume")

    def check_budget(self, max_steps: int) -> None:
        """Refuse a `--resume` that would train nothing: its checkpoint is already at or past the step
        budget (`--max-steps`, or the recipe's), so the run would only rewrite its result."""
        if self.meta is not None and self.env.restart_count == 0 and self.resume_step >= max_steps:
            raise CheckpointError(f"{self.source}: the checkpoint is at step {self.resume_step}, and this run stops at "
                                  f"step {max_steps} (--max-steps or train.max_steps); give a larger --max-steps "
                                  "to continue it")

    @property
    def sets_aside(self) -> bool:
        """Whether this run continues an earlier attempt in its folder (`set_aside_previous_attempt`)."""
        return self.source is not None or self.env.restart_count > 0

    # ---- before the run: put an earlier attempt's files aside (rank 0)

    def set_aside_previous_attempt(self) -> None:
        """A resumed or restarted run writes fresh logs; the earlier attempt's go to `attempts/N/`."""
        out, seed = self.out, self.seed
        result = out / f"result_{seed}.txt"
        if not (self.source is not None or self.env.restart_count > 0):
            return
        attempts = out / "attempts"
        done = sorted(int(p.name) for p in attempts.glob("*") if p.name.isdigit()) if attempts.is_dir() else []
        files = [p for p in (result, *(out / f for f in _ATTEMPT_FILES)) if p.exists()]
        if files:
            reached = _last_step(out / "metrics.jsonl")
            dest = attempts / str((done[-1] + 1) if done else 1)
            dest.mkdir(parents=True)
            self._set_aside = (dest, [f.name for f in files])
            for f in files:
                os.replace(f, dest / f.name)
            info = {"reached_step": reached, "resumed_from_step": self.resume_step,
                    "lost_steps": max(0, reached - self.resume_step), "restart_count": self.env.restart_count}
            atomic.write_json(dest / "attempt.json", info)
            done.append(int(dest.name))
        for n in done:
            try:
                info = json.loads((attempts / str(n) / "attempt.json").read_text())
            except (OSError, ValueError):
                continue
            self.restarts += 1
            self.lost_steps += int(info.get("lost_steps", 0))

    def undo_set_aside(self) -> None:
        """Put the earlier attempt's files back, over the ones this attempt began (rank 0). For a run
        that failed before it trained a step (data, model, checkpoint load): the run folder is then
        as the user left it, and a finished run still scores."""
        if self._set_aside is None:
            return
        dest, moved = self._set_aside
        for name in (f"result_{self.seed}.txt", *_ATTEMPT_FILES):
            if name in moved:
                os.replace(dest / name, self.out / name)
            else:
                (self.out / name).unlink(missing_ok=True)  # begun by this attempt: trainperf's own
        (dest / "attempt.json").unlink(missing_ok=True)
        dest.rmdir()
        if not any(dest.parent.iterdir()):
            dest.parent.rmdir()
        self._set_aside = None

    # ---- load

    def attach(self, states: dict[str, Stateful], dims: ParallelDims) -> None:
        """What to save and restore (the trainer's Statefuls, by name) and the layout to record."""
        self.states, self.layout = states, dims.to_dict()

    def load(self) -> bool:
        """Restore the attached states and this rank's RNG from the chosen checkpoint; False if none."""
        if self.source is None:
            return False
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        diffs = _compare(self.meta.get("recipe", {}), self.r.to_dict(), self.seed, self.meta.get("seed", -1))
        if diffs:
            raise CheckpointError(f"{self.source}: checkpoint of another model or recipe: " + "; ".join(diffs[:3]))
        t0 = time.perf_counter()
        state: dict = dict(self.states)
        same_world = self.meta.get("world_size") == self.env.world_size
        rng = self._rng_state()
        if self.meta.get("device_type") != self.env.device.type:
            rng = {k: v for k, v in rng.items() if not k.startswith("cuda_")}
        if same_world:
            state.update(rng)
        try:
            with _single_process_quiet():
                dcp.load(state, checkpoint_id=str(self.source))
        except (Exception, CheckpointException) as e:  # CheckpointException is a BaseException
            msg = _first_error(e)
            raise CheckpointError(f"{self.source}: corrupt or incompatible checkpoint ({msg})") from None
        if same_world:
            # the same world size: every rank continues its own random streams exactly
            self._set_rng_state({k: state[k] for k in rng})
        self.seconds += time.perf_counter() - t0
        self.saved_step = self.resume_step
        return True

    def _rng_state(self) -> dict[str, torch.Tensor]:
        """This rank's generator states, keyed by rank (each rank has its own streams)."""
        r = self.env.rank
        out = {f"rng_rank{r}": torch.get_rng_state()}
        if self.env.device.type == "cuda":
            out[f"cuda_rng_rank{r}"] = torch.cuda.get_rng_state(self.env.device)
        return out

    def _set_rng_state(self, states: dict[str, torch.Tensor]) -> None:
        r = self.env.rank
        torch.set_rng_state(states[f"rng_rank{r}"])
        if f"cuda_rng_rank{r}" in states:
            torch.cuda.set_rng_state(states[f"cuda_rng_rank{r}"], self.env.device)

    # ---- save

    def before_step(self, step: int) -> None:
        """Called before each step: save the state "at the start of step `step`" every N steps."""
        if self.every and step > 0 and step % self.every == 0 and step != self.saved_step:
            self.save(step)
        if self.fault is not None and self.env.restart_count == 0 and self.fault == (self.env.rank, step):
            os.kill(os.getpid(), signal.SIGKILL)

    def finish(self, step: int) -> None:
        if self.every and step != self.saved_step:
            self.save(step)

    def save(self, step: int) -> Path:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        t0 = time.perf_counter()
        env = self.env
        final = self.dir / f"step_{step:08d}"
        tmp = self.dir / f".step_{step:08d}.tmp"
        if env.is_main:
            self.dir.mkdir(parents=True, exist_ok=True)
            if final.exists():
                raise CheckpointError(f"{final}: exists; a checkpoint is never overwritten")
            for stale in self.dir.glob(".step_*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)  # left by saves that crashed; never read
        env.barrier()
        with _stops_held() as stopping:
            try:
                with _single_process_quiet():
                    dcp.save({**self.states, **self._rng_state()}, checkpoint_id=str(tmp))
                if env.is_main:
                    self._commit(tmp, final, step)
            except (Exception, CheckpointException) as e:  # CheckpointException is a BaseException
                inner = _inner_error(e)
                if stopping or isinstance(inner, (KeyboardInterrupt, Terminated)):
                    # a stop that lands mid-save (raised inside DCP's writer, or a peer rank that
                    # stopped at once) is still the stop the user asked for (exit 130/143), not a
                    # checkpoint error; a held signal is raised again as the block ends
                    if env.is_main:
                        shutil.rmtree(tmp, ignore_errors=True)
                    if stopping:
                        raise
                    raise inner from None
                raise self._save_failed(e, tmp, final) from e
        if env.is_main:
            self._prune()
        env.barrier()
        self.saved_step = step
        self.seconds += time.perf_counter() - t0
        return final

    def _save_failed(self, e: BaseException, tmp: Path, final: Path) -> Exception:
        """A one-line error for a checkpoint that could not be written. torch's writer reports a full
        disk as a RuntimeError ("unexpected pos ...") without the OSError behind it, so a failure
        while the disk has (almost) no room left is named for what it is. The half-written hidden
        folder is removed (it is never read, and on a full disk it holds the space)."""
        inner = _inner_error(e)
        try:
            free = shutil.disk_usage(tmp if tmp.exists() else self.dir).free
            largest = max((p.stat().st_size for p in tmp.iterdir()), default=0) if tmp.is_dir() else 0
        except OSError:
            free, largest = None, 0
        if self.env.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(inner, OSError):
            return file_error(inner, "saving the checkpoint", final)
        if free is not None and free < _NEARLY_FULL:
            return file_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "saving the checkpoint", final)
        fsize = resource.getrlimit(resource.RLIMIT_FSIZE)[0] if resource is not None else -1
        if fsize not in (-1, getattr(resource, "RLIM_INFINITY", -1)) and largest >= fsize:
            return file_error(OSError(errno.EFBIG, os.strerror(errno.EFBIG)), "saving the checkpoint", final)
        return CheckpointError(f"{final}: the checkpoint could not be written ({_first_error(e)})")

    def _commit(self, tmp: Path, final: Path, step: int) -> None:
        meta = {"format": FORMAT, "step": step, "samples": step * self.r.train.global_batch_size,
                "seed": self.seed, "world_size": self.env.world_size, "device_type": self.env.device.type,
                "layout": self.layout,
                "recipe": self.r.to_dict(), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}}
        atomic.write_json(tmp / MARKER, meta)
        os.rename(tmp, final)  # the commit: atomic on POSIX filesystems
        atomic.sync_dir(self.dir)  # make the rename itself durable

    def _prune(self) -> None:
        for old in committed(self.dir)[:-self.keep]:
            # un-commit first (drop the marker), so a crash mid-delete never leaves a half checkpoint that counts
            (old / MARKER).unlink(missing_ok=True)
            shutil.rmtree(old, ignore_errors=True)

    def first_run_start(self) -> float | None:
        """When the first attempt of this run started its clock (run_start, Unix seconds), from the
        result logs set aside in `attempts/`; None for a run that never restarted."""
        starts = []
        for log in sorted((self.out / "attempts").glob(f"*/result_{self.seed}.txt")):
            try:
                starts.append(read_log(log).start_ms)  # the scorer's reading of a result log
            except ScoreError:
                continue  # unreadable: that attempt's start is unknown
        starts = [t for t in starts if t is not None]
        return min(starts) / 1000.0 if starts else None

    def summary_fields(self) -> dict:
        return {"restarts": self.restarts, "lost_steps": self.lost_steps, "resumed_from_step": self.resume_step,
                "checkpoints": [p.name for p in committed(self.dir)] if self.env.is_main else []}


def _inner_error(e: BaseException) -> BaseException:
    """The first rank's own exception inside a DCP failure (which wraps each rank's exception and
    traceback), or `e` itself."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        inner = next(iter(failures.values()))
        inner = inner[0] if isinstance(inner, tuple) else inner
        if isinstance(inner, BaseException):
            return inner
    return e


def _first_error(e: BaseException) -> str:
    """One line from a DCP failure."""
    e = _inner_error(e)
    text = str(e).strip()
    line = text.splitlines()[0][:160] if text else ""
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def _last_step(metrics: Path) -> int:
    """The last training step an attempt logged (its metrics rows come every train.log_every steps)."""
    last = 0
    try:
        lines = metrics.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the last line of a killed run may be cut short
        if row.get("kind") in ("train", "eval", "end") and isinstance(row.get("step", row.get("steps")), int):
            last = max(last, int(row.get("step", row.get("steps"))))
    return last


@contextlib.contextmanager
def _single_process_quiet():
    """DCP warns on every save and load without a process group that it assumes one process, even
    when told so (no_dist): one process is what the run is, so that warning alone is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.distributed is .*uninitialized, assuming the intent",
                                category=UserWarning)
        yield
