"""The data stages and the pretraining loader at scale: throughput per core, speedup from 1 to 2
workers, peak RSS, bytes on disk per corpus token, and the wall clock projected to a large
corpus on many cores (issue 29, item 8).

It writes a corpus of `--gb` GB of prose documents as JSON Lines (or takes `--source`): real
sentences (Vim's and Node.js's documentation where this machine has them, else the built-in
corpus's), mixed by a seeded generator into documents of Wikipedia-like lengths with a few
book-length ones, and with made-up words drawn from a Zipf tail so that, as in real text, the
vocabulary keeps growing with the corpus; every document is distinct, so deduplication drops
none. Then it runs, as the pipeline does (`python -m bertstages STAGE --set ...`, params.yaml's
defaults otherwise):

- corpus with each of `--workers` (`corpus.workers`);
- vocab with as many of the tokenizers library's threads (RAYON_NUM_THREADS), on a sample of
  at most `--vocab-sample-gb` of the train split (`vocab.sample_bytes`);
- samples with as many workers and threads (`samples.workers`, RAYON_NUM_THREADS), and beside
  it plain `tokenizers` `encode_batch` over the same text on the same threads
  (`data_pipeline.tokenizer_floor`);
- the pretraining loader (PretrainingBatches + PretrainingCollator, batches of 32 at the
  samples' length) in this process and with one DataLoader worker.

Each stage runs in its own process tree, polled for its RSS (summed over its processes) and
its CPU seconds (`process_tree`): the main process's (serial: reading, deduplication, the
split, writing) and its workers' or threads' (parallel). Every run's output is hashed: the
same bytes for any number of workers. The projection to `--project-gb` on `--project-cores`
is Amdahl's law on those CPU seconds per GB, printed with its inputs; the vocab stage's
training is bounded by vocab.sample_bytes (1 GB by default) whatever the corpus size, only
its one read of the train split grows with it.

    python benchmarks/scale.py --gb 0.02                 # a quick check: a few minutes
    python benchmarks/scale.py --gb 1 --workdir /big/tmp # the real thing (see docs/scale.md)
    python benchmarks/scale.py --gb 0.15 --stages corpus,vocab --workers 2   # memory only

Last line: `scale corpus_speedup=X identical=B samples_vs_encode=X bytes_per_token=X
loader_per_worker=N projected_min=X`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from corpus_workers import originals  # noqa: E402
from process_tree import TreeUsage, run_watched  # noqa: E402

GB, MB = 1e9, 1e6
STAGES = ("corpus", "vocab", "samples", "loader")
NEEDS = {"vocab": ("corpus",), "samples": ("corpus", "vocab"), "loader": ("vocab", "samples")}
DEFAULT_TEXTS = ("/usr/share/vim/vim*/doc/*.txt", "/usr/share/doc/nodejs/api/*.md")
SHARD_BYTES = 100_000_000  # a JSON Lines file of the generated corpus holds about this much
LOADER_BATCH = 32  # train.batch_size's default

# Targets of issue 29.
TARGETS = {
    "corpus_speedup": 1.6,  # 2 workers over 1, the same bytes
    "samples_vs_encode": 0.9,  # samples stage over plain encode_batch, the same cores
    "bytes_per_token": 4.0,  # samples on disk per corpus token (phase 1, dupe 5)
    "loader_per_worker": 20_000,  # samples/s per DataLoader worker at 128 tokens
    "projected_minutes": 15.0,  # corpus + vocab + samples, 20 GB on 64 cores
}


# ---------------------------------------------------------------------------------------------
# The corpus


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_SYLLABLES = [c + v + e for c in "bdfgklmnprstvz" for v in "aeiou" for e in ("", "n", "r")]


def sentence_pool(patterns: list[str]) -> list[str]:
    """Distinct prose sentences of the files matching `patterns` (of the built-in corpus's
    documents without any: `corpus_workers.originals`): 30-400 characters, starting
    upper-case, ending like a sentence, mostly letters (no tables, code or option lists)."""
    pool = set()
    for text in originals(patterns):
        for paragraph in re.split(r"\n\s*\n", text.decode("utf-8", "replace")):
            for sentence in _SENTENCE_END.split(" ".join(paragraph.split())):
                if _is_prose(sentence):
                    pool.add(sentence)
    return sorted(pool)


def _is_prose(sentence: str) -> bool:
    if not 30 <= len(sentence) <= 400 or not sentence[0].isupper() or sentence[-1] not in ".!?":
        return False
    letters = sum(c.isalpha() or c == " " for c in sentence)
    return letters >= 0.85 * len(sentence) and "|" not in sentence


def rare_word(rank: int) -> str:
    """The made-up word of Zipf rank `rank`: its digits in base len(_SYLLABLES), as syllables."""
    rank += len(_SYLLABLES)  # two syllables at least
    syllables = []
    while rank:
        rank, digit = divmod(rank, len(_SYLLABLES))
        syllables.append(_SYLLABLES[digit])
    return "".join(syllables)


@dataclass
class ProseGenerator:
    """Documents of sentences drawn from `pool` by a seeded generator: paragraphs of about 4
    sentences; Wikipedia-like lengths (log-normal, median 15 sentences), one in 500 a book
    (3000-6000 sentences); in a share `rare` of sentences a made-up word of Zipf rank
    (exponent `zipf`) put after a space, capitalised half the time (a name): a vocabulary
    that grows with the text as real text's does (the train split of 50 MB holds 0.10 M
    distinct words, of 150 MB 0.22 M, of 1 GB about 1.2 M; the sentences alone 15 k)."""

    pool: list[str]
    seed: int = 0
    rare: float = 0.8
    zipf: float = 1.05
    rng: np.random.Generator = field(init=False)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)

    def documents(self, count: int) -> list[str]:
        rng = self.rng
        lengths = np.clip(rng.lognormal(np.log(15), 0.9, count), 2, 400).astype(int)
        books = rng.random(count) < 0.002
        lengths[books] = rng.integers(3000, 6001, int(books.sum()))
        picks = rng.integers(0, len(self.pool), int(lengths.sum()))
        breaks = rng.random(len(picks)) < 0.25
        rare = rng.random(len(picks)) < self.rare
        ranks = np.minimum(rng.zipf(self.zipf, len(picks)), 50_000_000)
        cuts = rng.random(len(picks))
        out, at = [], 0
        for length in lengths.tolist():
            parts = []
            for i in range(at, at + length):
                sentence = self.pool[picks[i]]
                if rare[i]:
                    sentence = _insert_word(sentence, rare_word(int(ranks[i])), cuts[i])
                parts.append(sentence)
                parts.append("\n\n" if breaks[i] else " ")
            out.append("".join(parts[:-1]))
            at += length
        return out


def _insert_word(sentence: str, word: str, where: float) -> str:
    cut = sentence.find(" ", int(where * len(sentence)))
    if cut < 0:
        return sentence
    word = word.capitalize() if where < 0.5 else word
    return f"{sentence[:cut]} {word}{sentence[cut:]}"


def write_corpus(folder: Path, size: int, generator: ProseGenerator) -> tuple[int, int]:
    """JSON Lines files of about SHARD_BYTES each in `folder`, one document a record, until
    they hold `size` bytes; returns (bytes, documents)."""
    folder.mkdir(parents=True)
    written = documents = shard = 0
    out = None
    while written < size:
        if out is None or out.tell() >= SHARD_BYTES:
            if out is not None:
                out.close()
            out = open(folder / f"part-{shard:05d}.jsonl", "wb")  # noqa: SIM115
            shard += 1
        for text in generator.documents(1000):
            data = (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode()
            out.write(data)
            written += len(data)
            documents += 1
            if written >= size:
                break
    out.close()
    return written, documents


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def folder_sha256(path: Path) -> str:
    """Of every file under `path`, by relative path and content."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# The stages


@dataclass
class StageRuns:
    """A stage's runs: per number of workers, the usage of each repetition and the digest of
    its output; `input_bytes`: what it reads."""

    name: str
    input_bytes: int
    usage: dict[int, list[TreeUsage]] = field(default_factory=dict)
    digests: dict[int, str] = field(default_factory=dict)
    startup: float = 0.0  # CPU seconds of a process that starts and stops (see `startup_cpu`)

    def median(self, workers: int, attribute: str) -> float:
        return statistics.median(getattr(u, attribute) for u in self.usage[workers])

    def serial_parallel(self, workers: int) -> tuple[float, float]:
        """(serial, parallel) CPU seconds of a run: the main process's (its feeder threads
        included: they hold the GIL) and its workers' for the corpus stage; the main thread's,
        and its Rayon threads' and workers' for the stages that tokenize."""
        main = self.median(workers, "main_thread_cpu")
        others = self.median(workers, "other_threads_cpu")
        children = self.median(workers, "children_cpu")
        if self.name == "corpus":
            return main + others, children
        return main, others + children

    def scalable(self, workers: int) -> tuple[float, float]:
        """`serial_parallel` less what does not grow with the corpus: `startup` per process
        (the main one, and each pool worker of a stage run with 2 workers or more)."""
        serial, parallel = self.serial_parallel(workers)
        pool = workers if workers > 1 and self.name != "vocab" else 0
        return max(0.0, serial - self.startup), max(0.0, parallel - pool * self.startup)

    @property
    def identical(self) -> bool:
        return len(set(self.digests.values())) == 1


def stage_env(threads: int) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "true",
            "RAYON_NUM_THREADS": str(threads)}


def bert(work: Path, stage: str, threads: int, *args: str) -> TreeUsage:
    """`python -m bertstages STAGE --params params.yaml ARGS` in `work`, watched."""
    command = [sys.executable, "-m", "bertstages", stage, "--params", str(REPO / "params.yaml"),
               *args]
    return run_watched(command, work, stage_env(threads))[1]


def startup_cpu(work: Path, stage: str) -> float:
    """CPU seconds of `python -m bertstages STAGE --help`: the interpreter and the imports, which
    every process of the stage pays once (a spawned worker imports the same), whatever the
    corpus size."""
    return run_watched([sys.executable, "-m", "bertstages", stage, "--help"], work,
                       stage_env(1))[1].cpu


def run_stage(runs: StageRuns, work: Path, workers: list[int], repeat: int, command) -> None:
    """`command(W, out)` (-> TreeUsage) for every W of `workers`, `repeat` times interleaved;
    keeps the last run's output as `work/<stage>` and the digest of every run's."""
    runs.startup = startup_cpu(work, runs.name)
    final = work / runs.name
    if final.exists():
        shutil.rmtree(final)
    for _ in range(repeat):
        for count in workers:
            out = work / f"{runs.name}-{count}"
            usage = command(count, out)
            runs.usage.setdefault(count, []).append(usage)
            digest = folder_sha256(out)
            if runs.digests.setdefault(count, digest) != digest:
                runs.digests[count] = f"differs between repetitions ({digest[:12]})"
            if out.exists():
                shutil.rmtree(final, ignore_errors=True)
                out.rename(final)
    print(f"  {runs.name}: done", flush=True)


def corpus_stage(work: Path, source: str, size: int, args) -> StageRuns:
    runs = StageRuns("corpus", size)

    def command(count: int, out: Path) -> TreeUsage:
        return bert(work, "corpus", count, "--set", f"corpus.source={source}",
                    "--set", f"corpus.workers={count}", "--out", str(out),
                    "--metrics", str(work / "metrics" / "corpus.json"))

    run_stage(runs, work, args.workers, args.repeat, command)
    return runs


def vocab_stage(work: Path, args) -> StageRuns:
    train = work / "corpus" / "train.txt"
    runs = StageRuns("vocab", train.stat().st_size)
    cap = [] if args.vocab_sample_gb is None else [
        "--set", f"vocab.sample_bytes={int(args.vocab_sample_gb * GB)}"]

    def command(count: int, out: Path) -> TreeUsage:
        return bert(work, "vocab", count, "--corpus", str(work / "corpus"), "--out", str(out),
                    "--metrics", str(work / "metrics" / "vocab.json"), *cap)

    run_stage(runs, work, args.workers, args.repeat, command)
    return runs


def samples_stage(work: Path, args) -> StageRuns:
    corpus = work / "corpus"
    runs = StageRuns("samples", sum((corpus / f"{s}.txt").stat().st_size for s in ("train", "val")))

    def command(count: int, out: Path) -> TreeUsage:
        return bert(work, "samples", count, "--corpus", str(corpus), "--vocab",
                    str(work / "vocab"), "--out", str(out), "--set", f"samples.workers={count}",
                    "--metrics", str(work / "metrics" / "samples.json"))

    run_stage(runs, work, args.workers, args.repeat, command)
    return runs


def encode_baseline(work: Path, threads: int, repeat: int) -> dict[int, list[dict]]:
    """Plain encode_batch over train.txt + val.txt with the trained vocabulary on `threads`
    threads (a process of its own, as the stage), `repeat` times: {threads: [{seconds, tokens,
    usage}]}. Run for the most workers only: its comparison with the stage is what counts."""
    corpus = work / "corpus"
    command = [sys.executable, __file__, "--encode-baseline", str(work / "vocab"),
               str(corpus / "train.txt"), str(corpus / "val.txt")]
    results = []
    for _ in range(repeat):
        _, usage = run_watched(command, work, stage_env(threads))
        results.append({**json.loads(usage.log.strip().splitlines()[-1]), "usage": usage})
    return {threads: results}


def _encode_baseline_main(vocab: str, files: list[str]) -> None:
    from data_pipeline import tokenizer_floor

    seconds, tokens = tokenizer_floor(Path(vocab), [Path(f) for f in files])
    print(json.dumps({"seconds": seconds, "tokens": tokens}))


def vocab_draw_cpu(work: Path, sample_bytes: int) -> float:
    """CPU seconds of the vocab stage's one read of the train split (`vocab_sample`: drawing
    the sample, or counting the documents of a split it trains on whole), run here alone."""
    from bertcore.data.vocab.sample import vocab_sample

    scratch = work / "draw"
    scratch.mkdir(exist_ok=True)
    started = time.process_time()
    with vocab_sample(work / "corpus" / "train.txt", sample_bytes, scratch):
        seconds = time.process_time() - started
    shutil.rmtree(scratch)
    return seconds


# ---------------------------------------------------------------------------------------------
# The loader (the parts that read samples: keep them small)


def train_samples(samples_dir: Path):
    """The train split of a samples folder, as pretraining opens it."""
    from bertcore.data.samples.store import SampleStore

    return SampleStore(samples_dir / "train")


def loader_rate(work: Path, num_workers: int, count: int) -> tuple[float, int]:
    """Samples per second of PretrainingBatches + PretrainingCollator over `count` train samples
    (batches of LOADER_BATCH; in this process with num_workers 0), timed from the first batch
    on (a worker's start left out); and how many were timed."""
    import torch

    from bertcore.data.vocab.files import read_vocab
    from bertcore.training.data.batches import PretrainingBatches
    from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec

    torch.set_num_threads(1)
    store = train_samples(work / "samples")
    collator = PretrainingCollator(MaskingConfig(), VocabSpec.from_tokens(
        read_vocab(work / "vocab")), seed=0)
    batches = PretrainingBatches(store, collator, LOADER_BATCH, 1, seed=0,
                                 num_workers=num_workers)
    count = min(count, (batches.steps_per_epoch - 1) * LOADER_BATCH)
    timed, started = 0, None
    for _step in batches.iterate(epoch=0):
        if started is None:
            started = time.perf_counter()
            continue
        timed += LOADER_BATCH
        if timed >= count:
            break
    return timed / (time.perf_counter() - started), timed


# ---------------------------------------------------------------------------------------------
# The report


def print_table(stages: list[StageRuns], workers: list[int], baseline: dict | None) -> None:
    print(f"\n{'stage':<9}{'workers':>8}{'wall s':>9}{'MB/s':>8}{'MB/s/core':>10}"
          f"{'speedup':>8}{'peak RSS MB':>12}{'CPU main s':>11}{'CPU par s':>10}  sha256")
    for runs in stages:
        first = runs.median(workers[0], "seconds")
        for count in workers:
            wall = runs.median(count, "seconds")
            serial, parallel = runs.serial_parallel(count)
            rate = runs.input_bytes / MB / wall
            print(f"{runs.name:<9}{count:>8}{wall:>9.2f}{rate:>8.2f}{rate / count:>10.2f}"
                  f"{first / wall:>7.2f}x{runs.median(count, 'peak_rss') / 2**20:>12.0f}"
                  f"{serial:>11.1f}{parallel:>10.1f}  {runs.digests[count][:12]}")
    for count, results in (baseline or {}).items():
        seconds = statistics.median(r["seconds"] for r in results)
        rate = stages[-1].input_bytes / MB / seconds
        main = statistics.median(r["usage"].main_thread_cpu for r in results)
        threads = statistics.median(r["usage"].cpu for r in results) - main
        print(f"{'encode':<9}{count:>8}{seconds:>9.2f}{rate:>8.2f}{rate / count:>10.2f}"
              f"{'':>20}{main:>11.1f}{threads:>10.1f}  (plain encode_batch, start-up left out)")
    print("(workers: processes of corpus.workers / samples.workers, and RAYON_NUM_THREADS; MB: "
          "of the source (corpus), the train split (vocab: trained on a sample of at most "
          "--vocab-sample-gb), train + val (samples, encode); CPU main: the serial part, CPU "
          f"par: workers' and tokenizer threads'; speedup over {workers[0]} worker(s); "
          "medians)")


@dataclass
class Projection:
    """Minutes for `gb` GB on `cores` cores, per stage, with the formula and its inputs."""

    gb: float
    cores: int
    measured_gb: float
    minutes: dict[str, float] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def scale(self) -> float:
        return self.gb / self.measured_gb

    def amdahl(self, name: str, serial: float, parallel: float, note: str) -> None:
        """T = S + P/N, S and P the CPU seconds measured, times gb / measured_gb."""
        s, p = serial * self.scale, parallel * self.scale
        total = s + p / self.cores
        self.minutes[name] = total / 60
        self.lines.append(
            f"  {name:<8} T = S + P/N = {serial:.2f} s x {self.scale:.4g} + {parallel:.2f} s x "
            f"{self.scale:.4g} / {self.cores} = {s:.0f} + {p / self.cores:.0f} = {total:.0f} s "
            f"({note}; floor max(S, P/N) = {max(s, p / self.cores):.0f} s)")

    def vocab(self, runs: StageRuns, workers: int, draw: float, trained_on: int,
              sample_bytes: int) -> None:
        """The one read of the train split grows with the corpus; training is bounded by the
        sample: T = D x (train at gb / train measured) + (S_t + P_t/N) x (sample at gb /
        sample measured)."""
        serial, parallel = runs.scalable(workers)
        train_at_scale = runs.input_bytes * self.scale
        sample_at_scale = min(sample_bytes, train_at_scale)
        grow = sample_at_scale / trained_on
        read = draw * self.scale
        train_serial, train_parallel = max(0.0, serial - draw) * grow, parallel * grow
        total = read + train_serial + train_parallel / self.cores
        self.minutes["vocab"] = total / 60
        self.lines.append(
            f"  vocab    T = D x {self.scale:.4g} + (S_t + P_t/N) x {grow:.4g} = "
            f"{draw:.2f} s x {self.scale:.4g} + ({max(0.0, serial - draw):.2f} s + "
            f"{parallel:.2f} s / {self.cores}) x {grow:.4g} = {read:.0f} + {train_serial:.0f} + "
            f"{train_parallel / self.cores:.0f} = {total:.0f} s (D: one read of the train "
            f"split, measured alone; S_t = main thread - D, P_t = tokenizer threads; trained "
            f"on {trained_on / MB:.1f} MB here, {sample_at_scale / GB:.2f} GB at {self.gb:g} GB: "
            f"vocab.sample_bytes {sample_bytes / GB:g} GB)")

    def report(self) -> float:
        total = sum(self.minutes.values())
        print(f"\nprojected to {self.gb:g} GB on {self.cores} cores (Amdahl; S, P: serial and "
              f"parallel CPU seconds at {self.measured_gb:.4g} GB, scaled by the corpus "
              f"size; the main process overlaps its workers, so the floor is max(S, P/N)):")
        for line in self.lines:
            print(line)
        stages = " + ".join(f"{name} {minutes:.1f}" for name, minutes in self.minutes.items())
        print(f"  total    {stages} = {total:.1f} min (target <= "
              f"{TARGETS['projected_minutes']:g} min; LDDL: 16 min on 128 cores)")
        return total


def check(value: float, target: float, text: str, lower_is_better: bool = False) -> float:
    ok = value <= target if lower_is_better else value >= target
    sign = "<=" if lower_is_better else ">="
    print(f"  {text:<58} {value:>10.2f}  target {sign} {target:g}  {'ok' if ok else 'MISSED'}")
    return value


# ---------------------------------------------------------------------------------------------


def at_least_one(text: str) -> int:
    """argparse's type for a count (a bad value: argparse's one-line error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not an integer >= 1")
    return value


def above_zero(text: str) -> float:
    """argparse's type for a size (a bad value: argparse's one-line error)."""
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


def worker_counts(text: str) -> list[int]:
    """argparse's type for `--workers 1,2`: counts of at least one."""
    try:
        return [at_least_one(count) for count in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         "integers >= 1") from None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=above_zero, default=0.02,
                        help="corpus size to generate, GB")
    parser.add_argument("--source", help="an existing corpus.source to take instead")
    parser.add_argument("--text", action="append", default=[],
                        help="glob of prose files to draw sentences from (repeatable)")
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a new one in "
                        "the temporary folder); removed at the end unless --keep")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"comma-separated, of {','.join(STAGES)}")
    parser.add_argument("--workers", type=worker_counts, default="1,2",
                        help="comma-separated worker counts")
    parser.add_argument("--repeat", type=at_least_one, default=1, help="runs of each, interleaved")
    parser.add_argument("--vocab-sample-gb", type=float, default=0.1,
                        help="vocab.sample_bytes for the run, GB (the projection scales it "
                             "to params.yaml's); 0: params.yaml's")
    parser.add_argument("--loader-samples", type=at_least_one, default=8192)
    parser.add_argument("--project-gb", type=above_zero, default=20.0)
    parser.add_argument("--project-cores", type=at_least_one, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.stages = [s for s in args.stages.split(",") if s]
    if unknown := set(args.stages) - set(STAGES):
        parser.error(f"unknown stages {sorted(unknown)}: choose from {STAGES}")
    if args.vocab_sample_gb < 0:
        parser.error(f"--vocab-sample-gb {args.vocab_sample_gb} is below 0")
    if args.source:
        from bertcore.common.errors import BertError
        from bertcore.data.corpus.sources import resolve_files

        try:
            resolve_files(args.source)
        except BertError as error:
            parser.error(f"--source: {error}")
    if not args.vocab_sample_gb:
        args.vocab_sample_gb = None
    return args


def prepare(work: Path, args) -> tuple[str, int]:
    """The corpus source and its size: `--source`, the one a kept workdir holds, or a new
    one."""
    if args.source:
        from bertcore.data.corpus.sources import resolve_files

        return args.source, sum(p.stat().st_size for p in resolve_files(args.source))
    source = work / "source"
    if source.is_dir():
        print(f"corpus: {folder_bytes(source) / MB:.1f} MB kept in {source}")
        return str(source), folder_bytes(source)
    started = time.perf_counter()
    pool = sentence_pool(args.text or list(DEFAULT_TEXTS))
    size, documents = write_corpus(source, int(args.gb * GB), ProseGenerator(pool, args.seed))
    print(f"corpus: {size / MB:.1f} MB, {documents} documents of {len(pool)} sentences mixed, "
          f"written in {time.perf_counter() - started:.0f} s")
    for path in source.iterdir():  # warm the page cache: time the stage, not the disk
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass
    return str(source), size


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--encode-baseline":
        _encode_baseline_main(sys.argv[2], sys.argv[3:])
        return
    args = parse_args()
    made = args.workdir is None or not args.workdir.exists()
    work = Path(tempfile.mkdtemp(prefix="bert-scale-")) if args.workdir is None else args.workdir
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        run(work, args)
        print(f"(the run took {(time.perf_counter() - started) / 60:.1f} min)")
    finally:
        if args.keep:
            print(f"kept {work}")
        elif made:
            shutil.rmtree(work, ignore_errors=True)
        else:
            for name in ("source", "corpus", "vocab", "samples", "metrics"):
                shutil.rmtree(work / name, ignore_errors=True)


def check_inputs(work: Path, stages: list[str]) -> None:
    """Every stage to run has its inputs: from a stage run before it, or a kept workdir."""
    for stage in stages:
        for need in NEEDS.get(stage, ()):
            if need not in stages and not (work / need).is_dir():
                raise SystemExit(f"--stages {stage} needs the output of {need}: add {need} to "
                                 "--stages, or give the --workdir of a run kept with --keep")


def run(work: Path, args) -> None:
    check_inputs(work, args.stages)
    source, size = prepare(work, args)
    (work / "metrics").mkdir(exist_ok=True)
    print(f"stages {','.join(args.stages)} with workers {args.workers} on "
          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    stages: list[StageRuns] = []
    if "corpus" in args.stages:
        stages.append(corpus_stage(work, source, size, args))
    if "vocab" in args.stages:
        stages.append(vocab_stage(work, args))
    baseline = None
    if "samples" in args.stages:
        stages.append(samples_stage(work, args))
        baseline = encode_baseline(work, max(args.workers), args.repeat)
    loader = {}
    if "loader" in args.stages:
        for num_workers in (0, 1):
            loader[num_workers] = loader_rate(work, num_workers, args.loader_samples)
    if stages:
        print_table(stages, args.workers, baseline)
    summarize(work, size, stages, baseline, loader, args)


def summarize(work: Path, size: int, stages: list[StageRuns], baseline: dict | None,
              loader: dict, args) -> None:
    by_name = {runs.name: runs for runs in stages}
    most = max(args.workers)
    values: dict[str, float | str] = {}
    print("\ntargets (issue 29):")
    if "corpus" in by_name and {1, 2} <= set(args.workers):
        runs = by_name["corpus"]
        speedup = runs.median(1, "seconds") / runs.median(2, "seconds")
        values["corpus_speedup"] = check(speedup, TARGETS["corpus_speedup"],
                                         "corpus stage, 2 workers over 1 (wall clock)")
        metrics = json.loads((work / "metrics" / "corpus.json").read_text())
        print(f"  {'corpus outputs identical for ' + str(args.workers) + ' workers':<58} "
              f"{runs.identical!s:>10}  (duplicates dropped: "
              f"{metrics['dropped'].get('duplicate_documents', 0)})")
    for name in ("vocab", "samples"):
        if name in by_name:
            print(f"  {name + ' outputs identical for ' + str(args.workers) + ' workers':<58} "
                  f"{by_name[name].identical!s:>10}")
    if baseline:
        encode = statistics.median(r["seconds"] for r in baseline[most])
        ratio = encode / by_name["samples"].median(most, "seconds")
        values["samples_vs_encode"] = check(ratio, TARGETS["samples_vs_encode"],
            f"samples stage vs plain encode_batch ({most} cores), speed")
        tokens = baseline[most][0]["tokens"]
        per_token = folder_bytes(work / "samples") / tokens
        values["bytes_per_token"] = check(per_token, TARGETS["bytes_per_token"],
            f"samples on disk per corpus token ({tokens / 1e6:.1f} M tokens)", True)
    for num_workers, (rate, timed) in loader.items():
        where = "in this process" if num_workers == 0 else f"{num_workers} DataLoader worker"
        value = check(rate, TARGETS["loader_per_worker"],
                      f"loader samples/s, {where} ({timed} samples)")
        if num_workers == 1:
            values["loader_per_worker"] = value
    if len(by_name) == 3:
        values["projected_min"] = project(work, size, by_name, args).report()
    print("scale " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in values.items())
          + (f" identical={all(r.identical for r in stages)}" if stages else ""))


def project(work: Path, size: int, by_name: dict[str, StageRuns], args) -> Projection:
    from bertcore.data.vocab.config import SAMPLE_BYTES

    most = max(args.workers)
    projection = Projection(args.project_gb, args.project_cores, size / GB)
    if most == 1:
        print("  (no run with 2 workers or more: every CPU second counted serial)")
    corpus, samples = by_name["corpus"], by_name["samples"]
    projection.amdahl("corpus", *_split(corpus, most), note=f"S: main process, P: {most} "
                      f"workers; less {corpus.startup:.2f} s of start-up a process")
    vocab_metrics = json.loads((work / "metrics" / "vocab.json").read_text())
    sample_bytes = int(args.vocab_sample_gb * GB) if args.vocab_sample_gb else SAMPLE_BYTES
    draw = vocab_draw_cpu(work, sample_bytes)
    projection.vocab(by_name["vocab"], most, draw, vocab_metrics["trained_on_bytes"],
                     SAMPLE_BYTES)
    projection.amdahl("samples", *_split(samples, most), note="S: main thread, P: tokenizer "
                      f"threads + workers; less {samples.startup:.2f} s of start-up a process")
    return projection


def _split(runs: StageRuns, workers: int) -> tuple[float, float]:
    """(S, P) of the run with `workers`; with one worker all of it counts as S."""
    serial, parallel = runs.scalable(workers)
    return (serial, parallel) if workers > 1 else (serial + parallel, 0.0)


if __name__ == "__main__":
    main()
