"""How the trainer takes the loss of one micro-batch: at once, or in chunks of tokens where the
whole would hold too much.

Cross-entropy over the vocabulary holds, at its peak in the backward, `LOSS_BYTES` per token and
vocabulary entry (the fp32 log-softmax it saved, the fp32 gradient it receives and the one it
makes): for Llama 3.1 8B's 128,256-entry vocabulary, 12.6 GB for one 8,192-token sequence. Past
`LOSS_CHUNK_BYTES` the head and the loss run chunk by chunk under activation checkpointing: each
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
LOSS_CHUNK_BYTES = 1 << 30  # the most one micro-batch's loss may hold before it is taken in chunks


def loss_chunk(tokens: int, vocab: int) -> int:
    """Tokens per chunk of one micro-batch's loss (`tokens` of them over `vocab` entries): all of
    them while their loss holds at most `LOSS_CHUNK_BYTES`, else the fewest equal chunks that each
    hold no more (the last one shorter)."""
    whole = tokens * vocab * LOSS_BYTES
    if whole <= LOSS_CHUNK_BYTES:
        return tokens
    return math.ceil(tokens / math.ceil(whole / LOSS_CHUNK_BYTES))
