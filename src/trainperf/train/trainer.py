"""Train to a target: the run MLPerf times from `run_start` to `run_stop`.

Init (untimed, as in MLPerf): prepare/open token shards, build the model on the meta device and let
`parallelize` shard and initialise it, the optimizer, the eval set, and restore a checkpoint.
Run (timed): blocks of `eval.every_samples` training sequences, each followed by an evaluation on
the fixed validation set; stop at the target (`success`) or at the step budget (`aborted`).

`Trainer.train_step` is exactly one optimizer step and `Trainer.run` the loop around it; neither
branches on the parallel layout: `ParallelDims` says how the batch is split and `grad_sync` which
gradient-sync switch the wrapper has.
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import torch

from trainperf import atomic
from trainperf.config import Recipe
from trainperf.data.pipeline import EvalSet, cache_root, check_source, eval_set, prepare, train_batches
from trainperf.data.samples import IGNORE
from trainperf.errors import TrainError, WeightsError
from trainperf.mlperf.benchmarks import benchmark_hooks
from trainperf.mlperf.logger import C, MLPerfLog, render_rules
from trainperf.model.flops import flops_per_token
from trainperf.model.transformer import Transformer
from trainperf.model.weights import load_base_weights
from trainperf.parallel.apply import parallelize, unwrap
from trainperf.parallel.context import shard_sequence
from trainperf.parallel.pipeline import split_stage, stage_ids
from trainperf.parallel.dims import ParallelDims
from trainperf.parallel.env import DistEnv
from trainperf.provenance import code_version
from trainperf.train.checkpoint import Checkpointer
from trainperf.train.metadata import run_metadata, submission_metadata
from trainperf.train.engine import make_engine
from trainperf.train.host import check_vector_isas, keep_freed_memory
from trainperf.train.optim import Optimizers, lr_at
from trainperf.train.peak import device_peak
from trainperf.train.precision import PrecisionChoice, choose_precision
from trainperf.train.save import save_final
from trainperf.train.state import TrainState, checkpoint_states
from trainperf.train.summary import RunOptions, Summary
from trainperf.train.timing import PhaseClock, synced_clock

__all__ = ["RunOptions", "Summary", "TrainError", "Trainer", "lr_at", "train"]


def train(r: Recipe, env: DistEnv, opts: RunOptions) -> Summary:
    """One run of recipe `r` into `opts.out`: init, the timed run, the final files."""
    done = finished_before_restart(opts.out, env)
    if done is not None:
        return done
    # every check that can refuse the run comes before its first change on disk
    check_source(r.data)
    ckpt = Checkpointer(r, opts.out, env, opts.seed, opts.resume)  # picks, verifies and compares what to resume from
    ckpt.check_budget(opts.max_steps or r.total_steps)
    if env.is_main:
        if not ckpt.sets_aside:
            _check_out(opts.out, opts.seed)
        ckpt.set_aside_previous_attempt()
        atomic.mark_out(opts.out, "run")
    env.barrier()
    log = MLPerfLog(opts.out / f"result_{opts.seed}.txt", enabled=env.is_main)
    try:
        log.event(C.CACHE_CLEAR, True)
        log.start(C.INIT_START)
        for key, value in submission_metadata(r, f"{env.world_size}x{device_name(env.device)}"):
            log.event(key, value)
        try:
            trainer = Trainer(r, env, opts, log, ckpt)
            trainer.init_run()
        except BaseException:
            # nothing trained yet: a resumed run's folder goes back to how it was (validate, then act)
            log.close()
            if env.is_main:
                ckpt.undo_set_aside()
            raise
        return trainer.run()
    finally:
        log.close()


def finished_before_restart(out: Path, env: DistEnv) -> Summary | None:
    """The run's summary when torchrun restarted a worker group whose run had already finished.
    A worker can die after the summary is written (a crash while the process exits); the restarted
    group must not train again over a finished result. Every rank reads the same file, written
    atomically by rank 0 before the failed group ended, so all take the same branch."""
    if env.restart_count == 0:
        return None
    s = Summary.read(out)
    if s is None or s.status not in (C.SUCCESS, C.ABORTED):
        return None
    if env.is_main:
        print(f"trainperf: {out} already holds this run's result ({s.status}, summary.json) from before the "
              f"restart; nothing is trained again")
    return s


def _check_out(out: Path, seed: int) -> None:
    if (out / "summary.json").exists():
        raise TrainError(f"{out}: already holds a finished run (summary.json); choose another --out")
    if (out / f"result_{seed}.txt").exists():
        raise TrainError(f"{out / f'result_{seed}.txt'}: exists; a result log is never overwritten")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def open_data(r: Recipe, env: DistEnv):
    """Prepared token shards (rank 0 prepares, the others open the complete cache); fills model.vocab_size."""
    data = prepare(r.data, row_len=r.model.seq_len) if env.is_main else None
    env.barrier()
    if data is None:
        data = prepare(r.data, row_len=r.model.seq_len)
    if r.model.vocab_size == 0:
        r.model.vocab_size = data.vocab_size
    elif r.model.vocab_size < data.vocab_size:
        raise TrainError(f"model.vocab_size={r.model.vocab_size} is smaller than the tokenizer's {data.vocab_size}")
    return data


def build_parts(r: Recipe, dims: ParallelDims, device: torch.device, seed: int) -> tuple[list[torch.nn.Module], int]:
    """This rank's model parts, the same way on every layout: the model built on the meta device,
    cut into this rank's pipeline stages (the whole model without a pipeline), each sharded and
    initialised by `parallelize` (seeded per tensor, so any layout starts from the same weights),
    then the start checkpoint read into the shards one tensor at a time. Also the whole model's
    parameter count."""
    torch.manual_seed(seed)  # dropout streams
    with torch.device("meta"):
        model = Transformer(r.model)
    n_params = sum(p.numel() for p in model.parameters())
    if dims.pp > 1:
        n_stages = dims.pp * r.parallel.vpp
        parts = [split_stage(model, s, n_stages) for s in stage_ids(dims, r.parallel.vpp)]
    else:
        parts = [model]
    p = r.parallel
    parts = [parallelize(part, dims, device, r.train.precision, activation_checkpoint=p.activation_checkpoint,
                         compile=p.compile, fp8=r.train.fp8_linear, seed=seed) for part in parts]
    if r.train.init_checkpoint:
        try:
            for part in parts:
                load_base_weights(unwrap(part), r.train.init_checkpoint)
        except WeightsError as err:
            raise TrainError(f"train.init_checkpoint: {err}") from None
    return parts, n_params


def resolve_precision(r: Recipe, env: DistEnv, ckpt: Checkpointer, batch: int, seq: int) -> PrecisionChoice:
    """train.precision = "auto" made concrete in the recipe: a resumed run keeps its checkpoint's
    format; otherwise the probe's (fp8 linears always run inside bf16 autocast)."""
    t = r.train
    if t.precision != "auto":
        choice = PrecisionChoice(t.precision, "train.precision")
    elif ckpt.meta is not None:
        choice = PrecisionChoice(ckpt.meta.get("recipe", {}).get("train", {}).get("precision", "fp32"),
                                 "the checkpoint's")
    elif t.fp8_linear:
        choice = PrecisionChoice("bf16", "train.fp8_linear runs in bf16 autocast")
    else:
        def share(code: int) -> int:
            mine = torch.tensor([code if env.is_main else 0], device=env.device)
            return int(env.all_reduce_sum(mine).cpu())
        choice = choose_precision(r.model, batch, seq, env.device, share, cache=cache_root(r.data))
    t.precision = choice.precision
    return choice


def pad_windows(x: torch.Tensor, y: torch.Tensor, seq_len: int, rows: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluation windows padded to `seq_len` and their count to a multiple of `rows` (the batch
    times the data-parallel ranks) with unscored targets. Causal attention keeps the real positions'
    losses as they were; every evaluation forward has one shape, which sequence parallelism needs
    (the sequence splits evenly over the tensor-parallel ranks) and compile likes: a short last
    batch would compile a second, dynamic-shape graph (seconds of start-up, more with a cold cache)."""
    pad, extra = max(0, seq_len - x.shape[1]), -x.shape[0] % rows
    return (torch.nn.functional.pad(x, (0, pad, 0, extra), value=0),
            torch.nn.functional.pad(y, (0, pad, 0, extra), value=IGNORE))


class Trainer:
    """Setup in `__init__`, one optimizer step in `train_step`, the timed run in `run`."""

    def __init__(self, r: Recipe, env: DistEnv, opts: RunOptions, log: MLPerfLog, ckpt: Checkpointer):
        self.r, self.env, self.opts, self.log, self.ckpt = r, env, opts, log, ckpt
        self.device = env.device
        self.dims = ParallelDims.from_config(r.parallel, env.world_size, env.rank)
        self.geometry = self.dims.batch(r.train)
        self.dims.build_mesh(self.device.type)
        # inductor's ISA checks are subprocesses: they run beside the data's reading and tokenizing,
        # and end before anything is timed (the precision probe, the peak)
        checks = check_vector_isas() if r.parallel.compile and self.device.type == "cpu" else []
        self.data = open_data(r, env)
        for check in checks:
            check.join()
        if self.device.type == "cpu":  # after the data: a first run's tokenizing keeps its own memory behaviour
            keep_freed_memory()
        self.precision = resolve_precision(r, env, ckpt, self.geometry.micro, r.model.seq_len // self.dims.cp)
        self.parts, self.n_params = build_parts(r, self.dims, self.device, opts.seed)
        self.engine = make_engine(self.parts, r, self.dims, self.device, self.geometry.accum)
        if self.device.type == "cuda" and env.is_main:
            from trainperf.train.engine import device_memory, fit_warning

            warning = fit_warning(r, self.dims, device_memory(self.device))
            if warning:
                print(f"trainperf: warning: {warning}", flush=True)
        self.opt = Optimizers(self.parts, r, self.device)
        self.state = TrainState()
        ckpt.attach(checkpoint_states(self.parts, self.opt, self.state), self.dims)
        ckpt.load()
        self.batches = train_batches(self.data, r.model.seq_len, r.train.global_batch_size, opts.seed)
        self.ev = eval_set(self.data, r.model.seq_len, r.data.eval_bytes, r.eval.eval_samples, r.eval.eval_documents)
        self.hooks = benchmark_hooks(r)
        self.fpt = flops_per_token(r.model)
        self.peak = device_peak(self.device, r.train.precision, cache_root(r.data))
        self.clock = PhaseClock(self.device)
        self.eval_seconds = 0.0
        self.last_eval = float("nan")
        self.max_steps = opts.max_steps or r.total_steps
        self.tokens_per_step = r.train.global_batch_size * r.model.seq_len
        self.metrics = open(opts.out / "metrics.jsonl", "x", encoding="utf-8") if env.is_main else None

    # ---- init (untimed)

    def init_run(self) -> None:
        """The rest of MLPerf's init: the run's metadata, compile warm-up, init_stop on every rank."""
        pairs = run_metadata(self.r, self.hooks, self.dims, self.geometry, seed=self.opts.seed,
                             eval_samples=self.ev.samples, corpus_fingerprint=self.data.fingerprint,
                             tokenizer=self.data.meta["tokenizer"], restarts=self.ckpt.restarts)
        for key, value in pairs:
            self.log.event(key, value)
        self.log.event("precision_choice", self.precision.to_dict())  # what auto measured, or the recipe's word
        # how FSDP2 holds gradients between micro-batches (parallel.apply.accumulation_mode)
        self.log.event("grad_accumulation", self.engine.grad_sync_mode)
        if self.r.parallel.compile:
            self.warm_up()
        self.env.barrier()
        self.log.end(C.INIT_STOP)

    def warm_up(self) -> None:
        """Compile before run_start, on random tokens (MLPerf's init may run the model on synthetic data,
        not on training or validation data): one training forward/backward and an evaluation with the
        eval set's shapes. Weights and optimizer state are untouched, and the random tokens come from a
        private generator, so the run's losses are the same with or without it."""
        gen = torch.Generator().manual_seed(0)
        vocab, g = self.r.model.vocab_size, self.geometry
        # inputs and targets as the batches hand them, overlapping views of one window per row, so
        # a compiled graph that guards on their strides is not compiled again in the timed run
        window = torch.randint(0, vocab, (g.per_rank, self.r.model.seq_len + 1), generator=gen)
        x, y = (shard_sequence(t, self.dims).to(self.device) for t in (window[:, :-1], window[:, 1:]))
        self.engine.forward_backward(x, y, None, g.accum)
        self.opt.zero_grad(set_to_none=True)
        # every evaluation forward has one shape (`evaluate` pads each chunk to whole micro-batches
        # on every rank), so one micro-batch per rank compiles it: not the whole eval set again
        first = self.ev.inputs[0]
        n = min(first.shape[0], g.micro * self.dims.dp)
        fake = [torch.randint(0, vocab, (n, *first.shape[1:]), generator=gen)]
        self.evaluate(EvalSet(fake, fake, self.ev.target_bytes, self.ev.target_tokens, self.ev.samples))

    # ---- one step

    def train_step(self) -> torch.Tensor:
        """One optimizer step over the global batch: this rank's share in micro-batches, gradients
        reduced once (after the last micro-batch), clipped, stepped. Returns the step's loss on the device."""
        r, step, accum = self.r, self.state.step, self.geometry.accum
        self.lr = lr_at(step + r.train.init_checkpoint_step, r)  # a start checkpoint continues its schedule
        self.opt.set_lr(self.lr)
        self.clock.start()
        x, y = self.batches.get(step, self.dims.dp_rank, self.dims.dp, pin=self.device.type == "cuda")
        x, y = shard_sequence(x, self.dims), shard_sequence(y, self.dims)  # a context-parallel rank's chunks
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        n_scored = self.batches.scored_tokens(step)
        self.clock.lap("data")
        total = self.engine.forward_backward(x, y, n_scored, accum)
        self.clock.lap("fwd_bwd")
        if r.train.grad_clip > 0:
            self.engine.clip_grad_norm(r.train.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.clock.lap("optimizer")
        self.state.step += 1
        return total

    @torch.no_grad()
    def evaluate(self, ev: EvalSet | None = None) -> tuple[float, float]:
        """(nats per byte, mean token loss) over the fixed eval set; data-parallel ranks split the windows."""
        ev = ev or self.ev
        for part in self.parts:
            part.eval()
        batch, dp_rank, dp = self.geometry.micro, self.dims.dp_rank, self.dims.dp
        loss_sum = torch.zeros(1, dtype=torch.float64)
        for inputs, targets in zip(ev.inputs, ev.targets):
            inputs, targets = pad_windows(inputs, targets, self.r.model.seq_len, batch * dp)
            inputs, targets = shard_sequence(inputs, self.dims), shard_sequence(targets, self.dims)
            # every rank runs the same number of forwards (sharded models gather weights collectively
            # in each one); a rank past the end repeats the first batch and scores nothing
            for k in range(math.ceil(inputs.shape[0] / (batch * dp))):
                i = (k * dp + dp_rank) * batch
                scored = i < inputs.shape[0]
                i = i if scored else 0
                x, y = inputs[i:i + batch].to(self.device), targets[i:i + batch].to(self.device)
                losses = self.engine.eval_losses(x, y)  # None on ranks that hold no head
                if scored and losses is not None:  # unscored targets (prompts, padding) have loss 0: the sum is over scored ones
                    loss_sum += losses.double().sum().cpu()
        for part in self.parts:
            part.train()
        total = float(self.env.all_reduce_sum(loss_sum.to(self.device), group=self.dims.loss_group).cpu())
        return total / ev.target_bytes, total / ev.target_tokens

    # ---- the timed run

    def run(self) -> Summary:
        """Blocks of training steps, each followed by an evaluation, until the target or the step budget."""
        r, log, e = self.r, self.log, self.r.eval
        steps_per_eval = max(1, math.ceil(e.every_samples / r.train.global_batch_size))
        status = C.ABORTED
        self.emit({"kind": "start", "target": e.target, "metric": e.metric, "max_steps": self.max_steps,
                   "flops_per_token": self.fpt, "peak_flops": self.peak.flops})
        log.start(C.RUN_START)
        self.t_start, self.wall_start = time.perf_counter(), time.time()
        try:
            while self.state.step < self.max_steps:
                # aligned to the eval cadence, so a resumed run evaluates at the same steps
                block_end = min((self.state.step // steps_per_eval + 1) * steps_per_eval, self.max_steps)
                self.train_block(block_end)
                if self.eval_block():
                    status = C.SUCCESS
                    break
        except BaseException:
            log.end(C.RUN_STOP, samples_count=self.samples, status=C.ABORTED)
            if self.metrics is not None:
                self.metrics.close()
            raise
        log.end(C.RUN_STOP, samples_count=self.samples, status=status)
        return self.finish(status)

    @property
    def samples(self) -> int:
        return self.state.step * self.r.train.global_batch_size

    def train_block(self, block_end: int) -> None:
        """Steps up to `block_end`, the loss read back (one host sync) every train.log_every steps."""
        t = self.r.train
        self.log.start(C.BLOCK_START, samples_count=self.samples)
        loss_acc, since, t_log = torch.zeros((), device=self.device), 0, synced_clock(self.device)
        while self.state.step < block_end:
            self.ckpt.before_step(self.state.step)
            loss_acc += self.train_step()
            since += 1
            if self.state.step % t.log_every == 0 or self.state.step == block_end:
                t_log = self.log_train(loss_acc, since, t_log)
                loss_acc.zero_()
                since = 0
        self.log.end(C.BLOCK_STOP, samples_count=self.samples)

    def log_train(self, loss_acc: torch.Tensor, steps: int, t_from: float) -> float:
        """The mean loss over the last `steps` steps and all data- and context-parallel ranks, and
        their throughput over the interval since `t_from`; returns the interval's end (after the sync)."""
        total = float(self.env.all_reduce_sum(loss_acc.clone(), group=self.dims.loss_group))
        # the interval ends once the device has done the steps' work, not when the host queued it
        t_to = synced_clock(self.device)
        seconds = t_to - t_from
        avg = total / steps / self.dims.grad_ranks
        self.clock.flush()  # synced above
        if not math.isfinite(avg):
            raise TrainError(f"training loss became {avg} at step {self.state.step}; lower train.lr or check the data")
        tps = steps * self.tokens_per_step / seconds
        self.emit({"kind": "train", "step": self.state.step, "loss": avg, "lr": self.lr, "tokens_per_s": tps,
                   "mfu": self.peak.mfu(tps * self.fpt / self.env.world_size),
                   "elapsed_s": t_to - self.t_start})
        return t_to

    def eval_block(self) -> bool:
        """Evaluate, log it the MLPerf way; True when the run reached its target."""
        e, samples, t0 = self.r.eval, self.samples, time.perf_counter()
        self.log.start(C.EVAL_START, samples_count=samples)
        npb, tok_loss = self.evaluate()
        self.log.end(C.EVAL_STOP, samples_count=samples)
        self.last_eval = npb if e.metric == "nats_per_byte" else tok_loss
        self.state.n_evals += 1
        counted = self.state.n_evals > e.skip_evals
        if counted:
            self.log.event(C.EVAL_ACCURACY, self.last_eval,
                           **self.hooks.eval_metadata(samples, self.state.step * self.tokens_per_step))
        self.eval_seconds += time.perf_counter() - t0
        self.emit({"kind": "eval", "step": self.state.step, "samples": samples, "eval_loss": self.last_eval,
                   "nats_per_byte": npb, "token_loss": tok_loss, "elapsed_s": time.perf_counter() - self.t_start})
        if not math.isfinite(self.last_eval):
            raise TrainError(f"validation loss became {self.last_eval} at step {self.state.step}")
        return counted and self.last_eval <= e.target and self.hooks.stops_at_target

    # ---- after run_stop

    def finish(self, status: str) -> Summary:
        """The summary, the last checkpoint, the final weights and the run's files."""
        elapsed, wall_stop = time.perf_counter() - self.t_start, time.time()
        self.clock.flush(sync=True)
        self.log.event(C.TRAIN_SAMPLES, self.samples)
        summary = self.summary(status, elapsed, wall_stop)
        self.ckpt.finish(self.state.step)
        summary.checkpoints = self.ckpt.summary_fields()["checkpoints"]
        summary.time_breakdown_s["checkpoint"] = round(self.ckpt.seconds, 3)
        t0 = time.perf_counter()
        save_final(self.parts, self.r, self.opts.out, self.env, self.data)  # each rank writes its own shards
        summary.time_breakdown_s["save"] = round(time.perf_counter() - t0, 3)
        if self.env.is_main:
            if self.r.benchmark.rules == self.r.benchmark.name:
                render_rules(self.r.benchmark.name, self.r.eval.target, self.opts.out / "compliance.yaml")
            self.emit({"kind": "end", **summary.to_dict()})
            self.metrics.close()
            summary.write(self.opts.out)
        return summary

    def summary(self, status: str, elapsed: float, wall_stop: float) -> Summary:
        r, steps = self.r, self.state.step
        times = {**self.clock.totals, "eval": self.eval_seconds}
        tokens = steps * self.tokens_per_step
        # wall time between run_start and run_stop less evaluation: on a GPU the per-step timers only
        # see kernel launches (the queue drains at the log-interval sync), so their sum would flatter
        train_time = elapsed - self.eval_seconds
        tps = tokens / train_time if train_time > 0 else 0.0
        first = self.ckpt.first_run_start()
        return Summary(
            benchmark=r.benchmark.name, status=status,
            time_to_train_s=(wall_stop - first) if first is not None else elapsed, last_attempt_s=elapsed,
            steps=steps, samples=self.samples, tokens=tokens, tokens_per_s=tps,
            mfu=self.peak.mfu(tps * self.fpt / self.env.world_size), peak_flops=self.peak.flops,
            peak_source=self.peak.source, final_eval_loss=self.last_eval, target=r.eval.target,
            metric=r.eval.metric, seed=self.opts.seed, device=device_name(self.device),
            world_size=self.env.world_size, out=str(self.opts.out), flops_per_token=self.fpt, params=self.n_params,
            evals=self.state.n_evals, corpus_fingerprint=self.data.fingerprint,
            tokens_to_target=tokens if status == C.SUCCESS else None,
            model_flops_to_target=float(tokens * self.fpt) if status == C.SUCCESS else None,
            precision=r.train.precision, precision_choice=self.precision.to_dict(),
            time_breakdown_s={k: round(v, 3) for k, v in times.items()}, deviations=self.hooks.deviations(),
            layout=self.dims.to_dict(), code=code_version(), **self.ckpt.summary_fields(),
        )

    def emit(self, row: dict) -> None:
        if self.metrics is not None:
            self.metrics.write(json.dumps(row) + "\n")
            self.metrics.flush()
        if self.opts.on_event is not None and self.env.is_main:
            self.opts.on_event(row)
