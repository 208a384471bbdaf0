"""Training throughput of trainperf's model vs a Hugging Face `transformers` baseline, same shapes,
same batch, same precision, in one run on one machine.

    python bench/throughput.py --configs tiny,gpt2-124m --json bench/results/cpu.json

Per (config, implementation): tokens/s and step time (median of the timed steps after warm-up), MFU
and the peak it is relative to, peak memory, and the ratio to the baseline of the same config.
The baseline is a plain PyTorch loop over `LlamaForCausalLM` (`Qwen3ForCausalLM` with QK-norm) /
`GPT2LMHeadModel` built from the same
config with torch.optim.AdamW, the way a user would write it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import resource
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

from trainperf.config import ModelConfig, load_recipe
from trainperf.model.flops import flops_per_token
from trainperf.model.transformer import Transformer
from trainperf.train.peak import device_peak

# name -> (ModelConfig kwargs, micro batch, steps). GPU-only configs are skipped on the CPU.
CONFIGS: dict[str, tuple[dict, int, bool]] = {
    "tiny": ({}, 16, False),  # filled from recipes/tiny.toml
    "gpt2-124m": (dict(family="gpt", n_layer=12, d_model=768, n_head=12, seq_len=1024, vocab_size=50304,
                       tie_embeddings=True), 2, False),
    "llama-1b": (dict(family="llama", n_layer=16, d_model=2048, n_head=32, n_kv_head=8, d_ff=8192,
                      seq_len=2048, vocab_size=128256, rope_theta=500000.0), 4, True),
    "llama-8b-4l": (dict(family="llama", n_layer=4, d_model=4096, n_head=32, n_kv_head=8, d_ff=14336,
                         seq_len=8192, vocab_size=128256, rope_theta=500000.0), 1, True),
}


def model_config(name: str) -> tuple[ModelConfig, int]:
    kw, batch, _ = CONFIGS[name]
    if name == "tiny":
        r = load_recipe("tiny")
        cfg = dataclasses.replace(r.model, vocab_size=r.model.vocab_size or r.data.bpe_vocab_size)
        return cfg, r.train.micro_batch_size
    return ModelConfig(**kw), batch


def hf_model(cfg: ModelConfig) -> torch.nn.Module:
    import transformers as tf

    if cfg.family == "llama":
        shape = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.ff_dim,
                     num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                     num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.seq_len,
                     rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta,
                     tie_word_embeddings=cfg.tie_embeddings, attention_bias=False)
        if cfg.qk_norm:  # the same function: Llama's blocks plus per-head query/key norms
            hc = tf.Qwen3Config(**shape, head_dim=cfg.head_dim)
            hc._attn_implementation = "sdpa"
            return tf.Qwen3ForCausalLM(hc)
        hc = tf.LlamaConfig(**shape, mlp_bias=False)
        hc._attn_implementation = "sdpa"
        return tf.LlamaForCausalLM(hc)
    hc = tf.GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.seq_len, n_embd=cfg.d_model,
                       n_layer=cfg.n_layer, n_head=cfg.n_head, n_inner=cfg.ff_dim, resid_pdrop=0.0,
                       embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=cfg.norm_eps,
                       tie_word_embeddings=cfg.tie_embeddings)
    hc._attn_implementation = "sdpa"
    return tf.GPT2LMHeadModel(hc)


def peak_mem_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # process high-water mark (KiB -> GB)


def time_impl(impl: str, cfg: ModelConfig, batch: int, precision: str, device: torch.device,
              steps: int, warmup: int, compile: bool, fp8: bool = False) -> dict:
    torch.manual_seed(0)
    if impl == "trainperf":
        model = Transformer(cfg).to(device)
        if fp8:
            from trainperf.parallel.apply import apply_float8

            apply_float8(model)
        if compile:  # as `trainperf run` compiles (parallel.apply.compile_model: each block)
            from trainperf.parallel.apply import compile_model

            compile_model(model)

        def loss_fn(x, y):
            return model(x, y).mean()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    else:
        model = hf_model(cfg).to(device)

        def loss_fn(x, y):
            logits = model(input_ids=x).logits
            return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=gen).to(device)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=gen).to(device)
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()
    times = []
    t_compile = time.perf_counter()
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        with ctx:
            loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i == 0:
            first_step = time.perf_counter() - t_compile
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    tps = batch * cfg.seq_len / med
    peak = device_peak(device, precision)
    fpt = flops_per_token(cfg)
    return {"impl": impl + ("+compile" if compile else "") + ("+fp8" if fp8 else ""), "precision": precision, "tokens_per_s": tps,
            "step_time_s": med, "mfu": peak.mfu(tps * fpt), "peak_flops": peak.flops,
            "peak_source": peak.source, "peak_mem_gb": peak_mem_gb(device), "first_step_s": first_step,
            "loss": float(loss.detach())}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tiny,gpt2-124m")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="also time trainperf with torch.compile, as a run compiles it (each block)")
    ap.add_argument("--fp8", action="store_true", help="also time trainperf with FP8 linears (torchao; bf16 rows)")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    rows = []
    header = f"{'config':<12} {'impl':<20} {'prec':<5} {'tok/s':>10} {'step ms':>9} {'MFU':>7} {'mem GB':>7} {'vs base':>8} {'1st step s':>10}"
    print(f"# {platform.processor() or platform.machine()} · torch {torch.__version__} · {device} · "
          f"{torch.get_num_threads()} threads · {time.strftime('%Y-%m-%d %H:%M')}")
    print(header)
    for name in args.configs.split(","):
        if name not in CONFIGS:
            print(f"unknown config {name} (known: {', '.join(CONFIGS)})", file=sys.stderr)
            return 2
        if CONFIGS[name][2] and device.type != "cuda":
            print(f"{name:<12} skipped: GPU-sized config")
            continue
        cfg, batch = model_config(name)
        for prec in args.precisions.split(","):
            impls = [("hf", False, False)] if not args.no_baseline else []
            impls += [("trainperf", False, False)] + ([("trainperf", True, False)] if args.compile else [])
            if args.fp8 and prec == "bf16":
                impls += [("trainperf", args.compile, True)]
            base = None
            for impl, comp, fp8 in impls:
                try:
                    r = time_impl(impl, cfg, batch, prec, device, args.steps, args.warmup, comp, fp8)
                except (NotImplementedError, torch.OutOfMemoryError) as e:
                    print(f"{name:<12} {impl:<20} {prec:<5} skipped: {str(e).splitlines()[0]}", flush=True)
                    continue
                if impl == "hf":
                    base = r["tokens_per_s"]
                ratio = r["tokens_per_s"] / base if base else float("nan")
                r.update(config=name, ratio_vs_hf=ratio, model={
                    "family": cfg.family, "n_layer": cfg.n_layer, "d_model": cfg.d_model, "n_head": cfg.n_head,
                    "n_kv_head": cfg.kv_heads, "d_ff": cfg.ff_dim, "seq_len": cfg.seq_len, "batch": batch,
                    "vocab": cfg.vocab_size, "dtype": prec})
                rows.append(r)
                print(f"{name:<12} {r['impl']:<20} {prec:<5} {r['tokens_per_s']:>10,.0f} "
                      f"{1e3 * r['step_time_s']:>9.1f} {_pct(r['mfu']):>7} {r['peak_mem_gb']:>7.2f} "
                      f"{ratio:>7.2f}x {r['first_step_s']:>10.1f}", flush=True)
    if rows:
        print(f"MFU relative to: {rows[-1]['peak_source']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
