"""Memory per GPU: weights, gradients and optimizer state under the sharding chosen, activations with
none / selective / full recompute (Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models"), the output logits, and a reserve for workspace and fragmentation.

Activation bytes are counted tensor by tensor, 16-bit activations, b sequences of s tokens:
  attention   QKV input 2sbh, Q 2sbh, K and V 2sb·h_kv each, then either FlashAttention's output 2sbh
              or (unfused) softmax 2as²b [+ dropout mask as²b + dropout output 2as²b], V·scores input
              to the output projection 2sbh, [+ output dropout mask sbh]
  MLP         input 2sbh, then GELU: pre- and post-activation 2sbf each [+ dropout mask sbh];
              SwiGLU: gate, up and their product 2sbf each
  norms       inputs of both 2sbh each
With GELU, f=4h, dropout and no FlashAttention this is the paper's 34·sbh + 5·as²b per layer;
sequence parallelism divides all of it by t (without it 10·sbh stays whole: norm inputs, the inputs
of the first GEMMs, dropout masks). Full recompute keeps only the layer input (2sbh/t); selective
drops what is cheap to recompute: the s² scores without FlashAttention (the paper's definition), or,
with it, the norm outputs and the activation-function output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.config import ModelConfig


GiB = 2**30
FROZEN_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5625}
RESERVE = 0.10  # share of usable HBM kept for cuBLAS/NCCL workspaces and allocator fragmentation


def activation_bytes_per_layer(cfg: ModelConfig, s: int, b: int, tp: int = 1, sp: bool = True,
                               recompute: str = "none", flash: bool = True, dropout: bool = False,
                               frozen_mlp: bool = False, fp8_inputs: bool = False) -> float:
    """Bytes one layer keeps for its backward, per tensor-parallel rank, for b sequences of s tokens.

    frozen_mlp: the MLP's weights are frozen and carry no adapters (LoRA on attention only): its
    GEMMs need no inputs saved for weight gradients, only the activation function's inputs.
    fp8_inputs: the GEMMs run in FP8/FP4 under Transformer Engine, whose Linear and LayerNormLinear
    keep the quantized copy of their input for the weight gradient (1 byte), not the 16-bit one:
    the two norm outputs and the down-projection's input shrink by half; the attention output
    stays 16-bit for the attention's backward and its FP8 copy is kept besides (+1 byte)."""
    h, a, f = cfg.d_model, cfg.n_head, cfg.ff_dim
    kv, q = cfg.kv_heads * cfg.head_dim, cfg.n_head * cfg.head_dim  # q = h unless model.head_size sets it apart
    sbh, sbq = s * b * h, s * b * q
    if recompute == "full":
        return 2 * sbh / (tp if sp else 1)
    drop_mask = 1 if dropout else 0
    # parts tensor parallelism splits anyway (head-sharded or ff-sharded tensors)
    q_k_v = 2 * sbq + 2 * 2 * s * b * kv
    q8 = 1 if fp8_inputs else 0  # bytes a quantized GEMM input saves (-) or adds (+) per element
    if flash:
        core = (2 + q8) * sbq  # output O (the logsumexp is s·b·a floats, negligible)
    else:
        scores = 2 * a * s * s * b + (3 * a * s * s * b if dropout else 0)
        core = (0 if recompute == "selective" else scores) + 2 * sbq
    act_out = (2 - q8) * s * b * f  # the down-projection's input
    if cfg.gated:
        mlp_mid = 2 * 2 * s * b * f + act_out  # gate, up, gate*up
    else:
        mlp_mid = 2 * s * b * f + act_out  # pre- and post-GELU
    if frozen_mlp:
        mlp_mid -= act_out  # the down-projection's input only served its weight gradient
    sharded = q_k_v + core + mlp_mid
    # parts that stay whole without sequence parallelism
    norm_in = 2 * 2 * sbh
    gemm_in = (1 if frozen_mlp else 2) * (2 - q8) * sbh  # QKV input and MLP input (the norms' outputs)
    masks = 2 * drop_mask * sbh
    if recompute == "selective" and flash:
        sharded -= act_out
        gemm_in = 0
    whole = norm_in + gemm_in + masks
    return sharded / tp + whole / (tp if sp else 1)


def korthikanti_per_layer(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                          selective: bool = False) -> float:
    """The paper's closed forms (GPT, 4h MLP, dropout, no FlashAttention), for checking the count:
    sbh(10 + 24/t + 5as/(ht)) tensor-parallel; sbh·34/t + 5as²b/t with sequence parallel;
    selective recompute drops the 5as/h term."""
    att = 0 if selective else 5 * a * s / (h * t)
    if sp:
        return s * b * h * (34 / t + att)
    return s * b * h * (10 + 24 / t + att)


@dataclass(frozen=True)
class Memory:
    """One GPU's memory at its peak. Under the `pytorch` stack `stack` is the trainer's own
    accounting (plan/stack_memory.py, which `run --dry-run` checks against traced memory): the
    fields are its terms and the total its peak, plus the reserve."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float
    reserve: float
    stack: Any = None  # a plan.stack_memory.StackMemory (not imported: stack_memory imports this module)

    @classmethod
    def of_stack(cls, m: Any, reserve: float) -> "Memory":
        return cls(weights=m.weights, grads=m.grads if m.grads_at_peak else 0.0, optimizer=m.optimizer,
                   activations=m.activations, logits=m.logits, reserve=reserve, stack=m)

    @property
    def total(self) -> float:
        if self.stack is not None:
            return self.stack.total + self.reserve
        # the state first, then what the micro-batches in flight add (the order the search sums in)
        return self.weights + self.grads + self.optimizer + self.logits + self.reserve + self.activations

    def as_gb(self) -> dict:
        if self.stack is not None:
            d = {k: v for k, v in self.stack.as_gb().items() if k != "total"}
            d["reserve"] = round(self.reserve / 1e9, 2)
        else:
            d = {k: round(v / 1e9, 2) for k, v in self.__dict__.items() if k != "stack"}
        d["total"] = round(self.total / 1e9, 2)
        return d


def state_bytes(trainable: float, frozen: float, dp_shard: int, precision: str, fp8_params: bool = False,
                grad_bytes: float = 4.0, sharded: bool = False) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes for one rank's parameters.

    Megatron's distributed optimizer (ZeRO-1): bf16 weights and the gradient buffer (`grad_bytes`
    per parameter: 4 for FP32 accumulation, 2 where the software reduces in BF16) stay whole, the
    fp32 master copy and Adam's two moments (12 bytes/param) are split over the data-parallel ranks.
    FP8/FP4 matmuls keep a low-precision copy of each trainable weight as well (+1 byte), unless
    FP8 with `fp8_params`: then the weights live in FP8 only (Megatron's fp8_param_gather, "keep the
    compute param in fp8 (no intermediate dtype)"), 1 byte, the master copy being the optimizer's.
    NVIDIA's FP4 configs turn it off (v5.1 config_common_fp4.sh: FP8_PARAM_GATHER=False).
    `sharded` (Megatron-FSDP, optim_grads_params): the weights and gradients are split over the
    data-parallel ranks as well.
    A frozen LoRA base is held in the matmul format only (NVIDIA's MLPerf LoRA runs set fp8_params:
    1 byte; NVFP4 is 4 bits plus one FP8 scale per 16 values).
    """
    low = precision in ("fp8", "fp4")
    per_weight = 1 if (precision == "fp8" and fp8_params) else 2 + (1 if low else 0)
    weights = trainable * per_weight + frozen * FROZEN_BYTES[precision]
    grads = trainable * grad_bytes
    optimizer = trainable * 12 / dp_shard
    if sharded:
        return weights / dp_shard, grads / dp_shard, optimizer
    return weights, grads, optimizer
