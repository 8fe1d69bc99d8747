"""`bert glue` end to end (the command as a user runs it: its start, every fine-tune with its
record, the staged outputs), the fine-tunes in worker processes (`glue.workers`, 0: one per
core) against one after another in the stage's process (`glue.workers: 1`) and, with
`--baseline`, against another checkout (today's code: a clone of main), side by side on the
same GLUE folder, model and params, in turn, `--rounds` times; medians count, and the outputs'
bytes (glue.json, its details and items, the seeds, the predictions) are checked the same.

The folder and model are benchmarks/glue_suite.py's: GLUE's layout with GLUE-like lengths,
BERT-tiny's shape with random weights. `--profile` instead runs this checkout's suite once
under cProfile (one worker: the stage's own process) and prints where its time goes. The last
line is machine-readable:

    glue_workers_vs_baseline=X.XX   (the time with workers over the baseline's: < 1 is faster;
                                     glue_workers_vs_one=X.XX without --baseline)

    git clone -q . /tmp/base && git -C /tmp/base checkout -q <main>
    PYTHONPATH=. python benchmarks/glue_workers.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import hashlib
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import glue_suite  # noqa: E402  (its folder and model)

COMPARED = ("glue.json", "glue_details.json", "glue_items.json", "seeds.tsv", "seeds.png")


def write_params(root: Path, tasks: list[str], seeds: int, epochs: float) -> None:
    params = {"glue": {"data": str(root / "glue_data"), "tasks": tasks, "seeds": seeds,
                       "batch_size": 32, "epochs": epochs, "max_seq_length": 128,
                       "device": "cpu"},
              "tracking": {"enabled": False}}
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")


PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> None:
    """This process adopts the orphans of the commands it starts (a fork server outlives its
    stage for a moment): `reap_orphans` then counts their CPU time too."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans() -> None:
    """Wait for every process this one adopted (their CPU time then counts as its children's)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_glue(checkout: Path, root: Path, out: Path, workers: int | None) -> tuple[float, float]:
    """`bert glue` with `checkout`'s code (a process of its own); its wall seconds and the CPU
    seconds of all its processes."""
    workers_set = [] if workers is None else ["--set", f"glue.workers={workers}"]
    command = [sys.executable, "-m", "bertstages", "glue", *workers_set,
               "--model", str(root / "pretrained"), "--vocab", str(root / "vocab"),
               "--metrics", str(out / "glue.json"), "--seeds", str(out / "seeds.tsv"),
               "--predictions", str(out / "predictions"), "--out", str(out / "models"),
               "--runs", str(out / "runs")]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    start, cpu = time.perf_counter(), cpu_seconds()
    subprocess.run(command, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    reap_orphans()
    return wall, cpu_seconds() - cpu


def digests(out: Path) -> dict[str, str]:
    files = [out / name for name in COMPARED] + sorted((out / "predictions").rglob("*.tsv"))
    return {str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in files}


def profile(root: Path, top: int) -> None:
    """This checkout's suite once in this process, under cProfile: the time of each part."""
    from bertcore.common.config import CpuConfig
    from bertcore.common.cpu import pin_cpu
    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.report import GluePaths, score_glue

    pin_cpu(CpuConfig())
    settings = yaml.safe_load((root / "params.yaml").read_text())["glue"]
    out = root / "profiled"
    paths = GluePaths(str(root / "pretrained"), str(root / "vocab"), str(out / "glue.json"),
                      str(out / "seeds.tsv"), str(out / "predictions"), str(out / "models"),
                      str(out / "runs"))
    profiler = cProfile.Profile()
    one = {"workers": 1} if "workers" in GlueConfig.__dataclass_fields__ else {}  # today's: none
    profiler.runcall(score_glue, GlueConfig(**settings, **one), paths, None)
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(r"bertcore|charts|matplotlib/pyplot", top)
    stats.print_stats(r"optimizer.py:.*__init__|_dynamo/__init__|matplotlib/__init__|"
                      r"run_backward|built-in method torch._C._nn.linear", 12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="another checkout of this repository (today's)")
    parser.add_argument("--tasks", default="sst2,mrpc", help="comma-separated task keys")
    parser.add_argument("--rows", type=int, default=256, help="rows per file")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile this checkout once")
    parser.add_argument("--without-one", action="store_true",
                        help="leave out glue.workers: 1 (this checkout in one process)")
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    glue_suite.TASKS[:] = tasks  # the folder holds these tasks alone
    with tempfile.TemporaryDirectory() as workdir:
        root = Path(workdir)
        # the model's weights drawn in a process of its own: this one pins the CPU to profile
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import glue_suite; glue_suite.TASKS[:] = sys.argv[4].split(','); "
                        "glue_suite.prepare(__import__('pathlib').Path(sys.argv[2]), "
                        "int(sys.argv[3]))", str(REPO / "benchmarks"), workdir,
                        str(args.rows), args.tasks], check=True)
        write_params(root, tasks, args.seeds, args.epochs)
        if args.profile:
            profile(root, 40)
            return
        ways = {"workers": (REPO, 0)} if args.without_one else {"workers": (REPO, 0),
                                                                 "one": (REPO, 1)}
        if args.baseline:
            ways["baseline"] = (Path(args.baseline).resolve(), None)
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        outputs: dict[str, dict[str, str]] = {}
        adopt_orphans()
        for round_ in range(args.rounds):
            for name in ways if round_ % 2 == 0 else reversed(ways):
                out = root / f"out-{name}"
                shutil.rmtree(out, ignore_errors=True)
                checkout, workers = ways[name]
                wall, used = run_glue(checkout, root, out, workers)
                seconds[name].append(wall)
                cpu[name].append(used)
                outputs[name] = digests(out)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"tasks={args.tasks} rows={args.rows} seeds={args.seeds} epochs={args.epochs} "
          f"rounds={args.rounds} cores={len(os.sched_getaffinity(0))} (in turn, wall clock)")
    for name, values in seconds.items():
        print(f"{name:<9} median {medians[name]:7.1f} s  ({', '.join(f'{v:.1f}' for v in values)})"
              f"  CPU median {statistics.median(cpu[name]):7.1f} s  "
              f"({', '.join(f'{v:.1f}' for v in cpu[name])})")
    same = all(digests_ == outputs["workers"] for digests_ in outputs.values())
    print(f"outputs the same bytes: {same}")
    base = "baseline" if args.baseline else "one"  # the time with workers over base's
    if base not in medians:
        return
    print(f"glue_workers_vs_{base}={medians['workers'] / medians[base]:.2f}")


if __name__ == "__main__":
    main()
