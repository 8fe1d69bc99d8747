"""The corpus stage in worker processes (`corpus.workers`): the same bytes for 1, 2 or 3
workers, and the same bytes as the one-process stage gave before it had workers, on corpora
that take every path through the stage (prose, lines, JSON Lines, gzip, UTF-16, damaged UTF-8,
HTML, paragraphs longer than a cleaning chunk, overlong sentences, duplicates, a corpus split
by parts)."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import pytest

import bertcore.data.corpus.build as corpus_build
import bertcore.data.corpus.textblocks as textblocks
from bertcore.common.atomic import write_json
from bertcore.common.errors import BertError
from bertcore.common.pool import TASKS_AHEAD_PER_WORKER, TaskRunner
from bertcore.data.corpus.build import build_corpus
from bertcore.data.corpus.config import CorpusConfig

WORDS = ["river", "stone", "lantern", "orchard", "harbor", "meadow", "signal", "copper",
         "winter", "garden", "falcon", "engine", "archive", "compass", "thunder", "silver",
         "basket", "canyon", "ribbon", "violet", "marble", "pepper", "kernel", "socket",
         "buffer", "thread", "module", "parser"]
OUTPUTS = ("train.txt", "val.txt", "parts.json", "corpus.json")
# sha256 of the outputs of the corpus stage as it was before it had workers (one process,
# commit d5f42fa), on the corpora below: the stage must still write exactly these bytes.
EXPECTED = {
    "mixed": {
        "train.txt": "2538730253633a5a49cd2c6851096888f4c27ba91fe123b398b2909dfe533528",
        "val.txt": "56d585910c6608dc7e3dbb95c866f3d6c4a9a28b9f00b812a2f31d18d4d79cdd",
        "parts.json": "87d1b90ed7788b64318f09c837ca859c46f0c5ed9e64836c9093fb47ba9674a5",
        "corpus.json": "6593c70262bc37d934164ad735cdda9809bfcfd5ab0dfc6c920d1add24d38e64",
    },
    "mixed_parts": {
        "train.txt": "229b110394d671d3a1bc20336fdc1f8471794707f3abcf3ccbe2a59d57ad3b62",
        "val.txt": "12663a138e737b56abbc46fbc932cfe9447aaf4ffdc58856f311b08b161d4a92",
        "parts.json": "f98d4d4702d5bd918f82e33b9e3e4ac7e3a3c1cf045950300873222ebebe4b76",
        "corpus.json": "165a8a9b3d0b1b3e0b97fdc72cac858fab1a92060b3beebbaa470a4c14a82c8d",
    },
    "book": {
        "train.txt": "7798f1dd7577a003dac4c6bb2ffd38373358e4e2d830f74d8f7b619bf82a5063",
        "val.txt": "45b5e417532b426151e54c2a70630a0b6609d2d1857a0c3382ddcf66530ab0b2",
        "parts.json": "36292fa86f79fd9dc6ceb539768ee2fc7e20c756d3295321d2f49f1ad3309c50",
        "corpus.json": "f29f049ad401d7aa539b5b1280364aaeb25b7c8184c9ba06deeb4fb205723022",
    },
}
CASES = {  # the corpus, and its config: split by documents, by parts on request, by parts
    "mixed": ("mixed", {"val_fraction": 0.25}),
    "mixed_parts": ("mixed", {"split_by": "parts"}),
    "book": ("book", {}),
}


def sentence(rng: random.Random, number: str) -> str:
    words = rng.sample(WORDS, rng.randint(4, 9))
    ending = rng.choice([".", ".", ".", "?", "!"])
    return f"Item {number} {' '.join(words)} e.g. Dr. Smith at 3.14 {rng.choice(WORDS)}{ending}"


def paragraphs(rng: random.Random, tag: str, count: int, per: int = 5) -> list[str]:
    return [" ".join(sentence(rng, f"{tag}-{p}-{s}") for s in range(per)) for p in range(count)]


def write_mixed_corpus(folder: Path) -> Path:
    """A folder of every kind of input the file sources read, built from a fixed seed."""
    rng = random.Random(29)
    folder.mkdir()
    for i in range(24):  # prose: a file is a document, blank lines end paragraphs
        text = "\n\n".join(paragraphs(rng, f"p{i}", rng.randint(1, 6)))
        if i % 5 == 1:
            text = f"<p>Some <b>bold</b> &amp; markup.</p>\n\n{text}\n\n<!-- gone -->"
        if i % 7 == 2:
            text += "\n\n" + "Ｆｕｌｌ width 。日本語の文です。次の文！\x07 soft\u00adhyphen."
        (folder / f"prose{i:02d}.txt").write_text(text + "\n", encoding="utf-8")
    (folder / "prose05_copy.txt").write_text((folder / "prose05.txt").read_text())
    (folder / "empty.txt").write_text("")
    long = " ".join(sentence(rng, f"long-{s}") for s in range(1500))  # > one cleaning chunk
    overlong = " ".join(rng.choice(WORDS) for _ in range(700))  # no sentence end: cut
    (folder / "long.txt").write_text(f"{long}\n\n{overlong}\n\n{long[:5000]}\n")
    wrapped = "\n".join(paragraphs(rng, "wrapped", 12, per=2))  # wrapped lines, one paragraph
    (folder / "wrapped.txt").write_text(wrapped + "\n")
    lines = []  # one sentence per line, blank lines between documents
    for d in range(40):
        doc = [sentence(rng, f"l{d}-{s}") for s in range(rng.randint(1, 7))]
        lines += [*doc, ""] if d % 9 else [*doc, "", *doc, ""]  # some documents twice
    (folder / "lines.txt").write_text("\n".join(lines))
    records = []
    for r in range(60):
        if r % 17 == 3:
            records.append("{not json")
        elif r % 13 == 4:
            records.append(json.dumps({"title": "no text"}))
        else:
            text = "\n\n".join(paragraphs(rng, f"j{r}", rng.randint(1, 3), per=3))
            records.append(json.dumps({"text": text if r % 11 else "  "}))
    records.append(records[5])  # a duplicate record
    (folder / "records.jsonl").write_text("\n".join(records) + "\n")
    with gzip.GzipFile(folder / "zipped.txt.gz", "wb", mtime=0) as handle:
        handle.write("\n\n".join(paragraphs(rng, "gz", 4)).encode())
    (folder / "wide.txt").write_text("\n\n".join(paragraphs(rng, "u16", 2)), encoding="utf-16")
    damaged = "\n\n".join(paragraphs(rng, "bad", 3)).encode().replace(b"Item", b"It\xffem", 2)
    (folder / "damaged.txt").write_bytes(damaged)
    return folder


def write_book(folder: Path) -> Path:
    """One long prose document: too few documents for a split by documents, so by parts."""
    rng = random.Random(7)
    folder.mkdir()
    (folder / "book.txt").write_text("\n\n".join(paragraphs(rng, "book", 60, per=4)) + "\n")
    return folder / "book.txt"


def corpus_outputs(source: Path, out: Path, **config) -> dict[str, str]:
    """sha256 of every output of the corpus stage (metrics/corpus.json as the stage writes it)."""
    out.mkdir()
    stats = build_corpus(CorpusConfig(source=str(source), **config), out, progress=False)
    write_json(out / "corpus.json", stats.to_dict())
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in OUTPUTS}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return {"mixed": write_mixed_corpus(folder / "mixed"), "book": write_book(folder / "book")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_bytes_as_before_for_1_2_and_3_workers(corpora, case, tmp_path, monkeypatch):
    """Tasks of a few kB, so that files come in many blocks, documents span tasks and the
    pool has work for every worker; the default sizes, with one worker; and paragraphs past
    a few kB cleaned in the main process as they are read (`TextStream`)."""
    corpus, config = CASES[case]
    outputs = {"default": corpus_outputs(corpora[corpus], tmp_path / "default", workers=1,
                                         **config)}
    monkeypatch.setattr(corpus_build, "TASK_SIZE", 3000)
    for workers in (1, 2, 3):
        outputs[workers] = corpus_outputs(corpora[corpus], tmp_path / str(workers),
                                          workers=workers, **config)
    monkeypatch.setattr(textblocks, "MAX_BLOCK_BYTES", 5000)
    outputs["streamed"] = corpus_outputs(corpora[corpus], tmp_path / "streamed", workers=2,
                                         **config)
    for run, hashes in outputs.items():
        assert hashes == EXPECTED[case], run


def test_the_pool_takes_a_bounded_number_of_tasks_ahead():
    """The stream of tasks is read as results are consumed, never all at once: the main
    process holds a few tasks per worker, not the corpus."""
    taken = []

    def tasks():
        for i in range(40):
            taken.append(i)
            yield i

    with TaskRunner(2) as run:
        for i, result in enumerate(run(abs, tasks())):
            assert result == i
            assert len(taken) <= i + 1 + TASKS_AHEAD_PER_WORKER * 2
    assert taken == list(range(40))


def write_records(path: Path, rng: random.Random, count: int, encoding: str = "utf-8",
                  damage_every: int = 0) -> None:
    """`count` JSON Lines records of accented prose (non-ASCII written as is), every
    `damage_every`-th with a stray byte that is no UTF-8, a few blank lines among them."""
    lines = []
    for r in range(count):
        text = " ".join(sentence(rng, f"r{r}-{s}") for s in range(3)) + " Très bien, déjà vu."
        line = json.dumps({"text": text}, ensure_ascii=False).encode(encoding)
        if damage_every and r % damage_every == 1:
            line = line.replace(b"Item", b"It\xffem", 1)
        lines.append(line + (b"\n\n" if r % 23 == 5 else b"\n"))
    path.write_bytes(b"".join(lines))


def test_json_lines_damaged_or_not_utf8_as_one_process_reads_them(tmp_path, monkeypatch):
    """JSON Lines come in blocks parsed where they are cleaned; a few bad bytes are still
    replaced and counted per record, and a file in another encoding still stops the stage at
    the line where it reads as one, for any number of workers."""
    rng = random.Random(5)
    (tmp_path / "good").mkdir()
    write_records(tmp_path / "good" / "damaged.jsonl", rng, 400, damage_every=50)
    write_records(tmp_path / "latin1.jsonl", rng, 40, encoding="latin-1")
    monkeypatch.setattr(corpus_build, "TASK_SIZE", 2000)
    outputs = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"out{workers}"
        outputs[workers] = corpus_outputs(tmp_path / "good", out, workers=workers)
        stats = json.loads((out / "corpus.json").read_text())
        assert stats["cleaning"]["invalid_utf8_sequences"] == 8, workers
        assert stats["input"]["records"] == 400, workers
        assert (out / "train.txt").read_text().count("It\ufffdem") + (
            out / "val.txt").read_text().count("It\ufffdem") == 8
        with pytest.raises(BertError, match=r"latin1.jsonl is not UTF-8: 9 of the first 9 "
                                            r"non-ASCII .* \(line 1: "):
            build_corpus(CorpusConfig(source=str(tmp_path / "latin1.jsonl"), workers=workers),
                         tmp_path, progress=False)
    assert outputs[1] == outputs[2] == outputs[3]


def test_valid_blocks_count_their_accented_letters_as_a_read_line_by_line(tmp_path,
                                                                          monkeypatch):
    """Whether a few bad bytes are damage (a warning) or another encoding (a stop) depends on
    the non-ASCII letters that decode; in blocks that are valid UTF-8 they are counted at
    once, and must be as many as a read line by line finds: here the damaged lines hold none,
    so only the valid blocks' letters keep the file going, as text and as JSON Lines."""
    rng = random.Random(11)
    sentences = []
    for i in range(400):  # 10 damaged lines, each amid ASCII lines, between accented ones
        if i % 40 == 10:
            sentences.append(f"Line {i} plain text with a stray \xff byte.")
        elif i % 40 < 20:
            sentences.append(f"Line {i} plain text {rng.choice(WORDS)}.")
        else:
            sentences.append(f"Ligne {i} très agréable, déjà vue {rng.choice(WORDS)}.")
    raw = [s.encode("utf-8").replace(b"\xc3\xbf", b"\xff") for s in sentences]
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "notes.txt").write_bytes(b"\n".join(raw) + b"\n")
    (tmp_path / "records").mkdir()
    records = [json.dumps({"text": s}, ensure_ascii=False).encode("utf-8") for s in sentences]
    (tmp_path / "records" / "notes.jsonl").write_bytes(
        b"\n".join(r.replace(b"\xc3\xbf", b"\xff") for r in records) + b"\n")
    monkeypatch.setattr(corpus_build, "TASK_SIZE", 300)  # blocks of a few lines
    for name in ("text", "records"):
        config = CorpusConfig(source=str(tmp_path / name), workers=1, format="lines")
        stats = build_corpus(config, tmp_path, progress=False)
        assert stats.cleaning["invalid_utf8_sequences"] == 10, name
