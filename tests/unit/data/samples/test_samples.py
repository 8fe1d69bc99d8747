"""The samples stage: NSP pairs by Google's algorithm (flaws fixed), on disk as arrays."""

from __future__ import annotations

import hashlib
import itertools
import json
import pickle
import random

import numpy as np
import pytest
from helpers.bert import assert_one_line_error, run_bert

import bertcore.data.samples.build as samples_module
import bertcore.data.samples.store as sample_store
from bertcore.common.errors import BertError
from bertcore.data.samples.build import VAL_MAX_PASSES, build_samples
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.samples.pairing import pair_document, truncation
from bertcore.data.samples.store import (
    PHASE1_DIR,
    PHASE2_DIR,
    SampleStore,
    check_vocab,
    read_meta,
)
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import CLS_ID, SEP_ID, load_tokenizer, save_vocab, vocab_fingerprint
from bertcore.data.vocab.training import train_tokenizer

PROSE = (
    "the quick brown fox jumps over a lazy dog while children play in the old park near "
    "river bank and birds sing songs about summer rain before evening light fades away"
)
WORDS = PROSE.split()


def documents(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) + "."
            for _ in range(rng.randint(1, 14))
        ]
        for _ in range(n)
    ]


def write_split(path, docs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny corpus (train 160 documents, val 12) and a vocab trained on it."""
    root = tmp_path_factory.mktemp("data")
    write_split(root / "corpus" / "train.txt", documents(160, seed=1))
    write_split(root / "corpus" / "val.txt", documents(12, seed=2))
    config = VocabConfig(vocab_size=200, min_frequency=1)
    tokenizer = train_tokenizer([documents(40, seed=3)[i] for i in range(40)], config)
    (root / "vocab").mkdir()
    save_vocab(tokenizer, root / "vocab")
    (root / "params.yaml").write_text("samples:\n  workers: 1\n  dupe_factor: 3\n")
    return root


def build(data, out, phase2_length=None, **config):
    """Phase 1's meta.json (and with `phase2_length` phase 2's samples in out/phase2)."""
    config = SamplesConfig(**{"dupe_factor": 3, "workers": 1, **config})
    files = {s: data / "corpus" / f"{s}.txt" for s in ("train", "val")}
    vocab = data / "vocab"
    out.mkdir()
    return build_samples(files, load_tokenizer(vocab), out, config, vocab_fingerprint(vocab),
                         phase2_length=phase2_length)[PHASE1_DIR]


def test_layout_and_invariants(data, tmp_path):
    meta = build(data, tmp_path / "s", max_seq_length=48)
    tokenizer = load_tokenizer(data / "vocab")
    corpus = [tokenizer.encode(line, add_special_tokens=False).ids
              for line in (data / "corpus" / "train.txt").read_text().splitlines()]
    corpus_ids = set().union(*corpus)
    store = SampleStore(tmp_path / "s" / "train")
    assert len(store) == meta["train"]["count"] > 300
    assert store.dtype == np.uint16 and store.tokens.dtype == np.uint16
    assert int(store.lengths.sum()) == meta["train"]["tokens"]
    # the tokens the pairs point into: the split's sentences, tokenised, in order, once
    assert store.tokens.tolist() == [t for ids in corpus for t in ids]
    assert len(store.tokens) == meta["train"]["corpus_tokens"]
    assert (meta["cls_id"], meta["sep_id"], meta["tokens_dir"]) == (CLS_ID, SEP_ID, ".")
    for i in range(len(store)):
        ids, b_start, is_random = store[i]
        n = len(ids)
        assert n <= 48 and n == store.lengths[i]
        assert ids[0] == CLS_ID and ids[b_start - 1] == SEP_ID and ids[-1] == SEP_ID
        assert b_start >= 3 and n - b_start >= 2  # both segments non-empty
        body = np.concatenate([ids[1 : b_start - 1], ids[b_start:-1]])
        assert not np.isin(body, [CLS_ID, SEP_ID]).any()
        assert set(body.tolist()) <= corpus_ids
        token_type_ids = (np.arange(n) >= b_start).astype(int)
        assert token_type_ids[b_start - 1] == 0 and token_type_ids[b_start] == 1
        assert is_random in (0, 1)
    assert store.lengths.max() == 48 == meta["train"]["max_length"]
    fraction = float(store.is_random_next.mean())
    assert meta["train"]["nsp_random_fraction"] == pytest.approx(fraction, abs=1e-4)
    assert 0.45 < fraction < 0.55
    assert meta["val"]["count"] == len(SampleStore(tmp_path / "s" / "val")) > 0
    assert meta["train"]["documents"] == 160
    # val: 12 documents never give val_pairs=1000 pairs, so it got every pass it may
    assert meta["val"]["dupe_factor"] == VAL_MAX_PASSES and meta["val"]["count"] < 1000
    assert read_meta(tmp_path / "s")["vocab_fingerprint"] == vocab_fingerprint(data / "vocab")
    assert not (tmp_path / "s" / ".work").exists()


def test_val_gets_passes_until_it_holds_val_pairs(data, tmp_path):
    """Val pass after pass until `val_pairs`: the first pass is the one-pass val, each pass
    pairs the same documents anew, and pairing stops at the first pass that reaches the count."""
    one = build(data, tmp_path / "one", val_pairs=0)["val"]
    assert one["dupe_factor"] == 1
    want = 2 * one["count"] + 1
    some = build(data, tmp_path / "some", val_pairs=want)["val"]
    passes, count = some["dupe_factor"], some["count"]
    assert 2 <= passes < VAL_MAX_PASSES and count >= want
    # one pair more than those passes hold takes exactly one more pass
    more = build(data, tmp_path / "more", val_pairs=count + 1)["val"]
    assert more["dupe_factor"] == passes + 1 and more["count"] > count
    first, some_store, more_store = (SampleStore(tmp_path / name / "val")
                                     for name in ("one", "some", "more"))
    assert all(np.array_equal(first[i][0], some_store[i][0]) for i in range(len(first)))
    assert all(np.array_equal(some_store[i][0], more_store[i][0]) for i in range(count))
    second_pass = {tuple(some_store[i][0]) for i in range(len(first), 2 * len(first))}
    assert len(second_pass - {tuple(first[i][0]) for i in range(len(first))}) > len(first) // 2


def test_meta_fingerprints_the_arrays_as_written(data, tmp_path):
    """meta["arrays_sha256"][split]: sha256 over each array's name, .npy header and the
    sha256 of its data, in ARRAYS order: the split's tokens.npy, then its pair arrays
    (computed while writing; recomputed here from files). Phase 2's covers the token file of
    phase 1 it points into, so a changed token changes both."""
    out = tmp_path / "s"
    meta = build(data, out, dupe_factor=2, phase2_length=64)
    assert sample_store.ARRAYS == ("tokens", "segment_starts", "segment_lengths",
                                   "is_random_next")

    def recomputed(folder, split):
        digest = hashlib.sha256()
        for name in sample_store.ARRAYS:
            path = (out if name == "tokens" else folder) / split / f"{name}.npy"
            raw = path.read_bytes()
            digest.update(f"{name}.npy\n".encode() + raw[:128]
                          + hashlib.sha256(raw[128:]).digest())
        return digest.hexdigest()

    for folder in (out, out / PHASE2_DIR):
        for split in ("train", "val"):
            assert read_meta(folder)["arrays_sha256"][split] == recomputed(folder, split)
    phase2 = read_meta(out / PHASE2_DIR)
    assert not (out / PHASE2_DIR / "train" / "tokens.npy").exists()  # phase 1's, shared
    assert phase2["tokens_dir"] == ".."
    assert meta["arrays_sha256"]["train"] != meta["arrays_sha256"]["val"]
    assert phase2["arrays_sha256"]["train"] != meta["arrays_sha256"]["train"]
    ids = out / "train" / "tokens.npy"
    raw = bytearray(ids.read_bytes())
    raw[-1] ^= 1
    ids.write_bytes(bytes(raw))
    assert recomputed(out, "train") != meta["arrays_sha256"]["train"]
    assert recomputed(out / PHASE2_DIR, "train") != phase2["arrays_sha256"]["train"]
    assert recomputed(out, "val") == meta["arrays_sha256"]["val"]


def test_store_indexing_and_pickling(data, tmp_path):
    build(data, tmp_path / "s", dupe_factor=1)
    store = SampleStore(tmp_path / "s" / "val")
    ids, b_start, is_random = store[-1]
    (a, b), (len_a, len_b) = store.segment_starts[-1], store.segment_lengths[-1]
    tokens = store.tokens
    assert ids.tolist() == [CLS_ID, *tokens[a : a + len_a], SEP_ID, *tokens[b : b + len_b], SEP_ID]
    assert b_start == len_a + 2 and is_random == store.is_random_next[-1]
    assert isinstance(b_start, int) and isinstance(is_random, int)
    with pytest.raises(IndexError):
        store[len(store)]
    again = pickle.loads(pickle.dumps(store))
    assert len(pickle.dumps(store)) < 1000  # by path, not by value
    assert np.array_equal(again[3][0], store[3][0])
    with pytest.raises(BertError, match="bert samples"):
        SampleStore(tmp_path / "nowhere")


def test_identical_output_whatever_the_workers_and_shards(data, tmp_path, monkeypatch):
    """Every file, phase 2's too, the same bytes for 1, 2 or 3 workers, any sharding and any
    batching of the sentences tokenised; phase 1's the same with phase 2 off."""
    build(data, tmp_path / "one", workers=1, phase2_length=64)
    monkeypatch.setattr(samples_module, "SHARD_TOKENS", 500)  # many shards
    monkeypatch.setattr(samples_module, "SENTENCE_BATCH_BYTES", 300)  # many tokenising tasks
    build(data, tmp_path / "two", workers=2, phase2_length=64)
    build(data, tmp_path / "three", workers=3)
    build(data, tmp_path / "seed", workers=1, random_seed=7)

    def files(folder):
        return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                if p.is_file()}

    one, two, three = (files(tmp_path / name) for name in ("one", "two", "three"))
    assert len(one) == 2 + 2 * 4 + 2 * 3  # meta.json twice, phase 1's 4 arrays, phase 2's 3
    assert one == two
    assert three == {name: data for name, data in one.items() if not name.startswith("phase2")}
    starts = "train/segment_starts.npy"
    assert one[starts] != (tmp_path / "seed" / starts).read_bytes()


# The token sequences the model saw from the samples of format 1 (commit 1903d61, which stored
# every `[CLS] A [SEP] B [SEP]` whole), for the corpus of the `data` fixture, with the tokenizer
# and settings of `test_the_model_sees_the_sequences_of_format_1`, by `sequences_sha256`:
# the format that stores pairs as references into the tokens must give the same ones.
FORMAT_1_SEQUENCES = {
    "documents": "114aea707fae67bccfad54ba0847bdddea6a2c59fe9c47387261567e0b96edab",
    "parts": "e5e78cb52f7a0e0d9a20c524ddd56ae33a181e1099c5ada89503e4eaec936704",
}


def sequences_sha256(samples_dir) -> str:
    """sha256 over every sample the model reads from a samples folder: for phase 1's folder,
    then phase 2's, for train then val, "phase <1|2> <split> <count>\n", then per sample in
    order its length (int32), its ids (int32 each), segment_b_start (int32), is_random_next
    (uint8), all little-endian."""
    digest = hashlib.sha256()
    for phase, folder in ((1, samples_dir), (2, samples_dir / PHASE2_DIR)):
        for split in ("train", "val"):
            store = SampleStore(folder / split)
            digest.update(f"phase {phase} {split} {len(store)}\n".encode())
            for i in range(len(store)):
                ids, b_start, is_random = store[i]
                digest.update(np.int32(len(ids)).tobytes() + ids.astype("<i4").tobytes()
                              + np.int32(b_start).tobytes() + np.uint8(is_random).tobytes())
    return digest.hexdigest()


def test_the_model_sees_the_sequences_of_format_1(data, tmp_path):
    """Pairs stored as references give the model the very sequences format 1 stored whole:
    both splits, both phases (48 and 96 tokens), a corpus split by documents and the same one
    split by parts (4 parts a document in train, 3 in val: no random B from a neighbour)."""
    tokenizer = train_tokenizer([documents(40, seed=3)[i] for i in range(40)],
                                VocabConfig(vocab_size=200, min_frequency=1))
    files = {s: data / "corpus" / f"{s}.txt" for s in ("train", "val")}
    parts = {"split_by": "parts", "train": [[d // 4, d % 4] for d in range(160)],
             "val": [[d // 3, d % 3] for d in range(12)]}
    config = SamplesConfig(max_seq_length=48, short_seq_prob=0.3, dupe_factor=3, workers=1)
    for name, split_by in (("documents", None), ("parts", parts)):
        out = tmp_path / name
        out.mkdir()
        build_samples(files, tokenizer, out, config, "fp", phase2_length=96, parts=split_by)
        assert sequences_sha256(out) == FORMAT_1_SEQUENCES[name], name


def test_samples_of_another_format_are_one_line_to_rebuild(data, tmp_path):
    """Samples of format 1 (sequences stored whole) are not read: one line, rerun `bert
    samples`; the store, the vocabulary check and training's inputs all say it."""
    old = tmp_path / "old"
    (old / "train").mkdir(parents=True)
    np.save(old / "train" / "input_ids.npy", np.array([2, 7, 3, 8, 3], np.uint16))
    np.save(old / "train" / "offsets.npy", np.array([0, 5], np.int64))
    np.save(old / "train" / "segment_b_start.npy", np.array([3], np.int32))
    np.save(old / "train" / "is_random_next.npy", np.array([0], np.uint8))
    meta = {"format": 1, "vocab_fingerprint": vocab_fingerprint(data / "vocab"),
            "arrays_sha256": {"train": "a" * 64}}
    (old / "meta.json").write_text(json.dumps(meta))
    for read in (lambda: SampleStore(old / "train"), lambda: check_vocab(old, data / "vocab")):
        with pytest.raises(BertError, match=r"of format 1, this version reads format 2: "
                                            r"rerun `bert samples`$") as error:
            read()
        assert "\n" not in str(error.value)


def test_check_vocab(data, tmp_path):
    build(data, tmp_path / "s", dupe_factor=1)
    check_vocab(tmp_path / "s", data / "vocab")
    other = tmp_path / "other"
    other.mkdir()
    config = VocabConfig(vocab_size=100, min_frequency=1)
    save_vocab(train_tokenizer([WORDS], config), other)
    with pytest.raises(BertError, match="another vocabulary"):
        check_vocab(tmp_path / "s", other)


# --- the pairs as the stage builds them, checked against the corpus they came from ---------

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def word_of(doc: int, sentence: int) -> str:
    """A word of its own for each sentence of the corpus below (two syllables, no ##)."""
    number = doc * 8 + sentence
    return SYLLABLES[number // len(SYLLABLES)] + SYLLABLES[number % len(SYLLABLES)]


def test_pairs_as_built_come_from_the_right_documents(tmp_path):
    """Every sentence is one word of its own repeated (documents of 1..7 sentences), so the
    tokens of a sample say which document and sentence each part came from. Built with the
    stage's own code: a random B is from another document (never a one-sentence document's
    A), an actual next B is the sentences right after A in A's document."""
    lengths = [1 + d % 7 for d in range(16)]  # two documents of one sentence
    docs = [[" ".join([word_of(d, s)] * (2 + (d + s) % 4)) for s in range(n)]
            for d, n in enumerate(lengths)]
    corpus = tmp_path / "corpus"
    write_split(corpus / "train.txt", docs)
    write_split(corpus / "val.txt", docs[:3])
    config = VocabConfig(vocab_size=300, min_frequency=1)
    tokenizer = train_tokenizer([[" ".join(doc) for doc in docs]], config)
    origin = {tokenizer.token_to_id(word_of(d, s)): (d, s)
              for d, n in enumerate(lengths) for s in range(n)}
    assert None not in origin and len(origin) == sum(lengths)  # each word is one token
    out = tmp_path / "samples"
    out.mkdir()
    max_len = 24
    build_samples({s: corpus / f"{s}.txt" for s in ("train", "val")}, tokenizer, out,
                  SamplesConfig(max_seq_length=max_len, dupe_factor=8, workers=1), "fp")
    store = SampleStore(out / "train")
    random_from = set()
    for i in range(len(store)):
        ids, b_start, is_random = store[i]
        a = [origin[t] for t in ids[1 : b_start - 1].tolist()]
        b = [origin[t] for t in ids[b_start:-1].tolist()]
        (doc_a,), (doc_b,) = {d for d, _ in a}, {d for d, _ in b}
        a_sentences, b_sentences = sorted({s for _, s in a}), sorted({s for _, s in b})
        for sentences in (a_sentences, b_sentences):  # runs of whole, consecutive sentences
            assert sentences == list(range(sentences[0], sentences[-1] + 1))
        assert lengths[doc_a] >= 2  # a one-sentence document gives no A
        if is_random:
            assert doc_b != doc_a, (i, a, b)
            random_from.add(doc_b)
        else:
            assert doc_b == doc_a and a_sentences[-1] < b_sentences[0], (i, a, b)
            if len(ids) < max_len:  # not truncated: B starts right after A
                assert b_sentences[0] == a_sentences[-1] + 1, (i, a, b)
    assert len(store) > 150
    assert 0.35 < store.is_random_next.mean() < 0.65
    assert len(random_from) == 16  # one-sentence documents serve as random Bs


# --- the pairing algorithm on its own ---------------------------------------------------------


def synthetic_corpus(n_docs: int, seed: int) -> list[list[int]]:
    """Sentence start offsets per document, over one flat token range; many long sentences,
    so that single-sentence chunks (Google's imbalance) are frequent."""
    rng = random.Random(seed)
    docs, pos = [], 0
    for _ in range(n_docs):
        starts = [pos]
        for _ in range(rng.choice([1, 2, 2, 3, 5, 8, 20])):
            pos += rng.choice([1, 5, 20, 60, 130, 300])
            starts.append(pos)
        docs.append(starts)
    return docs


def pair_all(docs, max_num_tokens=125, short_seq_prob=0.1, seed=0):
    """pair_document over synthetic offsets, with a random B of our own (the stage's own is
    checked in test_pairs_as_built_come_from_the_right_documents)."""
    doc_of_token = {}
    for d, starts in enumerate(docs):
        for s in range(len(starts) - 1):
            doc_of_token[starts[s]] = d
    results = []
    for d, starts in enumerate(docs):
        rng = random.Random(seed * 100003 + d)

        def random_segment(rng, min_tokens, d=d):
            other = rng.randrange(len(docs) - 1)
            other += other >= d
            o = docs[other]
            first = rng.randrange(len(o) - 1)
            last = first + 1
            while last < len(o) - 1 and o[last] - o[first] < min_tokens:
                last += 1
            return o[first], o[last]

        for inst in pair_document(starts, rng, max_num_tokens, short_seq_prob, random_segment):
            results.append((d, *inst))
    return results, doc_of_token


def doc_containing(docs, position):
    for d, starts in enumerate(docs):
        if starts[0] <= position < starts[-1]:
            return d
    raise AssertionError(position)


def test_pairs_follow_the_algorithm():
    docs = synthetic_corpus(300, seed=4)
    results, _ = pair_all(docs)
    for d, a0, a1, b0, b1, is_random in results:
        starts = docs[d]
        assert a1 > a0 and b1 > b0 and (a1 - a0) + (b1 - b0) <= 125
        assert starts[0] <= a0 < a1 <= starts[-1]
        if is_random:
            assert doc_containing(docs, b0) != d  # never the same document
        else:
            assert a1 <= b0 < b1 <= starts[-1]  # B follows A in the same document
            # untruncated pairs split exactly at a sentence boundary
            if (a1 - a0) + (b1 - b0) < 125:
                assert a1 == b0 and b0 in starts
    assert all(len(docs[d]) > 2 for d, *_ in results)  # single-sentence docs give no A


def test_nsp_balance_is_half_even_with_long_sentences():
    docs = synthetic_corpus(7000, seed=5)
    results, _ = pair_all(docs, seed=1)
    labels = np.array([r[-1] for r in results])
    assert len(labels) > 20000
    assert abs(labels.mean() - 0.5) < 0.02
    short, _ = pair_all(docs[:2000], max_num_tokens=13, short_seq_prob=0.5, seed=2)
    assert abs(np.mean([r[-1] for r in short]) - 0.5) < 0.02


def test_truncation_matches_googles_loop():
    for len_a, len_b in itertools.product(range(1, 30), range(1, 30)):
        for limit in range(2, len_a + len_b):
            a, b = len_a, len_b
            while a + b > limit:  # truncate_seq_pair, counting
                if a > b:
                    a -= 1
                else:
                    b -= 1
            cut = truncation(len_a, len_b, len_a + len_b - limit)
            assert cut == (len_a - a, len_b - b), (len_a, len_b, limit)


# --- the command ------------------------------------------------------------------------------


def test_cli_bad_input_and_nothing_destroyed(data, tmp_path):
    options = {
        "corpus": str(data / "corpus"),
        "vocab": str(data / "vocab"),
        "out": "samples",
        "metrics": "metrics/samples.json",
        "params": str(data / "params.yaml"),
    }

    def samples(*extra, **replace):
        args = [f"--{k}={v}" for k, v in {**options, **replace}.items()]
        return run_bert("samples", *args, *extra, cwd=tmp_path)

    assert samples().returncode == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "samples" / "train").iterdir()}
    metrics = json.loads((tmp_path / "metrics" / "samples.json").read_text())
    assert 0.45 < metrics["train"]["nsp_random_fraction"] < 0.55

    assert_one_line_error(samples(corpus=str(tmp_path / "missing")), "no corpus", code=1)
    one_doc = tmp_path / "one_doc"
    write_split(one_doc / "train.txt", documents(1, seed=9))
    write_split(one_doc / "val.txt", documents(5, seed=9))
    assert_one_line_error(samples(corpus=str(one_doc)), "1 document(s)", code=1)
    bad_vocab = tmp_path / "bad_vocab"
    bad_vocab.mkdir()
    for f in (data / "vocab").iterdir():
        (bad_vocab / f.name).write_bytes(f.read_bytes())
    tokens = (bad_vocab / "vocab.txt").read_text().splitlines()
    (bad_vocab / "vocab.txt").write_text("\n".join(tokens[:-1]) + "\n")
    assert_one_line_error(samples(vocab=str(bad_vocab)), "disagree", code=1)
    assert_one_line_error(samples(vocab=str(tmp_path / "missing")), "bert vocab", code=1)
    proc = samples("--set", "samples.max_seq_length=4")
    assert_one_line_error(proc, "samples.max_seq_length", code=2)

    after = {p.name: p.read_bytes() for p in (tmp_path / "samples" / "train").iterdir()}
    assert after == before
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["bad_vocab", "metrics", "one_doc", "samples"]
