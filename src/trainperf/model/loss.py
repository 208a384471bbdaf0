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

The trainer chunks where the head's output is a plain tensor: not under tensor parallelism (the
logits are split over the vocabulary already, `loss_parallel`) and not on a pipeline's last stage
(the schedule takes the loss from whole logits). `plan.stack_memory` prices the same rule. No torch
here: the planner reads it.
"""

from __future__ import annotations

import math

LOSS_BYTES = 12  # cross-entropy's backward: saved fp32 log-softmax, incoming and outgoing fp32 gradients


def loss_chunk(tokens: int, vocab: int, limit: int) -> int:
    """Tokens per chunk of one micro-batch's loss (`tokens` of them over `vocab` entries): all of
    them while their loss holds at most `limit` bytes (or `limit` is 0), else the fewest equal
    chunks that each hold no more (the last one shorter; one token at the least)."""
    whole = tokens * vocab * LOSS_BYTES
    if limit <= 0 or whole <= limit:
        return tokens
    return max(1, math.ceil(tokens / math.ceil(whole / limit)))
