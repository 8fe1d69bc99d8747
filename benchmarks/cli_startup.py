"""How long `bert` takes to answer without computing: its help, each command's help, and each
stage's refusal of a bad value in params, in a fresh interpreter each time (what a test that
starts `python -m bertstages` pays before the command does anything). With `--against DIR`
(another checkout, e.g. a worktree of the branch before a change) the same commands run there
too, alternating, and a ratio column compares them; the TORCH column says whether torch was
imported (`-X importtime`). Times are the best of `--repeat` runs.

    python benchmarks/cli_startup.py [--against ../before] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# (label, arguments of `bert`): the help of every command, and a bad value for each stage
CASES = [
    ("--help", ["--help"]),
    *[(f"{name} --help", [name, "--help"]) for name in (
        "corpus", "vocab", "samples", "pretrain", "evaluate", "export", "finetune", "prune",
        "fill-mask", "nsp")],
    ("corpus bad", ["corpus", "--set", "corpus.workers=x"]),
    ("vocab bad", ["vocab", "--set", "vocab.vocab_size=x"]),
    ("samples bad", ["samples", "--set", "samples.max_seq_length=x"]),
    ("pretrain bad", ["pretrain", "--set", "train.learning_rate=x"]),
    ("evaluate bad", ["evaluate", "--set", "eval.batch_size=x"]),
    ("export bad", ["export", "--set", "export.nothing=1"]),
    ("finetune bad", ["finetune", "--set", "finetune.epochs=x"]),
    ("prune bad", ["prune", "--set", "prune.batch_size=x"]),
]


def run_once(repo: Path, args: list[str]) -> tuple[float, bool]:
    """Seconds for `python -m bertstages ARGS` in `repo` (its params.yaml), and whether it
    imported torch."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bertstages", *args],
                          cwd=repo, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    imported_torch = any(line.rpartition("|")[2].strip() == "torch"
                         for line in done.stderr.splitlines())
    return seconds, imported_torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trees = [HERE] + ([args.against.resolve()] if args.against else [])
    header = f"{'command':<22}" + "".join(f"{'s ' + t.name:>22}{'torch':>7}" for t in trees)
    print(header + (f"{'ratio':>8}" if args.against else ""))
    for label, case in CASES:
        best = {t: (float("inf"), False) for t in trees}
        for _ in range(args.repeat):
            for tree in trees:
                seconds, torch_in = run_once(tree, case)
                best[tree] = (min(best[tree][0], seconds), torch_in)
        row = f"{label:<22}" + "".join(f"{best[t][0]:>22.2f}{'yes' if best[t][1] else 'no':>7}"
                                       for t in trees)
        if args.against:
            row += f"{best[trees[1]][0] / best[HERE][0]:>8.1f}"
        print(row)


if __name__ == "__main__":
    main()
