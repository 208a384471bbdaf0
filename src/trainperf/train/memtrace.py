"""The memory one rank of a layout holds, traced from the trainer's own code on fake tensors.

`trace_memory` builds this rank's model parts with the real `build_parts` (pipeline split,
`parallelize`: TP, AC, FSDP2, CP) on a fake process group of the run's world size (torch's "fake"
backend: collectives return at once, nothing is sent) under `FakeTensorMode` (tensors carry shapes,
dtypes and storages' sizes, no data), then runs the trainer's real step: `make_engine`'s
forward/backward over every micro-batch (with pp > 1 the stages' forwards and backwards in the
order torch's schedule gives this rank, `pipeline_step`), the optimizer step (its state made by a
first, untraced step, as every later step holds it), and one evaluation batch. `LiveBytes` counts every storage alive at each op, as the CUDA caching
allocator would hand them out (rounded up to its 512-byte blocks), and keeps the peak. It is
torch's `MemTracker` reduced to what gradient accumulation and pipeline schedules need: that tracker
refuses a module's second forward in one iteration, which both do.

What is counted: parameters, buffers, gradients, optimizer state, activations kept for backward,
FSDP2's all-gathered parameters and reduce-scatter buffers, the logits and the loss, temporaries.
What is not: the CUDA context and cuBLAS/NCCL workspaces, NCCL's own buffers, allocator
fragmentation, and FSDP2's prefetch of the next block on a separate CUDA stream (the trace runs on
one stream). The trace runs the CPU's kernels except where their saved tensors differ from CUDA's:
RMSNorm is traced as CUDA's fused kernel (`cuda_kernels`); attention goes through SDPA's fused
kernel on either device, which keeps its output and log-sum-exp as CUDA's flash kernel does; context
parallelism runs its all-gather attention (the CPU has no ring), whose causal mask the ring would not
hold; FP8 linears and compiled blocks are not traced (bf16, eager).

Fake tensors allocate nothing: the cost is per op, not per byte, so any world size and any width
trace alike; a deep model is traced at two shallow depths and extended (`trace_memory`).
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from dataclasses import dataclass, field

import torch

from trainperf.config import Recipe
from trainperf.parallel.dims import ParallelDims

BLOCK = 512  # the CUDA caching allocator's smallest block: every allocation rounds up to it
NOT_COUNTED = ("the CUDA context, cuBLAS and NCCL workspaces and NCCL's buffers, allocator fragmentation, "
               "FSDP2's prefetch of the next block on its own CUDA stream")


def _bytes(st: torch.UntypedStorage) -> int:
    return math.ceil(st.nbytes() / BLOCK) * BLOCK


class LiveBytes:
    """A dispatch mode that counts the bytes of every storage alive, and their peak.

    Storages made before it starts (the parameters, buffers) are counted with `add`; each new one when
    an op returns it, until it is freed (a weak reference's callback) or resized (FSDP2 frees an
    unsharded parameter by resizing its storage to 0, which no dispatch mode sees)."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self.now = 0
        self.peak = 0
        self.peak_at = ""
        self.phase = "init"
        self.paused = 0  # inside DTensor's shape propagation
        self._seen = WeakIdKeyDictionary()  # storage -> [bytes it holds now, its weak reference]

    def add(self, t: torch.Tensor) -> None:
        from torch.distributed._tools.common_utils import get_untyped_storages

        for st in get_untyped_storages(t):
            if st not in self._seen:
                box: list = [_bytes(st)]
                box.append(weakref.ref(st, lambda _, box=box: self._free(box)))
                self._seen[st] = box
                self.now += box[0]
        self._top()

    def _top(self) -> None:
        if self.now > self.peak:
            self.peak, self.peak_at = self.now, self.phase

    def _free(self, box: list) -> None:
        self.now -= box[0]
        box[0] = 0

    def _resized(self, st: torch.UntypedStorage) -> None:
        box = self._seen.get(st)
        if box is None:
            self.add(torch.tensor([], dtype=torch.uint8, device=st.device).set_(st))
            return
        n = _bytes(st)
        self.now += n - box[0]
        box[0] = n
        self._top()

    @contextlib.contextmanager
    def tracking(self):
        """Count, inside this context, what every op returns (under the fake mode active on entry)."""
        from torch._guards import active_fake_mode
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map_only

        tracker, fake = self, active_fake_mode()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if any(t is DTensor for t in types):
                    return NotImplemented  # DTensor lowers to local ops, which are the allocations
                if func is torch.ops._c10d_functional.wait_tensor.default and fake is not None:
                    res = args[0]  # the fake kernel returns a copy; a real wait returns its input
                else:
                    res = func(*args, **(kwargs or {}))
                # DTensor's sharding propagation runs ops under a fake mode of its own: no memory
                if active_fake_mode() is fake and not tracker.paused:
                    tree_map_only(torch.Tensor, tracker.add, res)
                return res

        orig = torch.UntypedStorage.resize_

        def resize_(st, size):
            orig(st, size)
            tracker._resized(st)

        # DTensor computes an op's output shape by running it on tensors of the whole (unsharded)
        # shape, under the fake mode it finds active, which is this one: those are not allocations
        prop = ShardingPropagator._propagate_tensor_meta_non_cached

        def propagate(*args, **kwargs):
            tracker.paused += 1
            try:
                return prop(*args, **kwargs)
            finally:
                tracker.paused -= 1

        torch.UntypedStorage.resize_ = resize_
        ShardingPropagator._propagate_tensor_meta_non_cached = propagate
        try:
            with Mode():
                yield self
        finally:
            torch.UntypedStorage.resize_ = orig
            ShardingPropagator._propagate_tensor_meta_non_cached = prop


@dataclass
class StageTrace:
    """The traced memory of one rank (the first of its pipeline stage: the others mirror it)."""

    pp_rank: int
    rank: int
    peak_bytes: int
    peak_at: str  # the phase of the step at the peak: forward/backward, optimizer or eval
    static_bytes: int  # parameters and buffers, as built
    resident_bytes: int  # what stays between steps: parameters, buffers, optimizer state
    seconds: float


@dataclass
class MemoryTrace:
    world: int
    precision: str
    grad_sync: str
    stages: list[StageTrace] = field(default_factory=list)
    not_counted: str = NOT_COUNTED
    depths: tuple[int, int] | None = None  # the layers per stage traced, where a deep model was extended

    @property
    def peak(self) -> StageTrace:
        return max(self.stages, key=lambda s: s.peak_bytes)


@contextlib.contextmanager
def fake_world(world: int, rank: int):
    """A process group of `world` ranks in which this process is `rank` and no collective moves data."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("trace_memory needs a process of its own: a process group is already running")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def real_meshes():
    """DeviceMesh computes sub-meshes' rank tables and this rank's coordinates with data-dependent ops
    (which a fake mode cannot run) whenever a sub-mesh is made or asked: those stay real tensors."""
    import functools

    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    def real(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with unset_fake_temporarily():
                return fn(*args, **kwargs)
        return inner

    saved = dict(DeviceMesh.__dict__)
    for name in ("__init__", "_get_mesh_tensor_from_full_mesh"):
        fn = saved.get(name)
        if isinstance(fn, staticmethod):
            setattr(DeviceMesh, name, staticmethod(real(fn.__func__)))
        elif callable(fn):
            setattr(DeviceMesh, name, real(fn))
    try:
        yield
    finally:
        for name in ("__init__", "_get_mesh_tensor_from_full_mesh"):
            if name in saved:
                setattr(DeviceMesh, name, saved[name])


class _FusedRMSNorm(torch.autograd.Function):
    """RMSNorm as CUDA runs it (torch's fused `_fused_rms_norm` kernel): the output in the input's
    dtype, the input and the fp32 reciprocal RMS per row saved for backward. The CPU's composite
    version would save fp32 copies of the input and the normalised input instead, which a GPU run
    does not hold. Shapes only: the trace computes nothing."""

    @staticmethod
    def forward(ctx, x, weight):
        rstd = torch.empty(x.shape[:-1] + (1,), dtype=torch.float32, device=x.device)
        ctx.save_for_backward(x, rstd, weight)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        x, _, weight = ctx.saved_tensors
        return torch.empty_like(x), None if weight is None else torch.empty_like(weight)


@contextlib.contextmanager
def cuda_kernels():
    """The kernels whose saved tensors differ between the CPU and CUDA, swapped for CUDA's shapes."""
    import torch.nn.functional as F

    orig = F.rms_norm

    def rms_norm(x, shape, weight=None, eps=None):
        return _FusedRMSNorm.apply(x, weight)

    F.rms_norm = rms_norm
    try:
        yield
    finally:
        F.rms_norm = orig


def trace_recipe(r: Recipe) -> Recipe:
    """The recipe as the trace runs it: "auto" precision is a GPU's answer (bf16), no weights to read."""
    import copy

    r = copy.deepcopy(r)
    if r.train.precision == "auto":
        r.train.precision = "bf16"
    r.train.init_checkpoint = ""
    r.parallel.compile = False  # compiled blocks hold the same tensors; tracing them under fake mode costs minutes
    r.train.fp8_linear = False  # traced as its bf16 autocast (torchao's FP8 casts are not traced)
    return r


def trace_stage(r: Recipe, world: int, rank: int, device_bytes: float | None, seed: int = 0,
                grad_mode: str | None = None) -> tuple[StageTrace, str]:
    """Build rank `rank`'s parts of `r` on a fake `world`-rank group and run one training step and one
    evaluation batch on fake tensors; its memory, and the gradient-sync mode the engine chose."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainperf.parallel.context import shard_sequence
    from trainperf.train.engine import make_engine
    from trainperf.train.optim import Optimizers
    from trainperf.train.trainer import build_parts

    t0 = time.perf_counter()
    device = torch.device("cpu")
    with fake_world(world, rank):
        dims = ParallelDims.from_config(r.parallel, world, rank)
        g = dims.batch(r.train)
        dims.build_mesh(device.type)  # outside the fake mode: the mesh's rank tables are real
        with real_meshes(), cuda_kernels(), FakeTensorMode(allow_non_fake_inputs=True):
            parts, _ = build_parts(r, dims, device, seed)
            engine = make_engine(parts, r, dims, device, g.accum, device_bytes=device_bytes, grad_mode=grad_mode)
            opt = Optimizers(parts, r, device)
            live = LiveBytes()
            for part in parts:
                for t in list(part.parameters()) + list(part.buffers()):
                    live.add(t)
            static = live.now
            x = torch.randint(0, r.model.vocab_size, (g.per_rank, r.model.seq_len))
            x = shard_sequence(x, dims)
            prime_optimizer(parts, opt, live)
            resident = traced_step(engine, opt, parts, x, r, dims, g, live)
            mode = engine.grad_sync_mode
    st = StageTrace(dims.coords()["pp"], rank, live.peak, live.peak_at, static, resident,
                    round(time.perf_counter() - t0, 2))
    return st, mode


def prime_optimizer(parts, opt, live: LiveBytes) -> None:
    """The optimizer's state as every step after the first holds it: AdamW makes its moments at its
    first step (on zero gradients here, outside the trace)."""
    for part in parts:
        for p in part.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    for st in opt_states(opt):
        live.add(st)


def traced_step(engine, opt, parts, x: torch.Tensor, r: Recipe, dims: ParallelDims, g, live: LiveBytes) -> int:
    """One training step and one evaluation batch under `live`'s tracking; the bytes resident after
    the optimizer step."""
    with live.tracking():
        live.phase = "forward/backward"
        if dims.pp > 1:
            pipeline_step(engine, x, r, dims, g.micro)
        else:
            engine.forward_backward(x, x, None, g.accum)
        live.phase = "optimizer"
        if r.train.grad_clip > 0 and dims.pp == 1:  # the pipeline's clip reads its norm on the host
            engine.clip_grad_norm(r.train.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        resident = live.now
        live.phase = "eval"
        for part in parts:
            part.eval()
        with torch.no_grad():
            if dims.pp > 1:
                pipeline_eval(engine, x[:g.micro], r, dims)
            else:
                engine.eval_losses(x[:g.micro], x[:g.micro])
    return resident


def opt_states(opt) -> list[torch.Tensor]:
    return [t for part in opt.opts for o in part for state in o.state.values() for t in state.values()
            if isinstance(t, torch.Tensor)]


def _hidden(r: Recipe, dims: ParallelDims, micro: int) -> torch.Tensor:
    """What a stage receives from the one before: (micro, T, D) hidden states, sequence-sharded over
    cp and (sequence parallel) tp; bf16 where FSDP2 computes in bf16, else autocast's fp32 residual."""
    t = r.model.seq_len // dims.cp // dims.tp
    dtype = torch.bfloat16 if r.train.precision == "bf16" and dims.fsdp else torch.float32
    return torch.randn(micro, t, r.model.d_model, dtype=dtype)


def pipeline_step(engine, x: torch.Tensor, r: Recipe, dims: ParallelDims, micro: int) -> None:
    """This rank's part of one pipeline step, in the order its schedule gives (torch's own action
    list for this rank), with the stages' own backward and gradient reduction. The fake group moves
    no data, so each stage's inputs from its neighbour are fake hidden states of the right shape
    (torch's schedule would first ask the neighbours for the shapes)."""
    from trainperf.parallel.context import step_context
    from trainperf.train.optim import autocast_ctx

    pipe = engine.pipe
    order = pipe.schedule.pipeline_order[dims.coords()["pp"]]
    loss_fn = pipe.schedule._loss_fn
    engine._scored["n"] = None
    stages = {st.stage_index: st for st in pipe.stages}
    live: dict = {s: [] for s in stages}  # per stage, its micro-batches in flight, oldest first
    accum = x.shape[0] // micro
    for a in order:
        if a is None:
            continue
        # backward takes a stage's oldest forward in flight (every schedule's order), so the list's
        # numbering of the micro-batches (one off on 1F1B's later ranks in torch 2.13) does not matter
        kind, s, m = a.computation_type.value, a.stage_index, (a.microbatch_index or 0) % accum
        stage = stages.get(s)
        if kind == "F":
            xs = x[m * micro:(m + 1) * micro] if s == 0 else _hidden(r, dims, micro).requires_grad_()
            with autocast_ctx(r, engine.device), step_context(dims, r.model.seq_len, engine.device):
                out = stage.submod(xs)
                if s == pipe.n_stages - 1:
                    out = loss_fn(out, x[m * micro:(m + 1) * micro])
            live[s].append((xs, out))
        elif kind in ("B", "I"):  # zero-bubble's weight half (W) runs with its input half here
            xs, out = live[s].pop(0)
            grads = None if s == pipe.n_stages - 1 else torch.ones_like(out)
            inputs = [xs] if xs.requires_grad else []
            with step_context(dims, r.model.seq_len, engine.device):  # the loss's backward under loss_parallel
                stage.backward_maybe_with_nosync("full", {"stage_output": out, "output_grads": grads,
                                                          "input_values": inputs})
        elif kind == "REDUCE_GRAD":
            stage.perform_reduce_grad(1)
    if not any(a is not None and a.computation_type.value == "REDUCE_GRAD" for a in order):
        for stage in pipe.stages:
            stage.perform_reduce_grad(1)


def pipeline_eval(engine, x: torch.Tensor, r: Recipe, dims: ParallelDims) -> None:
    """The forward of one evaluation batch through this rank's stages (no gradients kept)."""
    from trainperf.parallel.context import step_context
    from trainperf.train.optim import autocast_ctx

    pipe = engine.pipe
    for stage in pipe.stages:
        s = stage.stage_index
        with autocast_ctx(r, engine.device), step_context(dims, r.model.seq_len, engine.device):
            out = stage.submod(x if s == 0 else _hidden(r, dims, x.shape[0]), x if s == pipe.n_stages - 1 else None)
        del out


def _in_children(calls: list[tuple]) -> list:
    """fn(*args) for each (fn, *args) in a forked process of its own (a process group is made once per
    process: each traced rank gets its own), as many at once as the machine has cores; their
    results in order, or the first one's exception raised here."""
    import multiprocessing as mp
    import os

    ctx = mp.get_context("fork")
    results: list = [None] * len(calls)
    width = max(1, min(len(calls), os.cpu_count() or 1))

    def start(i: int):
        fn, *args = calls[i]
        recv, send = ctx.Pipe(duplex=False)

        def run() -> None:
            try:
                send.send((True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 - carried to the parent, raised there
                send.send((False, e))

        p = ctx.Process(target=run)
        p.start()
        send.close()
        return i, p, recv

    todo, running = list(range(len(calls))), []
    while todo or running:
        while todo and len(running) < width:
            running.append(start(todo.pop(0)))
        i, p, recv = running.pop(0)
        try:
            ok, value = recv.recv()
        except EOFError:
            ok, value = False, RuntimeError(f"the memory trace's process ended with exit code {p.exitcode}")
        p.join()
        if not ok:
            for _, q, _ in running:
                q.terminate()
                q.join()
            raise value
        results[i] = value
    return results


DEPTHS = (3, 4)  # layers per (virtual) stage of the two shallow traces a deep model is extended from


def traced_pp_ranks(r: Recipe, dims: ParallelDims) -> list[int]:
    """The pipeline ranks worth tracing: the first (embedding, the most micro-batches in flight), the
    last (head and loss), and of the others the one the planner finds busiest (layers x micro-batches
    in flight); the rest hold no more than it."""
    from trainperf.plan.stack_memory import in_flight, stage_layer_counts

    pp = dims.pp
    if pp <= 3:
        return list(range(pp))
    layers = stage_layer_counts(r.model.n_layer, pp, r.parallel.vpp)
    accum = dims.batch(r.train).accum
    mid = max(range(1, pp - 1), key=lambda p: layers[p] * in_flight(r.parallel.pp_schedule, pp, r.parallel.vpp, p, accum))
    return [0, mid, pp - 1]


def _grad_mode(r: Recipe, dims: ParallelDims, device_bytes: float | None, pp_rank: int) -> str | None:
    """How the full-depth rank would accumulate gradients (a shallow trace's fewer parameters must not
    decide it): parallel.apply's rule on this rank's parts of the whole model, built on the meta device."""
    from trainperf.model.transformer import Transformer
    from trainperf.parallel.apply import ACCUM_LOCAL, ACCUM_REDUCE_EACH, ACCUM_UNSHARDED
    from trainperf.parallel.dims import unsharded_grads_fit
    from trainperf.parallel.pipeline import split_stage

    if device_bytes is None or dims.ddp:
        return None
    if not dims.fsdp or dims.batch(r.train).accum == 1:
        return ACCUM_LOCAL
    with torch.device("meta"):
        model = Transformer(r.model)
    parts = [model]
    if dims.pp > 1:
        n = dims.pp * r.parallel.vpp
        parts = [split_stage(model, s, n) for s in range(pp_rank, n, dims.pp)]
    grads = sum(4 * p.numel() for part in parts for p in part.parameters() if p.requires_grad)
    if dims.pp > 1:  # the pipeline keeps the gathered parameters too
        grads += sum(2 * p.numel() for part in parts for p in part.parameters())
    return ACCUM_UNSHARDED if unsharded_grads_fit(grads // dims.tp, device_bytes) else ACCUM_REDUCE_EACH


def trace_memory(r: Recipe, world: int, device_bytes: float | None = None, seed: int = 0,
                 exact: bool = False) -> MemoryTrace:
    """The traced memory of the pipeline ranks `traced_pp_ranks` picks (the first rank of each: the
    ranks of one stage hold the same shapes, tp, cp and FSDP shards being even or a row apart), each
    traced in a process of its own (as many at once as there are cores).

    A model deeper than DEPTHS[-1] layers per (virtual) stage is traced at DEPTHS[0] and DEPTHS[1]
    layers per stage, unless `exact`, and each rank's peak extended linearly to its own layers: the
    blocks are identical, so from 3 layers per stage on every term grows by the same bytes per block
    (measured on GPT-3's first pipeline rank, tp 4, pp 8: 11.44, 13.67 and 18.14 GB at 3, 4 and 6
    layers per stage; at 2 the last block's and the prefetched block's buffers still differ:
    8.40 GB). Tests check the extension against a full trace."""
    import copy

    r = trace_recipe(r)
    dims = ParallelDims.for_recipe(r, world)
    per = world // dims.pp
    n_chunks = dims.pp * r.parallel.vpp
    pp_ranks = traced_pp_ranks(r, dims)
    deep = not exact and r.model.n_layer > DEPTHS[-1] * n_chunks
    depths = DEPTHS if deep else (None,)
    keys, calls = [], []
    for k in depths:
        rk = r
        if k is not None:
            rk = copy.deepcopy(r)
            rk.model.n_layer = k * n_chunks
        for p in pp_ranks:
            keys.append((k, p))
            calls.append((trace_stage, rk, world, p * per, device_bytes, seed, _grad_mode(r, dims, device_bytes, p)))
    runs = dict(zip(keys, _in_children(calls)))
    out = MemoryTrace(world, r.train.precision, runs[depths[0], 0][1])
    out.depths = None if not deep else DEPTHS
    if not deep:
        out.stages = [runs[None, p][0] for p in pp_ranks]
        return out
    from trainperf.plan.stack_memory import stage_layer_counts

    layers = stage_layer_counts(r.model.n_layer, dims.pp, r.parallel.vpp)
    a, b = DEPTHS
    for p in pp_ranks:
        s2, s3 = runs[a, p][0], runs[b, p][0]
        x = (layers[p] / r.parallel.vpp - a) / (b - a)

        def ext(f: str) -> int:
            return round(getattr(s2, f) + (getattr(s3, f) - getattr(s2, f)) * x)

        out.stages.append(StageTrace(p, p * per, ext("peak_bytes"), s3.peak_at, ext("static_bytes"),
                                     ext("resident_bytes"), round(s2.seconds + s3.seconds, 2)))
    return out

