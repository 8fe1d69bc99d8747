"""The default recipe against an earlier one, side by side on one corpus: the same data, both
pretrainings at once (one thread each, one core each on a 2-core machine, so that both see
the same machine), then each scored by `bert evaluate` and `bert probe`.

1. corpus -> vocab -> samples on `--source` (default: the built-in corpus), once, in a
   scratch folder, with `params.yaml` (plus `--set`), tracking off;
2. `bert pretrain` twice at once: `params.yaml` as it is ("recipe"), and the same with the
   `--before` overrides ("before", default: the defaults before docs/recipe.md's recipe:
   BERT-tiny as published, BERT's init, no probes while pretraining);
3. `bert evaluate` and `bert probe` of each model, and with `--finetune` `bert finetune`.

It prints one row per model (val MLM and NSP accuracy, the probes, pretrain seconds) and the
ratios recipe / before, the wall-time ratio included (both ran at the same time on the same
machine: the ratio is the cost of the recipe, whatever the machine's speed).

    python benchmarks/recipe.py                                       # the built-in corpus
    python benchmarks/recipe.py --source /usr/share/common-licenses --finetune
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEFORE = ("model.recipe=none", "eval.probe_sentences=0")
MODELS = ("before", "recipe")


def bert(stage: str, args: list[str], overrides: list[str], work: Path) -> subprocess.Popen:
    """`bert STAGE ARGS --set ...` started in `work` (tracking off, one thread)."""
    cmd = [sys.executable, "-m", "bertstages", stage, "--params", str(REPO / "params.yaml"),
           *args]
    for item in ["tracking.enabled=false", *overrides]:
        cmd += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log_path = work / f"{stage}-{args[-1].replace('/', '_')}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = log_path
    return proc


def wait(procs: dict[str, subprocess.Popen]) -> dict[str, float]:
    """Wait for every process; their wall clocks in seconds (a failure stops the script)."""
    started, seconds = time.perf_counter(), {}
    while len(seconds) < len(procs):
        for name, proc in procs.items():
            if name not in seconds and proc.poll() is not None:
                if proc.returncode != 0:
                    sys.exit(f"recipe.py: bert {proc.args[3]} ({name}) failed (exit "
                             f"{proc.returncode}); its log: {proc.log_path}")
                seconds[name] = time.perf_counter() - started
        time.sleep(0.2)
    return seconds


def prepare_data(source: str | None, overrides: list[str], work: Path) -> float:
    """corpus, vocab and samples, shared by both models; their wall clock in seconds."""
    data = [f"corpus.source={source}"] if source else []
    seconds = 0.0
    for stage, args in (("corpus", ["--out", "data/corpus", "--metrics", "m/corpus.json"]),
                        ("vocab", ["--metrics", "m/vocab.json", "--out", "data/vocab"]),
                        ("samples", ["--metrics", "m/samples.json", "--out", "data/samples"])):
        seconds += wait({stage: bert(stage, args, [*data, *overrides], work)})[stage]
    return seconds


def pretrain_both(overrides: list[str], before: list[str], work: Path) -> dict[str, float]:
    procs = {}
    for name in MODELS:
        changes = [*overrides, *(before if name == "before" else [])]
        procs[name] = bert("pretrain", ["--checkpoints", f"{name}/checkpoints", "--metrics",
                                        f"{name}/pretrain.json", "--log", f"{name}/log.tsv",
                                        "--eval-log", f"{name}/eval.tsv", "--out",
                                        f"{name}/model"], changes, work)
    return wait(procs)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def score(name: str, overrides: list[str], finetune: bool, work: Path) -> dict:
    model = ["--model", f"{name}/model"]
    wait({"evaluate": bert("evaluate", [*model, "--out", f"{name}/eval.json"], overrides, work),
          "probe": bert("probe", [*model, "--items", f"{name}/probe", "--out",
                                  f"{name}/probe.json"], overrides, work)})
    if finetune:
        wait({"finetune": bert("finetune", [*model, "--metrics", f"{name}/finetune.json",
                                            "--out", f"{name}/finetuned"], overrides, work)})
    val = read_json(work / name / "eval.json")["eval"]
    probe = read_json(work / name / "probe.json")["probe"]["builtin"]
    row = {"mlm": val["mlm_accuracy"], "nsp": val["nsp_accuracy"],
           "cloze_p1": probe["cloze"]["p_at_1"], "swapped": probe["swapped_pairs"]["accuracy"],
           "replaced": probe["replaced_pairs"]["accuracy"]}
    if finetune:
        finetuned = read_json(work / name / "finetune.json")["finetune"]
        row["finetune_gain"] = finetuned["gain"]["accuracy"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="corpus.source (default: params.yaml's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="for both models (repeatable)")
    parser.add_argument("--before", action="append", metavar="SECTION.KEY=VALUE",
                        help=f"what the earlier recipe changes (default: {' '.join(BEFORE)})")
    parser.add_argument("--finetune", action="store_true", help="also the finetune stage")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="recipe-"))
    work.mkdir(parents=True, exist_ok=True)
    data_seconds = prepare_data(args.source, args.overrides, work)
    seconds = pretrain_both(args.overrides, args.before or list(BEFORE), work)
    rows = {name: score(name, args.overrides, args.finetune, work) for name in MODELS}
    corpus = read_json(work / "m" / "corpus.json")
    print(f"corpus: {args.source or 'params.yaml'} ({corpus['documents']} documents, "
          f"{corpus['characters']} characters); work folder {work}")
    columns = list(rows["before"])
    print(f"{'model':8s} " + " ".join(f"{c:>13s}" for c in [*columns, "pretrain_s"]))
    for name in MODELS:
        values = [rows[name][c] for c in columns] + [seconds[name]]
        print(f"{name:8s} " + " ".join(f"{v:13.4f}" for v in values))
    ratios = [rows["recipe"][c] / rows["before"][c] if rows["before"][c] else float("nan")
              for c in columns] + [seconds["recipe"] / seconds["before"]]
    print(f"{'ratio':8s} " + " ".join(f"{v:13.3f}" for v in ratios))
    corpus_to_pretrain = [data_seconds + seconds[name] for name in MODELS]
    print("ratio = recipe / before; pretrain_s: both ran at once, one thread each")
    print(f"corpus to pretrain: data stages {data_seconds:.1f} s (shared) + pretrain: before "
          f"{corpus_to_pretrain[0]:.1f} s, recipe {corpus_to_pretrain[1]:.1f} s, ratio "
          f"{corpus_to_pretrain[1] / corpus_to_pretrain[0]:.3f}")


if __name__ == "__main__":
    main()
