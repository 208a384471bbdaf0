"""The layout grammar `trainperf plan --layout` reads and `trainperf run --layout` runs:
`tp=4,pp=8,vpp=6,cp=2,dp=64,mbs=1,gbs=512` (plus `recompute=` and `precision=`), and the recipe keys
each part sets. A leaf module: the planner, the CLI and the recipe loader (a recipe's `[layouts]`
table) share this one parser, and it imports none of them.

What a layout sets in a recipe (`recipe_overrides`):

    tp  -> parallel.tp            pp  -> parallel.pp            vpp -> parallel.vpp
    cp  -> parallel.cp            mbs -> train.micro_batch_size gbs -> train.global_batch_size
    dp  -> parallel.dp_shard = dp / parallel.dp_replicate (dp counts every data-parallel rank, as
           the planner does; with the default dp_replicate = 1 it is dp_shard itself)
    recompute -> parallel.activation_checkpoint (none, selective, full)
    precision -> bf16: train.precision = bf16, train.fp8_linear = false
                 fp8:  train.precision = bf16, train.fp8_linear = true (FP8 matmuls in the blocks)
                 fp4:  refused (the trainer has no FP4 matmuls)
    vpp > 1 also sets parallel.pp_schedule = interleaved_1f1b (the schedule the planner prices for
    virtual stages), and fewer micro-batches than pipeline stages sets gpipe (1F1B needs one per
    stage), unless --set names the schedule.
"""

from __future__ import annotations

from trainperf.errors import ConfigError

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8", "fp4")  # slowest to fastest (the planner's matmul formats)
INT_KEYS = ("tp", "pp", "vpp", "cp", "dp", "mbs", "gbs")
ORDER = INT_KEYS + ("recompute", "precision")
_ALIAS = {"microbatch": "mbs", "vp": "vpp", "rc": "recompute", "prec": "precision"}

_TARGET = {"tp": "parallel.tp", "pp": "parallel.pp", "vpp": "parallel.vpp", "cp": "parallel.cp",
           "dp": "parallel.dp_shard", "mbs": "train.micro_batch_size", "gbs": "train.global_batch_size",
           "recompute": "parallel.activation_checkpoint"}


def parse_layout(text: str, what: str = "--layout", precisions: tuple[str, ...] = PRECISIONS) -> dict:
    """'tp=1,pp=1,dp=8,mbs=1' -> {'tp': 1, ...}; recompute= and precision= take words (`precisions`:
    the planner's include fp16, which the trainer does not run). `what` names the option or recipe
    key in errors."""
    out: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ConfigError(f"{what}: expected key=value, got '{part}'")
        k, v = (x.strip() for x in part.split("=", 1))
        k = _ALIAS.get(k, k)
        if k in out:
            raise ConfigError(f"{what}: {k} is given twice ({k}={out[k]} and {k}={v}); give it once")
        if k in ("recompute", "precision"):
            ok = RECOMPUTE if k == "recompute" else precisions
            if v not in ok:
                raise ConfigError(f"{what}: {k} must be one of {', '.join(ok)}, got '{v}'")
            out[k] = v
        elif k in INT_KEYS:
            try:
                out[k] = int(v)
            except ValueError:
                raise ConfigError(f"{what}: {k} must be an integer, got '{v}'") from None
            if out[k] < 1:
                raise ConfigError(f"{what}: {k} must be >= 1, got {out[k]}")
        else:
            raise ConfigError(f"{what}: unknown key '{k}' (tp, pp, vpp, dp, cp, mbs, gbs, recompute, precision)")
    return out


def format_layout(spec: dict) -> str:
    """The canonical text of a parsed layout (keys in grammar order): parse_layout(format_layout(s)) == s."""
    return ",".join(f"{k}={spec[k]}" for k in ORDER if k in spec)


def ranks(spec: dict) -> int | None:
    """tp*pp*cp*dp, the ranks a layout needs; None when it leaves dp open."""
    if "dp" not in spec:
        return None
    return spec.get("tp", 1) * spec.get("pp", 1) * spec.get("cp", 1) * spec["dp"]


def spec_of(lay) -> dict:
    """The parsed form of a planner layout (anything with the grammar's attributes: tp, pp, vpp, cp,
    dp, mbs, gbs, recompute, precision); vpp only when the stages are interleaved."""
    spec = {k: getattr(lay, k) for k in ORDER}
    if spec["vpp"] == 1:
        del spec["vpp"]
    return spec


def _pairs(spec: dict, dp_replicate: int) -> list[tuple[str, str]]:
    """(the layout's `key=value`, the `section.key=value` it sets) in grammar order."""
    out = []
    for k in ORDER:
        if k not in spec:
            continue
        v, part = spec[k], f"{k}={spec[k]}"
        if k == "dp":
            if v % dp_replicate:
                raise ConfigError(f"--layout: dp={v} is not a multiple of parallel.dp_replicate={dp_replicate}")
            v //= dp_replicate
        if k == "precision":
            if v not in ("bf16", "fp8"):
                raise ConfigError(f"--layout: precision={v}: the trainer has no {v.upper()} matmuls (bf16 or fp8)")
            out += [(part, "train.precision=bf16"), (part, f"train.fp8_linear={'true' if v == 'fp8' else 'false'}")]
            continue
        out.append((part, f"{_TARGET[k]}={v}"))
    return out


def recipe_overrides(spec: dict, dp_replicate: int = 1) -> list[str]:
    """The `section.key=value` overrides a parsed layout stands for (table in the module docstring)."""
    return [o for _, o in _pairs(spec, dp_replicate)]


def _key(override: str) -> str:
    return override.split("=", 1)[0].strip()


def merge_overrides(spec: dict, user: list[str], dp_replicate: int = 1) -> list[str]:
    """The user's --set overrides followed by the layout's; a recipe key set by both is an error
    naming both. The interleaved schedule that vpp > 1 implies yields to a --set schedule."""
    theirs = {_key(u): u for u in user}
    mine = []
    for part, o in _pairs(spec, dp_replicate):
        if _key(o) in theirs:
            raise ConfigError(f"--layout {part} and --set {theirs[_key(o)]} both set {_key(o)}; give it once")
        mine.append(o)
    if "parallel.pp_schedule" not in theirs:
        schedule = _schedule(spec)
        if schedule:
            mine.append(f"parallel.pp_schedule={schedule}")
    return list(user) + mine


def _schedule(spec: dict) -> str | None:
    """The pipeline schedule a layout implies: interleaved 1F1B for virtual stages; GPipe when the
    step has fewer micro-batches than stages (1F1B needs at least one per stage, GPipe's bubble is
    the same there); otherwise the recipe's (1F1B by default)."""
    pp = spec.get("pp", 1)
    if spec.get("vpp", 1) > 1:
        return "interleaved_1f1b"
    if pp == 1:
        return None
    if all(k in spec for k in ("gbs", "dp", "mbs")) and spec["gbs"] // max(1, spec["dp"] * spec["mbs"]) < pp:
        return "gpipe"
    return None


__all__ = ["parse_layout", "format_layout", "recipe_overrides", "merge_overrides", "ranks", "spec_of", "RECOMPUTE",
           "PRECISIONS"]
