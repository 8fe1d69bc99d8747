"""What more processes buy the default pretraining, and that they change no byte.

Runs `bert pretrain` with the project's params, shortened to `--steps` optimizer steps (the
default run has 1500; the same model, batch, micro-batches and schedule otherwise, no
periodic evaluation, probes or tracking), with 1 process on one core and with 2 processes on
two cores (`taskset`, `cpu.threads: 1`), side by side, and prints each one's wall time, their
ratio and the sha256 of both models (equal: the gradient is added in one fixed tree,
`bertcore/training/hardware/fixed_sum.py`). Each count also runs `--warmup-steps` steps once,
so that the start (imports, torchrun, the final evaluation) drops out of the per-step cost:

    t_step(W) = (wall(W, steps) - wall(W, warmup)) / (steps - warmup)

From those it projects 4, 8 and 16 cores, printing the formula: a micro-batch costs
t_mb = t_step(1) / M (M = train.micro_batches: one process computes all of them), and what
does not split over the processes, the reduction (gather, tree, the optimizer step every
process takes), c = t_step(2) - (M / 2) * t_mb, grows with the tree's height:

    t_step(W) ~ (M / W) * t_mb + c * log2(W)

(W > M needs train.micro_batches raised to W; a micro-batch's cost is taken to shrink with
its sequences, which small micro-batches do not quite do: an optimistic bound.)

    python benchmarks/pretrain_processes.py --data data --steps 60
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not an integer >= 1")
    return number


def run(data: Path, work: Path, steps: int, nproc: int) -> tuple[float, str]:
    """Wall seconds of a shortened default pretraining in `nproc` processes on as many
    cores, and the sha256 of the weights it wrote."""
    out = work / f"{nproc}-{steps}"
    shutil.rmtree(out, ignore_errors=True)
    cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:nproc])
    args = ["taskset", "-c", cores, sys.executable, "-m", "bertstages", "pretrain",
            "--params", str(REPO / "params.yaml"),
            "--samples", str(data / "samples"), "--vocab", str(data / "vocab"),
            "--corpus", str(data / "corpus"), "--checkpoints", str(out / "checkpoints"),
            "--out", str(out / "model"), "--metrics", str(out / "pretrain.json"),
            "--log", str(out / "log.tsv"), "--eval-log", str(out / "eval.tsv")]
    for setting in (f"train.max_steps={steps}", f"train.nproc_per_node={nproc}",
                    "train.eval_every=0", "train.checkpoint_every=0", "eval.probe_sentences=0",
                    "eval.max_batches=1", "tracking.enabled=false", "cpu.threads=1"):
        args += ["--set", setting]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"pretrain_processes.py: the run in {nproc} process(es) failed: "
                 f"{proc.stderr.strip().splitlines()[-1:]}")
    weights = (out / "model" / "model.safetensors").read_bytes()
    return wall, hashlib.sha256(weights).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(prog="pretrain_processes.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data"),
                        help="the folder with corpus/, vocab/ and samples/ (default: data)")
    parser.add_argument("--steps", type=positive, default=60)
    parser.add_argument("--warmup-steps", type=positive, default=5)
    parser.add_argument("--micro-batches", type=positive, default=4,
                        help="train.micro_batches of the params (the default: 4)")
    args = parser.parse_args()
    if args.steps <= args.warmup_steps:
        parser.error(f"--steps {args.steps} is not more than --warmup-steps "
                     f"{args.warmup_steps}")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("needs two cores")
    with tempfile.TemporaryDirectory(prefix="pretrain-processes-") as scratch:
        work = Path(scratch)
        walls, shas, per_step = {}, {}, {}
        for nproc in (1, 2):
            short, _ = run(args.data, work, args.warmup_steps, nproc)
            walls[nproc], shas[nproc] = run(args.data, work, args.steps, nproc)
            per_step[nproc] = (walls[nproc] - short) / (args.steps - args.warmup_steps)
            print(f"{nproc} process{'es' if nproc > 1 else ''}: {walls[nproc]:.1f} s for "
                  f"{args.steps} steps ({per_step[nproc]:.3f} s a step), sha256 "
                  f"{shas[nproc]}")
    print(f"wall time, 2 processes / 1: {walls[2] / walls[1]:.2f} "
          f"(per step: {per_step[2] / per_step[1]:.2f}); "
          f"same bytes: {'yes' if shas[1] == shas[2] else 'NO'}")
    m = args.micro_batches
    t_mb = per_step[1] / m
    c = per_step[2] - (m / 2) * t_mb
    print(f"projection: t_step(W) ~ (M / W) * t_mb + c * log2(W), M = {m}, "
          f"t_mb = t_step(1) / M = {t_mb:.4f} s, c = t_step(2) - (M / 2) * t_mb = {c:.4f} s")
    for cores in (4, 8, 16):
        projected = (m / cores) * t_mb + c * math.log2(cores)
        print(f"  {cores:2d} cores: {projected:.3f} s a step, {per_step[1] / projected:.1f}x "
              f"one process" + (f" (train.micro_batches: {cores})" if cores > m else ""))
    print(f"ratio_2_over_1={walls[2] / walls[1]:.3f} same_bytes={int(shas[1] == shas[2])}")


if __name__ == "__main__":
    main()
