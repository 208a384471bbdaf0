"""The parallel layout of one run, built once from the recipe and the world size.

`ParallelDims` is the single answer to "how is this run laid out": the mesh sizes (`dp_shard = -1`
resolved), this rank's coordinates, the data-parallel rank/size/group, the batch geometry per rank,
the strategy name and the lowest precision the collectives carry. Everything that needs the layout
takes this object; nothing re-derives it from the config.

The mesh is (pp, dp_replicate, dp_shard, cp, tp), row-major over the ranks, as torchtitan orders it:
the ranks of one tensor-parallel group are neighbours (on a GPU node they share NVLink), pipeline
stages are the outermost split. Process groups come from the mesh, never from `new_group`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainperf.config import ConfigError, ParallelConfig, Recipe, TrainConfig

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
# how context-parallel attention runs (parallel/context.py chooses per run), for the log and summary
CP_ALLGATHER, CP_RING = "allgather_kv", "ring"
MULTI_STAGE_SCHEDULES = {"interleaved_1f1b", "zero_bubble"}  # pipeline schedules with several stages per rank


# FSDP2 may keep a rank's whole gradients (fp32) between micro-batches when they take at most this
# share of the device; beyond it, reduce-scattering each micro-batch (as torchtitan does) costs
# accum - 1 extra reduce-scatters and keeps only the shards
UNSHARDED_GRAD_SHARE = 0.125


def unsharded_grads_fit(grad_bytes: float, device_bytes: float) -> bool:
    return grad_bytes <= UNSHARDED_GRAD_SHARE * device_bytes


def fsdp_applies(dp_replicate: int, dp_shard: int, tp: int, pp: int, cp: int) -> bool:
    """Whether the trainer shards parameters with FSDP2 (see `ParallelDims.fsdp`)."""
    dp = dp_replicate * dp_shard
    return dp_shard > 1 or cp > 1 or (dp > 1 and (tp > 1 or pp > 1))


def stage_layers(n_layer: int, n_stages: int) -> list[range]:
    """The layers of each pipeline stage: as even as the count allows, and where it does not, the
    first and the last stage (which also hold the embedding and the head) get one layer fewer."""
    base, extra = divmod(n_layer, n_stages)
    # the extra layers go to the middle stages, outwards from the centre
    order = sorted(range(n_stages), key=lambda s: (abs(s - (n_stages - 1) / 2), s))
    counts = [base + (1 if s in set(order[:extra]) else 0) for s in range(n_stages)]
    out, start = [], 0
    for c in counts:
        out.append(range(start, start + c))
        start += c
    return out


def check_pipeline(n_layer: int, pp: int, vpp: int, schedule: str, microbatches: int) -> None:
    """The pipeline's demands on the model and the batch, as one-line ConfigErrors."""
    if pp == 1:
        return
    stages = pp * vpp
    if n_layer < stages:
        raise ConfigError(f"parallel.pp: {n_layer} layers (model.n_layer) cannot fill pp*vpp = {pp}*{vpp} = "
                          f"{stages} stages")
    if vpp > 1 and schedule not in MULTI_STAGE_SCHEDULES:
        raise ConfigError(f"parallel.pp_schedule={schedule!r} runs one stage per rank; vpp={vpp} needs "
                          f"interleaved_1f1b or zero_bubble")
    if schedule == "1f1b" and microbatches < pp:
        raise ConfigError(f"parallel.pp_schedule='1f1b': the {microbatches} micro-batches per step (per-rank "
                          f"batch / train.micro_batch_size) cannot fill {pp} stages; lower train.micro_batch_size "
                          f"or use gpipe")
    rounds = max(1, microbatches // pp)
    if schedule in MULTI_STAGE_SCHEDULES and microbatches % rounds:
        raise ConfigError(f"parallel.pp_schedule={schedule!r}: the {microbatches} micro-batches per step must be "
                          f"a multiple of their {rounds} rounds of pp={pp}")


@dataclass(frozen=True)
class BatchGeometry:
    """How one optimizer step's global batch is split: per data-parallel rank, then in micro-batches."""

    global_batch: int
    per_rank: int
    micro: int

    @property
    def accum(self) -> int:
        return self.per_rank // self.micro


@dataclass
class ParallelDims:
    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int = 1
    cp: int = 1
    rank: int = 0
    pp_schedule: str = "1f1b"
    mesh: object = field(default=None, repr=False, compare=False)  # DeviceMesh once `build_mesh` ran
    tied_group: object = field(default=None, repr=False, compare=False)  # first + last pipeline stage
    # the flattened meshes as `_flatten` returned them: slicing a flattened name from the root mesh is
    # deprecated from torch 2.11 (a UserWarning on every run)
    flat: dict = field(default_factory=dict, repr=False, compare=False)
    cp_attention: str = field(default=CP_ALLGATHER, compare=False)  # set by parallel.context.apply_cp
    cp_attention_why: str | None = field(default=None, repr=False, compare=False)  # why not the ring

    # ---- construction

    @classmethod
    def from_config(cls, pcfg: ParallelConfig, world_size: int, rank: int = 0) -> "ParallelDims":
        """The layout for `world_size` processes, or a ConfigError naming the key that does not fit."""
        if pcfg.compile and pcfg.tp > 1:
            # measured on torch 2.13 CPU/gloo: compiled blocks with DTensor TP fail in backward
            # (NestedRedistribute receives a plain tensor); FSDP2 + compile + AC works and is bit-identical
            raise ConfigError("parallel.compile: not supported with parallel.tp > 1 yet (compiled tensor-parallel "
                              "blocks fail in backward on this torch); use compile with FSDP/DDP, or tp without compile")
        fixed = pcfg.dp_replicate * pcfg.tp * pcfg.pp * pcfg.cp
        if pcfg.dp_shard == -1:
            if world_size % fixed:
                raise ConfigError(f"parallel: {world_size} processes are not divisible by dp_replicate*tp*pp*cp = "
                                  f"{pcfg.dp_replicate}*{pcfg.tp}*{pcfg.pp}*{pcfg.cp}")
            shard = world_size // fixed
        else:
            shard = pcfg.dp_shard
            if fixed * shard != world_size:
                raise ConfigError(f"parallel: dp_replicate*dp_shard*tp*pp*cp = {fixed * shard} does not match the "
                                  f"{world_size} processes (set parallel.dp_shard=-1 to use the rest)")
        return cls(pcfg.dp_replicate, shard, pcfg.tp, pcfg.pp, pcfg.cp, rank=rank, pp_schedule=pcfg.pp_schedule)

    @classmethod
    def for_recipe(cls, r: Recipe, world_size: int, rank: int = 0) -> "ParallelDims":
        """The trainer's whole layout check for a recipe on `world_size` processes (the mesh, the batch
        split, what pipeline and context parallelism need of the model), before any process starts;
        a ConfigError names the key that does not fit."""
        dims = cls.from_config(r.parallel, world_size, rank)
        g = dims.batch(r.train)
        p = r.parallel
        check_pipeline(r.model.n_layer, p.pp, p.vpp, p.pp_schedule, g.accum)
        return dims

    def build_mesh(self, device_type: str) -> None:
        """Create the DeviceMesh (every rank must call it, once), with the flattened dimensions the
        layout needs: FSDP shards over dp_shard x cp, losses are summed over dp x cp. One process needs none."""
        if self.world_size == 1 or self.mesh is not None:
            return
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, self.mesh_shape, mesh_dim_names=MESH_DIMS)
        if self.cp > 1:
            self.flat["dp_shard_cp"] = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
        self.flat["loss"] = mesh["pp", "dp_replicate", "dp_shard", "cp"]._flatten("loss")
        self.mesh = mesh
        if self.pp > 1:
            self.tied_group = self._tied_group()

    def _tied_group(self):
        """The pair (first pipeline stage, last pipeline stage) of ranks at this rank's other
        coordinates: where a tied embedding and head meet. Every rank creates every pair, in order."""
        import torch.distributed as dist

        per = self.world_size // self.pp
        mine = None
        for rest in range(per):
            g = dist.new_group([rest, (self.pp - 1) * per + rest])
            if self.rank % per == rest:
                mine = g
        return mine

    # ---- sizes

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return (self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp)

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def fsdp(self) -> bool:
        """Parameters are sharded over the data-parallel (and context-parallel) ranks: FSDP2 / HSDP.
        With TP, FSDP2 also replaces DDP for plain replication, because DDP cannot hold DTensor
        parameters; with CP, the cp ranks hold the same weights and average their gradients like
        data-parallel peers, so FSDP2 shards over dp_shard x cp (as torchtitan does). Under a
        pipeline too: DDP's reducer cannot follow the schedule's backward per micro-batch (measured on
        torch 2.13: its first-iteration bucket rebuild counts each parameter once per micro-batch and
        stops the second step), while FSDP2 is told which backward is the last."""
        return fsdp_applies(self.dp_replicate, self.dp_shard, self.tp, self.pp, self.cp)

    @property
    def grad_ranks(self) -> int:
        """How many ranks average each gradient (the FSDP/DDP group): the data-parallel ranks times
        the context-parallel ones, each of which holds a share of every sequence."""
        return self.dp * self.cp

    @property
    def ddp(self) -> bool:
        return not self.fsdp and self.dp_replicate > 1

    @property
    def strategy(self) -> str:
        """A short name for logs: ddp, fsdp, hsdp, fsdp+cp, hsdp+tp, tp, ... or single."""
        parts = []
        if self.fsdp and self.dp * self.cp > 1:
            parts.append("hsdp" if self.dp_replicate > 1 else "fsdp")
        elif self.ddp:
            parts.append("ddp")
        if self.cp > 1:
            parts.append("cp")
        if self.tp > 1:
            parts.append("tp")
        if self.pp > 1:
            parts.append("pp")
        return "+".join(parts) or "single"

    def coords(self) -> dict[str, int]:
        """This rank's index along every mesh dimension (row-major, as the mesh lays ranks out)."""
        out, rest = {}, self.rank
        for name, size in zip(reversed(MESH_DIMS), reversed(self.mesh_shape)):
            out[name] = rest % size
            rest //= size
        return {name: out[name] for name in MESH_DIMS}

    # ---- data parallelism

    @property
    def dp_rank(self) -> int:
        c = self.coords()
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    @property
    def cp_rank(self) -> int:
        return self.coords()["cp"]

    @property
    def cp_group(self):
        return None if self.mesh is None or self.cp == 1 else self.mesh["cp"].get_group()

    @property
    def dp_mesh(self):
        """The sub-mesh FSDP2 shards over: dp_shard (x cp), and dp_replicate beside it for HSDP."""
        if self.mesh is None:
            return None
        if self.dp_replicate > 1:  # a 2-D slice; with cp it still names the flattened dimension
            return self.mesh["dp_replicate", "dp_shard_cp" if self.cp > 1 else "dp_shard"]
        return self.flat["dp_shard_cp"] if self.cp > 1 else self.mesh["dp_shard"]

    @property
    def loss_group(self):
        """The ranks whose losses add up to the global batch's: every data- and context-parallel rank
        and every pipeline stage (only the last holds losses) of one tensor-parallel position; None
        is the world."""
        if self.mesh is None or self.grad_ranks * self.pp == self.world_size:
            return None
        return self.flat["loss"].get_group()

    @property
    def pp_group(self):
        return None if self.mesh is None or self.pp == 1 else self.mesh["pp"].get_group()

    def batch(self, t: TrainConfig) -> BatchGeometry:
        """The per-rank batch and micro-batch of `t`, or a ConfigError naming the key that does not fit."""
        if t.global_batch_size % self.dp:
            raise ConfigError(f"train.global_batch_size={t.global_batch_size} is not divisible by the "
                              f"{self.dp} data-parallel ranks")
        per_rank = t.global_batch_size // self.dp
        micro = min(t.micro_batch_size, per_rank)
        if self.pp > 1 and self.pp_schedule == "1f1b" and per_rank // micro < self.pp <= per_rank:
            # 1F1B needs a micro-batch per stage: the micro-batch shrinks to the largest that gives
            # them (the same gradient; the log's micro_batch_size says what ran)
            micro = max(m for m in range(1, per_rank // self.pp + 1) if per_rank % m == 0)
        if per_rank % micro:
            raise ConfigError(f"train.micro_batch_size={micro} does not divide the {per_rank} sequences per rank")
        return BatchGeometry(t.global_batch_size, per_rank, micro)

    def comm_precision(self, precision: str) -> str:
        """The lowest precision any collective carries (an MLPerf 6.1 disclosure key)."""
        if precision == "bf16" and (self.dp_shard > 1 or self.tp > 1 or self.cp > 1):
            # FSDP2 all-gathers bf16 parameters (the mixed-precision policy); TP moves autocast's bf16
            # activations; CP all-gathers autocast's bf16 keys and values
            return "bfloat16"
        # one process has no collectives; DDP all-reduces the fp32 gradients; FSDP reduce-scatters in fp32
        return "fp32"

    def to_dict(self) -> dict:
        out = {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "dp": self.dp, "tp": self.tp,
               "pp": self.pp, "cp": self.cp, "world_size": self.world_size, "strategy": self.strategy}
        if self.cp > 1:
            out["cp_attention"] = self.cp_attention
        return out
