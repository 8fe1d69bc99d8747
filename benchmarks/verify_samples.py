"""What checking a samples folder costs (`SamplesCheck`, run once by pretrain, evaluate and
prune before they read it): a folder of `--gb` GB of arrays is generated (the proportions of
the built-in corpus's: 2 bytes a token, 21 a pair, about 0.057 pairs a token, so 3.2 bytes a
corpus token), then the whole check and, beside it, the sha256 of the same files alone (what
`arrays_sha256` needs, the floor of any check that keeps its meaning), passes alternating so
that a loaded machine disturbs both alike; medians of wall and CPU seconds. `--cold` evicts
the files from the page cache (posix_fadvise) before each pass, so the disk is read too.
Last line: `verify_s_per_gb=... sha256_s_per_gb=... ratio=...` (CPU seconds per GB).

    python benchmarks/verify_samples.py [--gb 1] [--passes 3] [--cold] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bertcore.common.atomic import write_json
from bertcore.data.samples.store import (
    FORMAT_VERSION,
    META_FILE,
    PAIR_ARRAYS,
    TOKENS,
    NpyAppender,
    arrays_sha256,
    file_part,
)
from bertcore.data.samples.verify import SamplesCheck
from bertcore.data.vocab.files import SPECIAL_TOKENS, VOCAB_FILE, vocab_fingerprint

VOCAB_SIZE = 30522
MAX_SEQ_LENGTH = 128
PAIRS_PER_TOKEN = 0.057
BYTES_PER_TOKEN = 2 + 21 * PAIRS_PER_TOKEN
CHUNK = 1 << 24  # tokens generated at a time


def write_vocab(folder: Path) -> None:
    folder.mkdir(parents=True)
    words = [f"w{i}" for i in range(VOCAB_SIZE - len(SPECIAL_TOKENS))]
    (folder / VOCAB_FILE).write_text("\n".join([*SPECIAL_TOKENS, *words]) + "\n")


def write_split(split_dir: Path, n_tokens: int, rng: np.random.Generator) -> dict:
    """Random token ids and pairs inside them; returns the split's meta.json entry and its
    arrays_sha256 (under "arrays_sha256")."""
    split_dir.mkdir(parents=True)
    tokens = NpyAppender(split_dir / f"{TOKENS}.npy", np.dtype("<u2"))
    for start in range(0, n_tokens, CHUNK):
        count = min(CHUNK, n_tokens - start)
        tokens.append(rng.integers(len(SPECIAL_TOKENS), VOCAB_SIZE, count, dtype=np.uint16))
    n_pairs = max(1, int(n_tokens * PAIRS_PER_TOKEN))
    pairs = {name: NpyAppender(split_dir / f"{name}.npy", dtype, columns)
             for name, (dtype, columns) in PAIR_ARRAYS.items()}
    longest = (MAX_SEQ_LENGTH - 3) // 2
    for start in range(0, n_pairs, CHUNK):
        count = min(CHUNK, n_pairs - start)
        lengths = rng.integers(1, longest + 1, (count, 2))
        pairs["segment_lengths"].append(lengths)
        pairs["segment_starts"].append(rng.integers(0, n_tokens - longest, (count, 2)))
        pairs["is_random_next"].append(rng.integers(0, 2, count))
    parts = {TOKENS: tokens.close(), **{name: a.close() for name, a in pairs.items()}}
    return {"count": n_pairs, "corpus_tokens": n_tokens, "arrays_sha256": arrays_sha256(parts)}


def write_samples(folder: Path, vocab: Path, gb: float) -> int:
    """A samples folder of about `gb` GB (train, and val at 1% of it); returns its bytes."""
    rng = np.random.default_rng(0)
    n_tokens = int(gb * 1e9 / BYTES_PER_TOKEN)
    meta = {"format": FORMAT_VERSION, "vocab_fingerprint": vocab_fingerprint(vocab),
            "vocab_size": VOCAB_SIZE, "dtype": "uint16", "cls_id": 2, "sep_id": 3,
            "tokens_dir": ".", "max_seq_length": MAX_SEQ_LENGTH, "arrays_sha256": {}}
    for split, share in (("train", 0.99), ("val", 0.01)):
        stats = write_split(folder / split, int(n_tokens * share), rng)
        meta["arrays_sha256"][split] = stats.pop("arrays_sha256")
        meta[split] = stats
    write_json(folder / META_FILE, meta)
    return sum(path.stat().st_size for path in folder.rglob("*.npy"))


def evict(folder: Path) -> None:
    """Drop the arrays' pages from the page cache (they are clean: nothing is lost)."""
    for path in folder.rglob("*.npy"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(work) -> tuple[float, float]:
    """(wall, CPU) seconds of `work()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="evict the files before each pass")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="verify-samples-", dir=args.workdir))
    try:
        samples, vocab = work / "samples", work / "vocab"
        write_vocab(vocab)
        size = write_samples(samples, vocab, args.gb)
        files = sorted(samples.rglob("*.npy"))
        runs: dict[str, list[tuple[float, float]]] = {"verify": [], "sha256": []}
        for _ in range(args.passes):
            for name, job in (("verify", lambda: SamplesCheck(vocab)(samples)),
                              ("sha256", lambda: [file_part(path) for path in files])):
                if args.cold:
                    evict(samples)
                runs[name].append(timed(job))
        gb = size / 1e9
        per_gb = {}
        for name, times in runs.items():
            wall = statistics.median(t[0] for t in times)
            cpu = statistics.median(t[1] for t in times)
            per_gb[name] = cpu / gb
            print(f"{name:7s} {gb:.3f} GB: wall {wall:.2f} s, CPU {cpu:.2f} s "
                  f"({cpu / gb:.2f} CPU s/GB, {gb / wall:.2f} GB/s wall)")
        print(f"load average {os.getloadavg()[0]:.1f}, {'cold' if args.cold else 'warm'} cache")
        print(f"verify_s_per_gb={per_gb['verify']:.2f} sha256_s_per_gb={per_gb['sha256']:.2f} "
              f"ratio={per_gb['verify'] / per_gb['sha256']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
