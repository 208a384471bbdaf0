#!/usr/bin/env bash
# One prepared call for a lent GPU (H200): throughput vs transformers on the GPU configs, the FP8
# path, and the tiny benchmark to its target. Writes everything under ${OUT:-bench/results/gpu}.
# Usage on the device machine:  OUT=$OUT bash bench/gpu.sh
set -uo pipefail
OUT=${OUT:-bench/results/gpu}
mkdir -p "$OUT"
python -m pip install --quiet --no-deps -e . 2>&1 | tail -1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
timeout 420 python bench/throughput.py --configs tiny,gpt2-124m,llama-1b,llama-8b-4l --device cuda \
    --precisions bf16 --compile --fp8 --steps 10 --warmup 3 --json "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.txt"
timeout 150 trainperf run --device cuda --set train.precision=bf16 --no-progress --out "$OUT/tiny-run" 2>&1 \
    | tail -15 | tee "$OUT/tiny.txt"
