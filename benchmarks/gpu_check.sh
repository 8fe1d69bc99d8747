#!/usr/bin/env bash
# The device check: BERT-base train step (s128, s512; ours eager, compiled, transformers),
# `bert pretrain` on the GPU with a checkpoint, an extension and a resume check, DDP over NCCL
# under torchrun, fp16 with a GradScaler. Under 8 minutes on an H200; the last line is
#   gpu_check: seq_per_s=... compiled_seq_per_s=... vs_transformers=...x util=... mfu=... ...
#
#   bash benchmarks/gpu_check.sh              # on the GPU machine: python3, no install step
#   bash benchmarks/gpu_check.sh --dry-run    # tiny sizes on the CPU, mlflow/dvc unimportable
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=true
exec timeout 480 "$PYTHON" benchmarks/gpu_check.py "$@"
