"""How the trainer takes the loss of one micro-batch: at once, or in chunks of tokens where the
whole would hold too much.

Cross-entropy over the vocabulary holds, at its peak in the backward, `LOSS_BYTES` per token and
vocabulary entry (the fp32 log-softmax it saved, the fp32 gradient it receives and the one it
makes): for Llama 3.1 8B's 128,256-entry vocabulary, 12.6 GB for one 8,192-token sequence. Past
`model.loss_chunk_bytes` (1 GiB unless the recipe says otherwise; 0: never) the head and the loss
run chunk by chunk under activation checkpointing: each
chunk's logits are made, scored and dropped in the forward and made again in its backward, so one
chunk's are held at a time. The price is the head's forward a second time (about 2% more FLOPs at
8B; MFU counts model FLOPs and does not see it).

The trainer chunks wherever the model takes the loss itself: under tensor parallelism too (each
rank's logits span vocabulary/tp entries, `loss_parallel`), but not on a pipeline's last stage (the
schedule takes the loss from the stage's logits). `plan.stack_memory` prices the same rule. No
torch here: the planner reads it.
"""

from __future__ import annotations

import math

LOSS_BYTES = 12  # cross-entropy's backward: saved fp32 log-softmax, incoming and outgoing fp32 gradients
# torch's loss_parallel (tensor parallelism: each rank's logits over vocabulary/tp entries) holds
# five fp32 copies of the local logits at its backward's peak, where it sums the gradient of
# logits its log-softmax uses twice (traced: tests/train/test_memtrace.py)
LOSS_BYTES_TP = 20


def loss_bytes(tokens: int, vocab: int, tp: int) -> float:
    """What the loss of `tokens` over `vocab` entries holds at its peak on one of `tp` ranks."""
    return tokens * math.ceil(vocab / tp) * (LOSS_BYTES if tp == 1 else LOSS_BYTES_TP)


def loss_chunk(tokens: int, vocab: int, limit: int, tp: int = 1) -> int:
    """Tokens per chunk of one micro-batch's loss (`tokens` of them over `vocab` entries, split over
    `tp` ranks): all of them while their loss holds at most `limit` bytes (or `limit` is 0), else
    the fewest equal chunks that each hold no more (the last one shorter; one token at the least)."""
    whole = loss_bytes(tokens, vocab, tp)
    if limit <= 0 or whole <= limit:
        return tokens
    return max(1, math.ceil(tokens / math.ceil(whole / limit)))
