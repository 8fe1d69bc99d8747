"""A model-free row beside the fine-tuned ones: TF-IDF over token ids and a logistic
regression (a regression task: a linear one, least squares), on the same train/test split. It
says how much of a task words alone give away, so a fine-tune result reads against it as well
as against the majority class.

For a sentence pair the features are the TF-IDF of both texts together, their elementwise
product (which words they share) and its sum, the cosine of the two texts (how much they
share), the cue of NSP's bag-of-words baseline. The regression is sklearn's default (L2,
C = 1), fitted in float64 by L-BFGS on the whole training set: deterministic, and a few seconds
for thousands of examples.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertcore.downstream.tasks import EncodedExamples

C = 1.0  # inverse L2 strength, as sklearn's LogisticRegression
MAX_ITERATIONS = 200


def tfidf_features(data: EncodedExamples, idf: np.ndarray, pairs: bool) -> torch.Tensor:
    """One sparse row per example: TF-IDF of its tokens, L2-normalised; for `pairs`, that of
    both texts (columns [0, V)), the product of the two texts' own vectors ([V, 2V)) and their
    cosine (column 2V)."""
    size = len(idf)
    rows, cols, values = [], [], []
    for i, (ids, types) in enumerate(zip(data.input_ids, data.token_type_ids, strict=True)):
        ids, types = np.asarray(ids), np.asarray(types)
        whole = _normalised_tfidf(ids, idf)
        parts = [whole]
        if pairs:
            a, b = _normalised_tfidf(ids[types == 0], idf), _normalised_tfidf(ids[types == 1], idf)
            shared = {t: v * b[t] for t, v in a.items() if t in b}
            parts.append({t + size: v for t, v in shared.items()})
            parts.append({2 * size: sum(shared.values())})
        for part in parts:
            rows += [i] * len(part)
            cols += list(part)
            values += list(part.values())
    return torch.sparse_coo_tensor(np.array([rows, cols], dtype=np.int64).reshape(2, -1),
                                   torch.tensor(values, dtype=torch.float64),
                                   (len(data), 2 * size + 1 if pairs else size),
                                   check_invariants=True).coalesce()


def _normalised_tfidf(ids: np.ndarray, idf: np.ndarray) -> dict[int, float]:
    tokens, counts = np.unique(ids, return_counts=True)
    weights = counts * idf[tokens]
    norm = float(np.linalg.norm(weights)) or 1.0
    return {int(t): float(w) / norm for t, w in zip(tokens, weights, strict=True)}


def inverse_document_frequency(train: EncodedExamples, size: int) -> np.ndarray:
    """Smoothed idf over the training examples, as sklearn's: ln((1 + n) / (1 + df)) + 1."""
    frequency = np.zeros(size)
    for ids in train.input_ids:
        frequency[np.unique(ids)] += 1
    return np.log((1 + len(train)) / (1 + frequency)) + 1.0


def bag_of_words_predictions(train: EncodedExamples, test: EncodedExamples,
                             num_classes: int) -> np.ndarray:
    """Test predictions of a TF-IDF logistic regression fitted on `train`."""
    x_train, x_test = _features(train, test)
    scores = _fitted(x_train, x_test, torch.tensor(train.labels), num_classes, F.cross_entropy)
    return scores.argmax(dim=1).numpy()


def bag_of_words_values(train: EncodedExamples, test: EncodedExamples) -> np.ndarray:
    """Test predictions of a regression task: a linear regression on TF-IDF (squared error,
    the same L2 penalty) fitted on `train`'s values."""
    x_train, x_test = _features(train, test)
    targets = torch.tensor(train.labels, dtype=torch.float64)[:, None]
    return _fitted(x_train, x_test, targets, 1, F.mse_loss)[:, 0].numpy()


def _features(train: EncodedExamples, test: EncodedExamples
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Both splits' TF-IDF rows, the idf of `train`."""
    size = 1 + max(max(ids) for ids in (*train.input_ids, *test.input_ids))
    idf = inverse_document_frequency(train, size)
    pairs = any(1 in types for types in train.token_type_ids)
    return tfidf_features(train, idf, pairs), tfidf_features(test, idf, pairs)


def _fitted(x_train: torch.Tensor, x_test: torch.Tensor, targets: torch.Tensor, outputs: int,
            loss_of) -> torch.Tensor:
    """The test rows' outputs of a linear map fitted to `targets` by L-BFGS on `loss_of`
    (outputs, targets) plus the L2 penalty."""
    weights = torch.zeros(x_train.shape[1], outputs, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(outputs, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, bias], max_iter=MAX_ITERATIONS,
                                  line_search_fn="strong_wolfe")
    penalty = 1.0 / (2 * C * len(targets))  # sklearn's C * sum(loss) + ||w||^2 / 2, per example

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = torch.sparse.mm(x_train, weights) + bias
        loss = loss_of(logits, targets) + penalty * weights.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        return torch.sparse.mm(x_test, weights) + bias
