"""Fine-tuning: labelled files, the built-in word-order task, label mapping, pairs, truncation,
the export transformers loads, the scratch control, the one-line errors
(tests/stages/test_finetune_stage.py: the `finetune` and `prune` stages end to end)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.task_files import write_jsonl
from helpers.tiny_pretrain import (
    build_data,
    tiny_config,
    write_corpus,
)

from bertcore.common.errors import BertError, ConfigError
from bertcore.data.vocab.files import load_tokenizer, read_vocab
from bertcore.downstream.bag_of_words import bag_of_words_predictions
from bertcore.downstream.builtin_tasks import builtin_task, swap_two_words
from bertcore.downstream.config import FinetuneConfig
from bertcore.downstream.finetune import build_classifier
from bertcore.downstream.metrics import scores
from bertcore.downstream.tasks import (
    EncodedExamples,
    Example,
    encode_examples,
    label_names,
    read_examples,
    regression_targets,
    split_examples,
    task_problem,
)
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.saved.hf import export_hf_classifier

transformers = pytest.importorskip("transformers")


# ------------------------------------------------------------------------------- the data
def test_labels_strings_or_integers_in_natural_order(tmp_path):
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate([10, 2, 1, 2, "1"])]
    examples = read_examples(write_jsonl(tmp_path / "a.jsonl", rows), "text", None, "label")
    assert [e.label for e in examples] == ["10", "2", "1", "2", "1"]  # 1 and "1": one class
    assert label_names(examples) == ["1", "2", "10"]  # numerically, not "1", "10", "2"
    (tmp_path / "b.csv").write_text('sentence,y\n"a, quoted one",neg\nb,pos\nc,neg\n')
    examples = read_examples(tmp_path / "b.csv", "sentence", None, "y")
    assert examples[0] == Example("a, quoted one", None, "neg")
    assert label_names(examples) == ["neg", "pos"]
    # TSV as GLUE writes it: quote characters are text
    (tmp_path / "c.tsv").write_text('s1\ts2\tlabel\nhe said "hi\tshe left\t1\nx\ty\t0\n')
    examples = read_examples(tmp_path / "c.tsv", "s1", "s2", "label")
    assert examples[0] == Example('he said "hi', "she left", "1")


def test_a_number_is_one_label_however_it_is_written(tmp_path):
    """1, 1.0, "1.0", "01" and " +1 " are one class, not five; other text stays as written."""
    rows = [{"text": f"t{i}", "label": label}
            for i, label in enumerate([1, 1.0, "1.0", "01", " +1 ", 2.50, "2.5", "1e1", "x1",
                                       "1_0", "nan"])]
    examples = read_examples(write_jsonl(tmp_path / "a.jsonl", rows), "text", None, "label")
    assert [e.label for e in examples] == ["1"] * 5 + ["2.5", "2.5", "10", "x1", "1_0", "nan"]
    assert label_names(examples) == ["1", "2.5", "10", "1_0", "nan", "x1"]
    (tmp_path / "b.csv").write_text("text,label\na,1\nb,1.0\nc,2\nd,2.00\n")
    assert label_names(read_examples(tmp_path / "b.csv", "text", None, "label")) == ["1", "2"]
    with pytest.raises(BertError, match=r"d.jsonl:1: label nan is neither a string nor a finite"):
        read_examples(write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": float("nan")}]),
                      "text", None, "label")


def test_auto_is_regression_for_scores_and_classification_for_names_or_whole_numbers():
    def problem(task, *labels):
        return task_problem(task, [Example("t", None, label) for label in labels])

    assert problem("auto", "3.8", "1", "0.25") == (
        "regression", "auto: the labels are numbers, not all whole")
    assert problem("auto", "1", "5", "3") == ("classification",
                                             "auto: the labels are whole numbers")
    assert problem("auto", "0.5", "pos") == ("classification", "auto: the labels are names")
    assert problem("regression", "1", "5") == ("regression", "finetune.task: regression")
    assert problem("classification", "0.5", "1.5") == ("classification",
                                                       "finetune.task: classification")
    with pytest.raises(BertError, match=r"label 'pos' is not a number: a regression task needs "
                                        "numbers \\(set finetune.task to classification"):
        regression_targets([Example("a", None, "1"), Example("b", None, "pos")])
    with pytest.raises(BertError, match="every training label is 2"):
        regression_targets([Example("a", None, "2"), Example("b", None, "2")])
    with pytest.raises(ConfigError, match=r"task: 'regression' is not allowed; expected "
                                          "classification or auto: builtin:same-document is "
                                          "a built-in task"):
        FinetuneConfig(task="regression")
    with pytest.raises(ConfigError, match="classification"):
        FinetuneConfig(task="scores")


def test_a_regression_split_draws_from_all_the_scores():
    """Every score is a class of its own: a stratified split would hold none out (each
    class keeps its one example for training); a regression's split holds out its share."""
    examples = [Example(f"t{i}", None, str(i / 10)) for i in range(50)]
    train, test = split_examples(examples, 0.2, seed=1, stratified=False)
    assert len(test) == 10 and len(train) == 40 and set(train).isdisjoint(test)
    assert (train, test) == split_examples(examples, 0.2, seed=1, stratified=False)
    with pytest.raises(BertError, match="leaves no test examples"):
        split_examples(examples, 0.2, seed=1)


def test_split_is_seeded_stratified_and_keeps_every_class_in_training():
    examples = [Example(f"t{i}", None, "a" if i < 400 else "b") for i in range(500)] + [
        Example("rare", None, "c")]
    for seed in range(5):  # each class gives its share: never 78 + 22 or so by chance
        train, test = split_examples(examples, 0.2, seed=seed)
        assert sorted(e.label for e in test) == ["a"] * 80 + ["b"] * 20
        assert len(train) == 401 and "c" in {e.label for e in train}
    assert (train, test) == split_examples(examples, 0.2, seed=4)
    assert test != split_examples(examples, 0.2, seed=3)[1]
    # a class too small to share still keeps its example for training
    train, test = split_examples(examples, 0.6, seed=0)
    assert [e.label for e in train].count("c") == 1


def test_bad_input_is_a_one_line_error(tmp_path):
    def read(rows, name="d.jsonl"):
        return read_examples(write_jsonl(tmp_path / name, rows), "text", None, "label")

    with pytest.raises(BertError, match=r"d.jsonl:2: no label field 'label'"):
        read([{"text": "a", "label": 1}, {"text": "b", "y": 0}])
    with pytest.raises(BertError, match=r"d.jsonl:1: field 'text' is int 5, not a string"):
        read([{"text": 5, "label": 1}])
    with pytest.raises(BertError, match=r"label \[1\] is neither a string nor a finite number"):
        read([{"text": "a", "label": [1]}])
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(BertError, match=r"empty\.jsonl is empty"):
        read_examples(tmp_path / "empty.jsonl", "text", None, "label")
    (tmp_path / "header.csv").write_text("text,label\n")
    with pytest.raises(BertError, match="no examples, only a header"):
        read_examples(tmp_path / "header.csv", "text", None, "label")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(BertError, match="not UTF-8"):
        read_examples(tmp_path / "binary.csv", "text", None, "label")
    with pytest.raises(BertError, match="only one class"):
        label_names(read([{"text": "a", "label": "x"}, {"text": "b", "label": "x"}]))
    train = [Example("a", None, "x"), Example("b", None, "y")]
    with pytest.raises(BertError, match="test label 'z' never appears in the training data"):
        label_names(train, [Example("c", None, "z")])
    with pytest.raises(ConfigError, match="test_fraction"):
        FinetuneConfig(test_fraction=1.0)


def test_word_order_task_has_the_same_words_in_both_classes(tmp_path):
    rng = random.Random(0)
    assert swap_two_words("Too short here .", rng) is None
    assert swap_two_words("The Cat Sat On The Mat today", rng) is None  # one movable word
    sentence = "The cat sat on the mat, quietly."
    for _ in range(20):
        swapped = swap_two_words(sentence, rng)
        assert swapped != sentence and swapped.startswith("The ")
        assert swapped.endswith("mat, quietly.")  # punctuation never moves
        assert sorted(swapped.split()) == sorted(sentence.split())
    text = "\n\n".join(f"Sentence number {i} says that the {w} is near the river."
                       for i, w in enumerate(["cat", "dog", "cow", "owl"] * 10))
    (tmp_path / "val.txt").write_text(text + "\n")
    train, test = builtin_task("builtin:word-order", tmp_path / "val.txt", 0.25, seed=1)
    assert (len(train), len(test)) == (60, 20)
    for split in (train, test):
        originals = {e.text for e in split if e.label == "original"}
        swapped = [e.text for e in split if e.label == "swapped"]
        assert len(originals) == len(swapped)  # both versions of a sentence, same split
        assert {" ".join(sorted(s.split())) for s in swapped} == {
            " ".join(sorted(s.split())) for s in originals}
    assert not {e.text for e in train} & {e.text for e in test}


ANIMALS = ["cat", "dog", "cow", "owl", "fox", "hen", "yak", "eel"]


def test_replaced_word_task_keeps_the_word_distribution_of_both_classes(tmp_path):
    """One word of each sentence is replaced by a word drawn by frequency from the same text:
    over 2000 sentences the words removed and the words put in have the same distribution
    (so no bag of words tells the classes apart), and a sentence never gets its own word."""
    rng = random.Random(3)
    weights = [2 ** -i for i in range(len(ANIMALS))]
    docs = ["\n".join(f"Then the {rng.choices(ANIMALS, weights)[0]} saw "
                       f"{rng.choices(ANIMALS, weights)[0]} s{d}x{n}." for n in range(10))
            for d in range(200)]
    (tmp_path / "val.txt").write_text("\n\n".join(docs) + "\n")
    train, test = builtin_task("builtin:replaced-word", tmp_path / "val.txt", 0.2, seed=7)
    assert (len(train), len(test)) == (3200, 800)
    for split in (train, test):
        originals = {e.text for e in split if e.label == "original"}
        assert len(originals) * 2 == len(split)  # both versions of a sentence, same split
    removed, added = Counter(), Counter()
    originals = {e.text.split()[-1]: e.text for e in train + test if e.label == "original"}
    for e in train + test:
        if e.label == "replaced":
            before, after = originals[e.text.split()[-1]].split(), e.text.split()
            (i,) = [k for k, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
            assert i > 0 and before[i] in [*ANIMALS, "the", "saw"] and after[i] != before[i]
            removed[before[i]] += 1
            added[after[i]] += 1
    for word in ("the", "saw", "cat", "dog"):  # frequent enough to compare: within 20%
        assert added[word] == pytest.approx(removed[word], rel=0.2), word
    assert not {e.text for e in train} & {e.text for e in test}


def test_same_document_task_pairs_within_and_across_held_out_documents(tmp_path):
    docs = [[f"Document {d} sentence {s} about {ANIMALS[d % 8]}." for s in range(6)]
            for d in range(20)]
    (tmp_path / "val.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    train, test = builtin_task("builtin:same-document", tmp_path / "val.txt", 0.25, seed=2)
    assert (len(train), len(test)) == (15 * 6 * 2, 5 * 6 * 2)

    def doc(sentence):
        return int(sentence.split()[1])

    for split in (train, test):
        for e in split:
            assert (doc(e.text) == doc(e.pair)) == (e.label == "same") and e.text != e.pair
        assert Counter(e.label for e in split) == {"same": len(split) // 2,
                                                   "different": len(split) // 2}
    # the documents of the test pairs are not those of the training pairs
    assert not {doc(e.text) for e in train} & {doc(e.pair) for e in test}


def test_bag_of_words_row_reads_topics_and_not_word_order():
    """The TF-IDF regression separates classes that differ in their words (90 of 100 right
    at least), and sentence pairs that share words from those that do not, and stays near
    chance where both classes have the same words."""
    rng = random.Random(0)

    def encoded(pairs):
        return EncodedExamples([ids for ids, _ in pairs], [[0] * len(ids) for ids, _ in pairs],
                               [label for _, label in pairs], 0)

    def topical(n):
        return encoded([([2, *rng.sample(range(10 + 20 * label, 30 + 20 * label), 5),
                          *rng.sample(range(60, 90), 5), 3], label)
                        for label in (rng.randrange(2) for _ in range(n))])

    train, test = topical(300), topical(100)
    accuracy = np.mean(bag_of_words_predictions(train, test, 2) == np.array(test.labels))
    assert accuracy >= 0.9
    # sentence pairs: whether they share words transfers to pairs of words never seen
    def pairs(n, words):
        rows = []
        for _ in range(n):
            label = rng.randrange(2)
            a = rng.sample(words, 6)
            b = rng.sample(a, 4) + rng.sample(words, 2) if label else rng.sample(words, 6)
            ids = [2, *a, 3, *b, 3]
            rows.append((ids, [0] * 8 + [1] * 7, label))
        return EncodedExamples(*map(list, zip(*rows, strict=True)), 0)

    train, test = pairs(400, list(range(10, 500))), pairs(100, list(range(500, 990)))
    accuracy = np.mean(bag_of_words_predictions(train, test, 2) == np.array(test.labels))
    assert accuracy >= 0.9
    same_words = encoded([([2, *rng.sample(range(10, 40), 8), 3], rng.randrange(2))
                          for _ in range(400)])
    train, test = EncodedExamples(*(x[:300] for x in astuple(same_words)[:3]), 0), \
        EncodedExamples(*(x[300:] for x in astuple(same_words)[:3]), 0)
    accuracy = np.mean(bag_of_words_predictions(train, test, 2) == np.array(test.labels))
    assert 0.35 <= accuracy <= 0.65


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("vocab"), train_docs=20, val_docs=4) / "vocab"


def test_pairs_truncation_and_label_indices(vocab_dir):
    tokenizer = load_tokenizer(vocab_dir)
    examples = [Example("the cow sees the barn .", "the ship finds the wave .", "b"),
                Example("the " * 30 + "cow", None, "a")]
    encoded = encode_examples(examples, tokenizer, ["a", "b"], max_length=12)
    ids, types = encoded.input_ids[0], encoded.token_type_ids[0]
    tokens = [tokenizer.id_to_token(i) for i in ids]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    second = tokens.index("[SEP]") + 1
    assert types == [0] * second + [1] * (len(ids) - second)
    assert len(ids) == 12 and len(encoded.input_ids[1]) == 12
    assert encoded.truncated == 2 and encoded.labels == [1, 0]
    batch = encoded.batch([0, 1], pad_id=0)
    assert batch["input_ids"].shape == (2, 12) and batch["labels"].tolist() == [1, 0]
    short = encode_examples(examples[:1], tokenizer, ["a", "b"], max_length=64)
    assert short.truncated == 0 and short.input_ids[0][-1] == tokenizer.token_to_id("[SEP]")


def test_scores_accuracy_and_macro_f1():
    import numpy as np

    result = scores(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0]))
    assert result["accuracy"] == pytest.approx(0.6)
    # F1: class 0 2/(2+1+1)=0.5, class 1 4/(4+0+1)=0.8, class 2 0/(0+1+0)=0
    assert result["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)


# ------------------------------------------------------------------------------ the model
def test_scratch_control_is_untrained_and_pretrained_copies_the_encoder():
    config = tiny_config(vocab_size=50, dropout=0.0)
    torch.manual_seed(0)
    pretrained = BertPretrainingModel(config)
    with torch.no_grad():
        for p in pretrained.parameters():
            p.add_(1.0)  # far from any fresh init
    labels = ["neg", "pos"]
    warm = build_classifier(config, labels, pretrained, seed=7)
    cold = build_classifier(config, labels, None, seed=7)
    fresh = build_classifier(config, labels, None, seed=7)
    encoder = {k: v for k, v in pretrained.state_dict().items()
               if k.startswith(("embeddings.", "layers.", "pooler."))}
    for name, tensor in encoder.items():
        assert torch.equal(warm.state_dict()[name], tensor), name
        assert not torch.equal(cold.state_dict()[name], tensor), name
        assert torch.equal(cold.state_dict()[name], fresh.state_dict()[name]), name
    weight = cold.layers[0].ffn_in.weight
    assert abs(weight.std().item() - config.initializer_range) < 0.005  # BERT's init
    assert cold.embeddings.tokens.weight[config.pad_token_id].abs().sum() == 0


def test_export_loads_in_transformers_with_labels_and_the_same_logits(tmp_path, vocab_dir):
    vocab_size = len(read_vocab(vocab_dir))
    torch.manual_seed(3)
    ours = BertForSequenceClassification(tiny_config(vocab_size, dropout=0.0),
                                         ["negative", "neutral", "positive"]).eval()
    export_hf_classifier(ours, tmp_path / "hf", vocab_dir)
    theirs, info = transformers.BertForSequenceClassification.from_pretrained(
        tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info
    assert theirs.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    assert theirs.config.label2id == {"negative": 0, "neutral": 1, "positive": 2}
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path / "hf")
    inputs = tokenizer(["the cow sees the barn .", "the ship"], ["the wave .", "a star"],
                       padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = ours(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"])
        got = theirs.eval()(**inputs).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


SENTENCES = "Document {i} opens here. It goes on with a second sentence. A third one ends it."


# ------------------------------------------------------------ 4. a built-in task, inference
def test_same_document_on_too_few_documents_says_so(tmp_path):
    documents = ["\n".join(SENTENCES.format(i=i).replace(". ", ".\n").splitlines() * 8)
                 for i in range(3)]  # 24 sentences each: many examples, but 3 documents
    (tmp_path / "val.txt").write_text("\n\n".join(documents) + "\n")
    with pytest.raises(BertError) as info:
        builtin_task("builtin:same-document", tmp_path / "val.txt", 0.2, seed=0)
    assert str(info.value) == (
        f"{tmp_path / 'val.txt'} has too few documents to split by document for "
        "builtin:same-document: 3 (3 of two sentences or more), where its test and its train "
        "part each need two of two sentences or more; use a corpus of more documents, or set "
        "finetune.data to a labelled file")


def test_a_test_fraction_that_leaves_too_few_training_examples_is_named(tmp_path):
    """A built-in task whose split leaves too little to train on: the message names
    finetune.test_fraction, the setting that made the split, beside the corpus."""
    write_corpus(tmp_path, train_docs=1, val_docs=3)  # some 24 sentences
    builtin_task("builtin:word-order", tmp_path / "val.txt", 0.2, seed=0)  # enough
    with pytest.raises(BertError) as info:
        builtin_task("builtin:word-order", tmp_path / "val.txt", 0.9, seed=0)
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / 'val.txt'))} gives only \d training examples for "
        r"builtin:word-order with finetune.test_fraction 0.9 \(\d+ test examples\): lower "
        r"finetune.test_fraction, use a larger corpus, or set finetune.data to a labelled file",
        str(info.value)), str(info.value)


def test_one_damaged_record_is_named_by_its_line_not_blamed_on_the_encoding(tmp_path):
    rows = [json.dumps({"text": f"sentence {i}", "label": i % 2}).encode() for i in range(5)]
    rows[2] = rows[2].replace(b"sentence", b"sent\xe9nce")  # one record cut from Latin-1
    (tmp_path / "d.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(BertError) as info:
        read_examples(tmp_path / "d.jsonl", "text", None, "label")
    assert str(info.value) == (f"{tmp_path / 'd.jsonl'}:3 is not UTF-8 (byte 0xe9), the file's "
                               "other lines are: fix or remove that line")
    (tmp_path / "latin.jsonl").write_bytes(b"\n".join(rows).replace(b"sentence", b"s\xe9") +
                                           b"\n")
    with pytest.raises(BertError) as info:
        read_examples(tmp_path / "latin.jsonl", "text", None, "label")
    assert str(info.value) == (f"{tmp_path / 'latin.jsonl'} is not UTF-8 text (5 lines are not, "
                               "the first line 1, byte 0xe9): convert it to UTF-8, or point at "
                               "another file")
