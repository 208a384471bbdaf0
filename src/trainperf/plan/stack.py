"""The software that runs the layout: what the planner prices differently under each stack.

- `megatron`: NVIDIA's Megatron-LM / NeMo, the software of the MLPerf results the model is fitted
  on: the distributed optimizer (ZeRO-1: weights and gradients whole, optimizer state sharded),
  Transformer Engine FP8/FP4, data-parallel traffic overlapped bucket by bucket.
- `megatron-fsdp`: the same software with Megatron-FSDP (`use_megatron_fsdp`, sharding strategy
  optim_grads_params) in place of the distributed optimizer: weights, gradients and optimizer state
  sharded over dp·cp, parameters all-gathered for the forward and again for the backward (two
  layers' worth held gathered: `fsdp_double_buffer`); the megatron fit's efficiency and overlap.
  NVIDIA's Megatron-Bridge performance recipes run Llama 3 8B/70B so.
- `pytorch`: PyTorch-native training as trainperf's own trainer and torchtitan run it: FSDP2
  (weights, gradients and optimizer state sharded over dp·cp, parameters all-gathered for the
  forward and again for the backward), DTensor tensor parallelism, torch.distributed.pipelining
  schedules, torch.compile, torchao Float8 (no FP4). Its compute efficiency, per GPU generation,
  and overlap are fitted on torchtitan's published Llama benchmarks on H100 and A100
  (fitting.fit_pytorch).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.config import ConfigError


@dataclass(frozen=True)
class Stack:
    name: str
    fully_sharded: bool  # FSDP2 / ZeRO-3: weights and gradients sharded too
    max_precision: str  # the lowest-precision matmul format the software trains in
    describes: str
    trainer_memory: bool = False  # memory by trainperf's trainer's accounting (plan/stack_memory.py)


STACKS = {
    "megatron": Stack("megatron", False, "fp4", "Megatron-LM/NeMo: distributed optimizer, Transformer Engine, "
                                                "overlapped communication (what the MLPerf fit describes)"),
    "megatron-fsdp": Stack("megatron-fsdp", True, "fp4", "Megatron-LM/NeMo with Megatron-FSDP: weights, gradients "
                                                         "and optimizer state sharded, Transformer Engine (the MLPerf "
                                                         "fit's efficiency)"),
    "pytorch": Stack("pytorch", True, "fp8", "PyTorch-native: FSDP2, DTensor TP, torch pipelining, torch.compile, "
                                             "torchao Float8 (trainperf's trainer; fitted on torchtitan's benchmarks)",
                     trainer_memory=True),
}


def get_stack(name: str) -> Stack:
    if name not in STACKS:
        raise ConfigError(f"--stack: unknown stack '{name}' (known: {', '.join(STACKS)})")
    return STACKS[name]
