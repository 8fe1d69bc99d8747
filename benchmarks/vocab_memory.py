"""Peak memory of `bert vocab` against the size of what it trains on, so a user sizes the
machine, or `vocab.sample_bytes`, for a corpus: for each size, a train split of the prose
`benchmarks/scale.py` generates (real sentences with made-up words of Zipf rank, so that the
distinct words keep growing with the text as in real text) is trained on whole
(`vocab.sample_bytes: null`), in a process of its own; its peak RSS (`wait4`'s ru_maxrss)
and seconds are printed, with the MB of RSS per MB of text between consecutive sizes. Last
line: `vocab_rss_mb_per_gb=N` (that slope between the two largest sizes, per GB of sample).

    python benchmarks/vocab_memory.py [--sizes-mb 50 100 200] [--work /tmp/vocab_memory]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from scale import DEFAULT_TEXTS, ProseGenerator, sentence_pool

HERE = Path(__file__).resolve().parent.parent


def write_train_split(path: Path, size_mb: int, pool: list[str]) -> None:
    """About `size_mb` MB of the generator's documents as the corpus stage's train.txt (its
    paragraphs one a line, a blank line after each document)."""
    generator, written = ProseGenerator(pool), 0
    with open(path, "w", encoding="utf-8") as out:
        while written < size_mb * 1_000_000:
            for text in generator.documents(1000):
                block = text.replace("\n\n", "\n") + "\n\n"
                out.write(block)
                written += len(block.encode("utf-8"))


def peak_rss_mb(args: list[str], cwd: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of `python -m bertstages ARGS` run in `cwd`."""
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    started = time.perf_counter()
    with open(cwd / "stderr.txt", "w") as stderr:  # a pipe unread could fill and block it
        proc = subprocess.Popen([sys.executable, "-m", "bertstages", *args], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bert {' '.join(args)} failed: {(cwd / 'stderr.txt').read_text()}")
    return usage.ru_maxrss / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--work", type=Path, default=Path("/tmp/vocab_memory"))
    args = parser.parse_args()
    rows, pool = [], None
    print(f"{'text MB':>8}{'peak RSS MB':>13}{'seconds':>9}{'RSS MB per text MB':>20}")
    for size in args.sizes_mb:
        work = args.work / f"{size}mb"
        (work / "data" / "corpus").mkdir(parents=True, exist_ok=True)
        train = work / "data" / "corpus" / "train.txt"
        if not train.is_file():
            pool = pool or sentence_pool(list(DEFAULT_TEXTS))
            write_train_split(train, size, pool)
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
