"""Labelled tasks made from held-out text without labels (the corpus's val split, which
pretraining never saw), so that `finetune` shows what pretraining is worth on any corpus.

- `builtin:replaced-word`: is this sentence as written, or was one of its words replaced by
  another word of the same text? The replacement is drawn by frequency from the words of the
  split, so the words of both classes have the same distribution: no bag of words tells them
  apart, only knowing which words fit their context does, which is what MLM teaches.
- `builtin:same-document`: do these two sentences come from the same document (or part)? The
  topic cue NSP mostly learns; the train and test pairs come from different documents.
- `builtin:word-order`: is this sentence as written, or with two of its words swapped? Both
  classes have exactly the same words; a tiny model stays at chance on it, pretrained or not.

A sentence-level task keeps both versions of a sentence in the same split. Only lower-case
alphabetic words (not the first) are replaced or swapped, so capitals and punctuation give
nothing away.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.data.corpus.splits import read_documents
from bertcore.downstream.movable import movable_positions
from bertcore.downstream.tasks import Example

ORIGINAL = "original"


@dataclass(frozen=True)
class BuiltinTask:
    description: str
    # documents (lists of sentences) -> groups of examples; a group never straddles the split
    groups: Callable[[list[list[str]], random.Random], list[list[Example]]]
    by_document: bool = False  # split the documents first (pair tasks), not the groups


def builtin_task(name: str, corpus_file: str | Path, test_fraction: float,
                 seed: int) -> tuple[list[Example], list[Example]]:
    """(train, test) of built-in task `name` from a corpus file (one sentence per line, blank
    lines between documents), split `test_fraction` / rest, seeded."""
    task = BUILTIN_TASKS[name]
    documents = read_documents(corpus_file)
    rng = random.Random(seed)
    if task.by_document:
        rng.shuffle(documents)
        n_test = _test_count(len(documents), test_fraction, corpus_file, "documents")
        test = _flatten(task.groups(documents[:n_test], rng))
        train = _flatten(task.groups(documents[n_test:], rng))
        if not (test and train):
            usable = sum(len(doc) >= 2 for doc in documents)
            raise BertError(f"{corpus_file} has too few documents to split by document for "
                            f"{name}: {len(documents)} ({usable} of two sentences or more), "
                            "where its test and its train part each need two of two sentences "
                            "or more; use a corpus of more documents, or set finetune.data to "
                            "a labelled file")
    else:
        groups = task.groups(documents, rng)
        rng.shuffle(groups)
        n_test = _test_count(len(groups), test_fraction, corpus_file, "sentences")
        test, train = _flatten(groups[:n_test]), _flatten(groups[n_test:])
    if len(train) < 10 or len({e.label for e in train}) < 2 or not test:
        raise BertError(f"{corpus_file} gives only {len(train)} training examples for {name} "
                        f"with finetune.test_fraction {test_fraction:g} ({len(test)} test "
                        "examples): lower finetune.test_fraction, use a larger corpus, or set "
                        "finetune.data to a labelled file")
    rng.shuffle(train)
    return train, test


def _test_count(n: int, fraction: float, corpus_file, what: str) -> int:
    if n < 2:
        raise BertError(f"{corpus_file} has {n} usable {what} for the built-in task: use a "
                        "larger corpus, or set finetune.data to a labelled file")
    return max(1, min(round(n * fraction), n - 1))


def _flatten(groups: Sequence[Sequence[Example]]) -> list[Example]:
    return [example for group in groups for example in group]


# ------------------------------------------------------------------------------ word order
def word_order_groups(documents: list[list[str]], rng: random.Random) -> list[list[Example]]:
    groups = []
    for sentence in itertools.chain.from_iterable(documents):
        swapped = swap_two_words(sentence, rng)
        if swapped is not None:
            groups.append([Example(sentence, None, ORIGINAL), Example(swapped, None, "swapped")])
    return groups


def swap_two_words(sentence: str, rng: random.Random) -> str | None:
    """The sentence with two different movable words swapped; None when it has no such pair."""
    words = sentence.split()
    candidates = movable_positions(words)
    if len({words[i] for i in candidates}) < 2:
        return None
    while True:
        i, j = rng.sample(candidates, 2)
        if words[i] != words[j]:
            break
    words[i], words[j] = words[j], words[i]
    return " ".join(words)


# --------------------------------------------------------------------------- replaced word
def replaced_word_groups(documents: list[list[str]], rng: random.Random) -> list[list[Example]]:
    sentences = list(itertools.chain.from_iterable(documents))
    counts: Counter[str] = Counter()
    for sentence in sentences:
        words = sentence.split()
        counts.update(words[i] for i in movable_positions(words))
    if len(counts) < 2:
        return []
    vocabulary = sorted(counts)  # sorted: the draw depends on the text, not on dict order
    cumulative = list(itertools.accumulate(counts[w] for w in vocabulary))
    groups = []
    for sentence in sentences:
        words = sentence.split()
        candidates = movable_positions(words)
        if not candidates:
            continue
        i = rng.choice(candidates)
        while (new := vocabulary[bisect.bisect_right(cumulative, rng.randrange(cumulative[-1]))]
               ) == words[i]:
            pass
        replaced = [*words[:i], new, *words[i + 1:]]
        groups.append([Example(sentence, None, ORIGINAL),
                       Example(" ".join(replaced), None, "replaced")])
    return groups


# --------------------------------------------------------------------------- same document
def same_document_groups(documents: list[list[str]], rng: random.Random) -> list[list[Example]]:
    """For each sentence A of a document with another sentence: (A, a sentence of the same
    document that is not A's neighbour when there is one) and (A, a sentence of another
    document), so both classes have the same first sentences."""
    usable = [doc for doc in documents if len(doc) >= 2]
    if len(usable) < 2:
        return []
    groups = []
    for d, doc in enumerate(usable):
        for i, sentence in enumerate(doc):
            far = [j for j in range(len(doc)) if abs(j - i) > 1] or [j for j in range(len(doc))
                                                                     if j != i]
            k = rng.randrange(len(usable) - 1)  # any document but this one (the same draw
            other = usable[k + (k >= d)]         # as rng.choice of the list without d)
            groups.append([Example(sentence, doc[rng.choice(far)], "same"),
                           Example(sentence, rng.choice(other), "different")])
    return groups


BUILTIN_TASKS: dict[str, BuiltinTask] = {
    "builtin:replaced-word": BuiltinTask(
        "replaced-word (built-in): held-out sentences as written vs with one word replaced by "
        "another of the same text, drawn by frequency", replaced_word_groups),
    "builtin:same-document": BuiltinTask(
        "same-document (built-in): two held-out sentences from the same document vs from two "
        "documents", same_document_groups, by_document=True),
    "builtin:word-order": BuiltinTask(
        "word-order (built-in): held-out sentences as written vs with two of their words "
        "swapped", word_order_groups),
}
