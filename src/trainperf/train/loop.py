"""Train to a target: the loop MLPerf times from `run_start` to `run_stop`.

Init (untimed, as in MLPerf): prepare/open token shards, build the model, optimizer and eval set.
Run (timed): blocks of `eval.every_samples` training sequences, each followed by an evaluation on
the fixed validation set; stop at the target (`success`) or at the step budget (`aborted`).
The loop is the same for one process and for N: parallelism lives in `trainperf.parallel`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

import trainperf
from trainperf.config import Recipe
from trainperf.data.pipeline import EvalSet, eval_set, prepare, train_batches
from trainperf.errors import TrainError
from trainperf.mlperf.benchmarks import benchmark_hooks
from trainperf.mlperf.logger import C, MLPerfLog, render_rules
from trainperf.model.flops import flops_per_token
from trainperf.model.transformer import Transformer
from trainperf.model.weights import CheckpointError, load_base_weights, save_adapters
from trainperf.parallel.apply import comm_precision, dp_info, parallelize, resolve_layout, unwrap
from trainperf.parallel.env import DistEnv
from trainperf.train.checkpoint import Checkpointer
from trainperf.train.peak import device_peak
from trainperf.train.timing import PhaseClock
from trainperf.train.save import save_final


@dataclass
class RunOptions:
    out: Path
    seed: int = 0
    max_steps: int = 0  # 0 -> the recipe's
    progress: bool = True
    on_event: Callable[[dict], None] | None = None  # receives every metrics row (for live displays)
    resume: Path | None = None  # a run or checkpoint directory to continue from


@dataclass
class Summary:
    benchmark: str
    status: str
    time_to_train_s: float
    steps: int
    samples: int
    tokens: int
    tokens_per_s: float
    mfu: float
    peak_flops: float
    peak_source: str
    final_eval_loss: float
    target: float
    metric: str
    seed: int
    device: str
    world_size: int
    out: str
    flops_per_token: int
    params: int
    evals: int
    corpus_fingerprint: str
    time_breakdown_s: dict = field(default_factory=dict)
    deviations: list = field(default_factory=list)
    restarts: int = 0  # earlier attempts of this run (torchrun restarts, --resume in place)
    lost_steps: int = 0  # steps those attempts ran past their last checkpoint (redone)
    resumed_from_step: int = 0
    checkpoints: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def lr_at(step: int, r: Recipe) -> float:
    """Linear warm-up from 0 to lr, then cosine to end_lr over decay_steps, then end_lr."""
    t = r.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.decay_steps))
    return t.end_lr + (t.lr - t.end_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, r: Recipe, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not norms, biases). `fused` picks the implementation."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": r.train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    impl = r.train.fused
    kw: dict = {}
    if impl == "auto":
        impl = "fused" if device.type in ("cuda", "cpu") else "foreach"
    if impl == "fused":
        kw["fused"] = True
    elif impl == "foreach":
        kw["foreach"] = True
    else:
        kw["foreach"] = False
    return torch.optim.AdamW(groups, lr=r.train.lr, betas=(r.train.beta1, r.train.beta2), eps=r.train.eps, **kw)


def autocast_ctx(r: Recipe, device: torch.device):
    if r.train.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


@torch.no_grad()
def evaluate(model: torch.nn.Module, ev: EvalSet, r: Recipe, env: DistEnv, batch: int) -> tuple[float, float]:
    """(nats per byte, mean token loss) over the fixed eval set; data-parallel ranks split the windows."""
    model.eval()
    dp_rank, dp_size = dp_info(r.parallel, env)
    loss_sum = torch.zeros(1, dtype=torch.float64)
    for inputs, targets in zip(ev.inputs, ev.targets):
        # every rank runs the same number of forwards (sharded models gather weights collectively
        # in each one); a rank past the end repeats the first batch and scores nothing
        for k in range(math.ceil(inputs.shape[0] / (batch * dp_size))):
            i = (k * dp_size + dp_rank) * batch
            scored = i < inputs.shape[0]
            i = i if scored else 0
            x = inputs[i:i + batch].to(env.device)
            y = targets[i:i + batch].to(env.device)
            with autocast_ctx(r, env.device):
                losses = model(x, y)
            if scored:  # unscored targets (fine-tuning prompts) have loss 0: the sum is over scored ones
                loss_sum += losses.double().sum().cpu()
    model.train()
    total = float(env.all_reduce_sum(loss_sum.to(env.device)).cpu())
    return total / ev.target_bytes, total / ev.target_tokens


def warm_up_compiled(model: torch.nn.Module, opt: torch.optim.Optimizer, ev: EvalSet, r: Recipe,
                     env: DistEnv, micro: int) -> None:
    """Compile before run_start, on random tokens (MLPerf's init may run the model on synthetic data,
    not on training or validation data): one training forward/backward and an evaluation with the
    eval set's shapes. Weights and optimizer state are untouched, and the random tokens come from a
    private generator, so the run's losses are the same with or without it."""
    gen = torch.Generator().manual_seed(0)
    vocab = r.model.vocab_size
    x = torch.randint(0, vocab, (micro, r.model.seq_len), generator=gen).to(env.device)
    with autocast_ctx(r, env.device):
        loss = model(x, x).mean()
    loss.backward()
    opt.zero_grad(set_to_none=True)
    fake = [torch.randint(0, vocab, t.shape, generator=gen) for t in ev.inputs]
    evaluate(model, EvalSet(fake, fake, ev.target_bytes, ev.target_tokens, ev.samples), r, env, micro)


def _load_start(model: torch.nn.Module, path: str) -> None:
    if not path:
        return
    try:
        load_base_weights(model, path)
    except CheckpointError as err:
        raise TrainError(f"train.init_checkpoint: {err}") from None


def _precision_name(r: Recipe) -> str:
    return "bfloat16" if r.train.precision == "bf16" else "fp32"


def _check_out(out: Path, seed: int) -> None:
    if (out / "summary.json").exists():
        raise TrainError(f"{out}: already holds a finished run (summary.json); choose another --out")
    if (out / f"result_{seed}.txt").exists():
        raise TrainError(f"{out / f'result_{seed}.txt'}: exists; a result log is never overwritten")


def train(r: Recipe, env: DistEnv, opts: RunOptions) -> Summary:
    out, seed = opts.out, opts.seed
    ckpt = Checkpointer(r, out, env, seed, opts.resume)  # picks and verifies what to resume from, if anything
    if env.is_main:
        ckpt.set_aside_previous_attempt()
        _check_out(out, seed)
        out.mkdir(parents=True, exist_ok=True)
    env.barrier()
    log = MLPerfLog(out / f"result_{seed}.txt", enabled=env.is_main)
    try:
        return _train(r, env, opts, log, ckpt)
    finally:
        log.close()


def _train(r: Recipe, env: DistEnv, opts: RunOptions, log: MLPerfLog, ckpt: Checkpointer) -> Summary:
    out, seed = opts.out, opts.seed
    t, e = r.train, r.eval
    log.event(C.CACHE_CLEAR, True)
    log.start(C.INIT_START)
    log.event(C.SUBMISSION_ORG, os.environ.get("TRAINPERF_ORG", "trainperf"))
    log.event(C.SUBMISSION_PLATFORM, f"{env.world_size}x{_device_name(env.device)}")
    log.event(C.SUBMISSION_DIVISION, C.CLOSED)
    log.event(C.SUBMISSION_STATUS, C.RESEARCH)
    log.event(C.SUBMISSION_BENCHMARK, r.benchmark.name)

    # ---- data (untimed: MLPerf allows preparing data outside the timed region)
    data = prepare(r.data, row_len=r.model.seq_len) if env.is_main else None
    env.barrier()
    if data is None:
        data = prepare(r.data, row_len=r.model.seq_len)  # the cache is now complete; other ranks just open it
    if r.model.vocab_size == 0:
        r.model.vocab_size = data.vocab_size
    elif r.model.vocab_size < data.vocab_size:
        raise TrainError(f"model.vocab_size={r.model.vocab_size} is smaller than the tokenizer's {data.vocab_size}")

    dp_rank, dp_size = dp_info(r.parallel, env)
    if t.global_batch_size % dp_size:
        raise TrainError(f"train.global_batch_size={t.global_batch_size} is not divisible by the "
                         f"{dp_size} data-parallel ranks")
    per_rank = t.global_batch_size // dp_size
    micro = min(t.micro_batch_size, per_rank)
    if per_rank % micro:
        raise TrainError(f"train.micro_batch_size={micro} does not divide the {per_rank} sequences per rank")
    accum = per_rank // micro
    max_steps = opts.max_steps or r.total_steps

    torch.manual_seed(seed)
    with torch.device("meta") if r.parallel.meta_init else nullcontext():
        model = Transformer(r.model)
    n_params = sum(p.numel() for p in model.parameters())
    if not r.parallel.meta_init:
        _load_start(model, t.init_checkpoint)
    model = parallelize(model, r.parallel, env, t.precision, fp8=t.fp8_linear, seed=seed)
    if r.parallel.meta_init:
        _load_start(unwrap(model), t.init_checkpoint)  # into the shards, one tensor at a time
    opt = build_optimizer(model, r, env.device)
    resumed = ckpt.load(model, opt)
    batches = train_batches(data, r.model.seq_len, t.global_batch_size, seed)
    ev = eval_set(data, r.model.seq_len, r.data.eval_bytes, e.eval_samples, e.eval_documents)
    fpt = flops_per_token(unwrap(model).cfg)
    peak = device_peak(env.device, t.precision)

    hooks = benchmark_hooks(r)
    log.event(C.SEED, seed)
    log.event(C.GLOBAL_BATCH_SIZE, t.global_batch_size)
    log.event(C.MAX_SEQUENCE_LENGTH, r.model.seq_len)
    log.event(C.GRADIENT_ACCUMULATION_STEPS, accum)
    log.event(C.OPT_BASE_LR, t.lr)
    log.event(C.OPT_END_LR, t.end_lr)
    log.event(C.OPT_LR_WARMUP_STEPS, t.warmup_steps)
    log.event(C.OPT_LR_DECAY_STEPS, t.decay_steps)
    log.event(C.OPT_LR_DECAY_SCHEDULE, "cosine with linear warmup")
    hooks.log_optimizer(log)  # names and keys differ by ruleset (gpt3: "adam")
    log.event(C.OPT_GRADIENT_CLIP_NORM, t.grad_clip)
    # the schedule's length; a run cut short by --max-steps says so with status aborted
    log.event("max_steps", r.total_steps)
    log.event(C.EVAL_SAMPLES, ev.samples)
    log.event(C.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, "fp8" if t.fp8_linear else _precision_name(r))
    log.event(C.LOWEST_NUMERICAL_PRECISION_IN_ATTN, _precision_name(r))
    log.event(C.LOWEST_NUMERICAL_PRECISION_IN_COMM, comm_precision(r.parallel, env, t.precision))
    log.event(C.TENSOR_PARALLELISM, r.parallel.tp)
    log.event(C.PIPELINE_PARALLELISM, r.parallel.pp)
    log.event(C.CONTEXT_PARALLELISM, r.parallel.cp)
    log.event(C.EXPERT_PARALLELISM, 1)
    log.event(C.MICRO_BATCH_SIZE, micro)
    log.event(C.CONFIG_FILENAME, Path(r.source).name or "recipe.toml")
    log.event("world_size", env.world_size)
    log.event("parallel_layout", resolve_layout(r.parallel, env.world_size).to_dict())
    log.event("corpus_fingerprint", data.fingerprint)
    log.event("tokenizer", data.meta["tokenizer"])
    log.event("eval_metric", e.metric)
    log.event("target_accuracy", e.target)
    log.event("trainperf_version", trainperf.__version__)
    hooks.log_hyperparameters(log)

    metrics = open(out / "metrics.jsonl", "x", encoding="utf-8") if env.is_main else None

    def emit(row: dict) -> None:
        if metrics is not None:
            metrics.write(json.dumps(row) + "\n")
            metrics.flush()
        if opts.on_event is not None and env.is_main:
            opts.on_event(row)

    tokens_per_step = t.global_batch_size * r.model.seq_len
    steps_per_eval = max(1, math.ceil(e.every_samples / t.global_batch_size))
    clock = PhaseClock(env.device)
    times = {"eval": 0.0}
    if r.parallel.compile:
        warm_up_compiled(model, opt, ev, r, env, micro)
    env.barrier()
    log.end(C.INIT_STOP)
    log.start(C.RUN_START)
    t_start = time.perf_counter()
    step, status, last_eval, n_evals = resumed.step, C.ABORTED, float("nan"), resumed.n_evals
    loss_acc = torch.zeros((), device=env.device)
    t_log, steps_since_log = time.perf_counter(), 0
    emit({"kind": "start", "target": e.target, "metric": e.metric, "max_steps": max_steps,
          "flops_per_token": fpt, "peak_flops": peak.flops})
    try:
        while step < max_steps:
            log.start(C.BLOCK_START, samples_count=step * t.global_batch_size)
            # aligned to the eval cadence, so a resumed run evaluates at the same steps
            block_end = min((step // steps_per_eval + 1) * steps_per_eval, max_steps)
            while step < block_end:
                ckpt.before_step(step, model, opt, n_evals)
                lr = lr_at(step + t.init_checkpoint_step, r)  # a start checkpoint continues its schedule
                for g in opt.param_groups:
                    g["lr"] = lr
                clock.start()
                x, y = batches.get(step, dp_rank, dp_size, pin=env.device.type == "cuda")
                x, y = x.to(env.device, non_blocking=True), y.to(env.device, non_blocking=True)
                # fine-tuning samples score only some targets: each rank's loss is its sum over the
                # global batch's scored count (times dp, which gradient averaging divides out), so
                # the step's gradient is the token mean over the global batch for any layout
                n_scored = batches.scored_tokens(step)
                clock.lap("data")
                for m in range(accum):
                    xs, ys = x[m * micro:(m + 1) * micro], y[m * micro:(m + 1) * micro]
                    sync = accum == 1 or m == accum - 1
                    # one context around forward and backward (a no_sync() context cannot be entered twice)
                    with model.no_sync() if (not sync and hasattr(model, "no_sync")) else nullcontext():
                        with autocast_ctx(r, env.device):
                            losses = model(xs, ys)
                            if n_scored is None:
                                loss = losses.mean() / accum
                            else:
                                loss = losses.sum() * (dp_size / max(1, n_scored))
                        loss.backward()
                    loss_acc += loss.detach()
                clock.lap("fwd_bwd")
                if t.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
                clock.lap("optimizer")
                step += 1
                steps_since_log += 1
                if step % t.log_every == 0 or step == block_end:
                    # the mean over all data-parallel ranks; the one host sync per log interval
                    avg = float(env.all_reduce_sum(loss_acc.clone())) / steps_since_log / dp_size
                    clock.flush()  # the float() above synced the stream
                    if not math.isfinite(avg):
                        raise TrainError(f"training loss became {avg} at step {step}; lower train.lr or check the data")
                    now = time.perf_counter()
                    tps = steps_since_log * tokens_per_step / (now - t_log)
                    emit({"kind": "train", "step": step, "loss": avg, "lr": lr, "tokens_per_s": tps,
                          "mfu": tps * fpt / peak.flops / env.world_size, "elapsed_s": now - t_start})
                    loss_acc.zero_()
                    t_log, steps_since_log = now, 0
            samples = step * t.global_batch_size
            log.end(C.BLOCK_STOP, samples_count=samples)
            t0 = time.perf_counter()
            log.start(C.EVAL_START, samples_count=samples)
            npb, tok_loss = evaluate(model, ev, r, env, micro)
            log.end(C.EVAL_STOP, samples_count=samples)
            last_eval = npb if e.metric == "nats_per_byte" else tok_loss
            n_evals += 1
            if n_evals > e.skip_evals:
                log.event(C.EVAL_ACCURACY, last_eval, **hooks.eval_metadata(samples, step * tokens_per_step))
            times["eval"] += time.perf_counter() - t0
            t_log = time.perf_counter()  # eval time is not training throughput
            emit({"kind": "eval", "step": step, "samples": samples, "eval_loss": last_eval,
                  "nats_per_byte": npb, "token_loss": tok_loss, "elapsed_s": time.perf_counter() - t_start})
            if not math.isfinite(last_eval):
                raise TrainError(f"validation loss became {last_eval} at step {step}")
            if n_evals > e.skip_evals and last_eval <= e.target and hooks.stops_at_target:
                status = C.SUCCESS
                break
    except BaseException:
        log.end(C.RUN_STOP, samples_count=step * t.global_batch_size, status=C.ABORTED)
        if metrics is not None:
            metrics.close()
        raise
    log.end(C.RUN_STOP, samples_count=step * t.global_batch_size, status=status)
    elapsed = time.perf_counter() - t_start
    clock.flush(sync=True)
    times = {**clock.totals, **times}
    log.event(C.TRAIN_SAMPLES, step * t.global_batch_size)
    tokens = step * tokens_per_step
    # wall time between run_start and run_stop less evaluation: on a GPU the per-step timers only
    # see kernel launches (the queue drains at the log-interval sync), so their sum would flatter
    train_time = elapsed - times["eval"]
    tps = tokens / train_time if train_time > 0 else 0.0
    summary = Summary(
        benchmark=r.benchmark.name, status=status, time_to_train_s=elapsed, steps=step,
        samples=step * t.global_batch_size, tokens=tokens, tokens_per_s=tps,
        mfu=tps * fpt / (peak.flops * env.world_size), peak_flops=peak.flops, peak_source=peak.source,
        final_eval_loss=last_eval, target=e.target, metric=e.metric, seed=seed,
        device=_device_name(env.device), world_size=env.world_size, out=str(out), flops_per_token=fpt,
        params=n_params, evals=n_evals, corpus_fingerprint=data.fingerprint,
        time_breakdown_s={k: round(v, 3) for k, v in times.items()}, deviations=hooks.deviations(),
        **ckpt.summary_fields(),
    )
    ckpt.finish(step, model, opt, n_evals)
    summary.checkpoints = ckpt.summary_fields()["checkpoints"]
    summary.time_breakdown_s["checkpoint"] = round(ckpt.seconds, 3)
    t0 = time.perf_counter()
    save_final(model, r, out, env, data)
    if r.model.lora_rank > 0 and env.is_main:
        save_adapters(unwrap(model), out / "adapters.safetensors")
    summary.time_breakdown_s["save"] = round(time.perf_counter() - t0, 3)
    if env.is_main:
        if r.benchmark.rules == r.benchmark.name:
            render_rules(r.benchmark.name, e.target, out / "compliance.yaml")
        emit({"kind": "end", **summary.to_dict()})
        metrics.close()
        tmp = out / "summary.json.tmp"
        tmp.write_text(json.dumps(summary.to_dict(), indent=1))
        os.replace(tmp, out / "summary.json")
    return summary


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"
