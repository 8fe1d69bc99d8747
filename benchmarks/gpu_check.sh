#!/usr/bin/env bash
# The device check: its parts in order, each `benchmarks/gpu_check.py PART` in a process of its
# own under its own time limit (`timeout`), none started past GPU_CHECK_DEADLINE (default 300 s);
# a line per part as it ends, the summary line last whatever happens (a failure, a limit, a
# signal). docs/development.md says what each part and figure means.
#
#   bash benchmarks/gpu_check.sh                            # on the GPU machine: python3
#   bash benchmarks/gpu_check.sh --parts data,fp16 --workdir models/gpu_check   # some parts again
#   bash benchmarks/gpu_check.sh --dry-run                  # tiny sizes on the CPU, no mlflow/dvc
set -uo pipefail
cd "$(dirname "$0")/.." && repo=$PWD  # relative paths below: from the repo root
PYTHON=${PYTHON:-python3}
deadline=${GPU_CHECK_DEADLINE:-300}
mode=() dry=0 chosen="" work="" keep=0 results=gpu_check.txt
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) mode+=(--dry-run) dry=1 ;;
    --peak-tflops) mode+=(--peak-tflops "$2"); shift ;;  # dense bf16 peak (H100/H200 SXM: 989)
    --parts) chosen=$2; shift ;;  # comma-separated (device always runs first)
    --workdir) work=$2; keep=1; shift ;;  # kept; a rerun with the same params reuses its data
    --keep) keep=1 ;;
    --results) results=$2; shift ;;  # a line per part as it ends, then the summary
    *) echo "unknown option $1 (see the head of $0)" >&2; exit 2 ;;
  esac
  shift
done
# the parts, the essential ones first, with their time limits in seconds
if [ "$dry" = 1 ]; then
  title="gpu_check (dry run)" kind=cpu ddp=gloo short=32 long=64
else
  title="gpu_check" kind=cuda ddp=nccl short=128 long=512
fi
parts=(data:120 "pretrain_$kind:180" "resume_$kind:90" "ddp_$ddp:180" "step_s${short}_eager:120"
       fp16:90 "step_s${short}_compiled:300" datapath:240 "phase2_$kind:180"
       "step_s${long}_eager:120" "step_s${long}_compiled:300")
if [ -n "$chosen" ]; then
  known=" ${parts[*]%%:*} " picked=()
  for name in ${chosen//,/ }; do
    [[ $known == *" $name "* ]] || { echo "unknown part $name; the parts are:$known" >&2; exit 2; }
  done
  for part in "${parts[@]}"; do [[ ,$chosen, == *",${part%%:*},"* ]] && picked+=("$part"); done
  parts=("${picked[@]}")
fi
parts=(device:60 "${parts[@]}")

if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
[ -n "$work" ] || work=$(mktemp -d -t gpu_check-XXXXXX)
mkdir -p "$work" && work=$(cd "$work" && pwd) || exit 1
out=$work/check && rm -rf "$out" && mkdir -p "$out" && : >"$results" || exit 1
results=$(cd "$(dirname "$results")" && pwd)/$(basename "$results")
cp "$repo/params.yaml" "$work/params.yaml"
[[ $PYTHON != */* ]] || PYTHON=$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=true PYTHONUNBUFFERED=1
if [ "$dry" = 1 ]; then  # absent on the GPU machine
  for name in mlflow dvc; do
    mkdir -p "$work/blocked/$name"
    echo "raise ImportError('$name is not installed on the GPU machine (gpu_check --dry-run)')" \
      >"$work/blocked/$name/__init__.py"
  done
  PYTHONPATH="$work/blocked:$PYTHONPATH"
fi
# A machine without pip access may lack a dependency of the stages (pydantic, on some GPU images):
# wheels laid in .whl/ (docs/development.md) are installed for this run alone, outside the repo.
if [ -d "$repo/.whl" ] && ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" \
    "$repo"/.whl/*.whl && PYTHONPATH="$PYTHONPATH:$work/site"
fi

declare -A status
for part in "${parts[@]}"; do status[${part%%:*}]=not_run; done
began=$SECONDS running="" stopped_by=""

finish() {  # the summary line, to the output and the results file
  local statuses="" figures="" context="" name
  for part in "${parts[@]}"; do
    name=${part%%:*}
    statuses+=" $name=${status[$name]}"
    if [ -s "$out/$name.figures" ] && [ "$name" = device ]; then context=$(<"$out/$name.figures")
    elif [ -s "$out/$name.figures" ]; then figures+=" $(<"$out/$name.figures")"; fi
  done
  local ending="deadline=$deadline seconds=$((SECONDS - began))"
  [ -z "$stopped_by" ] || ending="stopped_by=$stopped_by $ending"
  local line="$title:$statuses |${figures:+$figures |} ${context:+$context }$ending"
  echo "$line" && echo "$line" >>"$results"
  [ "$keep" = 1 ] || rm -rf "$work"
}

on_signal() {  # end the running part (its whole process group), then the summary
  trap '' TERM INT HUP
  stopped_by=$1
  local job
  for job in $(jobs -p); do kill -TERM "$job" 2>/dev/null; done  # timeout passes it on
  wait
  [ -z "$running" ] || { status[$running]=stopped
                          echo "$running stopped $((SECONDS - start)) $1" >>"$results"; }
  finish
  exit "$2"
}
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGHUP 129' HUP

cd "$work" || exit 1  # the parts run there
code=0
for part in "${parts[@]}"; do
  name=${part%%:*} left=$((deadline - (SECONDS - began)))
  limit=$(( ${part#*:} < left ? ${part#*:} : left ))
  if [ "$limit" -le 0 ]; then
    status[$name]=skipped && echo "$name skipped 0 the deadline came" >>"$results"
    echo "[$(printf %5d $((SECONDS - began))) s] $name: skipped (the deadline came)"
    continue
  fi
  start=$SECONDS running=$name  # from here a signal stops this part
  echo "[$(printf %5d $((SECONDS - began))) s] >> $name (at most ${limit} s)"
  # a background job, so that a signal to this script is handled at once, not after the part
  timeout -k 10 "$limit" "$PYTHON" -u "$repo/benchmarks/gpu_check.py" "$name" --out "$out" \
    "${mode[@]}" &
  wait $!
  rc=$? running=""
  case $rc in
    0) status[$name]=ok ;;
    124|137) status[$name]=cut && echo "cut at its limit of $limit s" >"$out/$name.detail"
             code=124 ;;
    *) status[$name]=FAIL && [ "$code" = 124 ] || code=1 ;;
  esac
  detail=$(head -c 200 "$out/$name.detail" 2>/dev/null || echo "exit $rc")
  echo "$name ${status[$name]} $((SECONDS - start)) $detail" >>"$results"
  echo "[$(printf %5d $((SECONDS - began))) s] $name: ${status[$name]} ($detail) ($((SECONDS - start)) s)"
  [ "$name" != device ] || [ "$rc" = 0 ] || break  # no device: nothing else can run
done
finish
exit "$code"
