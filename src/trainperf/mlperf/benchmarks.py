"""What differs between benchmarks in the MLPerf log: extra keys, eval metadata, rule checks, deviations.

The train loop calls these hooks and never branches on the benchmark's name itself. The closed rules
of each official benchmark are in the YAMLs of the installed `mlperf-logging` package
(`compliance_checker/training_<ruleset>/closed_<benchmark>.yaml`) and in the MLPerf training rules;
`rule_checks` restates the ones a recipe can break, including those the checker does not look at
(eval cadence, skipped evals, schedule formulas), so a run's summary lists every departure.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from mlperf_logging.benchmark_meta import get_result_file_counts

from trainperf.config import ConfigError, Recipe, load_recipe
from trainperf.mlperf.logger import C, MLPerfLog

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
        log.event(C.OPT_NAME, name)
        for key, value in zip(keys, (t.beta1, t.beta2, t.eps, t.weight_decay)):
            log.event(key, value)

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        """Keys beyond the common set the train loop logs (e.g. lora_rank, init_checkpoint_step)."""

    def eval_metadata(self, samples: int, tokens: int) -> dict:
        return {"samples_count": samples}

    def rule_checks(self) -> list[Rule]:
        """The closed rules a recipe can break (empty for our own benchmarks)."""
        return []

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


class _Common(BenchmarkHooks):
    """Rules the three pretraining benchmarks share."""

    official = True
    seq_len = 0
    every = 0
    eval_samples = 0

    def skip(self, gbs: int) -> int:
        return 0

    def rule_checks(self) -> list[Rule]:
        m, t, e = self.recipe.model, self.recipe.train, self.recipe.eval
        gbs = t.global_batch_size
        rules = [
            _rule("model.seq_len", m.seq_len, f"max_sequence_length == {self.seq_len}", m.seq_len == self.seq_len),
            _rule("eval.every_samples", e.every_samples, f"eval every {self.every} sequences",
                  e.every_samples == self.every),
            _rule("eval.skip_evals", e.skip_evals, f"skip the first {self.skip(gbs)} evals",
                  e.skip_evals == self.skip(gbs)),
            _rule("train.beta1", t.beta1, "0.9", t.beta1 == 0.9),
            _rule("train.beta2", t.beta2, "0.95", t.beta2 == 0.95),
            _rule("train.weight_decay", t.weight_decay, "0.1", t.weight_decay == 0.1),
            _rule("train.grad_clip", t.grad_clip, "1.0", t.grad_clip == 1.0),
            _rule("model.family", m.family, "the benchmark's architecture",
                  m.family == ("gpt" if self.recipe.benchmark.name == "gpt3" else "llama")),
        ]
        if self.eval_samples:
            rules.append(_rule("eval.eval_samples", e.eval_samples, f"eval_samples == {self.eval_samples}",
                               e.eval_samples == self.eval_samples))
        return rules


class Llama31_8B(_Common):
    seq_len, every, eval_samples = 8192, 12288, 1024

    def rule_checks(self) -> list[Rule]:
        t = self.recipe.train
        return super().rule_checks() + [
            _rule("train.eps", t.eps, "1e-05", t.eps == 1e-5),
            _rule("train.max_steps", self.recipe.total_steps, "max_steps == 1,200,000",
                  self.recipe.total_steps == 1_200_000),
            _rule("train.decay_steps", t.decay_steps, "1,200,000 - warm-up steps",
                  t.decay_steps == 1_200_000 - t.warmup_steps),
            _rule("train.end_lr", t.end_lr, "0.1 x base LR", math.isclose(t.end_lr, 0.1 * t.lr)),
        ]


class Llama31_405B(_Common):
    seq_len, every, eval_samples = 8192, 18432, 5760

    def skip(self, gbs: int) -> int:
        return math.floor(0.0026 * gbs + 12)

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        log.event(C.INIT_CHECKPOINT_STEP, self.recipe.train.init_checkpoint_step)

    def rule_checks(self) -> list[Rule]:
        t = self.recipe.train
        gbs = t.global_batch_size
        warm = math.ceil(8000 * 1152 / gbs)
        return super().rule_checks() + [
            _rule("train.eps", t.eps, "1e-05", t.eps == 1e-5),
            # the checker compares floats exactly: lr * 1152 == GBS * 8e-5
            _rule("train.lr", t.lr, f"8e-5 * GBS / 1152 = {8e-5 * gbs / 1152!r}", t.lr * 1152 == gbs * 8e-5),
            _rule("train.warmup_steps", t.warmup_steps, f"ceil(8000 * 1152 / GBS) = {warm}", t.warmup_steps == warm),
            _rule("train.decay_steps", t.decay_steps, "ceil(1,200,000 * 1152 / GBS) - warm-up",
                  t.decay_steps == math.ceil(1_200_000 * 1152 / gbs) - warm),
            _rule("train.end_lr", t.end_lr, "8e-07", t.end_lr == 8e-7),
            _rule("train.init_checkpoint", t.init_checkpoint, "the Llama 3.1 405B checkpoint",
                  t.init_checkpoint != ""),
            _rule("train.init_checkpoint_step", t.init_checkpoint_step, "0", t.init_checkpoint_step == 0),
            _rule("train.global_batch_size", gbs, "1152..9216 (else new RCPs)", 1152 <= gbs <= 9216),
        ]


class GPT3(_Common):
    """Ruleset <= 4.1.0: Adam keys, eval_accuracy carries epoch_num = training tokens since the start."""

    seq_len, every = 2048, 24576
    continues_schedule = True
    # Adam with decoupled weight decay, which the GPT-3 rules name "adam"; the 4.1.0 rules have no
    # Adam weight-decay key, so decay is logged under a trainperf key.
    optimizer_keys = ("adam", C.OPT_ADAM_BETA_1, C.OPT_ADAM_BETA_2, C.OPT_ADAM_EPSILON, "opt_weight_decay")

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        log.event(C.INIT_CHECKPOINT_STEP, self.recipe.train.init_checkpoint_step)

    def eval_metadata(self, samples: int, tokens: int) -> dict:
        return {"epoch_num": tokens, "samples_count": samples}

    def rule_checks(self) -> list[Rule]:
        t = self.recipe.train
        gbs = t.global_batch_size
        lrs = (2e-5,) if gbs <= 3072 else ((2e-5, 3e-5) if gbs < 4096 else (3e-5,))
        ckpt = math.ceil(4000 * 1536 / gbs)
        return super().rule_checks() + [
            _rule("train.eps", t.eps, "1e-08", t.eps == 1e-8),
            _rule("train.lr", t.lr, f"one of {lrs} at GBS {gbs}", t.lr in lrs),
            _rule("train.warmup_steps", t.warmup_steps, f"ceil(265 * 1536 / GBS) = {math.ceil(265 * 1536 / gbs)}",
                  t.warmup_steps == math.ceil(265 * 1536 / gbs)),
            _rule("train.decay_steps", t.decay_steps, f"ceil(108600 * 1536 / GBS) = {math.ceil(108600 * 1536 / gbs)}",
                  t.decay_steps == math.ceil(108600 * 1536 / gbs)),
            _rule("train.end_lr", t.end_lr, "0.1 x base LR", math.isclose(t.end_lr, 0.1 * t.lr)),
            _rule("train.init_checkpoint_step", t.init_checkpoint_step,
                  f"ceil(4000 * 1536 / GBS) = {ckpt} steps of the reference checkpoint", t.init_checkpoint_step == ckpt),
            _rule("train.global_batch_size", gbs, "1536..8192 (else new RCPs)", 1536 <= gbs <= 8192),
            _rule("eval.eval_documents", self.recipe.eval.eval_documents,
                  "24567 (the reference's whole C4 validation subset)", self.recipe.eval.eval_documents == 24567),
        ]


class Llama2_70B_LoRA(BenchmarkHooks):
    official = True

    def log_hyperparameters(self, log: MLPerfLog) -> None:
        m = self.recipe.model
        log.event(C.OPT_LR_TRAINING_STEPS, self.recipe.total_steps)
        log.event("lora_rank", m.lora_rank)  # the package has no constant for it
        log.event("lora_alpha", m.lora_alpha)
        log.event("lora_dropout", m.lora_dropout)
        log.event(C.INIT_CHECKPOINT_STEP, self.recipe.train.init_checkpoint_step)

    def rule_checks(self) -> list[Rule]:
        m, t, e = self.recipe.model, self.recipe.train, self.recipe.eval
        skip = math.floor(0.125 * t.global_batch_size + 2)
        return [
            _rule("model.lora_rank", m.lora_rank, "16", m.lora_rank == 16),
            _rule("model.lora_alpha", m.lora_alpha, "32", m.lora_alpha == 32),
            _rule("model.lora_dropout", m.lora_dropout, "0.1", m.lora_dropout == 0.1),
            _rule("train.weight_decay", t.weight_decay, "1e-4", t.weight_decay == 1e-4),
            _rule("train.grad_clip", t.grad_clip, "0.3", t.grad_clip == 0.3),
            _rule("model.seq_len", m.seq_len, "8192", m.seq_len == 8192),
            _rule("eval.every_samples", e.every_samples, "eval every 384 sequences", e.every_samples == 384),
            _rule("eval.skip_evals", e.skip_evals, f"skip the first floor(0.125 * GBS + 2) = {skip} evals",
                  e.skip_evals == skip),
            _rule("eval.eval_samples", e.eval_samples, "173 (the GovReport validation set)", e.eval_samples == 173),
            _rule("train.init_checkpoint", t.init_checkpoint, "the Llama 2 70B weights", t.init_checkpoint != ""),
        ]


_HOOKS: dict[str, Callable[[Recipe], BenchmarkHooks]] = {
    "llama31_8b": Llama31_8B,
    "llama31_405b": Llama31_405B,
    "gpt3": GPT3,
    "llama2_70b_lora": Llama2_70B_LoRA,
}


def benchmark_hooks(recipe: Recipe) -> BenchmarkHooks:
    """The hooks of the recipe's rules (`benchmark.rules`); our own benchmarks get the defaults."""
    return _HOOKS.get(recipe.benchmark.rules, BenchmarkHooks)(recipe)
