#!/usr/bin/env bash
# One prepared call for a lent GPU: fits its 15 minutes with the start (the rows take at most ~7).
#
#   bash bench/gpu.sh prepare        # HERE, once: the tiny corpus into bench/gpu_data/tiny (git-ignored)
#   OUT=$OUT bash bench/gpu.sh       # THERE, with carry [".whl", "bench/gpu_data"]
#   bash bench/gpu.sh --dry          # here, on the CPU: every row at toy sizes (the driver's own test)
#
# Rows (bench/gpu_rows.py, each in its own process, each appended to $OUT/rows.jsonl the moment it
# ends): `trainperf run tiny` to its target; a ~1.2B Llama through the real trainer for 30 steps in
# bf16 and in FP8 (memory, MFU, finite losses); one throughput row of Hugging Face's Llama and one of
# trainperf's beside it. A row fails on a graph break, a recompile inside the timed run, or attention
# outside the fused SDPA kernels. What one GPU cannot test (every NCCL path) is printed first and last.
#
# The corpus is prepared here because `tiny` reads the Python standard library's sources: the GPU
# machine's Python has another standard library, so its `tiny` would be another corpus.
#
# The GPU machine has torch 2.11, transformers, tokenizers, safetensors, rich, matplotlib and pyarrow,
# but no package index: mlperf-logging and torchao travel as wheels in .whl/ (git-ignored). Fetch
# them here first (Python 3.12 there):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any \
#       -d .whl mlperf-logging==4.1.68 torchao==0.18.0
# trainperf runs from the source tree (PYTHONPATH=src): an editable install would need hatchling,
# which the machine cannot fetch. At most 8 files come back from $OUT: this writes 3.
set -uo pipefail
DATA=${DATA:-bench/gpu_data}
export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

if [ "${1:-}" = "prepare" ]; then
    exec python3 -m trainperf data prepare stdlib --tokenizer bpe --vocab-size 2048 --out "$DATA/tiny"
fi
if [ ! -f "$DATA/tiny/meta.json" ]; then
    echo "bench/gpu.sh: $DATA/tiny is not prepared: run 'bash bench/gpu.sh prepare' here and carry $DATA" >&2
    exit 2
fi
if [ "${1:-}" = "--dry" ]; then
    OUT=${OUT:-/tmp/trainperf-gpu-dry}
    exec timeout 1500 python3 bench/gpu_rows.py all --dry --device cpu --out "$OUT" --data "$DATA" ${ROWS:+--rows "$ROWS"}
fi

OUT=${OUT:-bench/results/gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, torchao, trainperf, mlperf_logging; print('torch', torch.__version__, 'torchao', torchao.__version__)"
} 2>&1 | tee "$OUT/gpu.txt"
# the rows' own limits add up to 420 s; this one only catches a hang between them
timeout 450 python3 bench/gpu_rows.py all --device cuda --out "$OUT" --data "$DATA" ${ROWS:+--rows "$ROWS"} 2>&1 \
    | tee -a "$OUT/gpu.txt"
ls "$OUT"
