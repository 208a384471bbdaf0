"""`trainperf import-hf`: a Hugging Face Llama / GPT-2 checkpoint folder as a trainperf start checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainperf import atomic
from trainperf.config import load_recipe
from trainperf.errors import OutError, RunError, UsageError

# The [model] keys printed for a recipe, in ModelConfig order; rope_theta only means something for llama.
_KEYS = ("family", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff", "vocab_size", "seq_len", "norm_eps",
         "rope_theta", "tie_embeddings", "bias")


def model_toml(cfg) -> str:
    """The `[model]` section of a recipe for `cfg` (TOML; Python's repr of these values is valid TOML)."""
    lines = ["[model]"]
    for key in _KEYS:
        if key == "rope_theta" and cfg.family != "llama":
            continue
        value = getattr(cfg, key)
        text = ("true" if value else "false") if isinstance(value, bool) else (
            f'"{value}"' if isinstance(value, str) else repr(value))
        note = ""
        if key == "seq_len" and cfg.family == "llama":
            note = "  # the checkpoint's max_position_embeddings; RoPE weights do not fix it, pick the recipe's"
        lines.append(f"{key} = {text}{note}")
    return "\n".join(lines)


def cmd_import_hf(args) -> int:
    from trainperf.model.hf import read_hf_checkpoint, read_hf_config
    from trainperf.model.weights import save_tensors

    out: Path = args.out
    if out.is_dir():
        raise OutError(f"--out {out}: is a folder; give the .safetensors file to write")
    if out.exists() and not args.force:
        raise RunError(f"{out}: exists; pass --force to replace it")
    atomic.existing_parent(out)  # checked before the checkpoint is read
    like = None
    if args.overrides and not args.recipe:
        raise UsageError("import-hf: --set needs --recipe")
    if args.recipe:
        like = load_recipe(args.recipe, args.overrides).model  # a bad recipe is a ConfigError: exit 2
    _, notes = read_hf_config(args.hf_dir)
    cfg, sd = read_hf_checkpoint(args.hf_dir, like=like)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(out) as tmp:  # a crash never leaves a half-written checkpoint under the final name
        save_tensors(sd, tmp, metadata={"format": "pt", "converted_from": str(args.hf_dir)})
    n = sum(t.numel() for t in sd.values())
    print(f"wrote {out}: {len(sd)} tensors, {n:,} parameters in trainperf's names"
          + (f"; matches recipe {args.recipe}" if args.recipe else ""))
    for note in notes:
        print(f"note: {note}")
    print(f"# set train.init_checkpoint = \"{out}\"; the checkpoint's model:")
    print(model_toml(cfg))
    return 0


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("import-hf", parents=[common],
                       help="convert a Hugging Face LlamaForCausalLM / GPT2LMHeadModel folder into a trainperf "
                            "start checkpoint (.safetensors)")
    p.add_argument("hf_dir", type=Path, metavar="HF_DIR",
                   help="folder with config.json and model.safetensors (or model.safetensors.index.json + shards)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the .safetensors file to write")
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help="check the checkpoint is this recipe's model and convert into its layout")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a value of --recipe, as `trainperf run --set` does (repeatable)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.set_defaults(handler=cmd_import_hf)
