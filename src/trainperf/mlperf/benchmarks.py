"""What differs between benchmarks in the MLPerf log: extra keys, eval metadata, rule checks, deviations.

The trainer calls these hooks and never branches on the benchmark's name itself. The closed rules
of each official benchmark are in the YAMLs of the installed `mlperf-logging` package
(`compliance_checker/training_<ruleset>/closed_<benchmark>.yaml`) and in the MLPerf training rules;
the ones a recipe can break, including those the checker does not look at (eval cadence, skipped
evals, schedule formulas), are stated once as data in `trainperf/rules/mlperf.toml`, and
`rule_checks` checks a recipe against them, so a run's summary lists every departure. What the data
cannot say (log keys that differ by ruleset) stays in the hook classes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from mlperf_logging.benchmark_meta import get_result_file_counts

from trainperf.config import ConfigError, Recipe, load_recipe
from trainperf.mlperf.logger import C, MLPerfLog
from trainperf.rules import BenchmarkRules, rules_for

# benchmark -> (newest training ruleset of the installed package that has it, runs per scored result
# from the package's benchmark_meta). 405b is absent from 6.1.0 and gpt3 ends at 4.1.0; the checker
# crashes on a benchmark its ruleset lacks, so the ruleset is chosen here.
_RULESETS = {"llama31_8b": "6.1.0", "llama2_70b_lora": "6.1.0", "llama31_405b": "6.0.0", "gpt3": "4.1.0"}
OFFICIAL: dict[str, tuple[str, int]] = {
    b: (rs, get_result_file_counts("training")[b]) for b, rs in _RULESETS.items()}

# Recipe keys whose change is no departure from the rules (where files live, logging, layout).
_NEUTRAL = {"data.corpus", "data.cache_dir", "train.log_every", "train.fused", "train.seed",
            "train.micro_batch_size", "benchmark.runs_per_result"}


@dataclasses.dataclass
class Rule:
    key: str  # the recipe key (or log key) the rule is about
    want: str  # what the rules ask, in words
    ok: bool


def _rule(key: str, value: Any, want: str, ok: bool) -> Rule:
    return Rule(key, f"{want} (this run: {value!r})", ok)


class BenchmarkHooks:
    """Defaults: the 6.x LLM convention (AdamW keys, samples_count everywhere), no extra rules."""

    # The start checkpoint's steps continue the LR schedule (gpt3) rather than start it at 0.
    continues_schedule = False
    # An official benchmark's recipe is the reference: any value changed from it is listed.
    official = False
    # opt_name's value, then the log keys of beta1, beta2, epsilon and weight decay
    optimizer_keys = ("adamw", C.OPT_ADAMW_BETA_1, C.OPT_ADAMW_BETA_2, C.OPT_ADAMW_EPSILON, C.OPT_ADAMW_WEIGHT_DECAY)

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        # A smoke run's model and corpus make any target meaningless: it never ends as a success.
        self.stops_at_target = not recipe.smoke.enabled

    def log_optimizer(self, log: MLPerfLog) -> None:
        t = self.recipe.train
        name, *keys = self.optimizer_keys
        # Muon beside AdamW: opt_name says muon, the AdamW keys describe the AdamW half
        log.event(C.OPT_NAME, "muon" if t.optimizer == "muon" else name)
        for key, value in zip(keys, (t.beta1, t.beta2, t.eps, t.weight_decay)):
            log.event(key, value)
        if t.optimizer == "muon":
            log.event("opt_muon_learning_rate", t.muon_lr or t.lr)
            log.event("opt_muon_momentum", t.muon_momentum)

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        """Keys beyond the common set the train loop logs (e.g. lora_rank, init_checkpoint_step)."""

    def eval_metadata(self, samples: int, tokens: int) -> dict:
        return {"samples_count": samples}

    def rule_checks(self) -> list[Rule]:
        """The closed rules a recipe can break, from trainperf/rules/mlperf.toml (none for our own benchmarks)."""
        rules = rules_for(self.recipe.benchmark.rules)
        return check_rules(self.recipe, rules) if rules is not None else []

    def deviations(self) -> list[str]:
        """Where this run departs from the benchmark's closed rules (listed in the summary)."""
        out = [f"rule: {r.key}: {r.want}" for r in self.rule_checks() if not r.ok]
        smoke = self.recipe.smoke.enabled
        if smoke or self.official:
            out = recipe_changes(self.recipe, "smoke" if smoke else "changed") + out
        if smoke:
            out.append(f"smoke: does not stop at the quality target {self.recipe.eval.target}; stops after "
                       f"{self.recipe.smoke.evals} logged evals with status aborted")
        return out


def recipe_changes(r: Recipe, tag: str) -> list[str]:
    """`<tag>: section.key: recipe value -> run value` for every non-neutral value the run changed
    from its recipe file (by --smoke or --set)."""
    try:
        base = load_recipe(r.source) if r.source else None
    except ConfigError:
        base = None
    if base is None:
        return [f"{tag}: recipe file unavailable; changes not listed"]
    out = []
    for section in ("benchmark", "model", "data", "train", "eval", "parallel"):
        a, b = getattr(base, section), getattr(r, section)
        for f in dataclasses.fields(a):
            key = f"{section}.{f.name}"
            va, vb = getattr(a, f.name), getattr(b, f.name)
            if va != vb and key not in _NEUTRAL:
                out.append(f"{tag}: {key}: {va!r} -> {vb!r}")
    return out


def _value(r: Recipe, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(r, section), name)


# recipe key -> the field of BenchmarkRules that fixes it (a rule left at None leaves the key free)
_FIXED = (("model.family", "family"), ("model.seq_len", "seq_len"), ("eval.every_samples", "eval_every_samples"),
          ("eval.eval_samples", "eval_samples"), ("eval.eval_documents", "eval_documents"),
          ("train.beta1", "beta1"), ("train.beta2", "beta2"), ("train.eps", "eps"),
          ("train.weight_decay", "weight_decay"), ("train.grad_clip", "grad_clip"),
          ("model.lora_rank", "lora_rank"), ("model.lora_alpha", "lora_alpha"), ("model.lora_dropout", "lora_dropout"))


def check_rules(r: Recipe, b: BenchmarkRules) -> list[Rule]:
    """Every rule of `b` (trainperf/rules/mlperf.toml) that the recipe can break, checked."""
    t, gbs = r.train, r.train.global_batch_size
    out = [_rule(key, _value(r, key), f"{getattr(b, attr)!r}", _value(r, key) == getattr(b, attr))
           for key, attr in _FIXED if getattr(b, attr) is not None]
    a, c = b.skip_evals
    out.append(_rule("eval.skip_evals", r.eval.skip_evals, f"skip the first FLOOR({a} * GBS + {c}) = {b.skip(gbs)} evals",
                     r.eval.skip_evals == b.skip(gbs)))
    if b.lr is not None:  # the checker compares floats exactly, in this form
        base, at = b.lr["base"], b.lr["at_gbs"]
        out.append(_rule("train.lr", t.lr, f"{base} * GBS / {at} = {b.lrs(gbs)[0]!r}", t.lr * at == gbs * base))
    elif b.lr_by_gbs:
        out.append(_rule("train.lr", t.lr, f"one of {b.lrs(gbs)} at GBS {gbs}", t.lr in b.lrs(gbs)))
    if b.warmup_steps(gbs) is not None:
        out.append(_rule("train.warmup_steps", t.warmup_steps, f"CEIL({b.warmup_samples} / GBS) = {b.warmup_steps(gbs)}",
                         t.warmup_steps == b.warmup_steps(gbs)))
    if b.schedule_steps is not None:
        out.append(_rule("train.max_steps", r.total_steps, f"max_steps == {b.schedule_steps:,}",
                         r.total_steps == b.schedule_steps))
    decay = b.decay_steps(gbs, t.warmup_steps)
    if decay is not None:
        how = "schedule end - warm-up" if b.decay_minus_warmup else "schedule end"
        out.append(_rule("train.decay_steps", t.decay_steps, f"{how} = {decay}", t.decay_steps == decay))
    end = b.end_lr_for(t.lr)
    if end is not None:
        want = f"{b.end_lr!r}" if b.end_lr is not None else f"{b.end_lr_ratio} x base LR"
        out.append(_rule("train.end_lr", t.end_lr, want, math.isclose(t.end_lr, end, rel_tol=1e-12, abs_tol=0.0)))
    if b.needs_init_checkpoint:
        out.append(_rule("train.init_checkpoint", t.init_checkpoint, "the benchmark's start checkpoint",
                         t.init_checkpoint != ""))
    step = b.init_checkpoint_step(gbs)
    if step is not None:
        out.append(_rule("train.init_checkpoint_step", t.init_checkpoint_step,
                         f"CEIL({b.init_checkpoint_samples} / GBS) = {step}", t.init_checkpoint_step == step))
    if b.gbs_range is not None:
        lo, hi = b.gbs_range
        out.append(_rule("train.global_batch_size", gbs, f"{lo}..{hi} (else new RCPs)", lo <= gbs <= hi))
    return out


class _Common(BenchmarkHooks):
    """What the three pretraining benchmarks log alike."""

    official = True


class Llama31_8B(_Common):
    pass


class Llama31_405B(_Common):
    def log_hyperparameters(self, log: MLPerfLog) -> None:
        log.event(C.INIT_CHECKPOINT_STEP, self.recipe.train.init_checkpoint_step)


class GPT3(_Common):
    """Ruleset <= 4.1.0: Adam keys, eval_accuracy carries epoch_num = training tokens since the start."""

    continues_schedule = True
    # Adam with decoupled weight decay, which the GPT-3 rules name "adam"; the 4.1.0 rules have no
    # Adam weight-decay key, so decay is logged under a trainperf key.
    optimizer_keys = ("adam", C.OPT_ADAM_BETA_1, C.OPT_ADAM_BETA_2, C.OPT_ADAM_EPSILON, "opt_weight_decay")

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        log.event(C.INIT_CHECKPOINT_STEP, self.recipe.train.init_checkpoint_step)

    def eval_metadata(self, samples: int, tokens: int) -> dict:
        return {"epoch_num": tokens, "samples_count": samples}


class Llama2_70B_LoRA(BenchmarkHooks):
    official = True

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        m = self.recipe.model
        log.event(C.OPT_LR_TRAINING_STEPS, self.recipe.total_steps)
        log.event("lora_rank", m.lora_rank)  # the package has no constant for it
        log.event("lora_alpha", m.lora_alpha)
        log.event("lora_dropout", m.lora_dropout)
        log.event(C.INIT_CHECKPOINT_STEP, self.recipe.train.init_checkpoint_step)


_HOOKS: dict[str, Callable[[Recipe], BenchmarkHooks]] = {
    "llama31_8b": Llama31_8B,
    "llama31_405b": Llama31_405B,
    "gpt3": GPT3,
    "llama2_70b_lora": Llama2_70B_LoRA,
}


def benchmark_hooks(recipe: Recipe) -> BenchmarkHooks:
    """The hooks of the recipe's rules (`benchmark.rules`); our own benchmarks get the defaults."""
    return _HOOKS.get(recipe.benchmark.rules, BenchmarkHooks)(recipe)
