"""Recipes side by side on one corpus, over pretraining seeds, decided by `bert compare`.

1. corpus -> vocab -> samples on `--source` (default: the built-in corpus), once, in a
   scratch folder, with `params.yaml` (plus `--set`), tracking off;
2. `bert pretrain` of every arm and seed, `--jobs` at a time (one thread each: on a 2-core
   machine two at once, each on its own core, so that all see the same machine). An arm is a
   name and the overrides it adds to `--set`; the default arms are "before" (the defaults
   before docs/recipe.md's recipe: BERT-tiny as published, BERT's init, no probes while
   pretraining) and "recipe" (params.yaml as it is);
3. `bert evaluate` and `bert probe` of each model (with `--finetune`, `bert finetune` too),
   into `<work>/<arm>-<seed>/metrics`;
4. `bert compare` of every arm against the first, its seeds joined: each figure and each
   difference with its 95% interval over seeds and items, and a verdict. Also written to
   `<work>/compare.md` and `<work>/compare.json`.

It also prints each arm's median pretraining wall time and its ratio to the first arm's (the
runs went `--jobs` at a time on the same machine: the ratio is the cost, whatever its speed).

    python benchmarks/recipe.py                                       # the built-in corpus
    python benchmarks/recipe.py --source kjv.jsonl --seeds 42,1,2 \\
        --arm "before model.recipe=none eval.probe_sentences=0" --arm recipe \\
        --arm "linear train.schedule=linear"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = ("before model.recipe=none eval.probe_sentences=0", "recipe")


def bert(stage: str, args: list[str], overrides: list[str], work: Path) -> subprocess.Popen:
    """`bert STAGE ARGS --set ...` started in `work` (tracking off, one thread)."""
    cmd = [sys.executable, "-m", "bertstages", stage, "--params", str(REPO / "params.yaml"),
           *args]
    for item in ["tracking.enabled=false", "cpu.threads=1", *overrides]:
        cmd += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log_path = work / f"{stage}-{args[-1].replace('/', '_')}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = log_path
    return proc


def run_all(jobs: dict[str, tuple], width: int, work: Path) -> dict[str, float]:
    """Run `jobs` (name -> bert()'s stage, args, overrides), `width` at a time; each one's wall
    clock in seconds (a failure stops the script)."""
    waiting, running, seconds = list(jobs), {}, {}
    while waiting or running:
        while waiting and len(running) < width:
            name = waiting.pop(0)
            running[name] = (bert(*jobs[name], work), time.perf_counter())
        for name, (proc, started) in list(running.items()):
            if proc.poll() is None:
                continue
            if proc.returncode != 0:
                sys.exit(f"recipe.py: bert {proc.args[3]} ({name}) failed (exit "
                         f"{proc.returncode}); its log: {proc.log_path}")
            seconds[name] = time.perf_counter() - started
            del running[name]
        time.sleep(0.2)
    return seconds


def prepare_data(source: str | None, overrides: list[str], work: Path) -> float:
    """corpus, vocab and samples, shared by every model; their wall clock in seconds (0 when
    `work` holds them already: more arms on the same data)."""
    if (work / "data" / "samples" / "meta.json").is_file():
        return 0.0
    data = [f"corpus.source={source}"] if source else []
    seconds = 0.0
    for stage, args in (("corpus", ["--out", "data/corpus", "--metrics", "m/corpus.json"]),
                        ("vocab", ["--metrics", "m/vocab.json", "--out", "data/vocab"]),
                        ("samples", ["--metrics", "m/samples.json", "--out", "data/samples"])):
        seconds += run_all({stage: (stage, args, [*data, *overrides])}, 1, work)[stage]
    return seconds


def pretrain_jobs(arms: dict[str, list[str]], seeds: list[int], overrides: list[str]) -> dict:
    jobs = {}
    for seed in seeds:
        for arm, changes in arms.items():
            run = f"{arm}-{seed}"
            jobs[run] = ("pretrain", ["--checkpoints", f"{run}/checkpoints", "--metrics",
                                      f"{run}/pretrain.json", "--log", f"{run}/log.tsv",
                                      "--eval-log", f"{run}/eval.tsv", "--out", f"{run}/model"],
                         [*overrides, *changes, f"train.seed={seed}"])
    return jobs


def score_jobs(runs: list[str], overrides: list[str], finetune: bool) -> dict:
    jobs = {}
    for run in runs:
        model = ["--model", f"{run}/model"]
        jobs[f"{run} evaluate"] = ("evaluate", [*model, "--out", f"{run}/metrics/eval.json"],
                                   overrides)
        jobs[f"{run} probe"] = ("probe", [*model, "--items", f"{run}/probe", "--out",
                                          f"{run}/metrics/probe.json"], overrides)
        if finetune:
            jobs[f"{run} finetune"] = ("finetune", [*model, "--out", f"{run}/finetuned",
                                                    "--metrics", f"{run}/metrics/finetune.json"],
                                       overrides)
    return jobs


def compare(arms: list[str], seeds: list[int], work: Path) -> None:
    sides = [",".join(f"{arm}-{seed}/metrics" for seed in seeds) for arm in arms]
    subprocess.run([sys.executable, "-m", "bertstages", "compare", *sides, "--names",
                    ",".join(arms), "--markdown", "compare.md", "--json", "compare.json"],
                   cwd=work, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)


def parse_arms(specs: list[str]) -> dict[str, list[str]]:
    """"NAME key=value key=value" -> {NAME: [key=value, ...]}."""
    arms = {}
    for spec in specs:
        name, *changes = spec.split()
        arms[name] = changes
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="corpus.source (default: params.yaml's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="for every arm (repeatable)")
    parser.add_argument("--arm", action="append", metavar='"NAME [SECTION.KEY=VALUE ...]"',
                        help="an arm and what it changes; the first is the baseline (default: "
                             + " and ".join(f'"{a}"' for a in ARMS) + ")")
    parser.add_argument("--seeds", default="42,1,2", help="train.seed of each run of an arm")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each")
    parser.add_argument("--finetune", action="store_true", help="also the finetune stage")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="recipe-"))
    work.mkdir(parents=True, exist_ok=True)
    arms = parse_arms(args.arm or list(ARMS))
    seeds = [int(seed) for seed in args.seeds.split(",")]
    data_seconds = prepare_data(args.source, args.overrides, work)
    seconds = run_all(pretrain_jobs(arms, seeds, args.overrides), args.jobs, work)
    run_all(score_jobs(list(seconds), args.overrides, args.finetune), args.jobs, work)
    corpus = json.loads((work / "m" / "corpus.json").read_text(encoding="utf-8"))
    print(f"corpus: {args.source or 'params.yaml'} ({corpus['documents']} documents, "
          f"{corpus['characters']} characters); data stages {data_seconds:.1f} s; work folder "
          f"{work}")
    compare(list(arms), seeds, work)
    medians = {arm: statistics.median(seconds[f"{arm}-{seed}"] for seed in seeds)
               for arm in arms}
    first = next(iter(arms))
    for arm, median in medians.items():
        print(f"pretrain {arm}: median {median:.1f} s of {len(seeds)} seeds, "
              f"{median / medians[first]:.3f}x {first}'s ({args.jobs} at once, one thread each)")


if __name__ == "__main__":
    main()
