"""The GLUE suite's wall time (`score_glue`, the glue stage's library call: every task fine-tuned
over seeds, scored, every output written), this checkout against another (`--baseline`, e.g.
a clone at the commit before the unpadded encoder), on the same GLUE folder, model and threads.

The folder is written as tests/helpers/glue_files.py writes it (GLUE's layout, headers, quirks),
with each text lengthened by filler words to GLUE-like lengths: single sentences around 16
tokens (SST-2, CoLA), pairs around 40 in all (MRPC, STS-B, RTE), a long tail cut at
`glue.max_seq_length`. The model is BERT-tiny's shape with random weights over a vocabulary
trained on the folder (the cost does not depend on what the weights hold). Each checkout runs
the suite in a process of its own (its code first on PYTHONPATH), in turn, `--rounds` times;
the median counts. The last line is machine-readable:

    glue_suite_vs_baseline=X.XX

    git clone -q . /tmp/base && git -C /tmp/base checkout -q <commit before>
    PYTHONPATH=. python benchmarks/glue_suite.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
FILLER = ["movie", "the", "plot", "was", "quite", "good", "and", "not", "really", "bad", "a",
          "story", "of", "two", "men", "who", "said", "it", "is", "very"]


def write_folder(root: Path, rows: int) -> None:
    """tests/helpers/glue_files.py's folder, its texts lengthened to GLUE-like token counts."""
    sys.path.insert(0, str(REPO / "tests"))
    from helpers import glue_files

    plain = glue_files.glue_row
    rng = np.random.default_rng(0)

    def filler(median: float) -> str:
        count = int(np.clip(rng.lognormal(math.log(median), 0.55), 1, 150))
        return " ".join(FILLER[i] for i in rng.integers(0, len(FILLER), count))

    def glue_row(key, file_name, i):
        text, pair, label = plain(key, file_name, i)
        if pair is None:
            return f"{text} {filler(12)}", None, label
        return f"{text} {filler(14)}", f"{pair} {filler(14)}", label

    glue_files.glue_row = glue_row
    glue_files.write_glue_folder(root / "glue_data", tasks=TASKS, rows=rows)


def prepare(root: Path, rows: int) -> None:
    """The folder, a vocabulary of its words and a random BERT-tiny, as the glue tests make."""
    import torch

    from bertcore.data.vocab.config import VocabConfig
    from bertcore.data.vocab.files import read_vocab, save_vocab
    from bertcore.data.vocab.training import LineBatches, train_tokenizer
    from bertcore.model.bert import BertConfig, BertPretrainingModel
    from bertcore.saved.hf import save_model

    write_folder(root, rows)
    text = root / "text.txt"
    text.write_text("\n".join(cell for path in sorted((root / "glue_data").rglob("*.tsv"))
                              for line in path.read_text(encoding="utf-8").splitlines()
                              for cell in line.split("\t")), encoding="utf-8")
    vocab = VocabConfig(vocab_size=400, min_frequency=1)
    (root / "vocab").mkdir()
    save_vocab(train_tokenizer(LineBatches(text), vocab), root / "vocab")
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=len(read_vocab(root / "vocab")),
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    save_model(BertPretrainingModel(config), root / "pretrained")


def run_suite(root: Path, seeds: int, threads: int) -> float:
    """One glue stage's library call, untracked; its wall seconds."""
    import torch

    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.report import GluePaths, score_glue

    torch.set_num_threads(threads)
    out = Path(tempfile.mkdtemp(dir=root))
    config = GlueConfig(data=str(root / "glue_data"), tasks=TASKS, seeds=seeds, batch_size=32,
                        epochs=1, max_seq_length=128, device="cpu")
    paths = GluePaths(str(root / "pretrained"), str(root / "vocab"), str(out / "glue.json"),
                      str(out / "seeds.tsv"), str(out / "predictions"), str(out / "models"),
                      str(out / "runs"))
    start = time.perf_counter()
    score_glue(config, paths, None)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="another checkout of this repository (required)")
    parser.add_argument("--rows", type=int, default=256, help="rows per file")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_suite(Path(args.worker), args.seeds, args.threads)))
        return
    if not args.baseline:
        parser.error("--baseline: give another checkout of this repository")
    checkouts = {"this": REPO, "baseline": Path(args.baseline).resolve()}
    seconds: dict[str, list[float]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory() as workdir:
        prepare(Path(workdir), args.rows)
        for round_ in range(args.rounds):
            for name in checkouts if round_ % 2 == 0 else reversed(checkouts):
                env = {**os.environ, "PYTHONPATH": str(checkouts[name])}
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", workdir, "--seeds", str(args.seeds),
                     "--threads", str(args.threads)], env=env, check=True, text=True,
                    stdout=subprocess.PIPE)
                seconds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"tasks={','.join(TASKS)} rows={args.rows} seeds={args.seeds} "
          f"threads={args.threads} rounds={args.rounds} (checkouts in turn)")
    for name, values in seconds.items():
        print(f"{name:<9} median {medians[name]:7.1f} s  ({', '.join(f'{v:.1f}' for v in values)})")
    print(f"glue_suite_vs_baseline={medians['baseline'] / medians['this']:.2f}")


if __name__ == "__main__":
    main()
