"""Peak memory of `bert vocab` against the size of what it trains on, so a user sizes the
machine, or `vocab.sample_bytes`, for a corpus: for each size, a train split of generated prose
(Zipf-distributed words over a large made-up vocabulary, so that distinct words keep growing
with the text, as in real corpora) is trained on whole (`vocab.sample_bytes` above it), in a
process of its own; its peak RSS (`wait4`'s ru_maxrss) and seconds are printed, with the
MB of RSS per MB of text between consecutive sizes. Last line: `vocab_rss_mb_per_gb=N` (the
slope between the two largest sizes, per GB of sample).

    python benchmarks/vocab_memory.py [--sizes-mb 50 100 200] [--work /tmp/vocab_memory]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent.parent
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def write_prose(path: Path, size_mb: int, seed: int = 0, types: int = 2_000_000) -> None:
    """About `size_mb` MB of sentences of Zipf-distributed made-up words, documents of 5 to 30
    sentences separated by blank lines (the corpus stage's train.txt)."""
    rng = random.Random(seed)
    words: dict[int, str] = {}

    def word(rank: int) -> str:
        if rank not in words:
            local = random.Random(rank)
            words[rank] = "".join(local.choice(SYLLABLES) for _ in range(local.randint(1, 4)))
        return words[rank]

    target, written = size_mb * 1_000_000, 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            lines = []
            for _ in range(rng.randint(5, 30)):
                length = rng.randint(6, 24)
                sentence = " ".join(word(min(types, int(rng.paretovariate(1.05))))
                                    for _ in range(length))
                lines.append(sentence[0].upper() + sentence[1:] + ".")
            block = "\n".join(lines) + "\n\n"
            out.write(block)
            written += len(block.encode("utf-8"))


def peak_rss_mb(args: list[str], cwd: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of `python -m bertstages ARGS` run in `cwd`."""
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bertstages", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bert {' '.join(args)} failed: {proc.stderr.read().decode()}")
    return usage.ru_maxrss / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--work", type=Path, default=Path("/tmp/vocab_memory"))
    args = parser.parse_args()
    rows = []
    print(f"{'text MB':>8}{'peak RSS MB':>13}{'seconds':>9}{'RSS MB per text MB':>20}")
    for size in args.sizes_mb:
        work = args.work / f"{size}mb"
        (work / "data" / "corpus").mkdir(parents=True, exist_ok=True)
        train = work / "data" / "corpus" / "train.txt"
        if not train.is_file():
            write_prose(train, size)
        text_mb = train.stat().st_size / 1e6
        params = {"vocab": {"sample_bytes": None}, "tracking": {"enabled": False}}
        (work / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
        rss, seconds = peak_rss_mb(["vocab", "--out", "vocab", "--metrics", "vocab.json"], work)
        slope = (rss - rows[-1][1]) / (text_mb - rows[-1][0]) if rows else float("nan")
        rows.append((text_mb, rss))
        print(f"{text_mb:>8.1f}{rss:>13.0f}{seconds:>9.1f}{slope:>20.2f}", flush=True)
    if len(rows) >= 2:
        (small_mb, small_rss), (large_mb, large_rss) = rows[-2], rows[-1]
        print(f"vocab_rss_mb_per_gb={(large_rss - small_rss) / (large_mb - small_mb) * 1000:.0f}")


if __name__ == "__main__":
    main()
