"""The probes' library: the pseudo-log-likelihood against a plain loop over transformers'
BertForMaskedLM, the BLiMP and LAMA files read and scored on cases whose figures are known,
each bad input's one line, and the built-in probes made from a tiny val split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.tiny_pretrain import write_corpus

from bertcore.common.errors import BertError
from bertcore.common.report import write_report
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab
from bertcore.data.vocab.training import train_tokenizer
from bertcore.downstream.probes import minimal_pairs as minimal_pairs_module
from bertcore.downstream.probes.builtin import REPLACED, SWAPPED, builtin_probes
from bertcore.downstream.probes.cloze import (
    ClozeItem,
    cloze_report,
    precision,
    read_cloze,
    score_cloze,
)
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.frequencies import count_train
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.minimal_pairs import (
    MinimalPair,
    pair_report,
    read_minimal_pairs,
    score_pairs,
)
from bertcore.downstream.probes.pll import PLL, WORD_L2R, SentenceScores, pseudo_log_likelihoods
from bertcore.downstream.probes.probing import run_probes
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.hf import export_hf
from bertcore.saved.trained_model import load_model_and_tokenizer

transformers = pytest.importorskip("transformers")

SENTENCES = [
    "paris is the capital of france .",
    "rome is the capital of italy .",
    "the cat sat on the mat .",
    "the dog slept on the old rug near the door .",
    "a bird sang .",
    "berlin is the capital of germany and a big city .",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A tiny random BERT with peaked predictions (a wide init), exported with its vocab."""
    root = tmp_path_factory.mktemp("probe")
    corpus = root / "corpus"
    write_corpus(corpus, train_docs=20, val_docs=8)
    lines = [*SENTENCES, *corpus.joinpath("train.txt").read_text().split("\n")]
    vocab_config = VocabConfig(vocab_size=300, min_frequency=1)
    tokenizer = train_tokenizer([lines], vocab_config)
    (root / "vocab").mkdir()
    save_vocab(tokenizer, root / "vocab")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, initializer_range=0.15)
    export_hf(BertPretrainingModel(config).eval(), root / "hf", vocab_dir=root / "vocab")
    return root


def masked_lm(root: Path, batch_size: int = 7) -> MaskedLM:
    model, tokenizer = load_model_and_tokenizer(str(root / "hf"), None, head="mlm")
    return MaskedLM(model, tokenizer, batch_size=batch_size)


def reference_pll(hf_model, lm: MaskedLM, sentence: str) -> float:
    """Salazar et al.'s PLL the straightforward way: one forward per masked token."""
    ids = [lm.cls_id, *lm.word_ids(sentence), lm.sep_id]
    total = 0.0
    for position in range(1, len(ids) - 1):
        masked = list(ids)
        masked[position] = lm.mask_id
        with torch.no_grad():
            logits = hf_model(input_ids=torch.tensor([masked])).logits[0, position]
        total += logits.log_softmax(-1)[ids[position]].item()
    return total


@pytest.fixture(scope="module")
def expected_plls(exported) -> list[float]:
    hf_model = transformers.BertForMaskedLM.from_pretrained(exported / "hf").eval()
    return [reference_pll(hf_model, masked_lm(exported), s) for s in SENTENCES]


@pytest.mark.parametrize("batch_size", [1, 7, 1000])  # a sentence split, several, all
def test_pll_is_the_sum_of_each_token_masked_in_turn_as_transformers_scores_it(
        exported, expected_plls, batch_size):
    lm = masked_lm(exported, batch_size)
    expected = expected_plls
    got = pseudo_log_likelihoods(lm, [lm.encode(s) for s in SENTENCES])
    assert got == pytest.approx(expected, abs=1e-5)
    assert len(set(round(v, 3) for v in got)) == len(got)  # the sentences do differ


# ------------------------------------------------------------------------- minimal pairs
def write_lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


BLIMP = [
    {"sentence_good": "the cat sat on the mat .", "sentence_bad": "the cat sat mat the on .",
     "UID": "order"},
    {"sentence_good": "the dog slept .", "sentence_bad": "the dog sleeped .", "UID": "order"},
    {"sentence_good": "a bird sang .", "sentence_bad": "a bird sing .", "UID": "agreement"},
    {"sentence_good": "rome is big .", "sentence_bad": "rome are big .", "UID": "agreement"},
]


def test_minimal_pairs_accuracy_per_group_and_overall(exported, tmp_path, monkeypatch):
    """With PLLs that make pairs 1, 3 and 4 right and pair 2 wrong: 0.75 overall, 0.5 for
    `order`, 1.0 for `agreement`; a tie counts half."""
    path = write_lines(tmp_path / "blimp.jsonl", BLIMP)
    pairs = read_minimal_pairs(path)
    assert [(p.group, p.where) for p in pairs][1] == ("order", f"{path} line 2")
    fixed = [-1.0, -2.0, -3.0, -1.0, -1.0, -1.5, -4.0, -5.0]  # good, bad per pair
    other = [-2.0, -1.0, -3.0, -1.0, -1.0, -1.5, -4.0, -5.0]  # pair 1 wrong too
    monkeypatch.setattr(minimal_pairs_module, "sentence_scores",
                        lambda lm, sentences, what, progress, l2r: SentenceScores(fixed, other))
    lm = masked_lm(exported)
    counts = count_train(exported / "corpus" / "train.txt", lm)
    scored = score_pairs(lm, pairs, counts)
    metrics, details = pair_report(scored, PLL)
    assert metrics == {"accuracy": 0.75, "accuracy_pll": 0.75, "accuracy_pll_word_l2r": 0.5}
    assert pair_report(scored, WORD_L2R)[0]["accuracy"] == 0.5
    assert details["groups"]["order"]["accuracy"] == 0.5
    assert details["groups"]["agreement"] == {
        "pairs": 2, "accuracy": 1.0, "accuracy_pll": 1.0, "accuracy_pll_word_l2r": 1.0,
        "split_word_pairs": scored[2].split_word + scored[3].split_word,
        "unigram_baseline": pytest.approx(
            details["groups"]["agreement"]["unigram_baseline"])}
    assert [s.row(PLL)["correct"] for s in scored] == [True, False, True, True]
    monkeypatch.setattr(minimal_pairs_module, "sentence_scores",
                        lambda lm, sentences, what, progress, l2r: SentenceScores([-1.0] * 8,
                                                                                  [-1.0] * 8))
    assert pair_report(score_pairs(lm, pairs, counts), PLL)[0]["accuracy"] == 0.5


def test_a_sentence_two_pairs_share_is_scored_once(exported, monkeypatch):
    """The built-in pairs share their good sentence (swapped, replaced): its PLL is computed
    once and given to both pairs."""
    seen = []

    def plls(lm, sentences, what, progress, l2r):
        seen.extend(sentences)
        return SentenceScores(*[[-float(len(s.ids)) for s in sentences]] * 2)

    monkeypatch.setattr(minimal_pairs_module, "sentence_scores", plls)
    lm = masked_lm(exported)
    counts = count_train(exported / "corpus" / "train.txt", lm)
    good = "the cat sat on the mat ."
    pairs = [MinimalPair(good, "the cat sat the on mat .", SWAPPED, "s"),
             MinimalPair(good, "the cat sat on the rug near .", REPLACED, "s")]
    scored = score_pairs(lm, pairs, counts)
    assert len(seen) == 3 and len(set(seen)) == 3
    assert scored[0].pll[0] == scored[1].pll[0] == -len(lm.encode(good))
    assert scored[1].pll[1] == -len(lm.encode(pairs[1].bad))


def test_a_pair_without_uid_is_grouped_by_its_file(tmp_path):
    folder = tmp_path / "blimp"
    folder.mkdir()
    write_lines(folder / "anaphor.jsonl", [{k: v for k, v in BLIMP[0].items() if k != "UID"}])
    write_lines(folder / "island.jsonl", ["", BLIMP[1]])  # a blank line is skipped
    assert [(p.group, p.where.rsplit(" ", 1)[1]) for p in read_minimal_pairs(folder)] == [
        ("anaphor", "1"), ("order", "2")]


# --------------------------------------------------------------------------------- cloze
def test_cloze_precision_at_1_and_10_and_the_answers_not_counted(exported, tmp_path,
                                                                monkeypatch):
    """The model patched to rank `paris` first, then `rome`, then the rest: an item answered
    paris hits at 1, rome at 10 only, a rare word at neither; a word of several tokens is
    not counted, and reported."""
    lm = masked_lm(exported)
    paris, rome = lm.single_token("Paris"), lm.single_token("rome")
    assert None not in (paris, rome)
    scores = -torch.arange(lm.vocab_size, dtype=torch.float)
    scores[paris], scores[rome] = 10.0, 9.0
    monkeypatch.setattr(MaskedLM, "log_probs_at",
                        lambda self, blocks, positions: scores.expand(len(positions), -1))
    rare = lm.tokenizer.id_to_token(lm.vocab_size - 1)
    path = write_lines(tmp_path / "lama.jsonl", [
        {"masked_sentences": ["[MASK] is the capital of france ."], "obj_label": "Paris",
         "predicate_id": "P36"},
        {"masked_sentences": ["[MASK] is the capital of italy .", "more"], "obj_label": "Rome"},
        {"masked_sentences": ["the [MASK] sat ."], "obj_label": rare.lstrip("#") or "x"},
        {"masked_sentences": ["the cat sat on the [MASK] ."], "obj_label": "Xyzzyqqvv"},
    ])
    items = read_cloze(path)
    assert [i.group for i in items] == ["P36", "lama", "lama", "lama"]
    metrics, details = cloze_report(score_cloze(lm, items), count_train(
        exported / "corpus" / "train.txt", lm), lm)
    assert lm.single_token(items[2].answer) is not None
    assert metrics == {"p_at_1": pytest.approx(1 / 3), "p_at_10": pytest.approx(2 / 3)}
    assert details["items"] == 3
    assert details["not_counted"]["count"] == 1
    assert details["not_counted"]["examples"] == ["Xyzzyqqvv"]


def test_the_frequency_baseline_guesses_the_most_frequent_whole_words(exported):
    lm = masked_lm(exported)
    counts = count_train(exported / "corpus" / "train.txt", lm)
    guess = [lm.tokenizer.id_to_token(i) for i in counts.most_frequent(lm, 3)]
    assert guess[0] == "the"  # every sentence of the tiny corpus has two
    words = sorted(counts.words, key=lambda w: -counts.words[w])
    assert guess == [w for w in words if lm.single_token(w) is not None][:3]


# ---------------------------------------------------------------------------- bad input
MISSING = ("probe.minimal_pairs", "does not exist")


@pytest.mark.parametrize(("lines", "fragments"), [
    ([], ("is empty", "sentence_good and sentence_bad")),
    (["", "  "], ("is empty",)),
    ([BLIMP[0], "{not json"], ("line 2 is not JSON", "sentence_good")),
    ([BLIMP[0], "[1, 2]"], ("line 2 is not a JSON object",)),
    ([{"sentence_good": "a b c ."}], ("line 1 has no 'sentence_bad'",)),
    ([{"sentence_good": "a b .", "sentence_bad": " "}], ("line 1 has no text in 'sentence_bad'",)),
])
def test_bad_minimal_pairs_are_one_line_naming_the_file_and_line(tmp_path, lines, fragments):
    path = write_lines(tmp_path / "pairs.jsonl", lines) if lines else tmp_path / "pairs.jsonl"
    if not lines:
        path.write_text("")
    with pytest.raises(BertError) as error:
        read_minimal_pairs(path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(("row", "fragment"), [
    ({"masked_sentences": ["no mask here ."], "obj_label": "x"},
     "holds 0 [MASK]: expected exactly"),
    ({"masked_sentences": ["[MASK] and [MASK] ."], "obj_label": "x"}, "holds 2 [MASK]"),
    ({"masked_sentences": "[MASK] is .", "obj_label": "x"}, "no list of sentences"),
    ({"masked_sentences": ["[MASK] is ."]}, "has no 'obj_label'"),
])
def test_bad_cloze_items_are_one_line_naming_the_file_and_line(tmp_path, row, fragment):
    path = write_lines(tmp_path / "lama.jsonl", [
        {"masked_sentences": ["[MASK] is ."], "obj_label": "x"}, row])
    with pytest.raises(BertError, match="line 2") as error:
        read_cloze(path)
    assert fragment in str(error.value) and str(path) in str(error.value)


def test_a_path_that_does_not_exist_or_a_folder_without_files(tmp_path):
    with pytest.raises(BertError, match=r"probe\.cloze: .*nowhere\.jsonl does not exist"):
        read_cloze(tmp_path / "nowhere.jsonl")
    with pytest.raises(BertError, match=r"holds no \.jsonl file"):
        read_minimal_pairs(tmp_path)


def test_a_sentence_longer_than_the_model_names_its_line(exported, tmp_path):
    lm = masked_lm(exported)
    path = write_lines(tmp_path / "long.jsonl", [
        BLIMP[0], {"sentence_good": "the cat " * 40, "sentence_bad": "a b ."}])
    counts = count_train(exported / "corpus" / "train.txt", lm)
    with pytest.raises(BertError, match=r"long.jsonl line 2: .*tokens, the model takes at most 64"):
        score_pairs(lm, read_minimal_pairs(path), counts)


# ----------------------------------------------------------------------- built-in probes
def test_builtin_probes_perturb_the_held_out_sentences_as_they_say(exported):
    lm = masked_lm(exported)
    corpus = exported / "corpus"
    counts = count_train(corpus / "train.txt", lm)
    probes = builtin_probes(corpus / "val.txt", lm, counts, sentences=30, seed=1)
    assert probes.drawn == 30 and probes.eligible > 30
    val = set(corpus.joinpath("val.txt").read_text().splitlines())
    for item in probes.cloze:
        words, filled = item.text.split(), item.text.replace("[MASK]", item.answer)
        assert words.count("[MASK]") == 1 and words.index("[MASK]") > 0 and filled in val
        assert lm.single_token(item.answer) is not None
    kinds = {SWAPPED: 0, REPLACED: 0}
    ranked = sorted(counts.words, key=lambda w: (-counts.words[w], w))
    for pair in probes.pairs:
        kinds[pair.group] += 1
        good, bad = pair.good.split(), pair.bad.split()
        assert pair.good in val and pair.bad != pair.good and len(good) == len(bad)
        changed = [i for i, (a, b) in enumerate(zip(good, bad, strict=True)) if a != b]
        if pair.group == SWAPPED:
            assert len(changed) == 2 and changed[1] == changed[0] + 1
            assert good[changed[0]] == bad[changed[1]] and good[changed[1]] == bad[changed[0]]
        else:
            assert len(changed) == 1
            old, new = good[changed[0]], bad[changed[0]]
            assert abs(ranked.index(old) - ranked.index(new)) == 1
    assert kinds[SWAPPED] > 10 and kinds[REPLACED] > 10


def test_builtin_probes_give_the_same_bytes_twice_and_depend_on_the_seed(exported, tmp_path):
    corpus = exported / "corpus"
    config = ProbeConfig(builtin_sentences=40, seed=3)
    outputs = []
    for n, seed in enumerate((3, 3, 4)):
        report = run_probes(masked_lm(exported, batch_size=16),
                            ProbeConfig(builtin_sentences=40, seed=seed),
                            corpus / "val.txt", corpus / "train.txt")
        files = write_report(tmp_path / f"probe{n}.json", "probe", report.metrics,
                             report.details)
        outputs.append((files[0].read_bytes(), files[1].read_bytes(), report.items))
    assert outputs[0] == outputs[1]  # same params, same bytes
    assert outputs[2][2] != outputs[0][2]
    metrics = json.loads(outputs[0][0])["probe"]["builtin"]
    details = json.loads(outputs[0][1])["builtin"]
    assert set(metrics) == {"cloze", "swapped_pairs", "replaced_pairs"}
    assert details["swapped_pairs"]["unigram_baseline"]["accuracy"] == 0.5  # same tokens: ties
    assert details["seed"] == config.seed and details["drawn_sentences"] == 40


def test_a_swap_never_leaves_the_sentence_as_it_was():
    """Of `the the` and `the red` only the second swap changes the sentence; with equal
    words alone there is none."""
    import random

    from bertcore.downstream.probes.builtin import swap_adjacent

    words = ["It", "Was", "the", "the", "red"]
    assert {swap_adjacent(words, random.Random(seed)) for seed in range(20)} == {
        "It Was the red the"}
    assert swap_adjacent(["It", "Was", "the", "the", "Cow"], random.Random(0)) is None


def test_the_cloze_ranks_whole_words_as_the_frequency_guess_does(exported, monkeypatch):
    """The model patched to rank punctuation, special tokens and a ## piece above `paris`:
    the cloze ranks whole-word tokens only, the set the frequency baseline guesses from, so
    `paris` is its first answer (P@1 1), and none of its ten is anything but a word."""
    lm = masked_lm(exported)
    paris = lm.word_token("paris")
    piece = next(i for i in range(lm.vocab_size) if lm.tokenizer.id_to_token(i).startswith("##"))
    not_words = [lm.tokenizer.token_to_id(t) for t in (".", "[SEP]", "[MASK]", "[UNK]")]
    scores = -torch.arange(lm.vocab_size, dtype=torch.float)
    for rank, token_id in enumerate([*not_words, piece]):
        scores[token_id] = 20.0 - rank
    scores[paris] = 10.0
    monkeypatch.setattr(MaskedLM, "log_probs_at",
                        lambda self, blocks, positions: scores.expand(len(positions), -1))
    scored = score_cloze(lm, [ClozeItem("[MASK] is the capital of france .", "paris", "g", "w")])
    assert scored[0].top[0] == paris
    assert len(scored[0].top) == 10 and all(lm.is_word(i) for i in scored[0].top)
    assert precision(scored, 1) == 1.0
    assert not any(lm.is_word(i) for i in [*not_words, piece])


def test_a_blimp_score_is_shown_beside_blimps_own_figures(exported, tmp_path):
    """A user's minimal pairs are read against the unigram count measured here and against
    the figures of BLiMP's paper (its 5-gram, LSTM, GPT-2 and humans, over all 67 paradigms)."""
    from bertcore.downstream.probes.probing import ProbeOutcome

    path = write_lines(tmp_path / "blimp.jsonl", BLIMP)
    corpus = exported / "corpus"
    report = run_probes(masked_lm(exported), ProbeConfig(builtin_sentences=0,
                                                         minimal_pairs=str(path)),
                        corpus / "val.txt", corpus / "train.txt")
    paper = report.details["minimal_pairs"]["blimp_paper"]
    assert (paper["5-gram"], paper["LSTM"], paper["GPT-2"], paper["humans"]) == (
        0.612, 0.698, 0.815, 0.886)
    line, = ProbeOutcome(report.metrics, report.details).summary()
    assert "unigram" in line and "5-gram 0.612" in line and "LSTM 0.698" in line, line


def test_text_the_tokenizer_reads_as_unk_stops_before_scoring(exported, tmp_path, monkeypatch):
    """Greek for a vocabulary of Latin letters: every word [UNK], the probes would score the
    model's guesses from nothing. The train split (the built-in probes' corpus) and each of
    the user's files are checked before anything is scored."""
    monkeypatch.setattr(MaskedLM, "log_probs_at", lambda *_: pytest.fail("scored"))
    corpus = exported / "corpus"
    lm = masked_lm(exported)
    greek = tmp_path / "train.txt"
    greek.write_text("ένα κείμενο εδώ .\n\nάλλο κείμενο .\n", encoding="utf-8")
    with pytest.raises(BertError, match=r"the tokenizer in TOKENIZERS reads 5 of the 7 tokens "
                                        rf"of the train split {greek} as \[UNK\] \(71%\)"):
        run_probes(lm, ProbeConfig(), corpus / "val.txt", greek, "TOKENIZERS")
    cloze = write_lines(tmp_path / "lama.jsonl", [
        {"masked_sentences": ["η [MASK] είναι εδώ ."], "obj_label": "γάτα"}])
    with pytest.raises(BertError, match=rf"reads 3 of the 4 tokens of probe.cloze {cloze} "):
        run_probes(lm, ProbeConfig(builtin_sentences=0, cloze=str(cloze)), corpus / "val.txt",
                   corpus / "train.txt", "TOKENIZERS")
    pairs = write_lines(tmp_path / "blimp.jsonl", [
        {"sentence_good": "η γάτα κάθεται .", "sentence_bad": "η γάτα κάθονται ."}])
    with pytest.raises(BertError, match=rf"reads 6 of the 8 tokens of probe.minimal_pairs "
                                        rf"{pairs} as \[UNK\] \(75%\)"):
        run_probes(lm, ProbeConfig(builtin_sentences=0, minimal_pairs=str(pairs)),
                   corpus / "val.txt", corpus / "train.txt", "TOKENIZERS")


def test_a_figure_over_no_item_is_null_not_zero(exported, tmp_path):
    """No answer of the cloze file is one token, no val word is among the train split's words
    (so none can be replaced): the figures over those empty sets are null in the JSON and
    the summary, where a 0.0 would read as a score in `dvc exp show`."""
    from bertcore.downstream.probes.probing import ProbeOutcome

    corpus = exported / "corpus"
    train = tmp_path / "train.txt"
    train.write_text("aaaa bbbb aaaa .\n", encoding="utf-8")
    lama = write_lines(tmp_path / "lama.jsonl", [
        {"masked_sentences": ["the cat sat on the [MASK] ."], "obj_label": "Xyzzyqqvv"}])
    report = run_probes(masked_lm(exported), ProbeConfig(cloze=str(lama)), corpus / "val.txt",
                        train)
    assert report.metrics["cloze"] == {"p_at_1": None, "p_at_10": None}
    assert report.details["cloze"]["items"] == 0
    assert report.details["cloze"]["frequency_baseline"]["p_at_1"] is None
    assert report.details["cloze"]["groups"]["lama"]["p_at_10"] is None
    builtin = report.metrics["builtin"]
    assert builtin["replaced_pairs"] == {"accuracy": None, "accuracy_pll": None,
                                         "accuracy_pll_word_l2r": None}
    assert report.details["builtin"]["replaced_pairs"]["pairs"] == 0
    assert report.details["builtin"]["replaced_pairs"]["unigram_baseline"]["accuracy"] is None
    assert 0 <= builtin["swapped_pairs"]["accuracy"] <= 1  # pairs there: a figure
    assert 0 <= builtin["cloze"]["p_at_10"] <= 1
    written, _ = write_report(tmp_path / "probe.json", "probe", report.metrics, report.details)
    assert json.loads(written.read_text())["probe"]["cloze"] == {"p_at_1": None, "p_at_10": None}
    builtin_cloze, pairs, cloze = ProbeOutcome(report.metrics, report.details).summary()
    assert "null" not in builtin_cloze
    assert "close frequency null (unigram null, 0 pairs); null: no item to score" in pairs
    assert "P@1 null, P@10 null (word frequency null, null); null: no item" in cloze

    # with their intervals: none for a figure over no item, which has no outcomes either
    from bertcore.common.outcomes import read_items
    from bertcore.common.report import with_items

    metrics, details, estimates = with_items(report.metrics, report.details, report.outcomes)
    assert metrics["cloze"] == {"p_at_1": None, "p_at_10": None}
    assert metrics["builtin"]["replaced_pairs"] == {"accuracy": None, "accuracy_pll": None,
                                                    "accuracy_pll_word_l2r": None}
    assert "accuracy_ci95" in metrics["builtin"]["swapped_pairs"]
    files = write_report(tmp_path / "probe.json", "probe", metrics, details, report.outcomes)
    outcomes = read_items(files[2])
    assert set(outcomes.sets) == {"builtin.cloze", "builtin.swapped_pairs"}
    assert set(details["intervals"]) == {"confidence", *outcomes.figures} == {
        "confidence", "builtin.cloze.p_at_1", "builtin.cloze.p_at_10",
        "builtin.swapped_pairs.accuracy", "builtin.swapped_pairs.accuracy_pll",
        "builtin.swapped_pairs.accuracy_pll_word_l2r"}
    builtin_cloze, pairs, cloze = ProbeOutcome(metrics, details, estimates).summary()
    assert f"P@10 {estimates['builtin.cloze.p_at_10'].text()} (word frequency" in builtin_cloze
    assert "close frequency null (unigram null, 0 pairs); null: no item to score" in pairs
    assert "P@1 null, P@10 null (word frequency null, null); null: no item" in cloze


# ------------------------------------------------- per-item outcomes and their intervals
def probed(lm: MaskedLM, tmp_path: Path, val: Path, train: Path, **params):
    """run_probes' report written with its intervals and outcomes, as the stage writes it:
    (report, probe.json's group, the outcomes read back, the details)."""
    from bertcore.common.outcomes import items_file, read_items
    from bertcore.common.report import with_items

    report = run_probes(lm, ProbeConfig(**params), val, train)
    metrics, details, _ = with_items(report.metrics, report.details, report.outcomes)
    files = write_report(tmp_path / "probe.json", "probe", metrics, details, report.outcomes)
    assert files[2] == items_file(files[0]) == tmp_path / "probe_items.json"
    written = json.loads(files[0].read_text())["probe"]
    return report, written, read_items(files[2]), json.loads(files[1].read_text())


def lama_and_blimp(exported: Path, tmp_path: Path) -> dict:
    """probe.cloze with an answer of several tokens (not counted) and probe.minimal_pairs."""
    lm = masked_lm(exported)
    rare = lm.tokenizer.id_to_token(lm.vocab_size - 1).lstrip("#") or "x"
    lama = write_lines(tmp_path / "lama.jsonl", [
        {"masked_sentences": ["[MASK] is the capital of france ."], "obj_label": "paris"},
        {"masked_sentences": ["[MASK] is the capital of italy ."], "obj_label": "rome"},
        {"masked_sentences": ["[MASK] cat sat on the mat ."], "obj_label": "the"},
        {"masked_sentences": ["the [MASK] sat ."], "obj_label": rare},
        {"masked_sentences": ["the cat sat on the [MASK] ."], "obj_label": "Xyzzyqqvv"},
    ])
    blimp = write_lines(tmp_path / "blimp.jsonl", BLIMP)
    return {"cloze": str(lama), "minimal_pairs": str(blimp)}


def favour_frequent_words(exported: Path, monkeypatch) -> None:
    """The tiny model with its train split's 10 most frequent words made likelier at every
    slot, so that its cloze figures are neither all 0 nor all 1."""
    lm = masked_lm(exported)
    frequent = count_train(exported / "corpus" / "train.txt", lm).most_frequent(lm, 10)
    original = MaskedLM.log_probs_at

    def favoured(self, blocks, positions):
        scores = original(self, blocks, positions).clone()
        scores[:, frequent] += 5.0
        return scores

    monkeypatch.setattr(MaskedLM, "log_probs_at", favoured)


def test_each_figure_is_the_mean_of_its_items_outcomes_with_its_interval_beside_it(
        exported, tmp_path, monkeypatch):
    """Every figure of probe.json (built-in cloze P@1 and P@10, both kinds of pairs, the
    user's BLiMP and LAMA) is the mean of its items' outcomes in probe_items.json, to the
    digit (rounded to the precision its interval supports), and its `_ci95` holds it."""
    from bertcore.common.dotted import flatten
    from bertcore.common.intervals import estimate

    favour_frequent_words(exported, monkeypatch)
    corpus = exported / "corpus"
    report, written, outcomes, details = probed(
        masked_lm(exported, 16), tmp_path, corpus / "val.txt", corpus / "train.txt",
        builtin_sentences=40, seed=3, **lama_and_blimp(exported, tmp_path))
    figures = {name: value for name, value in flatten(written).items()
               if not name.endswith("_ci95")}
    assert set(outcomes.figures) == set(figures) == {
        "builtin.cloze.p_at_1", "builtin.cloze.p_at_10", "cloze.p_at_1", "cloze.p_at_10",
        *(f"{pairs}.{accuracy}" for pairs in ("builtin.swapped_pairs", "builtin.replaced_pairs",
                                              "minimal_pairs")
          for accuracy in ("accuracy", "accuracy_pll", "accuracy_pll_word_l2r"))}
    unrounded = flatten(report.metrics)
    for name, figure in outcomes.figures.items():
        found = estimate(figure.runs)
        assert figure.runs.value() == unrounded[name], name  # today's number, exactly
        assert figures[name] == round(unrounded[name], found.decimals), name
        low, high = flatten(written)[f"{name}_ci95"]
        assert low <= figures[name] <= high and [low, high] == found.interval(), name
        assert details["intervals"][name].startswith(found.text()), name
    sets = outcomes.sets
    assert sets["cloze"].items == details["cloze"]["items"] == 4  # the 5th answer not counted
    assert sets["minimal_pairs"].items == 4
    assert sets["builtin.swapped_pairs"].items == details["builtin"]["swapped_pairs"]["pairs"]
    assert len({s.digest for s in sets.values()}) == len(sets) == 5


def test_a_tied_pair_counts_half_in_its_outcome_as_in_the_accuracy():
    """(good, bad) PLLs right, wrong, tied, right: the outcomes 1, 0, 0.5, 1, whose mean is
    the accuracy, 0.625; without a tie the column is of integers 0 and 1."""
    from bertcore.common.outcomes import StageItems
    from bertcore.downstream.probes.minimal_pairs import ScoredPair
    from bertcore.downstream.probes.probe_items import add_pairs

    plls = [(-1.0, -2.0), (-3.0, -1.0), (-2.5, -2.5), (-4.0, -6.0)]
    scored = [ScoredPair(MinimalPair(f"good {i} .", f"bad {i} .", "g", "w"), (g, b), (g, b),
                         (0.0, 0.0), False)
              for i, (g, b) in enumerate(plls)]
    items = StageItems("probe")
    add_pairs(items, "minimal_pairs", scored, "minimal pair", PLL)
    figure = items.figures["minimal_pairs.accuracy"]
    assert figure.runs.columns["x"].tolist() == [[[1.0, 0.0, 0.5, 1.0]]]
    assert figure.runs.value() == pair_report(scored, PLL)[0]["accuracy"] == 0.625
    add_pairs(items, "minimal_pairs", scored[:2], "minimal pair", PLL)
    column = items.figures["minimal_pairs.accuracy"].runs.columns["x"]
    assert column.dtype.kind == "i" and column.tolist() == [[[1, 0]]]


def test_the_items_digest_names_the_items_not_the_model(exported, tmp_path, monkeypatch):
    """Twice the same params: the same digests and the same bytes. Another model on the same
    items (the scores changed): the same digests, other outcomes. Another probe.seed, or
    another val file: other digests for every built-in probe."""
    corpus = exported / "corpus"
    other_val = tmp_path / "other"
    write_corpus(other_val, train_docs=2, val_docs=8, seed=7)
    runs = {}
    for name, seed, val in (("first", 3, corpus / "val.txt"), ("again", 3, corpus / "val.txt"),
                            ("seed", 4, corpus / "val.txt"), ("val", 3, other_val / "val.txt")):
        (tmp_path / name).mkdir()
        runs[name] = probed(masked_lm(exported, 16), tmp_path / name, val,
                            corpus / "train.txt", builtin_sentences=40, seed=seed)[2]
    favour_frequent_words(exported, monkeypatch)
    (tmp_path / "model").mkdir()
    runs["model"] = probed(masked_lm(exported, 16), tmp_path / "model", corpus / "val.txt",
                           corpus / "train.txt", builtin_sentences=40, seed=3)[2]
    digests = {name: {k: s.digest for k, s in items.sets.items()} for name, items in runs.items()}
    assert set(digests["first"]) == {"builtin.cloze", "builtin.swapped_pairs",
                                     "builtin.replaced_pairs"}
    assert digests["again"] == digests["model"] == digests["first"]
    assert ((tmp_path / "first/probe_items.json").read_bytes()
            == (tmp_path / "again/probe_items.json").read_bytes())
    outcomes = {name: items.figures["builtin.cloze.p_at_10"].runs.columns["x"].tolist()
                for name, items in runs.items()}
    assert outcomes["model"] != outcomes["first"]
    for other in ("seed", "val"):
        assert all(digests[other][k] != digests["first"][k] for k in digests["first"]), other
