"""Throughput and memory of the data stages (corpus -> vocab -> samples) on generated prose.

For each size it writes a prose-like corpus of N MB (Zipf-distributed made-up words, sentences
of 4-30 words, documents of 2-40 sentences, all documents distinct), runs `bert corpus`,
`bert vocab` and `bert samples` each in its own subprocess (params.yaml defaults otherwise),
and prints per stage the wall time, MB/s and tokens/s (over the corpus stage's output) and the
peak RSS (summed over the stage's process tree, sampled every 0.1 s: `process_tree`). In the
same run it times plain `tokenizers` `encode_batch` over the same text with the trained
vocabulary: the floor the samples stage is compared with. (`scale.py` measures the same
stages at one size with 1 and 2 workers, and projects them to a large corpus.)

Targets: samples >= 0.5x plain encode_batch; peak RSS at the largest size within 1.2x of the
second largest. Last line: `samples_vs_tokenizer=X.XX rss_ratio=Y.YY` (the ratio at the
largest size; rss_ratio is the worst stage).

    python benchmarks/data_pipeline.py --quick          # 2 and 8 MB, under a minute
    python benchmarks/data_pipeline.py --sizes 100 400  # the real thing (minutes)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from process_tree import run_watched

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000


def make_words(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` distinct made-up words of 1-4 syllables (so WordPiece has pieces to learn),
    shortest first: frequent words are short, as in real prose."""
    onsets = ["", "b", "br", "c", "ch", "d", "f", "g", "gr", "h", "k", "l", "m", "n", "p",
              "pl", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z"]
    vowels = ["a", "e", "i", "o", "u", "ea", "ou", "ai"]
    codas = ["", "", "", "n", "r", "s", "t", "l", "nd", "st", "ng"]
    words: set[str] = set()
    while len(words) < count:
        n = int(rng.choice([1, 1, 2, 2, 2, 3, 3, 4]))
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                          for _ in range(n)))
    return np.array(sorted(words, key=lambda w: (len(w), w)), dtype=object)


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> None:
    """A prose-like text file: one sentence per line, a blank line between documents."""
    rng = np.random.default_rng(seed)
    words = make_words(rng, 30000)
    ranks = np.arange(1, len(words) + 1)
    probs = 1.0 / (ranks + 2.7) ** 1.07  # Zipf-Mandelbrot, like word frequencies in prose
    probs /= probs.sum()
    # A pool of distinct sentences; documents draw from it at random, so none repeat.
    pool = []
    lengths = rng.integers(4, 31, size=200_000)
    tokens = words[rng.choice(len(words), size=int(lengths.sum()), p=probs)]
    ends = rng.choice([".", ".", ".", "?", "!"], size=len(lengths))
    pos = 0
    for length, end in zip(lengths.tolist(), ends, strict=True):
        sentence = " ".join(tokens[pos : pos + length])
        pos += length
        if length > 8:
            cut = sentence.find(" ", len(sentence) // 2)
            sentence = sentence[:cut] + "," + sentence[cut:]
        pool.append(sentence[0].upper() + sentence[1:] + end)
    target = int(megabytes * MB)
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            picks = rng.integers(0, len(pool), size=(100, 40))
            sizes = rng.integers(2, 41, size=100)
            block = "\n\n".join(
                "\n".join(pool[i] for i in row[:n]) for row, n in zip(picks, sizes, strict=True)
            ) + "\n\n"
            out.write(block)
            written += len(block.encode())


def run_stage(args: list[str], cwd: Path) -> tuple[float, int]:
    """Run `bert ARGS`; return (wall seconds, peak RSS in bytes summed over its processes)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "true"}
    _, usage = run_watched([sys.executable, "-m", "bertstages", *args], cwd, env)
    return usage.seconds, usage.peak_rss


def tokenizer_floor(vocab_dir: Path, files: list[Path]) -> tuple[float, int]:
    """Seconds and tokens of plain `tokenizers` encode_batch over the files' lines."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    tokens = 0
    started = time.perf_counter()
    for path in files:
        with open(path, encoding="utf-8") as handle:
            while True:
                lines = [line for line in handle.readlines(1 << 20) if line.strip()]
                if not lines:
                    break
                for encoding in tokenizer.encode_batch(lines, add_special_tokens=False):
                    tokens += len(encoding.ids)
    return time.perf_counter() - started, tokens


def bench_size(megabytes: float, root: Path) -> dict:
    work = root / f"{megabytes:g}MB"
    work.mkdir(parents=True)
    shutil.copy(REPO / "params.yaml", work / "params.yaml")
    shutil.copytree(REPO / "params", work / "params")  # the recipe params.yaml names
    raw = work / "raw.txt"
    write_corpus(raw, megabytes)
    stages = {
        "corpus": ["corpus", "--set", f"corpus.source={raw}", "--out", "corpus",
                   "--metrics", "metrics/corpus.json"],
        "vocab": ["vocab", "--corpus", "corpus", "--out", "vocab"],
        "samples": ["samples", "--corpus", "corpus", "--vocab", "vocab", "--out", "samples",
                    "--metrics", "metrics/samples.json"],
    }
    result = {}
    for name, args in stages.items():
        result[name] = run_stage(args, work)
    texts = [work / "corpus" / "train.txt", work / "corpus" / "val.txt"]
    result["tokenizer"] = tokenizer_floor(work / "vocab", texts)
    result["bytes"] = sum(p.stat().st_size for p in texts)
    result["raw_bytes"] = raw.stat().st_size
    shutil.rmtree(work)
    return result


def report(megabytes: float, result: dict) -> None:
    size = result["bytes"] / MB
    _, tokens = result["tokenizer"]
    print(f"\n{megabytes:g} MB generated -> {size:.1f} MB corpus text, {tokens / 1e6:.1f} M tokens")
    print(f"{'stage':<12}{'seconds':>9}{'MB/s':>9}{'Mtok/s':>9}{'peak RSS MB':>13}")
    for name in ("corpus", "vocab", "samples", "tokenizer"):
        seconds, peak = result[name] if name != "tokenizer" else (result[name][0], None)
        mb = (result["raw_bytes"] if name == "corpus" else result["bytes"]) / MB
        rss = f"{peak / 2**20:13.0f}" if peak else f"{'(in-process)':>13}"
        print(f"{name:<12}{seconds:9.2f}{mb / seconds:9.2f}{tokens / seconds / 1e6:9.2f}{rss}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[25, 100, 400],
                        help="corpus sizes in MB")
    parser.add_argument("--quick", action="store_true", help="two small sizes (2 and 8 MB)")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder")
    args = parser.parse_args()
    sizes = [2.0, 8.0] if args.quick else sorted(args.sizes)
    root = Path(tempfile.mkdtemp(prefix="bench-data-", dir=args.workdir))
    try:
        results = {}
        for megabytes in sizes:
            results[megabytes] = bench_size(megabytes, root)
            report(megabytes, results[megabytes])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    largest = results[sizes[-1]]
    speed = largest["tokenizer"][0] / largest["samples"][0]
    ratios = {}
    if len(sizes) > 1:
        previous = results[sizes[-2]]
        ratios = {s: largest[s][1] / previous[s][1] for s in ("corpus", "vocab", "samples")}
        print(f"\npeak RSS {sizes[-1]:g} MB / {sizes[-2]:g} MB: "
              + ", ".join(f"{s} {r:.2f}" for s, r in ratios.items()))
    print(f"samples stage: {speed:.2f}x plain encode_batch (target >= 0.5)")
    print(f"samples_vs_tokenizer={speed:.2f} rss_ratio={max(ratios.values(), default=1.0):.2f}")


if __name__ == "__main__":
    main()
