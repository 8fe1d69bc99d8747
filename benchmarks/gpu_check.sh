#!/usr/bin/env bash
# The device check (benchmarks/gpu_check.py): the pretrain, resume and DDP checks, BERT-base train
# steps ours vs transformers (eager vs eager, compiled vs compiled), fp16, host syncs over the
# real data path; within a deadline (GPU_CHECK_DEADLINE, default 300 s), the costly parts only
# if they fit. Its last line is the summary, printed whatever happens (a failure, the deadline,
# SIGTERM); gpu_check.json holds the same, rewritten as each part ends.
#
#   bash benchmarks/gpu_check.sh                          # on the GPU machine: python3, no install
#   bash benchmarks/gpu_check.sh --parts step_s512_compiled   # a rerun of some parts
#   bash benchmarks/gpu_check.sh --dry-run                # tiny sizes on the CPU, no mlflow/dvc
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEADLINE=${GPU_CHECK_DEADLINE:-300}
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=true PYTHONUNBUFFERED=1
# A machine without pip access may lack a dependency of the stages (pydantic, on some GPU images):
# wheels laid in .whl/ (docs/development.md) are installed for this run alone, outside the repo.
if [ -d .whl ] && ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
  site=$(mktemp -d)
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:$site"
fi
# The check stops itself at its deadline; timeout is the backstop: SIGTERM 20 s later (the
# check prints its summary on it), SIGKILL 10 s after that.
exec timeout -k 10 $((DEADLINE + 20)) "$PYTHON" -u benchmarks/gpu_check.py --deadline "$DEADLINE" "$@"
