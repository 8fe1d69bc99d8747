"""A model-free NSP baseline: how much of next sentence prediction a corpus gives away through
shared words, the topic cue NSP mostly learns (Lan et al. 2020, ALBERT). "B is random when the
TF-IDF cosine of A's and B's bags of words is below t", with t fitted on the train pairs, scored
on the val pairs. `bert evaluate` reports it beside the model's NSP accuracy: a model near it
has learnt what words alone tell; one near the majority class has learnt nothing.
"""

from __future__ import annotations

import numpy as np

from bertcore.data.samples.store import SampleStore


def bag_of_words_nsp(train: SampleStore, val: SampleStore, limit: int = 20000) -> float:
    """Val NSP accuracy of "B is random when the TF-IDF cosine of A and B is below t", with
    t fitted on (at most `limit` of) the train pairs; idf over the train pairs."""

    def bags(store: SampleStore, n: int):
        for i in range(n):
            ids, b_start, random_next = store[i]
            yield (np.unique(ids[1 : b_start - 1], return_counts=True),
                   np.unique(ids[b_start:-1], return_counts=True), random_next)

    train_bags = list(bags(train, min(len(train), limit)))
    n_train = len(train_bags)
    # ids up to the largest in the bags and in val's tokens, which its pairs point into (not a
    # scan of the whole train split)
    largest = max((int(ids[-1]) for (a, _), (b, _), _ in train_bags for ids in (a, b)
                   if len(ids)), default=0)  # np.unique's ids are sorted
    frequency = np.zeros(max(largest, int(val.tokens.max())) + 1)
    for (a, _), (b, _), _ in train_bags:
        frequency[np.union1d(a, b)] += 1
    idf = np.log((n_train + 1) / (frequency + 1)) + 1.0

    def cosines(pairs) -> tuple[np.ndarray, np.ndarray]:
        scores, labels = [], []
        for (a, ca), (b, cb), random_next in pairs:
            wa, wb = ca * idf[a], cb * idf[b]
            _, ia, ib = np.intersect1d(a, b, assume_unique=True, return_indices=True)
            scores.append((wa[ia] @ wb[ib]) / max(np.linalg.norm(wa) * np.linalg.norm(wb), 1e-12))
            labels.append(bool(random_next))
        return np.array(scores), np.array(labels, dtype=bool)

    scores, labels = cosines(train_bags)
    order = np.argsort(scores)
    # predicting "random" for the k lowest scores: right on the random ones among them and
    # on the follow-ons above them
    right = np.concatenate([[0], np.cumsum(labels[order])]) + np.concatenate(
        [np.cumsum((~labels[order])[::-1])[::-1], [0]])
    k = int(np.argmax(right))
    threshold = scores[order[k]] if k < n_train else np.inf
    val_scores, val_labels = cosines(bags(val, len(val)))
    return float(np.mean((val_scores < threshold) == val_labels))
