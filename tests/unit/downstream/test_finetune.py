"""Fine-tuning: labelled files, the built-in word-order task, label mapping, pairs, truncation,
the export transformers loads, the scratch control, the one-line errors; then, on a tiny model
pretrained here, the `finetune` and `prune` stages end to end (MLflow read back)."""

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
import yaml
from helpers.bert import ONE_THREAD, assert_one_line_error, run_bert
from helpers.classifiers import transformers_accuracy
from helpers.tiny_pretrain import (
    ADJECTIVES,
    TOPICS,
    VERBS,
    build_data,
    tiny_config,
    write_corpus,
)
from huggingface_hub import ModelCard

from bertcore.common.digests import file_sha256
from bertcore.common.errors import BertError, ConfigError
from bertcore.common.intervals import difference
from bertcore.common.outcomes import read_items
from bertcore.common.tracking import Tracker, sqlite_uri
from bertcore.data.samples.store import SampleStore
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
from bertcore.saved.card import interval_text
from bertcore.saved.hf import WEIGHTS_NAME, export_hf_classifier, load_model, save_model
from bertcore.saved.model_run import MODEL_TAG
from bertcore.training.config import EvalConfig, TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.loop.step import StepRunner
from bertcore.training.loop.trainer import Trainer
from bertcore.training.run.heldout import heldout_splits

transformers = pytest.importorskip("transformers")


pytestmark = pytest.mark.usefixtures("one_thread")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


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


# ----------------------------------------------------------------------------- the stages
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A tiny model pretrained here (300 steps on the synthetic topic corpus) with its data,
    and the MLflow run it came from."""
    root = tmp_path_factory.mktemp("stages")
    data = build_data(root, train_docs=60, val_docs=60)
    tokens = read_vocab(data / "vocab")
    config = TrainConfig(max_steps=300, batch_size=16, learning_rate=3e-3, warmup_steps=20,
                         eval_every=0, checkpoint_every=0, device="cpu", seed=5)
    torch.manual_seed(5)
    model = BertPretrainingModel(tiny_config(len(tokens), 0.1, hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=128))
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5),
                                   VocabSpec.from_tokens(tokens), seed=5)
    batches = PretrainingBatches(SampleStore(data / "samples" / "train"), collator, 16, 1, seed=5)
    Trainer(StepRunner(model, config, batches, device="cpu"), progress=False).train()
    save_model(model, root / "models" / "pretrained")
    (root / "models" / "pretrained" / "training.json").write_text(json.dumps({"step": 300}))
    parent = Tracker.start(sqlite_uri(root / "mlflow.db"), "tiny-downstream", run_name="pretrain",
                           tags={MODEL_TAG: file_sha256(root / "models/pretrained" / WEIGHTS_NAME)})
    parent.finish()
    (root / "parent_run_id").write_text(parent.run_id)
    params = {
        "masking": {"max_predictions_per_seq": 5},
        "train": {"batch_size": 16, "learning_rate": 3e-3, "seed": 5},
        "eval": {"batch_size": 32},
        # word order: what this corpus teaches ("the ADJ NOUN VERB the NOUN ."), and a scratch
        # model cannot learn from 700 examples
        "finetune": {"data": "builtin:word-order", "learning_rate": 1e-3, "max_seq_length": 32,
                     "max_steps": None},
        "prune": {"fraction": 0.5, "batches": 4, "batch_size": 16, "recovery_steps": 5,
                  "throughput_steps": 2},
        "tracking": {"experiment": "tiny-downstream"},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return root


@pytest.mark.slow
def test_finetune_stage_beats_the_majority_and_the_scratch_control(workdir):
    run_bert("finetune", cwd=workdir, env=ONE_THREAD, check=True)
    metrics = json.loads((workdir / "metrics" / "finetune.json").read_text())["finetune"]
    details = json.loads((workdir / "metrics" / "finetune_details.json").read_text())
    assert list(metrics) == ["task", "pretrained", "scratch", "gain"]
    assert metrics["task"] == "builtin:word-order" and "swapped" in details["data"]["description"]
    assert details["data"]["labels"] == ["original", "swapped"]
    assert details["majority_class"]["accuracy"] == pytest.approx(0.5)
    assert details["data"]["train_examples"] + details["data"]["test_examples"] > 800
    # measured: 0.79 pretrained, 0.50 from scratch (which learns nothing in 240 steps)
    assert metrics["pretrained"]["accuracy"] > 0.7
    assert details["training"]["seeds"] == [42, 43, 44]  # finetune.seeds' default
    for scores_of_seed in details["seeds"].values():
        assert scores_of_seed["gain"]["accuracy"] == pytest.approx(
            scores_of_seed["pretrained"]["accuracy"] - scores_of_seed["scratch"]["accuracy"])
    assert metrics["gain"]["accuracy"] > 0.15
    assert metrics["gain"]["accuracy_ci95"][0] > 0  # pretraining helps beyond the noise

    # transformers, given only models/finetuned, reproduces the median seed's test accuracy
    folder = workdir / "models" / "finetuned"
    _, test = builtin_task("builtin:word-order", workdir / "data" / "corpus" / "val.txt", 0.2,
                           seed=42)
    median = details["seeds"][str(details["median_seed"])]["pretrained"]["accuracy"]
    assert transformers_accuracy(folder, test) == pytest.approx(median)
    # 3 seeds: the middle one's, to the precision its interval supports
    assert metrics["pretrained"]["accuracy"] == pytest.approx(median, abs=0.005)

    # MLflow: a child of the pretraining run, the headline in the pretraining run itself
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    parent_id = (workdir / "parent_run_id").read_text()
    children = client.search_runs(
        [client.get_run(parent_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and "
                      "attributes.run_name LIKE 'finetune-%'")
    assert len(children) == 1
    child = children[0]
    assert child.info.status == "FINISHED"
    assert child.data.params["finetune.learning_rate"] == "0.001"
    assert child.data.metrics["pretrained_accuracy"] == pytest.approx(
        metrics["pretrained"]["accuracy"])
    assert len(client.get_metric_history(child.info.run_id, "seed_43/scratch/train_loss")) > 5
    assert child.data.metrics["gain_accuracy_ci95_low"] == metrics["gain"]["accuracy_ci95"][0]
    # counts and the baseline are tags, not charts
    assert not any("examples" in key or "majority" in key for key in child.data.metrics)
    assert child.data.tags["data.train_examples"] == str(details["data"]["train_examples"])
    assert float(child.data.tags["majority_class.accuracy"]) == pytest.approx(0.5)
    items = json.loads((workdir / "metrics" / "finetune_items.json").read_text())
    assert _artifacts(client, child.info.run_id, workdir / "dl") == {
        "finetune.json": {"finetune": metrics}, "finetune_details.json": details,
        "finetune_items.json": items}
    parent = client.get_run(parent_id)
    assert parent.data.metrics["finetune_gain_accuracy"] == pytest.approx(
        metrics["gain"]["accuracy"])
    # the classifier: a model card beside it, and an MLflow Model of the child run
    card = ModelCard.load(workdir / "models" / "finetuned" / "README.md")
    assert card.data.pipeline_tag == "text-classification"
    assert {r.metric_name: r.metric_value for r in card.data.eval_results}[
        "test accuracy"] == pytest.approx(metrics["pretrained"]["accuracy"], abs=1e-6)
    (logged,) = client.search_logged_models(experiment_ids=[child.info.experiment_id],
                                            filter_string=f"source_run_id = '{child.info.run_id}'")
    assert logged.name == "model" and logged.tags["mlflow.source.type"] == "LOCAL"
    assert client.get_metric_history(parent_id, "finetune_pretrained_accuracy")[0].step == 300


def test_prune_stage_shrinks_the_model_and_exports_it(workdir):
    proc = run_bert("prune", cwd=workdir, env=ONE_THREAD, check=True)
    metrics = json.loads((workdir / "metrics" / "prune.json").read_text())["prune"]
    assert list(metrics) == ["heads", "val", "parameters", "heads_per_layer"]  # no timing
    assert metrics["heads"] == {"before": 4, "after": 2, "removed": 2, "removed_fraction": 0.5}
    details = json.loads((workdir / "metrics" / "prune_details.json").read_text())
    assert list(details) == ["pruned_heads", "requested_heads", "importance", "settings",
                             "differences", "intervals"]
    assert sum(len(heads) for heads in details["pruned_heads"].values()) == 2
    assert metrics["heads_per_layer"] == {"before": [2, 2], "after": [1, 1]}
    assert metrics["parameters"]["before"] - metrics["parameters"]["after"] == 2 * (4 * 64 * 32
                                                                                    + 3 * 32)
    for key in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        assert set(metrics["val"][key]) == {"before", "pruned", "recovered", "before_ci95",
                                            "pruned_ci95", "recovered_ci95"}
    assert_prune_items(workdir, metrics, details, proc.stderr)

    folder = workdir / "models" / "pruned"
    ours = load_model(folder).eval()
    assert ours.config.heads_per_layer == [1, 1]
    assert ours.num_parameters() == metrics["parameters"]["after"]
    theirs = transformers.BertForPreTraining.from_pretrained(folder).eval()
    ids = torch.tensor([[2, 30, 31, 32, 3, 40, 41, 3]])
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).prediction_logits, ours(ids).mlm_logits,
                                   rtol=0, atol=1e-4)
    # transformers 5 loads every head: the saving is ours alone, and the stage says so
    full_size = sum(p.numel() for p in theirs.parameters())
    assert full_size == metrics["parameters"]["before"]
    assert (f"transformers 5 ignores pruned_heads and loads this model at full size "
            f"({full_size:,} parameters, every head); the saving "
            f"({metrics['parameters']['after']:,}) needs bertcore.saved.hf.load_model"
            ) in proc.stderr
    card = ModelCard.load(folder / "README.md")
    assert card.data.pipeline_tag == "fill-mask" and "transformers 5 has no head" in card.text

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    parent_id = (workdir / "parent_run_id").read_text()
    child = _latest_prune_run(client, parent_id)
    # the speed, a measurement of the machine: in MLflow (and the console), not the files
    for kind in ("forward_sequences_per_s", "train_step_sequences_per_s"):
        speed = {key: child.data.tags[f"throughput.{kind}.{key}"]
                 for key in ("before", "after", "speedup", "low", "high", "within_noise")}
        assert float(speed["before"]) > 0 and float(speed["speedup"]) == pytest.approx(
            float(speed["after"]) / float(speed["before"]), rel=1e-4)  # tags: 6 digits
        assert float(speed["low"]) <= float(speed["high"])
        assert speed["within_noise"] == str(float(speed["low"]) <= 1 <= float(speed["high"]))
    assert child.data.metrics["train_step_speedup"] == pytest.approx(
        float(child.data.tags["throughput.train_step_sequences_per_s.speedup"]), rel=1e-5)
    assert "recovery" in {key.split(".")[1] for key in child.data.tags if key.startswith("seconds")}
    assert not any("heads" in key or "parameters" in key for key in child.data.metrics)
    saved = _artifacts(client, child.info.run_id, workdir / "dl")
    assert saved["prune.json"] == {"prune": metrics} and metrics["heads"]["after"] == 2
    assert child.data.tags["settings.recovery_steps"] == "5"
    assert client.get_run(parent_id).data.metrics["prune_val_mlm_accuracy"] == pytest.approx(
        metrics["val"]["mlm_accuracy"]["recovered"])
    # the final val figures' intervals, in the child run and the pretraining run, and the
    # outcomes they are drawn from as an artifact
    for key in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        low, high = metrics["val"][key]["recovered_ci95"]
        for run, prefix in ((child, ""), (client.get_run(parent_id), "prune_")):
            assert run.data.metrics[f"{prefix}val_{key}_ci95_low"] == low
            assert run.data.metrics[f"{prefix}val_{key}_ci95_high"] == high
    assert saved["prune_items.json"] == json.loads(
        (workdir / "metrics" / "prune_items.json").read_text())
    assert child.data.tags["differences.mlm_accuracy.pruned.verdict"] == (
        details["differences"]["mlm_accuracy"]["pruned"]["verdict"])


def assert_prune_items(workdir: Path, metrics: dict, details: dict, said: str) -> None:
    """prune_items.json: each val figure of prune.json, on the val pairs of the evaluate
    stage's set, with the value and interval prune.json has; the differences pruned - before
    and recovered - before with their paired interval, in the details and the summary."""
    items = read_items(workdir / "metrics" / "prune_items.json")
    # the same val pairs with the same masks as `bert evaluate` scores (masking, eval.seed)
    (split, *_) = heldout_splits(workdir / "data" / "samples", workdir / "data" / "vocab",
                                 MaskingConfig(max_predictions_per_seq=5))
    assert items.sets == {"val": split.item_set(EvalConfig(batch_size=32))}
    assert items.sets["val"].items == len(SampleStore(workdir / "data" / "samples" / "val"))
    estimates = items.estimates()
    for key in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        scores = metrics["val"][key]
        for phase in ("before", "pruned", "recovered"):
            found = estimates[f"val.{key}.{phase}"]
            assert round(found.value, found.decimals) == pytest.approx(scores[phase], abs=1e-12)
            assert found.interval() == scores[f"{phase}_ci95"]
            assert found.low <= found.value <= found.high and found.low < found.high
        before = items.figures[f"val.{key}.before"].runs
        for phase in ("pruned", "recovered"):
            after = items.figures[f"val.{key}.{phase}"].runs
            paired = difference(before, after, same_items=True)
            written = details["differences"][key][phase]
            assert written["difference"] == paired.rounded().value
            assert written["ci95"] == paired.interval()
            assert paired.value == pytest.approx(estimates[f"val.{key}.{phase}"].value
                                                 - estimates[f"val.{key}.before"].value)
            # the same pairs before and after: far narrower than two independent samples
            unpaired = difference(before, after, same_items=False)
            assert paired.high - paired.low < 0.8 * (unpaired.high - unpaired.low), key
            verdict = ("within noise" if paired.low <= 0 <= paired.high else
                       "better" if (paired.low > 0) == (key != "mlm_loss") else "worse")
            assert written["verdict"] == verdict
    change = details["differences"]["mlm_accuracy"]["pruned"]
    assert (f"pruned - before {interval_text(change['difference'], *change['ci95'], signed=True)}, "
            f"{change['verdict']}") in said
    before = metrics["val"]["mlm_accuracy"]
    assert "val (before -> pruned -> recovered after 5 steps) MLM accuracy " in said
    assert f"MLM accuracy {interval_text(before['before'], *before['before_ci95'])} -> " in said
    # the card: each val figure with its interval, and what pruning changed
    card = (workdir / "models" / "pruned" / "README.md").read_text()
    final = metrics["val"]["nsp_accuracy"]
    assert (f"| val NSP accuracy | {interval_text(final['recovered'], *final['recovered_ci95'])}"
            f" |") in card
    assert "val MLM accuracy, pruned minus before: " in card


def _latest_prune_run(client, parent_id: str):
    runs = client.search_runs(
        [client.get_run(parent_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and "
                      "attributes.run_name LIKE 'prune-%'",
        order_by=["attributes.start_time DESC"])
    return runs[0]


@pytest.mark.slow
def test_prune_with_no_head_to_remove_writes_the_model_unchanged(workdir, tmp_path):
    """prune.fraction 0 (or too small for one head): no recovery steps, the pretrained
    weights written as they were, and a speed ratio of exactly 1 (one model, timed once)."""
    out, metrics_file = tmp_path / "pruned", tmp_path / "prune.json"
    proc = run_bert("prune", "--set", "prune.fraction=0", "--out", str(out), "--metrics",
                    str(metrics_file), cwd=workdir, env=ONE_THREAD, check=True)
    assert "removes none: the model is written unchanged, with no recovery steps" in proc.stderr
    metrics = json.loads(metrics_file.read_text())["prune"]
    details = json.loads((tmp_path / "prune_details.json").read_text())
    assert metrics["heads"]["removed"] == 0 and details["pruned_heads"] == {}
    # nothing recovered; the pruned model is the model before: no change, not even noise
    assert set(metrics["val"]["mlm_accuracy"]) == {"before", "pruned", "before_ci95",
                                                   "pruned_ci95"}
    assert details["differences"]["mlm_accuracy"] == {
        "pruned": {"difference": 0.0, "ci95": [0.0, 0.0], "verdict": "within noise"}}
    assert details["settings"]["recovery_steps"] == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    child = _latest_prune_run(client, (workdir / "parent_run_id").read_text())
    assert not any(key.startswith("seconds.recovery") for key in child.data.tags)
    for kind in ("forward_sequences_per_s", "train_step_sequences_per_s"):
        assert child.data.tags[f"throughput.{kind}.speedup"] == "1"
        assert child.data.tags[f"throughput.{kind}.within_noise"] == "True"
    pretrained = load_model(workdir / "models" / "pretrained").state_dict()
    written = load_model(out).state_dict()
    assert written.keys() == pretrained.keys()
    assert all(torch.equal(written[name], pretrained[name]) for name in pretrained)


def _artifacts(client, run_id: str, folder: Path) -> dict[str, dict]:
    """The JSON files a run has under `metrics/`, by name."""
    found = {}
    for artifact in client.list_artifacts(run_id, "metrics"):
        local = client.download_artifacts(run_id, artifact.path, str(folder))
        found[Path(local).name] = json.loads(Path(local).read_text())
    return found


def test_stages_answer_bad_input_in_one_line(workdir, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    proc = run_bert("finetune", "--set", f"finetune.data={tmp_path / 'empty.csv'}",
                    cwd=workdir, env=ONE_THREAD)
    assert_one_line_error(proc, "empty.csv is empty")
    rows = [{"sentence": "a", "label": 1}]
    write_jsonl(tmp_path / "d.jsonl", rows)
    proc = run_bert("finetune", "--set", f"finetune.data={tmp_path / 'd.jsonl'}",
                    cwd=workdir, env=ONE_THREAD)
    assert_one_line_error(proc, "no text field 'text'", "finetune.text_field")
    proc = run_bert("prune", "--set", "prune.fraction=1", cwd=workdir, env=ONE_THREAD)
    assert_one_line_error(proc, "prune.fraction", "[0, 1)", code=2)


def test_a_task_the_tokenizer_reads_as_unk_stops_before_training(workdir, tmp_path):
    """Greek for a vocabulary of Latin letters: every word [UNK], nothing to learn from."""
    rows = [{"text": f"ένα κείμενο {'καλό' if i % 2 else 'κακό'} .", "label": i % 2}
            for i in range(20)]
    data = write_jsonl(tmp_path / "greek.jsonl", rows)
    out = tmp_path / "finetuned"
    proc = run_bert("finetune", "--set", f"finetune.data={data}", "--out", str(out),
                    "--metrics", str(tmp_path / "finetune.json"), cwd=workdir, env=ONE_THREAD)
    assert_one_line_error(proc, "the tokenizer in data/vocab reads 48 of the 64 tokens of the "
                          "training examples of greek.jsonl as [UNK] (75%)", "trained with")
    assert not out.exists() and not (tmp_path / "finetune.json").exists()


def scores_csv(path: Path, rows: int = 200) -> Path:
    """Sentences of the tiny corpus scored by their topic and adjective: 0.0 to 5.7, most
    not whole (a similarity score's kind of label), learnable from the words."""
    rng = random.Random(0)
    topics = sorted(TOPICS)
    lines = ["text,score"]
    for _ in range(rows):
        topic, adjective = rng.randrange(len(topics)), rng.randrange(len(ADJECTIVES))
        a, b = rng.sample(TOPICS[topics[topic]].split(), 2)
        lines.append(f"the {ADJECTIVES[adjective]} {a} {rng.choice(VERBS)} the {b} .,"
                     f"{topic + adjective / 10:.1f}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_file_of_scores_is_fine_tuned_as_a_regression_as_sts_b(workdir, tmp_path):
    """auto finds the scores, trains STS-B's head (one output, squared error) and reports
    Pearson and Spearman, which transformers reproduces from the exported model alone."""
    from scipy.stats import pearsonr

    data = scores_csv(tmp_path / "scores.csv")
    out, metrics_file = tmp_path / "finetuned", tmp_path / "finetune.json"
    proc = run_bert("finetune", "--set", f"finetune.data={data}", "--set",
                    "finetune.label_field=score", "--set", "finetune.epochs=30", "--set",
                    "finetune.seeds=1", "--set", "tracking.enabled=false", "--out",
                    str(out), "--metrics", str(metrics_file), cwd=workdir, env=ONE_THREAD,
                    check=True)
    assert "finetune (1 seed): gain in Pearson " in proc.stderr, proc.stderr
    assert "; regression (auto: the labels are numbers, not all whole) -> " in proc.stderr
    metrics = json.loads(metrics_file.read_text())["finetune"]
    details = json.loads((tmp_path / "finetune_details.json").read_text())
    assert list(metrics) == ["task", "pretrained", "scratch", "gain"]
    assert list(metrics["pretrained"]) == list(metrics["gain"]) == [
        "pearson", "pearson_ci95", "spearman", "spearman_ci95"]
    seed = details["seeds"]["42"]
    assert seed["gain"]["pearson"] == pytest.approx(
        seed["pretrained"]["pearson"] - seed["scratch"]["pearson"])
    items = read_items(metrics_file.with_name("finetune_items.json"))
    assert items.figures["gain.pearson"].runs.statistic == "pearson_gain"
    assert metrics["gain"]["pearson_ci95"] == items.figures["gain.pearson"].estimate().interval()
    assert "majority_class" not in details  # a constant guess has no correlation
    assert details["data"]["problem"] == "regression"
    assert details["data"]["label_range"] == [0.0, 5.7]
    assert details["data"]["train_examples"] == 160 and details["data"]["test_examples"] == 40
    # the topic is in the words, and both models learn it (measured: Pearson 0.93 bag of
    # words, 0.85 pretrained, 0.95 from scratch; 0.17 and 0.28 after 50 steps)
    assert details["bag_of_words"]["pearson"] > 0.8
    assert metrics["pretrained"]["pearson"] > 0.7 and metrics["scratch"]["pearson"] > 0.7

    model = transformers.BertForSequenceClassification.from_pretrained(out).eval()
    assert model.config.problem_type == "regression" and model.config.num_labels == 1
    tokenizer = transformers.BertTokenizerFast.from_pretrained(out)
    _, test = split_examples(read_examples(data, "text", None, "score"), 0.2, 42,
                             stratified=False)
    inputs = tokenizer([e.text for e in test], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**inputs).logits[:, 0].numpy()
    assert pearsonr(predicted, [float(e.label) for e in test]).statistic == pytest.approx(
        seed["pretrained"]["pearson"], abs=1e-5)


# ------------------------------------------------------------------------- 4. corpus inputs
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
