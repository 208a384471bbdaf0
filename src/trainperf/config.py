"""Recipes: typed dataclasses loaded from TOML, with `--set a.b=value` overrides and validation.

Every error is a `ConfigError` whose message names the offending key, so the CLI can print one line
and exit 2. Recipes are plain data; nothing here is evaluated or executed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trainperf
from trainperf.data.indexed import parse_blend
from trainperf.errors import ConfigError, DataError
from trainperf.layout import PRECISIONS, parse_layout, ranks
from trainperf.rules import rules_for


@dataclass
class BenchmarkConfig:
    name: str = "tiny"
    # MLPerf training ruleset the log is written for (and checked against).
    ruleset: str = "6.1.0"
    # "tiny" -> our own compliance YAML; otherwise the official closed rules of `name`.
    rules: str = "tiny"
    # Runs per scored result (MLPerf uses 10 for the small LLM benchmarks, 3 for the big ones).
    runs_per_result: int = 5


@dataclass
class ModelConfig:
    family: Literal["llama", "gpt"] = "llama"  # llama: RoPE, RMSNorm, SwiGLU, GQA; gpt: learned pos, LayerNorm, GELU
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    n_kv_head: int = 0  # 0 -> same as n_head (multi-head attention)
    # each head's width; 0 -> d_model / n_head. Qwen 3 (0.6B: 16 heads of 128 on d_model 1024) and
    # Mistral NeMo (32 of 128 on 5120) set it apart, so q and the attention output are n_head * head_size wide
    head_size: int = 0
    d_ff: int = 0  # 0 -> family default (4*d for gpt, ~8/3*d rounded to `ff_multiple_of` for llama)
    ff_multiple_of: int = 64
    vocab_size: int = 0  # 0 -> taken from the tokenizer
    seq_len: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # Llama 3.1's RoPE frequency scaling ("llama3" in HF configs); 0 = none. Long wavelengths are
    # divided by the factor, short ones kept, the band between interpolated.
    rope_scaling_factor: float = 0.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_context: int = 8192
    tie_embeddings: bool = True
    bias: bool = False
    # Architecture levers within the family (each off by default; Hugging Face export refuses the
    # ones LlamaForCausalLM, Qwen3ForCausalLM (llama + qk_norm) or GPT2LMHeadModel cannot compute):
    # the MLP's activation: "auto" is the family's (llama: SwiGLU, gpt: GELU); "relu2" is ReLU
    # squared without a gate (Primer, So et al. 2021; modded-nanogpt), d_ff 4*d by default
    mlp_act: Literal["auto", "swiglu", "gelu", "relu2"] = "auto"
    qk_norm: bool = False  # RMSNorm on each head's queries and keys before RoPE (OLMo 2, Qwen 3)
    logit_softcap: float = 0.0  # >0: logits = cap * tanh(logits / cap) (Gemma 2)
    # memory, not architecture (the losses are the same): the most one micro-batch's loss may hold
    # before the head and the loss run in chunks of tokens (model/loss.py); 0: never in chunks
    loss_chunk_bytes: int = 1 << 30
    zero_init_head: bool = False  # the output head starts at zero (needs tie_embeddings = false)
    lora_rank: int = 0  # >0: LoRA adapters on `lora_targets`, base weights frozen
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0  # dropout on the adapter's input (training only)
    # the projections that get adapters (w3 exists in llama only)
    lora_targets: list[Literal["wq", "wk", "wv", "wo", "w1", "w2", "w3"]] = field(
        default_factory=lambda: ["wq", "wk", "wv", "wo"])

    @property
    def activation(self) -> str:
        if self.mlp_act != "auto":
            return self.mlp_act
        return "gelu" if self.family == "gpt" else "swiglu"

    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.n_head

    @property
    def ff_dim(self) -> int:
        if self.d_ff:
            return self.d_ff
        if not self.gated:
            return 4 * self.d_model
        hidden = int(2 * (4 * self.d_model) / 3)
        m = self.ff_multiple_of
        return m * ((hidden + m - 1) // m)


@dataclass
class DataConfig:
    # "stdlib"; a local .txt/.jsonl/.parquet file or folder (tokenized once into the cache); or token
    # data read as it is: a folder `trainperf data prepare` wrote, a Megatron .bin/.idx prefix, a
    # folder of prefixes, or a Megatron blend "w1 prefix1 w2 prefix2"
    corpus: str = "stdlib"
    # "byte", "bpe" (trained on the train split), a Hugging Face tokenizer.json or a SentencePiece
    # .model; for a Megatron prefix (which carries none) the tokenizer its tokens came from
    tokenizer: str = "bpe"
    bpe_vocab_size: int = 4096
    eval_bytes: int = 262144  # held-out text evaluated each time (a fixed prefix of the validation split)
    cache_dir: str = ""  # "" -> $TRAINPERF_CACHE or ~/.cache/trainperf
    synthetic: bool = False  # smoke runs: a small random corpus, no files needed
    # "tokens": a text stream sampled in windows; "samples": fine-tuning rows scored only where their
    # labels say (LoRA on GovReport: the summary), from `input_ids`/`labels` or `input`/`output` rows
    kind: Literal["tokens", "samples"] = "tokens"
    # a separate validation file or folder, or Megatron prefix (the MLPerf benchmarks evaluate on a
    # fixed file); "" -> hold out documents by a hash of their id (of their index, for a prefix)
    val: str = ""
    # a token put after every document (e.g. "<|end_of_text|>"), as the MLPerf references' data has
    eod: str = ""
    # how training draws token windows: "random" offsets per (seed, step), or "gpt", Megatron's
    # GPT dataset (documents shuffled with the seed, packed into seq_len + 1 windows, each token
    # once per epoch), as the MLPerf references sample
    sampler: Literal["random", "gpt"] = "random"


@dataclass
class TrainConfig:
    global_batch_size: int = 16  # sequences per optimizer step, for any world size
    micro_batch_size: int = 16  # sequences per forward/backward on one rank
    lr: float = 3e-3
    end_lr: float = 3e-4
    warmup_steps: int = 50
    decay_steps: int = 1000  # from lr to end_lr over this many steps after warm-up (see schedule)
    # "cosine": cosine from lr to end_lr over decay_steps; "wsd": warm-up, stable at lr, then linear
    # to end_lr over the last `cooldown` fraction of decay_steps (MiniCPM's warm-up-stable-decay)
    schedule: Literal["cosine", "wsd"] = "cosine"
    cooldown: float = 0.5
    max_steps: int = 0  # 0 -> warmup + decay; training stops at the target or here (aborted)
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    # bf16: autocast; "auto": bf16 on a CUDA device, and on a CPU whichever of fp32 and bf16 ran the
    # model's training step faster when timed during init (untimed, on random tokens)
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    fp8_linear: bool = False  # the blocks' linear layers in FP8 (torchao Float8Linear; Hopper and newer)
    # "muon": torch.optim.Muon for the blocks' weight matrices, AdamW (the settings above) for the
    # embedding, head, norms and biases, as modded-nanogpt trains; "adamw": AdamW for everything
    optimizer: Literal["adamw", "muon"] = "adamw"
    muon_lr: float = 0.0  # 0 -> train.lr; the update's RMS is matched to AdamW's (match_rms_adamw)
    muon_momentum: float = 0.95
    # Newton-Schulz iterations per Muon step (torch's and modded-nanogpt's 5): the optimizer's cost is
    # 5 x 2(2m^2 n + m^3) FLOPs per m x n matrix whatever the batch, so at small batches it is a large
    # share of the step
    muon_ns_steps: int = 5
    # One (a, b, c) per Newton-Schulz iteration, flat (a1, b1, c1, a2, b2, c2, ...), 3 x muon_ns_steps
    # numbers; empty: torch's (3.4445, -4.7750, 2.0315) every iteration. Tuned per-iteration
    # coefficients reach further in fewer iterations (bench/ns_coefficients.py derives them)
    muon_ns_coefficients: list[float] = field(default_factory=list)
    # What the momentum is divided by before Newton-Schulz: its Frobenius norm (torch's) or its
    # Schatten-8 norm (sum sigma^8)^(1/8), also >= the largest singular value and tighter where one
    # direction dominates, so fewer iterations reach as far (train.muon.newton_schulz)
    muon_ns_norm: Literal["frobenius", "schatten8"] = "frobenius"
    # Orthogonalise each attention head's block of wq, wk, wv (its rows) and wo (its columns) on its
    # own, as independent matrices, rather than the whole projection: heads are separate subspaces
    # the attention never mixes before wo, and n_head blocks of head_dim rows cost 1/n_head^2 of the
    # whole's Newton-Schulz products (bench/results/tiny_records_2026-12-06_to_07.md)
    muon_per_head: bool = False
    # Orthogonalise a gated MLP's gate and up projections (w1, w3) as one matrix, rows stacked: the
    # fused gate/up weight that Megatron's linear_fc1 is. Both read the same input, so the joint
    # update is Muon's for that fused weight; its Gram form takes one d_model^2 iteration where the
    # two matrices took two (bench/results/tiny_records_2026-12-06_to_07.md)
    muon_joint_gate_up: bool = False
    fused: Literal["auto", "fused", "foreach", "for-loop"] = "auto"  # the AdamW implementation
    log_every: int = 10
    seed: int = 0
    # Start from these weights (a .safetensors file or a run dir holding model.safetensors); a LoRA
    # recipe loads them as its frozen base. init_checkpoint_step = optimizer steps the checkpoint
    # already stands for: the LR schedule continues from there (MLPerf gpt3 starts at step > 0).
    init_checkpoint: str = ""
    init_checkpoint_step: int = 0


@dataclass
class EvalConfig:
    every_samples: int = 4096  # evaluate after this many training sequences
    target: float = 1.45
    metric: Literal["nats_per_byte", "log_perplexity"] = "nats_per_byte"  # log_perplexity: mean token loss, the MLPerf LLM metric
    eval_samples: int = 0  # sequences evaluated (0 -> as many as `data.eval_bytes` gives)
    # >0: evaluate the whole validation split, which must hold exactly this many documents, and log
    # that count as eval_samples (GPT-3: the reference's 24,567-document C4 subset, ~11.6M tokens)
    eval_documents: int = 0
    skip_evals: int = 0  # evals skipped at the start (MLPerf LoRA / 405b rules)


@dataclass
class ParallelConfig:
    dp_replicate: int = 1
    dp_shard: int = -1  # -1 -> whatever is left of the world size
    tp: int = 1
    pp: int = 1  # pipeline stages (ranks); the layers split evenly over pp * vpp stage modules
    vpp: int = 1  # virtual stages per pipeline rank (interleaved schedules)
    pp_schedule: Literal["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"] = "1f1b"
    cp: int = 1  # context parallel: the sequence split over cp ranks, two chunks each (causal balance)
    activation_checkpoint: Literal["none", "selective", "full"] = "none"
    compile: bool = False


@dataclass
class CheckpointConfig:
    every_steps: int = 0  # 0 -> no checkpoints; N -> a distributed checkpoint every N steps and at the end
    keep: int = 3  # committed checkpoints kept (the oldest are deleted)
    dir: str = ""  # "" -> <run dir>/checkpoints (must be on a filesystem every node sees)


@dataclass
class SmokeConfig:
    """`trainperf run BENCH --smoke`: the benchmark's control flow shrunk to run in seconds on a CPU."""

    overrides: list[str] = field(default_factory=list)  # section.key=value applied before any --set
    evals: int = 3  # logged evals before the run stops (aborted)
    init_steps: int = 0  # >0: first train its own start checkpoint for this many steps
    enabled: bool = False  # set by --smoke only


@dataclass
class SubmittedLayout:
    """A layout a published system ran, from a recipe's `[layouts.NAME]` table; `trainperf run BENCH
    --dry-run --layout NAME` checks and prices it. Not a run setting: runs take `--layout` or [parallel]."""

    layout: str = ""  # trainperf.layout's grammar: tp=,pp=,vpp=,cp=,dp=,mbs=,gbs=
    gpus: int = 0  # the system's GPU count (the world size the layout is for)
    gpu: str = ""  # the planner's GPU kind (h100, h200, gb200, ...)
    precision: str = ""  # the matmul format it ran (bf16, fp8, fp4), for the planner's estimate
    system: str = ""  # round, submitter and system as published
    source: str = ""  # where the layout is stated (the submission's own config file)


@dataclass
class Recipe:
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    smoke: SmokeConfig = field(default_factory=SmokeConfig)
    layouts: dict[str, SubmittedLayout] = field(default_factory=dict)  # [layouts.NAME] tables
    source: str = ""  # file the recipe came from

    @property
    def total_steps(self) -> int:
        return self.train.max_steps or (self.train.warmup_steps + self.train.decay_steps)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        d.pop("layouts")  # what others ran, not a setting of this run
        return d


# --------------------------------------------------------------------------------------------------
# loading


def recipes_dir() -> Path:
    """Where recipes live: inside the wheel (`_recipes`) or, for a source checkout, `recipes/`."""
    pkg = Path(trainperf.__file__).parent
    for cand in (pkg / "_recipes", pkg.parents[1] / "recipes"):
        if cand.is_dir():
            return cand
    raise ConfigError("recipes: no recipes folder found next to the package")


def list_recipes() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.toml"))


def _resolve(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise ConfigError(f"recipe: file {name_or_path} not found")
        return p
    cand = recipes_dir() / f"{name_or_path}.toml"
    if not cand.is_file():
        raise ConfigError(f"recipe: unknown benchmark '{name_or_path}' (known: {', '.join(list_recipes())})")
    return cand


def _check_choice(key: str, value: Any, typ: Any) -> None:
    """A `Literal[...]` field (or a list of one) holds only the values its type names."""
    origin = typing.get_origin(typ)
    if origin is list:
        for v in value if isinstance(value, list) else [value]:
            _check_choice(key, v, typing.get_args(typ)[0])
    elif origin is Literal:
        allowed = [repr(a) for a in typing.get_args(typ)]
        if value not in typing.get_args(typ):
            names = allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"
            raise ConfigError(f"{key}: must be {names}, got {value!r}")


def _coerce(key: str, value: Any, typ: Any) -> Any:
    """Convert a TOML or command-line value to the field's type, or raise naming the key."""
    origin = typing.get_origin(typ)
    if origin is Literal:
        _check_choice(key, value, typ)
        return value
    if origin is list:
        (inner,) = typing.get_args(typ)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(key, v, inner) for v in value]
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if typ is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if typ is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        number = None
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        # TOML and float() both read inf and nan; no recipe value means either (lr=inf trained to a
        # nan loss, grad_clip=inf and eval.target=inf ran as if meaningful)
        if not math.isfinite(number):
            raise ConfigError(f"{key}: must be a finite number, got {value!r}")
        return number
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported type {typ}")  # pragma: no cover - schema bug


@functools.cache
def _section_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # evaluates the annotations: once per class, not per validate()


_SECTIONS = {f.name: f for f in dataclasses.fields(Recipe) if f.name not in ("source", "layouts")}


def _layouts(table: Any) -> dict[str, SubmittedLayout]:
    """A recipe's `[layouts.NAME]` tables: known keys, the layout in the grammar, its GPU count
    matching tp*pp*cp*dp, and a source."""
    if not isinstance(table, dict):
        raise ConfigError("layouts: expected [layouts.NAME] tables")
    types = _section_types(SubmittedLayout)
    out = {}
    for name, t in table.items():
        if not isinstance(t, dict):
            raise ConfigError(f"layouts.{name}: expected a [layouts.{name}] table")
        entry = SubmittedLayout()
        for key, value in t.items():
            if key not in types:
                raise ConfigError(f"layouts.{name}.{key}: unknown key (known: {', '.join(types)})")
            setattr(entry, key, _coerce(f"layouts.{name}.{key}", value, types[key]))
        spec = parse_layout(entry.layout, what=f"layouts.{name}.layout")
        _check(entry.gpus >= 1, f"layouts.{name}.gpus", "must be >= 1")
        _check(bool(entry.source), f"layouts.{name}.source", "must say where the layout is published")
        _check(entry.precision in ("",) + PRECISIONS, f"layouts.{name}.precision",
               f"must be one of {', '.join(PRECISIONS)}, got {entry.precision!r}")
        n = ranks(spec)
        _check(n in (None, entry.gpus), f"layouts.{name}.layout", f"tp*pp*cp*dp = {n}, not its gpus = {entry.gpus}")
        out[name] = entry
    return out


def _apply(recipe: Recipe, section: str, key: str, value: Any) -> None:
    if section not in _SECTIONS:
        raise ConfigError(f"{section}: unknown section (known: {', '.join(_SECTIONS)})")
    obj = getattr(recipe, section)
    types = _section_types(type(obj))
    if key not in types:
        raise ConfigError(f"{section}.{key}: unknown key (known: {', '.join(types)})")
    setattr(obj, key, _coerce(f"{section}.{key}", value, types[key]))


def _parse_override(text: str) -> tuple[str, str, str]:
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected section.key=value")
    path, value = text.split("=", 1)
    if path.count(".") != 1:
        raise ConfigError(f"{path}: expected section.key")
    section, key = path.strip().split(".")
    return section, key, value.strip()


def _derive_from_rules(r: Recipe, pinned: set[tuple[str, str]]) -> None:
    """A smoke recipe states its GBS; the benchmark's rules (trainperf/rules/mlperf.toml) give the
    LR, warm-up, decay, end LR and skipped evaluations at that GBS, unless the smoke section pins one."""
    rules = rules_for(r.benchmark.rules)
    if rules is None:
        return
    t = r.train
    for path, value in rules.derived(t.global_batch_size, lr=t.lr, warmup=t.warmup_steps).items():
        section, key = path.split(".")
        now = getattr(getattr(r, section), key)
        if isinstance(value, float) and math.isclose(now, value, rel_tol=1e-12):
            continue  # 0.1 x 2e-5 is 2.0000000000000003e-06: keep the recipe's exact decimal
        if (section, key) not in pinned:
            setattr(getattr(r, section), key, value)


def model_config(table: dict) -> ModelConfig:
    """A [model] table on its own (a run's saved `trainperf_model`) as a ModelConfig held to a
    recipe's rules (types, choices, sizes); ConfigError naming the `model.` key otherwise."""
    recipe = Recipe()
    for key, value in table.items():
        _apply(recipe, "model", key, value)
    validate(recipe)  # the other sections are the defaults, valid: what fails is the model
    return recipe.model


def load_recipe(name_or_path: str = "tiny", overrides: list[str] | None = None, smoke: bool = False) -> Recipe:
    """Load a recipe by benchmark name or path, apply `section.key=value` overrides, validate it.

    With `smoke`, the recipe's own `[smoke] overrides` are applied first (the user's come after)."""
    path = _resolve(name_or_path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"recipe {path}: not valid TOML ({e})") from None
    if not raw:  # every default is tiny's: an empty file would silently run (or plan) tiny
        raise ConfigError(f"recipe {path}: empty; a recipe states at least its [model] (recipes/tiny.toml shows every section)")
    recipe = Recipe(source=str(path))
    recipe.layouts = _layouts(raw.pop("layouts", {}))
    for section, table in raw.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{section}: expected a [section] table")
        for key, value in table.items():
            _apply(recipe, section, key, value)
    if recipe.smoke.enabled:
        raise ConfigError("smoke.enabled: set by `trainperf run --smoke`, not by the recipe")
    smoke_recipe = dataclasses.replace(recipe, smoke=dataclasses.replace(recipe.smoke))
    for section in ("benchmark", "model", "data", "train", "eval", "parallel"):
        setattr(smoke_recipe, section, dataclasses.replace(getattr(recipe, section)))
    for text in recipe.smoke.overrides:  # checked even without --smoke, so a broken recipe fails early
        section, key, value = _parse_override(text)
        if section == "smoke":
            raise ConfigError(f"smoke.overrides: {text!r} cannot change the smoke section itself")
        _apply(smoke_recipe, section, key, value)
    _derive_from_rules(smoke_recipe, pinned={_parse_override(t)[:2] for t in recipe.smoke.overrides})
    if smoke:
        recipe = smoke_recipe
        recipe.smoke.enabled = True
    for text in overrides or []:
        section, key, value = _parse_override(text)
        if (section, key) == ("smoke", "enabled"):
            raise ConfigError("smoke.enabled: use `trainperf run --smoke`")
        _apply(recipe, section, key, value)
    user = {_parse_override(t)[:2] for t in overrides or []}
    if recipe.data.synthetic and ("data", "corpus") in user and ("data", "synthetic") not in user:
        raise ConfigError("data.corpus: the run trains on a synthetic corpus (data.synthetic, which --smoke sets), "
                          "so it would be ignored; add --set data.synthetic=false to train on it")
    validate(recipe)
    return recipe


# The largest size (layers, width, heads, FFN, vocabulary, sequence) trainperf takes, 2**31 - 1
# (int32's largest): every published model is orders of magnitude under it in each (126 layers, a
# 256K vocabulary, a 10M-token context), so it refuses only typos, which otherwise hung building
# the model or overflowed the planner's pipeline split (C sizes, 2**63) in a traceback.
MAX_MODEL_SIZE = 2**31 - 1
MAX_SEED = 2**32 - 1  # numpy's generators (the GPT sampler's shuffles) take no larger seed
MODEL_SIZES = ("n_layer", "d_model", "n_head", "n_kv_head", "head_size", "d_ff", "vocab_size", "seq_len")


def oversized(m: ModelConfig, keys: dict[str, str] | None = None) -> str | None:
    """'KEY=V is beyond ...' for the first size of `m` past MAX_MODEL_SIZE, or None; `keys` names a
    field as the input spells it (a config.json key, an inline key)."""
    for f in MODEL_SIZES:
        if getattr(m, f) > MAX_MODEL_SIZE:
            return (f"{(keys or {}).get(f, f)}={getattr(m, f)} is beyond {MAX_MODEL_SIZE} (2**31 - 1), the "
                    "largest size trainperf takes")
    return None


def _check(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {msg}")


def _check_choices(r: Recipe) -> None:
    """Every Literal-typed field, also in a recipe built in code rather than loaded (e.g. `data prepare`)."""
    for section in _SECTIONS:
        obj = getattr(r, section)
        for key, typ in _section_types(type(obj)).items():
            _check_choice(f"{section}.{key}", getattr(obj, key), typ)


def validate(r: Recipe) -> None:
    _check_choices(r)
    m, d, t, e, p = r.model, r.data, r.train, r.eval, r.parallel
    for k in ("n_layer", "d_model", "n_head", "seq_len"):
        _check(getattr(m, k) >= 1, f"model.{k}", f"must be >= 1, got {getattr(m, k)}")
    if too_big := oversized(m, {f: f"model.{f}" for f in MODEL_SIZES}):
        raise ConfigError(too_big)
    _check(m.head_size >= 0, "model.head_size", "must be >= 0 (0: d_model / n_head)")
    _check(m.head_size > 0 or m.d_model % m.n_head == 0, "model.n_head",
           f"{m.n_head} heads do not divide d_model={m.d_model} (or set model.head_size)")
    _check(m.n_kv_head >= 0, "model.n_kv_head", "must be >= 0")
    _check(m.n_head % m.kv_heads == 0, "model.n_kv_head", f"{m.kv_heads} kv heads do not divide n_head={m.n_head}")
    _check(m.family == "gpt" or m.head_dim % 2 == 0, "model.n_head", "RoPE needs an even head dimension")
    _check(m.d_ff >= 0, "model.d_ff", "must be >= 0")
    _check(m.vocab_size >= 0, "model.vocab_size", "must be >= 0")
    _check(m.norm_eps > 0, "model.norm_eps", "must be > 0")
    _check(m.rope_theta > 0, "model.rope_theta", f"must be > 0 (RoPE's base wavelength), got {m.rope_theta}")
    _check(m.logit_softcap >= 0, "model.logit_softcap", "must be >= 0 (0: no cap)")
    _check(m.loss_chunk_bytes >= 0, "model.loss_chunk_bytes", "must be >= 0 (0: the loss never in chunks)")
    _check(not m.zero_init_head or not m.tie_embeddings, "model.zero_init_head",
           "needs model.tie_embeddings = false (a zero head tied to the embedding would zero the embedding)")
    _check(m.rope_scaling_factor == 0 or m.rope_scaling_factor >= 1, "model.rope_scaling_factor",
           f"must be 0 (none) or >= 1, got {m.rope_scaling_factor}")
    _check(0 < m.rope_low_freq_factor < m.rope_high_freq_factor, "model.rope_high_freq_factor",
           "must be greater than model.rope_low_freq_factor > 0")
    _check(m.rope_original_context >= 1, "model.rope_original_context", "must be >= 1")
    _check(m.lora_rank >= 0, "model.lora_rank", "must be >= 0")
    _check(m.lora_alpha > 0, "model.lora_alpha", "must be > 0")
    _check(0 <= m.lora_dropout < 1, "model.lora_dropout", "must be in [0, 1)")
    _check(d.tokenizer in ("byte", "bpe") or d.tokenizer.endswith((".json", ".model")), "data.tokenizer",
           f"must be 'byte', 'bpe', a tokenizer.json or a SentencePiece .model path, got {d.tokenizer!r}")
    if len(d.corpus.split()) > 1:  # a blend's syntax is the recipe's, checked before anything runs
        try:
            parse_blend(d.corpus)
        except DataError as e:
            raise ConfigError(f"data.corpus: {e}") from None
    _check(256 < d.bpe_vocab_size <= 2**32, "data.bpe_vocab_size", "must be in (256, 2^32]")
    _check(d.eval_bytes > 0, "data.eval_bytes", "must be > 0")
    _check(d.kind == "tokens" or d.tokenizer != "bpe", "data.tokenizer",
           "fine-tuning samples (data.kind='samples') need 'byte' or a tokenizer file")
    _check(t.global_batch_size >= 1, "train.global_batch_size", "must be >= 1")
    _check(t.micro_batch_size >= 1, "train.micro_batch_size", "must be >= 1")
    _check(t.micro_batch_size <= t.global_batch_size, "train.micro_batch_size",
           f"{t.micro_batch_size} is larger than train.global_batch_size={t.global_batch_size} (a micro-batch is "
           "part of one optimizer step's batch)")
    _check(t.lr > 0, "train.lr", f"must be > 0, got {t.lr}")
    _check(0 <= t.end_lr <= t.lr, "train.end_lr", f"must be in [0, train.lr], got {t.end_lr}")
    _check(t.warmup_steps >= 0, "train.warmup_steps", "must be >= 0")
    _check(t.decay_steps >= 0, "train.decay_steps", "must be >= 0")
    _check(t.max_steps >= 0, "train.max_steps", "must be >= 0")
    _check(r.total_steps >= 1, "train.max_steps", "no steps to run (warmup + decay = 0 and max_steps = 0)")
    _check(t.weight_decay >= 0, "train.weight_decay", "must be >= 0")
    _check(0 <= t.beta1 < 1, "train.beta1", "must be in [0, 1)")
    _check(0 <= t.beta2 < 1, "train.beta2", "must be in [0, 1)")
    _check(t.eps > 0, "train.eps", "must be > 0")
    _check(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 disables clipping)")
    _check(0 < t.cooldown <= 1, "train.cooldown", f"must be in (0, 1], got {t.cooldown}")
    _check(t.muon_lr >= 0, "train.muon_lr", "must be >= 0 (0 -> train.lr)")
    _check(0 <= t.muon_momentum < 1, "train.muon_momentum", "must be in [0, 1)")
    _check(t.muon_ns_steps >= 1, "train.muon_ns_steps", f"must be >= 1, got {t.muon_ns_steps}")
    _check(len(t.muon_ns_coefficients) in (0, 3 * t.muon_ns_steps), "train.muon_ns_coefficients",
           f"needs 3 numbers per iteration (train.muon_ns_steps = {t.muon_ns_steps}), got {len(t.muon_ns_coefficients)}")
    _check(not t.fp8_linear or t.precision in ("bf16", "auto"), "train.fp8_linear",
           "needs train.precision = \"bf16\" (FP8 matmuls inside bf16 autocast)")
    _check(t.log_every >= 1, "train.log_every", "must be >= 1")
    _check(0 <= t.seed <= MAX_SEED, "train.seed", f"must be in [0, {MAX_SEED}] (numpy's seed range), got {t.seed}")
    _check(t.init_checkpoint_step >= 0, "train.init_checkpoint_step", "must be >= 0")
    _check(t.init_checkpoint_step == 0 or t.init_checkpoint != "", "train.init_checkpoint_step",
           "needs train.init_checkpoint (the steps a checkpoint stands for)")
    _check(r.smoke.evals >= 1, "smoke.evals", "must be >= 1")
    _check(r.smoke.init_steps >= 0, "smoke.init_steps", "must be >= 0")
    _check(e.every_samples >= 1, "eval.every_samples", "must be >= 1")
    _check(e.target > 0, "eval.target", "must be > 0")
    _check(e.eval_samples >= 0, "eval.eval_samples", "must be >= 0")
    _check(e.eval_documents >= 0, "eval.eval_documents", "must be >= 0")
    _check(not (e.eval_samples and e.eval_documents), "eval.eval_documents",
           "give eval.eval_samples (sequences) or eval.eval_documents (the whole split), not both")
    _check(e.skip_evals >= 0, "eval.skip_evals", "must be >= 0")
    for k in ("dp_replicate", "tp", "pp", "cp"):
        _check(getattr(p, k) >= 1, f"parallel.{k}", "must be >= 1")
    _check(p.dp_shard == -1 or p.dp_shard >= 1, "parallel.dp_shard", "must be >= 1 or -1 (the rest)")
    _check(m.n_head % p.tp == 0, "parallel.tp", f"tp={p.tp} does not divide model.n_head={m.n_head}")
    _check(m.kv_heads % p.tp == 0, "parallel.tp", f"tp={p.tp} does not divide the {m.kv_heads} kv heads")
    _check(p.pp >= 1, "parallel.pp", "must be >= 1")
    _check(p.vpp >= 1, "parallel.vpp", "must be >= 1")
    _check(p.cp >= 1, "parallel.cp", "must be >= 1")
    _check(m.seq_len % (2 * p.cp) == 0, "parallel.cp",
           f"cp={p.cp} needs model.seq_len={m.seq_len} to split into 2*cp = {2 * p.cp} equal chunks")
    c = r.checkpoint
    _check(c.every_steps >= 0, "checkpoint.every_steps", "must be >= 0 (0 disables checkpoints)")
    _check(c.keep >= 1, "checkpoint.keep", "must be >= 1")
