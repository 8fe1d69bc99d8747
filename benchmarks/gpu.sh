#!/usr/bin/env bash
# Training throughput on one GPU: our BERT vs transformers' BertForPreTraining, BERT-base,
# sequence 128, bf16 autocast; sequences/s and MFU against a bf16 matmul of the same run.
# Finishes in under five minutes on one GPU.
#
#   benchmarks/gpu.sh              # the real run (GPU)
#   benchmarks/gpu.sh --dry-run    # tiny sizes, a few steps, runs on CPU: keeps it unbroken
#   benchmarks/gpu.sh --no-compile # skip the torch.compile variant of ours
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 290 "$PYTHON" benchmarks/gpu_step.py "$@"
