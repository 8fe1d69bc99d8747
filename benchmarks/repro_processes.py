"""The whole default pipeline (`dvc repro` of this repository's dvc.yaml with its params.yaml
and the built-in corpus) in two fresh git + DVC copies, side by side: on one core
(`train.nproc_per_node: 1`, `finetune.workers: 1`, `glue.workers: 1`) and with the defaults
(processes and workers as the cores hold). The stages run one at a time in the pipeline's
order (`dvc repro -s STAGE`), the two copies in turn, each first every other stage, so that
a machine's other load falls on both alike. It prints each stage's wall seconds in both,
the total of each, and both pretrained weights' sha256, which must be equal (the pipeline's
promise: the same bytes for any process count), then which DVC outputs differ, if any.

The default run takes about 20 minutes a copy on 2 cores. `--steps N` makes it a smoke
test of a few minutes: N pretraining, fine-tuning and recovery steps, one pass of samples,
one seed pair, and `--set KEY=VALUE` edits both copies' params further. The last line is
machine-readable:

    repro_auto_vs_one=X.XX   (the defaults' total wall time over one core's: < 1 is faster)

    PYTHONPATH=. python benchmarks/repro_processes.py
    PYTHONPATH=. python benchmarks/repro_processes.py --steps 4   # the smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # dvc and bert beside this Python
# What a copy of the pipeline holds: its code, recipes, stages and params, DVC's settings
COPIED = ("bertcore", "bertstages", "params", "dvc.yaml", "params.yaml", ".gitignore",
          ".dvc/config", ".dvc/plots")
ONE_CORE = {"train.nproc_per_node": 1, "finetune.workers": 1, "glue.workers": 1}
ARMS = ("one", "auto")


def at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is not an integer >= {low}")
        return value
    return parse


def edit(text: str) -> tuple[str, object]:
    """`section.key=value` (the value as YAML) as a params edit."""
    key, sep, value = text.partition("=")
    if not sep or "." not in key:
        raise argparse.ArgumentTypeError(f"{text!r} is not section.key=value")
    return key, yaml.safe_load(value)


def smoke_edits(steps: int) -> dict[str, object]:
    """The edits of `--steps`: every count of steps `steps`, one pass of samples, two seeds."""
    return {"train.max_steps": steps, "train.warmup_steps": steps // 2,
            "train.eval_every": 0, "samples.dupe_factor": 1, "finetune.max_steps": steps,
            "finetune.seeds": 2, "prune.batches": 2, "prune.recovery_steps": steps,
            "prune.throughput_steps": 1}


def write_params(repo: Path, edits: dict[str, object]) -> None:
    path = repo / "params.yaml"
    params = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key, value in edits.items():
        section, name = key.split(".", 1)
        params.setdefault(section, {})[name] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def environment() -> dict[str, str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "bench", "GIT_COMMITTER_NAME": "bench",
           "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    for name in ("PYTHONPATH", "MLFLOW_TRACKING_URI", "OMP_NUM_THREADS"):
        env.pop(name, None)  # each copy runs its own code, store and thread counts
    return env


def run(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(command, cwd=cwd, env={**env, "PYTHONPATH": str(cwd)},
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed in {cwd}:\n{done.stdout}{done.stderr}")


def copy_items(repo: Path, items: tuple[str, ...]) -> None:
    for item in items:
        source, target = REPO / item, repo / item
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)


def new_copy(root: Path, name: str, edits: dict[str, object], env: dict[str, str]) -> Path:
    """A fresh git + DVC repository holding the pipeline, its params edited."""
    repo = root / name
    copy_items(repo, tuple(item for item in COPIED if not item.startswith(".dvc/")))
    write_params(repo, edits)
    run(["git", "init", "-q", "-b", "main"], repo, env)
    run([str(BIN / "dvc"), "init", "-q"], repo, env)
    copy_items(repo, tuple(item for item in COPIED if item.startswith(".dvc/")))
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "pipeline"], repo, env)
    return repo


def stage_order(dvc_yaml: Path) -> list[str]:
    """The stages in an order that runs each after those whose outputs it reads (dvc.yaml's
    order among the ready ones)."""
    stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    outs = {name: [next(iter(o)) if isinstance(o, dict) else o for kind in
                   ("outs", "metrics", "plots") for o in stage.get(kind, [])]
            for name, stage in stages.items()}

    def reads(name: str, other: str) -> bool:
        return any(dep == out or dep.startswith(f"{out.rstrip('/')}/")
                   or out.startswith(f"{dep.rstrip('/')}/")
                   for dep in stages[name].get("deps", []) for out in outs[other])

    order: list[str] = []
    while len(order) < len(stages):
        order.append(next(name for name in stages if name not in order and all(
            other in order for other in stages if other != name and reads(name, other))))
    return order


def weights_sha256(repo: Path) -> str:
    details = json.loads((repo / "metrics" / "pretrain_details.json").read_text())
    return details["model_sha256"]


def differing_outputs(one: Path, auto: Path) -> list[str]:
    """The DVC outputs (dvc.lock's md5) that differ between the copies."""
    def outs(repo: Path) -> dict[str, str]:
        lock = yaml.safe_load((repo / "dvc.lock").read_text())
        return {out["path"]: out.get("md5", "") for stage in lock["stages"].values()
                for out in stage.get("outs", [])}
    first, second = outs(one), outs(auto)
    return sorted(path for path in first.keys() | second.keys()
                  if first.get(path) != second.get(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=at_least(2),
                        help="a smoke test: this many steps of each training, one sample pass")
    parser.add_argument("--set", dest="edits", type=edit, action="append", default=[],
                        metavar="KEY=VALUE", help="a params edit of both copies (repeatable)")
    parser.add_argument("--keep", help="leave the two copies in this folder")
    args = parser.parse_args()
    edits = {**(smoke_edits(args.steps) if args.steps else {}), **dict(args.edits)}
    env = environment()
    root = Path(args.keep or tempfile.mkdtemp(prefix="repro-processes-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        repos = {"one": new_copy(root, "one", {**edits, **ONE_CORE}, env),
                 "auto": new_copy(root, "auto", edits, env)}
        seconds: dict[str, dict[str, float]] = {arm: {} for arm in ARMS}
        stages = stage_order(REPO / "dvc.yaml")
        print(f"{'stage':<10} {'one core':>9} {'defaults':>9}  cores={len(os.sched_getaffinity(0))}"
              f" edits={edits or 'none'}", flush=True)
        for index, stage in enumerate(stages):
            for arm in ARMS if index % 2 == 0 else reversed(ARMS):
                start = time.perf_counter()
                run([str(BIN / "dvc"), "repro", "-q", "-s", stage], repos[arm], env)
                seconds[arm][stage] = time.perf_counter() - start
            print(f"{stage:<10} {seconds['one'][stage]:9.1f} {seconds['auto'][stage]:9.1f}",
                  flush=True)
        totals = {arm: sum(seconds[arm].values()) for arm in ARMS}
        print(f"{'total':<10} {totals['one']:9.1f} {totals['auto']:9.1f}")
        shas = {arm: weights_sha256(repos[arm]) for arm in ARMS}
        for arm in ARMS:
            print(f"weights sha256 ({arm}): {shas[arm]}")
        print(f"weights the same bytes: {shas['one'] == shas['auto']}")
        differ = differing_outputs(repos["one"], repos["auto"])
        print(f"DVC outputs that differ: {', '.join(differ) if differ else 'none'}")
        print(f"repro_auto_vs_one={totals['auto'] / totals['one']:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
