#!/usr/bin/env bash
# One prepared call for a lent GPU (H200): throughput vs transformers on the GPU configs, the FP8
# path, and the tiny benchmark to its target. Writes everything under ${OUT:-bench/results/gpu}.
#
# The GPU machine has torch 2.11, transformers, tokenizers, safetensors, rich, matplotlib and pyarrow,
# but no package index: mlperf-logging and torchao travel as wheels in .whl/ (git-ignored). Fetch
# them here first (Python 3.12 there):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any \
#       -d .whl mlperf-logging==4.1.68 torchao==0.18.0
# then run with carry [".whl"]:  OUT=$OUT bash bench/gpu.sh
# trainperf runs from the source tree (PYTHONPATH=src): an editable install would need hatchling,
# which the machine cannot fetch.
set -uo pipefail
OUT=${OUT:-bench/results/gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, trainperf, mlperf_logging; print('torch', torch.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"
timeout 420 python3 bench/throughput.py --configs tiny,gpt2-124m,llama-1b,llama-8b-4l --device cuda \
    --precisions bf16 --compile --fp8 --steps 10 --warmup 3 --json "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.txt"
# at most 8 files come back from $OUT: the run writes aside and only its log, metrics and summary return
timeout 150 python3 -m trainperf run --device cuda --set train.precision=bf16 --no-progress --out /tmp/tiny-run 2>&1 \
    | tail -15 | tee "$OUT/tiny.txt"
cp /tmp/tiny-run/summary.json /tmp/tiny-run/metrics.jsonl /tmp/tiny-run/result_0.txt "$OUT/" 2>/dev/null
ls "$OUT"
