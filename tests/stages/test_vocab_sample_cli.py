"""`bert vocab` with vocab.sample_bytes: the vocabulary is trained on a sample of the train
split's documents, drawn by a hash of their content; a split within the sample gives the
vocabulary the whole split gives, byte for byte (tests/unit/data/vocab/test_vocab_sample.py:
how the documents are found and drawn)."""

from __future__ import annotations

import hashlib
import json
import random

from helpers.bert import assert_one_line_error, run_bert
from helpers.vocab_texts import corpus_lines, word_lines, write_corpus

from bertcore.data.vocab.files import read_vocab

VOCAB_FILES = ("special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
# sha256 of the files the vocab stage wrote before vocab.sample_bytes existed (tokenizers 0.23)
BEFORE_SAMPLING = {
    "tiny": ("af856fe9500d6a61306efc3badbfd1a13171152f8b4b118a0960fc68fd9e6213",
             "e38e81d1e7aacc37d01e8f6f8c338217a37d03c15fe5a387efcdbcf2d46392db",
             "c03ebffe4caf6c28453687f5317f157e811ab5a3f8f62348f1c7cf19f1d8c8b9",
             "f79bacdc58081815734499058356e49ae406bc64b887d221e27c20e1f008fe0d"),
    "varied": ("af856fe9500d6a61306efc3badbfd1a13171152f8b4b118a0960fc68fd9e6213",
               "b33c4af0d09f68c569f862b78cde98662b43c2c8a016ba8a1af9a883e1383285",
               "c03ebffe4caf6c28453687f5317f157e811ab5a3f8f62348f1c7cf19f1d8c8b9",
               "71fb9247f2a2a459b10b9cb6bc8b7c920819c2adad2c6b2926628ad5e18fd535"),
    "varied-300": ("af856fe9500d6a61306efc3badbfd1a13171152f8b4b118a0960fc68fd9e6213",
                   "c10325bcc0ac5f0d5e82617a38e430cc4415a607b9a74620a23b39c12a5343e1",
                   "c03ebffe4caf6c28453687f5317f157e811ab5a3f8f62348f1c7cf19f1d8c8b9",
                   "e501e61b4c3bcc0451d0da655e5a0745996c512aa64604c19095cdac938cce49"),
}
FIXED_SIZE = ("--set", "vocab.vocab_size=300", "--set", "vocab.min_frequency=1")
MARK = 0x4E00  # document i holds the CJK character chr(MARK + i), a token of its own
DOCUMENTS = 400


def vocab(tmp_path, corpus: str, name: str, *sets: str) -> tuple[tuple[bytes, ...], dict]:
    """Run the vocab stage on `corpus`; return its files' bytes and metrics/vocab.json."""
    run_bert("vocab", "--corpus", corpus, "--out", f"{name}-vocab", "--metrics", f"{name}.json",
             *sets, cwd=tmp_path, check=True)
    files = tuple((tmp_path / f"{name}-vocab" / f).read_bytes() for f in VOCAB_FILES)
    return files, json.loads((tmp_path / f"{name}.json").read_text())


def marked_documents(seed: int = 0) -> list[list[str]]:
    """DOCUMENTS documents of 3 sentences, document i marked by a character only it holds."""
    lines = corpus_lines(seed, n=3 * DOCUMENTS)
    return [[f"{lines[3 * i]} {chr(MARK + i)}", *lines[3 * i + 1 : 3 * i + 3]]
            for i in range(DOCUMENTS)]


def write_documents(folder, documents: list[list[str]]) -> int:
    """train.txt as the corpus stage writes it; returns its size in bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    text = "\n".join("".join(line + "\n" for line in doc) for doc in documents)
    (folder / "train.txt").write_text(text, "utf-8")
    return len(text.encode())


def marks(vocab_files: tuple[bytes, ...]) -> set[int]:
    """The documents whose marking character is a token of the vocabulary."""
    tokens = vocab_files[VOCAB_FILES.index("vocab.txt")].decode().splitlines()
    return {ord(t) - MARK for t in tokens if len(t) == 1 and 0 <= ord(t) - MARK < DOCUMENTS}


def test_a_split_within_the_sample_gives_the_vocabulary_of_before(tmp_path):
    """The sha256s of the files before sampling existed: the default sample (1 GB), one of
    exactly the split's size and none at all (null) give them, and metrics/vocab.json says the
    whole split was read."""
    (tmp_path / "params.yaml").write_text("vocab: {}\n")
    write_corpus(tmp_path / "tiny", corpus_lines())
    write_corpus(tmp_path / "varied", word_lines(800, 6))
    size = (tmp_path / "varied" / "train.txt").stat().st_size
    runs = {"tiny": ("tiny", ()), "varied": ("varied", ()), "varied-300": ("varied", FIXED_SIZE),
            "exact": ("varied", ("--set", f"vocab.sample_bytes={size}")),
            "null": ("varied", ("--set", "vocab.sample_bytes=null"))}
    for name, (corpus, sets) in runs.items():
        files, metrics = vocab(tmp_path, corpus, name, *sets)
        digests = tuple(hashlib.sha256(data).hexdigest() for data in files)
        assert digests == BEFORE_SAMPLING.get(name, BEFORE_SAMPLING["varied"]), name
        assert metrics["trained_on_bytes"] == metrics["train_bytes"] == (
            tmp_path / corpus / "train.txt").stat().st_size
        assert metrics["trained_on_documents"] == metrics["train_documents"] == (
            83 if corpus == "tiny" else 96)


def test_a_larger_split_trains_on_its_sample_only(tmp_path):
    """A third of the split: the marks in the vocabulary are those of the sampled documents
    (one each), it is the vocabulary of a split holding only them, and the documents' order
    in the file does not change which ones are drawn."""
    (tmp_path / "params.yaml").write_text("vocab: {}\n")
    documents = marked_documents()
    size = write_documents(tmp_path / "full", documents)
    third = ("--set", f"vocab.sample_bytes={size // 3}", *FIXED_SIZE)
    sampled, metrics = vocab(tmp_path, "full", "sampled", *third)
    drawn = marks(sampled)
    assert metrics["train_documents"] == DOCUMENTS and metrics["train_bytes"] == size
    assert metrics["trained_on_documents"] == len(drawn)
    assert 0.8 < metrics["trained_on_bytes"] / (size // 3) < 1.2
    assert 0.8 < len(drawn) / (DOCUMENTS / 3) < 1.2

    write_documents(tmp_path / "only", [documents[i] for i in sorted(drawn)])
    assert vocab(tmp_path, "only", "only", *FIXED_SIZE)[0] == sampled

    shuffled = documents[:]
    random.Random(1).shuffle(shuffled)
    write_documents(tmp_path / "shuffled", shuffled)
    again, again_metrics = vocab(tmp_path, "shuffled", "shuffled", *third)
    assert again == sampled and again_metrics == metrics

    everything, whole = vocab(tmp_path, "full", "null", "--set", "vocab.sample_bytes=null",
                              *FIXED_SIZE)
    assert marks(everything) == set(range(DOCUMENTS))
    assert whole["trained_on_documents"] == whole["train_documents"] == DOCUMENTS
    assert whole["trained_on_bytes"] == size
    # the sample was written beside the output and is gone
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_sample_that_draws_nothing_is_one_line_and_keeps_the_vocabulary(tmp_path):
    (tmp_path / "params.yaml").write_text("vocab: {}\n")
    write_documents(tmp_path / "full", marked_documents())
    before, _ = vocab(tmp_path, "full", "v", *FIXED_SIZE)
    for value, fragments, code in (("1", ("vocab.sample_bytes 1", "null"), 1),
                                   ("0", ("vocab.sample_bytes", ">= 1"), 2)):
        proc = run_bert("vocab", "--corpus", "full", "--out", "v-vocab", "--metrics", "v.json",
                        "--set", f"vocab.sample_bytes={value}", cwd=tmp_path)
        assert_one_line_error(proc, *fragments, code=code)
    assert tuple((tmp_path / "v-vocab" / f).read_bytes() for f in VOCAB_FILES) == before
    assert read_vocab(tmp_path / "v-vocab")[:1] == ["[PAD]"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
