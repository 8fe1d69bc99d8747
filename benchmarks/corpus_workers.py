"""The corpus stage with 1 worker and with more, side by side, on real prose: MB/s and speedup.

It copies prose files (`--from GLOB`, repeatable; by default the built-in corpus's documents,
the Python documentation, written out one file each) into a temporary folder until it holds
`--mb` MB, each copy of a file with a first line of its own so that no document is a
duplicate of another; then runs `build_corpus` on it with each of `--workers` (fresh
output each time, the source read once before so the page cache is warm), checks that every
run wrote the same bytes, and prints the wall time and MB/s of each, the speedup over the
first, and the CPU seconds of the main process and of the workers (on a busy machine the
wall clock says little; the CPU split says what the main process, the serial part, costs).
The folder is deleted at the end.

Target (issue 29): >= 1.6x with 2 workers than with 1, on a machine with 2 idle cores.
Last line: `speedup_2=X.XX identical=True`.

    python benchmarks/corpus_workers.py --mb 20                        # a minute or two
    python benchmarks/corpus_workers.py --mb 120 --from '/usr/share/doc/*/*.md'
    python benchmarks/corpus_workers.py --mb 120 --jsonl        # records, not files
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertcore.data.corpus.build import build_corpus  # noqa: E402
from bertcore.data.corpus.config import CorpusConfig  # noqa: E402
from bertcore.data.corpus.pythondocs import PythonDocsSource  # noqa: E402

MB = 1_000_000


def originals(patterns: list[str]) -> list[bytes]:
    """The texts to copy: the files matching the globs, or the built-in corpus's documents."""
    if patterns:
        files = sorted({path for pattern in patterns for path in glob.glob(pattern)})
        texts = [Path(path).read_bytes() for path in files if Path(path).is_file()]
    else:
        texts = [document.text.encode() for document in
                 PythonDocsSource().documents(Counter(), lambda amount: None)]
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise SystemExit(f"no text found in {patterns}")
    return texts


def write_corpus(folder: Path, texts: list[bytes], size: int, jsonl: bool = False) -> int:
    """Copies of `texts` into `folder` until it holds `size` bytes, a file each (`jsonl`: a
    JSON Lines record each, in files of a copy of all); returns the bytes."""
    total = copy = 0
    while total < size:
        records = []
        for number, text in enumerate(texts):
            data = f"Copy {copy} of text {number}.\n\n".encode() + text
            if jsonl:
                records.append(json.dumps({"text": data.decode("utf-8", "replace")}) + "\n")
            else:
                (folder / f"{copy:04d}-{number:05d}.txt").write_bytes(data)
                total += len(data)
        if jsonl:
            data = "".join(records).encode()
            (folder / f"{copy:04d}.jsonl").write_bytes(data)
            total += len(data)
        copy += 1
    return total


def cpu_seconds() -> tuple[float, float]:
    """CPU time (user + system) of this process, and of its finished child processes."""
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def outputs_sha256(out: Path) -> str:
    digest = hashlib.sha256()
    for name in ("train.txt", "val.txt", "parts.json"):
        digest.update((out / name).read_bytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=20, help="corpus size in MB")
    parser.add_argument("--from", dest="patterns", action="append", default=[],
                        help="glob of prose files to copy (repeatable)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--jsonl", action="store_true",
                        help="write the copies as JSON Lines records instead of files")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corpus-workers-"))
    try:
        source = work / "source"
        source.mkdir()
        size = write_corpus(source, originals(args.patterns), int(args.mb * MB), args.jsonl)
        for path in source.iterdir():  # warm the page cache: time the stage, not the disk
            path.read_bytes()
        print(f"corpus: {size / MB:.1f} MB in {len(list(source.iterdir()))} files")
        seconds, digests = {}, {}
        for workers in args.workers:
            out = work / f"out-{workers}"
            out.mkdir()
            start, cpu = time.perf_counter(), cpu_seconds()
            stats = build_corpus(CorpusConfig(source=str(source), workers=workers), out,
                                 progress=False)
            seconds[workers] = time.perf_counter() - start
            (main_now, workers_now), (main_before, workers_before) = cpu_seconds(), cpu
            main_cpu, workers_cpu = main_now - main_before, workers_now - workers_before
            digests[workers] = outputs_sha256(out)
            shutil.rmtree(out)
            print(f"workers={workers}: {seconds[workers]:.1f} s, "
                  f"{size / MB / seconds[workers]:.2f} MB/s, {stats.documents} documents, "
                  f"speedup {seconds[args.workers[0]] / seconds[workers]:.2f}x; CPU seconds: "
                  f"main process {main_cpu:.1f}, workers {workers_cpu:.1f}; peak RSS of the "
                  f"main process so far {peak_rss_mb():.0f} MB")
        identical = len(set(digests.values())) == 1
        ratio = seconds[1] / seconds[2] if 1 in seconds and 2 in seconds else float("nan")
        print(f"speedup_2={ratio:.2f} identical={identical}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
