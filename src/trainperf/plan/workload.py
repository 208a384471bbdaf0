"""A benchmark as the planner sees it: the model (from the recipe `trainperf run` uses), the MLPerf
rules that shape time-to-train (RCP units, evaluation cadence and size), and LoRA or not."""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import MODEL_SIZES, ConfigError, ModelConfig, Recipe, list_recipes, load_recipe, oversized
from trainperf.errors import DataError
from trainperf.rules import rules_for

RULES = Path(__file__).with_name("benchmarks.toml")  # the closed rules themselves: trainperf/rules


@dataclass(frozen=True)
class Benchmark:
    name: str  # recipe name, e.g. gpt3_175b
    mlperf: str  # MLPerf's name, e.g. gpt3 (RCP files, results); "" for a model that is not a benchmark
    model: ModelConfig
    default_gbs: int
    lora: bool
    rcp_unit: str  # "tokens" or "samples"
    eval_every_samples: int
    eval_samples: float  # sequences per evaluation
    skip_a: float  # evaluations skipped at the start: floor(skip_a * GBS + skip_b)
    skip_b: int
    model_source: str  # where the shape came from
    # measured in the round's result logs, 0 where not measured (benchmarks.toml says where from):
    eval_overhead_s: float = 0.0  # fixed seconds per evaluation beyond its forward passes
    first_eval_s: float = 0.0  # one-time seconds on the clock around the first evaluation
    # the least seconds per layer of an evaluation's forward: where training runs as CUDA graphs and
    # evaluation eagerly, the eager forward is bound by the host's kernel launches, not the GPUs
    eval_eager_s_per_layer: float = 0.0
    round: str = ""  # the MLPerf round whose rules these are ('5.1')
    runs_per_result: int = 1  # a score is the olympic mean of this many runs
    # How the submitters' software holds parameters and gradients (benchmarks.toml says where read).
    # fp8_param_gather (Megatron's flag; NeMo's fp8_params): under FP8 matmuls the weights live in
    # FP8 only and the distributed optimizer all-gathers them in FP8, 1 byte per parameter instead
    # of BF16's 2 plus an FP8 copy (NVIDIA's FP4 configs turn it off).
    fp8_param_gather: bool = False
    grad_bytes: float = 4.0  # gradient buffer per parameter: FP32 (4), or BF16 (2, grad_reduce_in_fp32=False)
    # Megatron's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split (NeMo's
    # ASYM_PP_EMBED / ASYM_PP_LOSS): the embedding and the output layer + loss each take one layer's
    # slot in the pipeline split, so the first and last virtual stages hold one layer fewer
    pp_split_counts_embedding_and_loss: bool = False
    recipe: str = ""  # what `trainperf run` takes for this model (a recipe name or path); "" when none

    def __post_init__(self):
        if self.is_mlperf and not self.recipe:
            object.__setattr__(self, "recipe", self.name)

    @property
    def seq_len(self) -> int:
        return self.model.seq_len

    @property
    def is_mlperf(self) -> bool:
        """An MLPerf benchmark (RCPs, evaluations, rounds), or any other model (`--model`)."""
        return bool(self.mlperf)

    def evals(self, samples: float, gbs: int) -> float:
        """Evaluations on the clock while training `samples` sequences at batch `gbs` (the last one
        reaches the target). Fractional: the RCP mean falls between evaluation points. A model
        that is not a benchmark has none."""
        if not self.eval_every_samples:
            return 0.0
        every = math.ceil(self.eval_every_samples / gbs) * gbs
        skipped = math.floor(self.skip_a * gbs + self.skip_b)
        return max(1.0, samples / every - skipped)


@functools.lru_cache(maxsize=1)
def _rules() -> dict:
    return tomllib.loads(RULES.read_text(encoding="utf-8"))


def known() -> list[str]:
    return [k for k in _rules() if k != "precision_by_round"]


def rounds(mlperf: str) -> list[str]:
    """MLPerf rounds ('4.0', ...) with the benchmark in them, oldest first: those whose RCP folder in
    the installed mlperf-logging has it and whose allowed precisions benchmarks.toml states."""
    from trainperf.plan.rcp import rulesets

    known_rounds = _rules()["precision_by_round"]
    return [r.rsplit(".", 1)[0] for r in rulesets(mlperf) if r.rsplit(".", 1)[0] in known_rounds]


def resolve_round(mlperf: str, round_: str | None) -> str:
    """'v4.1' -> '4.1'; None -> the newest round that has the benchmark. A round without the
    benchmark is a usage error: its rules, RCPs and evaluation costs do not exist."""
    have = rounds(mlperf)
    if not have:
        raise ConfigError(f"--round: no MLPerf round has RCPs for {mlperf} in the installed mlperf-logging")
    if round_ is None:
        return have[-1]
    r = round_.strip().lstrip("v")
    if r not in have:
        raise ConfigError(f"--round: {mlperf} has no rules for round '{round_}' (rounds: {', '.join(have)})")
    return r


def max_precision(round_: str) -> str:
    """Lowest-precision matmul format closed submissions could use in MLPerf round '5.1'."""
    table = _rules()["precision_by_round"]
    return table.get(round_.lstrip("v"), "fp4")


def _closed_rules(mlperf: str) -> dict:
    """The evaluation rules of the newest round, as rules/mlperf.toml states them."""
    rule = rules_for(mlperf)
    if rule is None:
        raise ConfigError(f"plan: rules/mlperf.toml has no [{mlperf}]")
    out = {"eval_every_samples": rule.eval_every_samples, "skip_evals": tuple(rule.skip_evals)}
    if rule.eval_samples is not None:
        out["eval_samples"] = rule.eval_samples
    return out


def load_benchmark(name: str, round_: str | None = None, model: ModelConfig | None = None,
                   gbs: int | None = None) -> Benchmark:
    """The benchmark `name` (recipe name or MLPerf name). The model comes from `recipes/<name>.toml`
    when it exists; `model`/`gbs` override it (tests, custom shapes). `round_` ('5.0') picks the
    evaluation cadence and costs of that MLPerf round where they changed; default the newest round
    that has the benchmark."""
    rules = _rules()
    key = next((k for k in known() if name in (k, rules[k]["mlperf"])), None)
    if key is None:
        raise ConfigError(f"plan: unknown benchmark '{name}' (known: {', '.join(known())}); "
                          f"any other model: --model {name}")
    r = {**_closed_rules(rules[key]["mlperf"]), **rules[key]}
    round_ = resolve_round(r["mlperf"], round_)
    over = r.get(f"v{round_.replace('.', '_')}")
    if over:
        r.update(over)
    r["skip_a"], r["skip_b"] = r["skip_evals"]
    if model is None:
        if key not in list_recipes():
            raise ConfigError(f"plan: recipes/{key}.toml not found (the planner takes the model from the recipe)")
        rec = load_recipe(key)
        model, default_gbs, src = rec.model, rec.train.global_batch_size, rec.source
        if model.vocab_size == 0:
            raise ConfigError(f"plan: recipes/{key}.toml leaves model.vocab_size to the tokenizer; the planner needs it")
    else:
        default_gbs, src = gbs or 1, "given"
    if r["lora"] and model.lora_rank <= 0:
        raise ConfigError(f"plan: {key} is a LoRA benchmark but its model has lora_rank=0")
    eval_samples = r["eval_tokens"] / model.seq_len if "eval_tokens" in r else r["eval_samples"]
    return Benchmark(name=key, mlperf=r["mlperf"], model=model, default_gbs=gbs or default_gbs,
                     lora=bool(r["lora"]), rcp_unit=r["rcp_unit"], eval_every_samples=r["eval_every_samples"],
                     eval_samples=eval_samples, skip_a=r["skip_a"], skip_b=r["skip_b"], model_source=src,
                     eval_overhead_s=float(r.get("eval_overhead_s", 0.0)),
                     first_eval_s=float(r.get("first_eval_s", 0.0)),
                     eval_eager_s_per_layer=float(r.get("eval_eager_s_per_layer", 0.0)), round=round_,
                     runs_per_result=int(r.get("runs_per_result", 1)),
                     fp8_param_gather=bool(r.get("fp8_param_gather", False)),
                     grad_bytes=float(r.get("grad_bytes", 4.0)),
                     pp_split_counts_embedding_and_loss=bool(r.get("pp_split_counts_embedding_and_loss", False)))


# -- any dense GPT/Llama model (no MLPerf rules) ----------------------------------------------

# the inline grammar `layers=96,d_model=12288,heads=96,kv_heads=96,ffn=49152,vocab=51200,seq=2048,family=gpt`
INLINE_KEYS = {"layers": "n_layer", "d_model": "d_model", "heads": "n_head", "kv_heads": "n_kv_head",
               "ffn": "d_ff", "vocab": "vocab_size", "seq": "seq_len", "head_dim": "head_size"}


SEQ_LEN = {"seq_len": "--seq-len"}  # a sequence --seq-len gave is named so in an error
MLP_ACTS = ("swiglu", "gelu", "relu2")  # inline `mlp=`: a gated SwiGLU (three matrices) or two matrices


def _family_model(family: str, shape: dict, where: str, keys: dict[str, str], mlp: str | None = None,
                  tied: bool | None = None) -> ModelConfig:
    """A ModelConfig of `family`: llama is RMSNorm, SwiGLU, RoPE and an untied head; gpt is
    LayerNorm, GELU, learned positions and biases, its head tied to the embedding. `mlp` and `tied`
    replace the family's MLP and head (Nemotron: llama's blocks with a two-matrix squared-ReLU MLP)."""
    if family not in ("llama", "gpt"):
        raise ConfigError(f"{where}: family must be llama or gpt, got '{family}'")
    for k, v in shape.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where}: {keys.get(k, k)} must be a positive integer, got {v!r}")
    missing = [k for k in ("n_layer", "d_model", "n_head", "vocab_size", "seq_len") if k not in shape]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(keys.get(m, m) for m in missing)}")
    cfg = ModelConfig(family=family, tie_embeddings=family == "gpt" if tied is None else tied, bias=family == "gpt",
                      mlp_act=mlp or "auto", **shape)
    check_model(cfg, where, keys)
    return cfg


def check_model(cfg: ModelConfig, where: str, keys: Mapping[str, str] | None = None) -> None:
    """What the planner needs of a shape to price it: one line naming what is wrong. `keys` names
    a size as the input spells it (an inline key, a config.json key); default its field's name."""
    if too_big := oversized(cfg, dict(keys or {})):
        raise ConfigError(f"{where}: {too_big}")
    if not cfg.head_size and cfg.d_model % cfg.n_head:
        raise ConfigError(f"{where}: {cfg.n_head} heads do not divide d_model {cfg.d_model} (or give head_dim)")
    if cfg.n_head % cfg.kv_heads:
        raise ConfigError(f"{where}: {cfg.kv_heads} KV heads do not divide the {cfg.n_head} heads")
    if cfg.vocab_size < 1:
        raise ConfigError(f"{where}: the vocabulary size is not stated (the planner needs it)")


def parse_inline(text: str, seq_len: int | None = None) -> ModelConfig:
    """`layers=..,d_model=..,heads=..,kv_heads=..,ffn=..,vocab=..,seq=..,family=gpt|llama`, and
    optionally `mlp=swiglu|gelu|relu2` and `tied=true|false`; `seq_len` (--seq-len) overrides seq=."""
    shape: dict = {}
    family, mlp, tied = "llama", None, None
    given: set[str] = set()
    for part in (p.strip() for p in text.split(",") if p.strip()):
        k, sep, v = part.partition("=")
        k, v = k.strip(), v.strip()
        if not sep:
            raise ConfigError(f"--model: expected key=value, got '{part}'")
        if k in given:
            raise ConfigError(f"--model: {k} is given twice")
        given.add(k)
        if k == "family":
            family = v
            continue
        if k == "mlp":
            if v not in MLP_ACTS:
                raise ConfigError(f"--model: mlp must be {', '.join(MLP_ACTS)}, got '{v}'")
            mlp = v
            continue
        if k == "tied":
            if v not in ("true", "false"):
                raise ConfigError(f"--model: tied must be true or false, got '{v}'")
            tied = v == "true"
            continue
        if k not in INLINE_KEYS:
            raise ConfigError(f"--model: unknown key '{k}' (keys: {', '.join([*INLINE_KEYS, 'family', 'mlp', 'tied'])})")
        try:
            shape[INLINE_KEYS[k]] = int(v)
        except ValueError:
            raise ConfigError(f"--model: {k} must be a positive integer, got '{v}'") from None
    keys = {v: k for k, v in INLINE_KEYS.items()}  # our field -> the key the user wrote
    if seq_len is not None:
        shape["seq_len"], keys = seq_len, {**keys, **SEQ_LEN}
    return _family_model(family, shape, "--model", keys, mlp, tied)


def parse_hf_config(path: Path, seq_len: int | None = None) -> ModelConfig:
    """A Hugging Face config.json, read as the trainer reads it (`model.hf_config`), refusing only
    what changes the price of its sequence: `seq_len` (--seq-len), else max_position_embeddings."""
    from trainperf.atomic import read_json
    from trainperf.model.hf_config import hf_model_config, size_keys

    where = f"--model {path}"
    raw = read_json(path, ConfigError)
    cfg, _ = hf_model_config(raw, where, ConfigError, exact=False, seq_len=seq_len)
    check_model(cfg, where, {**size_keys(raw.get("model_type"), raw), **(SEQ_LEN if seq_len is not None else {})})
    return cfg


def _recipe_model(spec: str, seq_len: int | None) -> tuple[ModelConfig, Recipe]:
    """A recipe's model, its vocabulary taken from data.tokenizer where model.vocab_size is 0, as
    the trainer takes it (a relative path from the current folder, as `trainperf run` reads it)."""
    from dataclasses import replace

    from trainperf.data.tokenizer import planned_vocab

    rec, where = load_recipe(spec), f"--model {spec}"
    model, keys = rec.model, {f: f"model.{f}" for f in MODEL_SIZES}
    if not model.vocab_size:
        try:
            model = replace(model, vocab_size=planned_vocab(rec.data.tokenizer, rec.data.bpe_vocab_size))
        except DataError as e:  # the recipe's to fix, not the data's: a usage error
            raise ConfigError(f"{where}: data.tokenizer: {e}, and model.vocab_size is 0, so the vocabulary is "
                              "the tokenizer's (a relative path is read from the current folder, as `trainperf "
                              "run` reads it)") from None
    if seq_len is not None:
        model, keys = replace(model, seq_len=seq_len), {**keys, **SEQ_LEN}
    check_model(model, where, keys)
    return model, rec


def custom_workload(spec: str, seq_len: int | None = None, gbs: int | None = None) -> Benchmark:
    """A model that is not an MLPerf benchmark, from a recipe name, a recipe TOML, a Hugging Face
    config.json (or the folder holding it) or the inline grammar, at `seq_len` where given; no RCPs
    and no evaluations. Its global batch is the recipe's unless `gbs` is given (required for the
    other forms)."""
    if not spec.strip():
        raise ConfigError("--model: empty; give a recipe name or TOML, a Hugging Face config.json or its folder, "
                          "or layers=,d_model=,heads=,vocab=,seq=")
    if seq_len is not None and seq_len < 1:
        raise ConfigError(f"--seq-len: must be a positive integer, got {seq_len}")
    p = Path(spec)
    default_gbs, recipe = None, ""
    if "=" in spec:
        model, src = parse_inline(spec, seq_len), f"inline: {spec}"
    elif p.is_dir() or p.suffix == ".json":
        config = p / "config.json" if p.is_dir() else p
        if not config.is_file():
            raise ConfigError(f"--model: folder {spec} holds no config.json (a Hugging Face model folder does)"
                              if p.is_dir() else f"--model: file {spec} not found")
        model, src = parse_hf_config(config, seq_len), str(config)
    else:
        model, rec = _recipe_model(spec, seq_len)
        src, default_gbs, recipe = rec.source, rec.train.global_batch_size, spec
    if seq_len is not None:
        src += f", --seq-len {seq_len}"
    g = gbs or default_gbs
    if not g:
        raise ConfigError("--gbs: give the global batch (sequences per step) for a model without a recipe")
    return model_workload(p.stem if "=" not in spec else "custom", model, g, src, recipe)


def model_workload(name: str, model: ModelConfig, gbs: int, source: str, recipe: str = "") -> Benchmark:
    """A model that is not an MLPerf benchmark at global batch `gbs`: no RCPs, no evaluations."""
    return Benchmark(name=name, mlperf="", model=model, default_gbs=gbs, lora=model.lora_rank > 0,
                     rcp_unit="samples", eval_every_samples=0, eval_samples=0.0, skip_a=0.0, skip_b=0,
                     model_source=source, recipe=recipe)
