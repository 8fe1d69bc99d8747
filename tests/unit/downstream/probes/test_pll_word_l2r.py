"""PLL-word-l2r (Kauf & Ivanova 2023) against a hand computation: a tiny model over a vocabulary
written here, whose words split into pieces as its test sentences need, scored copy by copy on
masked copies written out by hand; it equals PLL where every word is one token; a BLiMP file
made here, with the share of its pairs that differ in a word split into pieces and the
accuracies on those pairs and the others; `probe.scoring` checked at the edge."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.tiny_pretrain import tiny_config
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordPiece

from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.minimal_pairs import accuracy
from bertcore.downstream.probes.pll import sentence_scores
from bertcore.downstream.probes.probing import run_probes
from bertcore.model.bert import BertPretrainingModel

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "slept",
         "ran", "run", "on", "mat", ".", "un", "##bel", "##iev", "##able", "sleep", "##ed",
         "sit", "##s"]
ID = {token: i for i, token in enumerate(VOCAB)}
M = "[MASK]"


@pytest.fixture(scope="module")
def lm() -> MaskedLM:
    """A tiny random BERT (a wide init, so that its guesses differ) over VOCAB."""
    tokenizer = Tokenizer(WordPiece(ID, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(len(VOCAB), dropout=0.0, initializer_range=0.2))
    return MaskedLM(model, tokenizer, batch_size=3)


def by_hand(lm: MaskedLM, sentence: list[str], copies: list[tuple[list[str], int]]) -> float:
    """The sum, over copies of `sentence` written out by hand, of the log-probability of its
    token at the copy's position, each copy alone through the model."""
    total = 0.0
    for tokens, position in copies:
        ids = torch.tensor([[ID[t] for t in tokens]])
        log_probs = lm.log_probs_at([ids], torch.tensor([position]))
        total += log_probs[0, ID[sentence[position]]].item()
    return total


SENTENCE = ["[CLS]", "the", "un", "##bel", "##iev", "##able", "cat", "sat", ".", "[SEP]"]
# PLL-word-l2r: each token masked with the later tokens of its word, the earlier ones in view
L2R_COPIES = [
    (["[CLS]", M, "un", "##bel", "##iev", "##able", "cat", "sat", ".", "[SEP]"], 1),
    (["[CLS]", "the", M, M, M, M, "cat", "sat", ".", "[SEP]"], 2),
    (["[CLS]", "the", "un", M, M, M, "cat", "sat", ".", "[SEP]"], 3),
    (["[CLS]", "the", "un", "##bel", M, M, "cat", "sat", ".", "[SEP]"], 4),
    (["[CLS]", "the", "un", "##bel", "##iev", M, "cat", "sat", ".", "[SEP]"], 5),
    (["[CLS]", "the", "un", "##bel", "##iev", "##able", M, "sat", ".", "[SEP]"], 6),
    (["[CLS]", "the", "un", "##bel", "##iev", "##able", "cat", M, ".", "[SEP]"], 7),
    (["[CLS]", "the", "un", "##bel", "##iev", "##able", "cat", "sat", M, "[SEP]"], 8),
]


@pytest.mark.parametrize("batch_size", [1, 3, 1000])  # a sentence split, several, all
def test_pll_word_l2r_is_the_sum_over_the_copies_masked_by_hand(lm, batch_size):
    """`the unbelievable cat sat .`: `unbelievable` is un ##bel ##iev ##able; its first piece
    is guessed with all four masked, its last with the other three in view. PLL masks each
    token alone, so the two differ on this sentence."""
    lm.batch_size = batch_size
    sentence = lm.tokenize("The unbelievable cat sat.")
    assert [VOCAB[i] for i in sentence.ids] == SENTENCE
    assert sentence.words == ((1, 2), (2, 6), (6, 7), (7, 8), (8, 9))
    pll_copies = [([*SENTENCE[:p], M, *SENTENCE[p + 1:]], p) for p in range(1, 9)]
    scores = sentence_scores(lm, [lm.tokenize("a"), sentence])  # "a" is [UNK]: one word
    assert scores.pll_word_l2r[1] == pytest.approx(by_hand(lm, SENTENCE, L2R_COPIES), abs=1e-5)
    assert scores.pll[1] == pytest.approx(by_hand(lm, SENTENCE, pll_copies), abs=1e-5)
    assert abs(scores.pll[1] - scores.pll_word_l2r[1]) > 0.1


def test_pll_word_l2r_is_pll_where_every_word_is_one_token(lm):
    """No word in pieces: every copy is PLL's, the same numbers to the bit."""
    texts = ["the cat sat on the mat .", "the dog slept .", "mat"]
    sentences = [lm.tokenize(t) for t in texts]
    assert all(end - start == 1 for s in sentences for start, end in s.words)
    scores = sentence_scores(lm, sentences)
    assert scores.pll_word_l2r == scores.pll
    assert scores.pll == sentence_scores(lm, sentences, word_l2r=False).pll


# the pairs of a BLiMP file made here, and whether a word they differ in is in pieces
BLIMP = [
    ({"sentence_good": "the dog slept .", "sentence_bad": "the dog sleeped .", "UID": "past"},
     True),  # sleep ##ed
    ({"sentence_good": "the cat sat .", "sentence_bad": "the cat sits .", "UID": "past"},
     True),  # sit ##s
    ({"sentence_good": "the cat sat on the mat .", "sentence_bad": "the cat sat the on mat .",
      "UID": "order"}, False),
    ({"sentence_good": "the unbelievable dog ran on the unbelievable mat .",
      "sentence_bad": "the unbelievable dog run on the unbelievable mat .", "UID": "past"},
     False),  # in pieces before and after where the pair differs, not there
    ({"sentence_good": "the unbelievable cat sat .", "sentence_bad": "unbelievable the cat sat .",
      "UID": "order"}, True),  # two words swapped, one of them in pieces
]


def hand_scores(lm: MaskedLM, text: str) -> tuple[float, float]:
    """(PLL, PLL-word-l2r) of `text`, each copy made here and scored alone."""
    tokens = [VOCAB[i] for i in lm.tokenize(text).ids]
    pll, l2r = [], []
    for p in range(1, len(tokens) - 1):
        pll.append(([*tokens[:p], M, *tokens[p + 1:]], p))
        end = p + 1
        while tokens[end].startswith("##"):
            end += 1
        l2r.append(([*tokens[:p], *[M] * (end - p), *tokens[end:]], p))
    return by_hand(lm, tokens, pll), by_hand(lm, tokens, l2r)


@pytest.mark.parametrize("scoring", ["pll_word_l2r", "pll"])
def test_a_blimp_file_by_both_scorings_with_its_share_of_pairs_split(lm, tmp_path, scoring):
    """3 of the 5 pairs differ in a word in pieces (0.6); each accuracy, overall and on those
    pairs and the others, is the share of pairs the hand scores get right, and `accuracy` is
    the one `probe.scoring` names."""
    lm.batch_size = 4
    path = tmp_path / "blimp.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row, _ in BLIMP), encoding="utf-8")
    train = tmp_path / "train.txt"
    train.write_text("the cat sat on the mat .\n\nthe dog slept .\n", encoding="utf-8")
    report = run_probes(lm, ProbeConfig(builtin_sentences=0, minimal_pairs=str(path),
                                        scoring=scoring), tmp_path / "val.txt", train)
    hand = [[hand_scores(lm, row[key]) for key in ("sentence_good", "sentence_bad")]
            for row, _ in BLIMP]
    split = [is_split for _, is_split in BLIMP]

    def right(kind: int, keep) -> float | None:
        return accuracy([(g[kind], b[kind]) for (g, b), s in zip(hand, split, strict=True)
                         if keep(s)])

    details, metrics = report.details["minimal_pairs"], report.metrics["minimal_pairs"]
    assert [r["split_word"] for r in report.items["minimal_pairs.jsonl"]] == split
    assert details["split_word"]["share"] == 0.6 and details["split_word"]["pairs"] == 3
    assert details["whole_words"]["pairs"] == 2
    assert details["groups"]["past"]["split_word_pairs"] == 2
    for kind, name in enumerate(("pll", "pll_word_l2r")):
        assert metrics[f"accuracy_{name}"] == right(kind, lambda s: True), name
        assert details["split_word"][f"accuracy_{name}"] == right(kind, bool), name
        assert details["whole_words"][f"accuracy_{name}"] == right(kind, lambda s: not s), name
    assert metrics["accuracy"] == metrics[f"accuracy_{scoring}"]
    assert report.details["scoring"] == scoring
    assert set(report.outcomes.figures) == {
        "minimal_pairs.accuracy", "minimal_pairs.accuracy_pll",
        "minimal_pairs.accuracy_pll_word_l2r"}
