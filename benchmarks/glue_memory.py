"""Peak memory of `bert glue` at BERT-base's shape: a suite against one fine-tune alone.

A GLUE folder of small files (tests/helpers/glue_files.py's layout: SST-2, MRPC, RTE), a vocabulary
trained on them and a model of BERT-base's shape (hidden 768, 12 layers, 12 heads, FFN 3072;
random weights, the vocabulary's few hundred tokens: 87 M parameters) are written to a
temporary folder; then `bert glue` runs there in a process of its own, a few optimizer steps
per fine-tune, tracking off, and its peak resident memory (ru_maxrss) is read once it ends:
first for 1 task x 1 seed (one fine-tune and the pretrained model), then for TASKS x SEEDS.
A suite that keeps nothing of a fine-tune beyond it peaks near the first figure.

    python benchmarks/glue_memory.py                        # 3 tasks x 3 seeds, 3 steps each
    python benchmarks/glue_memory.py --code /tmp/older      # the stage of another checkout

`--code` runs the stage from another checkout's code (e.g. `git archive REV | tar -x -C DIR`),
on the same files. The last line is machine-readable:

    peak_rss_mb=one:N,suite:N
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the GLUE folder's writer the tests use

from helpers.glue_files import write_glue_folder, write_glue_vocab  # noqa: E402

from bertcore.data.vocab.files import read_vocab  # noqa: E402
from bertcore.model.bert import BertConfig, BertPretrainingModel  # noqa: E402
from bertcore.saved.hf import save_model  # noqa: E402

TASKS = ["sst2", "mrpc", "rte"]
# a child's peak resident memory, read by a parent that waited for it alone
_PEAK_OF = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "sys.exit(done.returncode)")


def write_inputs(root: Path, rows: int) -> None:
    """The GLUE folder, a vocabulary of its words, a BERT-base-shaped model (random)."""
    write_glue_folder(root / "glue_data", tasks=TASKS, rows=rows)
    write_glue_vocab(root, vocab_size=400)
    config = BertConfig(vocab_size=len(read_vocab(root / "data" / "vocab")), hidden_size=768,
                        num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                        max_position_embeddings=512)
    torch.manual_seed(0)
    save_model(BertPretrainingModel(config), root / "models" / "pretrained")


def peak_rss_mb(root: Path, code: Path, tasks: list[str], seeds: int, steps: int) -> float:
    """`bert glue` on `tasks` x `seeds` with `code`'s stage: its peak RSS in MiB."""
    params = {"glue": {"data": "glue_data", "tasks": tasks, "seeds": seeds, "batch_size": 8,
                       "max_steps": steps, "max_seq_length": 64},
              "tracking": {"enabled": False}}
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    if "workers" in (code / "bertcore" / "downstream" / "config.py").read_text(encoding="utf-8"):
        params["glue"]["workers"] = 1  # the stage's own process fine-tunes: its peak is theirs
    env = {**os.environ, "PYTHONPATH": str(code)}
    # a folder of finished fine-tunes of its own, or the suite would reuse the single one's
    # (a checkout from before it has none)
    runs = (["--runs", str(root / "runs" / f"{len(tasks)}x{seeds}")]
            if "--runs" in (code / "bertstages" / "glue.py").read_text(encoding="utf-8") else [])
    done = subprocess.run([sys.executable, "-c", _PEAK_OF, sys.executable, "-m", "bertstages",
                           "glue", *runs], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bert glue failed:\n{done.stderr[-3000:]}")
    return int(done.stdout.split()[-1]) / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose stage runs")
    parser.add_argument("--tasks", type=int, default=3, choices=range(1, len(TASKS) + 1))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per fine-tune")
    parser.add_argument("--rows", type=int, default=32, help="rows per GLUE file")
    args = parser.parse_args()
    if args.seeds < 1 or args.steps < 1 or args.rows < 2:
        parser.error("--seeds and --steps must be >= 1, --rows >= 2")
    if not (args.code / "bertstages" / "glue.py").is_file():
        parser.error(f"--code {args.code} is not a checkout of this project")
    with tempfile.TemporaryDirectory(prefix="glue-memory-") as folder:
        root = Path(folder)
        write_inputs(root, args.rows)
        one = peak_rss_mb(root, args.code, TASKS[:1], 1, args.steps)
        print(f"1 task x 1 seed: peak RSS {one:.0f} MiB", flush=True)
        suite = peak_rss_mb(root, args.code, TASKS[: args.tasks], args.seeds, args.steps)
        print(f"{args.tasks} tasks x {args.seeds} seeds: peak RSS {suite:.0f} MiB")
    print(f"peak_rss_mb=one:{one:.0f},suite:{suite:.0f}")


if __name__ == "__main__":
    main()
