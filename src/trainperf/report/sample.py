"""`trainperf sample RUNDIR --prompt "def "`: let a person read what a trained model learned."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from trainperf.data.dataset import TOKENIZER_FILES
from trainperf.data.tokenizer import load_tokenizer
from trainperf.errors import UsageError
from trainperf.model.transformer import Transformer
from trainperf.report.export import load_model
from trainperf.report.rundir import RunDirError


# torch.Generator.manual_seed takes a 64-bit seed (2**64 - 1 at most, negatives wrap around); int64's
# range keeps it one that every torch API taking a seed reads the same
MAX_TORCH_SEED = 2**63 - 1


@torch.no_grad()
def generate(model: Transformer, ids: list[int], max_new_tokens: int, temperature: float = 0.8,
             top_k: int = 50, generator: torch.Generator | None = None) -> list[int]:
    """Sample a continuation of `ids`; the context is cropped to the model's sequence length."""
    device = next(model.parameters()).device
    seq = torch.tensor([ids], dtype=torch.long, device=device)
    for _ in range(max_new_tokens):
        logits = model(seq[:, -model.cfg.seq_len:])[0, -1].float()
        if temperature <= 0:
            nxt = logits.argmax().view(1)
        else:
            # float64 and the top logit at 0 first: a tiny temperature then sends the others to -inf
            # (a near-greedy choice) instead of overflowing every logit to inf (NaN probabilities)
            logits = (logits.double() - logits.max()) / temperature
            if 0 < top_k < logits.numel():
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator).to(device)
        seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
    return seq[0, len(ids):].tolist()


def sample(run_dir: str | Path, prompt: str, max_new_tokens: int = 200, num_samples: int = 1,
           temperature: float = 0.8, top_k: int = 50, seed: int = 0, device: str = "cpu") -> list[str]:
    """`num_samples` continuations of `prompt` (the prompt included), reproducible for a seed."""
    # the arguments first, before anything is read: a bad one is exit 2
    if not (math.isfinite(temperature) and temperature >= 0):
        raise UsageError(f"--temperature {temperature}: must be a finite number >= 0 (0: always the most likely token)")
    if not 0 <= seed <= MAX_TORCH_SEED:
        raise UsageError(f"--seed {seed}: must be in [0, {MAX_TORCH_SEED}] (torch's generator seeds)")
    if not prompt:
        raise UsageError("--prompt is empty: the model continues text, give it some")
    run_dir = Path(run_dir)
    tok_path = next((run_dir / n for n in TOKENIZER_FILES if (run_dir / n).is_file()), run_dir / "tokenizer.json")
    if not tok_path.is_file():
        raise RunDirError(f"{tok_path}: missing; sampling needs the run's tokenizer")
    tok = load_tokenizer(tok_path)
    ids = tok.encode(prompt)
    if not ids:
        raise UsageError(f"--prompt {prompt!r}: gives no tokens with {tok_path}; the model continues text, "
                         "give it some")
    model = load_model(run_dir, device)
    if max(ids) >= model.cfg.vocab_size:
        raise RunDirError(f"{tok_path}: gives token ids beyond the model's vocabulary ({model.cfg.vocab_size})")
    gen = torch.Generator().manual_seed(seed)
    return [prompt + tok.decode(generate(model, ids, max_new_tokens, temperature, top_k, gen))
            for _ in range(num_samples)]
