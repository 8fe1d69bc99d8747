"""The finetune stage over seeds (`finetune.seeds`): one test split for every seed, one seed
the single run it always was, the medians, spread and paired test as a hand computation from
each seed's scores, the per-item outcomes behind the intervals, the median seed's model."""

from __future__ import annotations

import itertools
import json
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.classifiers import transformers_accuracy
from helpers.tiny_pretrain import ADJECTIVES, TOPICS, VERBS, build_data, tiny_config
from scipy import stats

from bertcore.common.intervals import statistic_of
from bertcore.common.outcomes import items_digest, read_items
from bertcore.data.vocab.files import load_tokenizer, read_vocab
from bertcore.downstream.config import FinetuneConfig
from bertcore.downstream.finetune import (
    FinetunePaths,
    build_classifier,
    predict,
    run_finetune,
    scores,
    train_classifier,
)
from bertcore.downstream.finetune_task import finetune_task
from bertcore.downstream.tasks import read_examples, split_examples
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model
from bertcore.saved.pretrained import load_pretrained

# measured: 40 steps at 3e-3 take the tiny model's seeds from 0.36 (the majority) to 0.60
SETTINGS = dict(batch_size=8, max_steps=40, max_seq_length=16, learning_rate=3e-3,
                device="cpu", workers=1)  # in this process (a pool: the test of workers)


def topics_jsonl(path: Path, rows: int = 120) -> Path:
    """Sentences of the tiny corpus labelled by their topic: learnable in a few steps, and
    each seed learns it differently."""
    rng = random.Random(1)
    topics = sorted(TOPICS)[:3]
    lines = []
    for _ in range(rows):
        topic = rng.choice(topics)
        a, b = rng.sample(TOPICS[topic].split(), 2)
        text = f"the {rng.choice(ADJECTIVES)} {a} {rng.choice(VERBS)} the {b} ."
        lines.append(json.dumps({"text": text, "label": topic}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """data/ and an untrained tiny model in models/pretrained, a topic task, and the stage run
    with 3 seeds and with 1 (the outputs under out3/ and out1/)."""
    root = tmp_path_factory.mktemp("seeds")
    build_data(root)
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(len(read_vocab(root / "data" / "vocab"))))
    save_model(model, root / "models" / "pretrained")
    data = topics_jsonl(root / "topics.jsonl")
    for seeds in (3, 1):
        out = root / f"out{seeds}"
        run_finetune(FinetuneConfig(data=str(data), seeds=seeds, **SETTINGS),
                     _paths(root, out), target=None)
    return root


def _paths(root: Path, out: Path) -> FinetunePaths:
    return FinetunePaths(root / "models" / "pretrained", root / "data" / "vocab",
                         root / "data" / "corpus" / "val.txt", out / "finetuned",
                         out / "finetune.json")


def _report(root: Path, seeds: int) -> tuple[dict, dict]:
    out = root / f"out{seeds}"
    return (json.loads((out / "finetune.json").read_text())["finetune"],
            json.loads((out / "finetune_details.json").read_text()))


def test_every_seed_is_scored_on_the_one_test_split_of_finetune_seed(root):
    items = read_items(root / "out3" / "finetune_items.json")
    _, test = split_examples(read_examples(root / "topics.jsonl", "text", None, "label"), 0.2,
                             seed=42)
    assert items.sets["test"].digest == items_digest([[e.text, e.pair, e.label] for e in test])
    assert items.sets["test"].items == len(test) == 25
    labels = items.figures["pretrained.macro_f1"].runs.columns["label"][0]
    names = ["city", "farm", "forest"]
    assert labels.shape == (3, 25)
    assert (labels == [names.index(e.label) for e in test]).all()  # every seed: these items
    predictions = items.figures["gain.macro_f1"].runs.columns["pred"][0]
    assert len({tuple(row) for row in predictions}) > 1  # the seeds differ
    assert items.figures["gain.accuracy"].run_labels == ("42", "43", "44")


def test_one_seed_is_the_single_run_and_the_first_of_several(root):
    """seeds: 1 gives the numbers of one fine-tune with finetune.seed, as the stage did
    before it had seeds; and the first of 3 seeds is that same fine-tune."""
    config = FinetuneConfig(data=str(root / "topics.jsonl"), seeds=1, **SETTINGS)
    model, _ = load_pretrained(root / "models" / "pretrained", root / "data" / "vocab")
    tokenizer = load_tokenizer(root / "data" / "vocab")
    task = finetune_task(config, "unused", tokenizer, model.config.max_position_embeddings)
    (recipe,) = config.recipes(model.config.hidden_size)
    single = {}
    for which, source in (("pretrained", model), ("scratch", None)):
        classifier = build_classifier(model.config, task.labels, source, 42)
        train_classifier(classifier, task.train, recipe, torch.device("cpu"), 0)
        single[which] = scores(predict(classifier, task.test, torch.device("cpu"), 0),
                               np.asarray(task.test.labels))
    _, one = _report(root, 1)
    _, three = _report(root, 3)
    assert one["seeds"]["42"]["pretrained"] == single["pretrained"]
    assert one["seeds"]["42"]["scratch"] == single["scratch"]
    assert three["seeds"]["42"] == one["seeds"]["42"]
    assert list(one["seeds"]) == ["42"] and one["paired_test"]["p_value"]["accuracy"] is None


def _decimals_of(interval: list[float]) -> int:
    half = (interval[1] - interval[0]) / 2
    return min(6, max(0, 1 - int(np.floor(np.log10(half))))) if half > 0 else 4


def test_medians_spread_and_paired_test_are_those_of_the_seeds(root):
    metrics, details = _report(root, 3)
    seeds = details["seeds"]
    assert list(seeds) == ["42", "43", "44"] and details["training"]["seeds"] == [42, 43, 44]
    for which in ("pretrained", "scratch", "gain"):
        for key in ("accuracy", "macro_f1"):
            values = [seeds[s][which][key] for s in seeds]
            decimals = _decimals_of(metrics[which][f"{key}_ci95"])
            assert metrics[which][key] == round(statistics.median(values), decimals)
            assert details["spread"][which][key] == {"min": min(values), "max": max(values)}
    for s in seeds:
        assert seeds[s]["gain"]["accuracy"] == (seeds[s]["pretrained"]["accuracy"]
                                                - seeds[s]["scratch"]["accuracy"])
    # the median seed: the middle one by the pretrained model's test accuracy
    ranked = sorted(seeds, key=lambda s: (seeds[s]["pretrained"]["accuracy"], int(s)))
    assert details["median_seed"] == int(ranked[1])
    # the paired test: every sign flip of the 3 gains, |mean| as large as the one seen
    gains = [seeds[s]["gain"]["accuracy"] for s in seeds]
    flipped = [abs(np.mean(np.multiply(signs, gains)))
               for signs in itertools.product((1, -1), repeat=3)]
    expected = np.mean([f >= abs(np.mean(gains)) - 1e-12 for f in flipped])
    assert details["paired_test"]["p_value"]["accuracy"] == pytest.approx(expected)


def test_the_items_file_gives_the_figures_and_intervals_of_finetune_json(root):
    metrics, _ = _report(root, 3)
    items = read_items(root / "out3" / "finetune_items.json")
    assert set(items.figures) == {f"{which}.{key}" for which in ("pretrained", "scratch", "gain")
                                  for key in ("accuracy", "macro_f1")}
    for name, figure in items.figures.items():
        which, key = name.split(".")
        estimate = figure.estimate()
        assert metrics[which][f"{key}_ci95"] == estimate.interval(), name
        assert metrics[which][key] == round(estimate.value, estimate.decimals), name
        assert estimate.low < estimate.high, name  # seeds and items vary: a real interval


def test_the_model_written_is_the_median_seeds(root):
    """transformers, given only the folder, scores the median seed's pretrained accuracy."""
    pytest.importorskip("transformers")
    _, details = _report(root, 3)
    seed = details["median_seed"]
    folder = root / "out3" / "finetuned"
    _, test = split_examples(read_examples(root / "topics.jsonl", "text", None, "label"), 0.2,
                             seed=42)
    assert transformers_accuracy(folder, test) == pytest.approx(
        details["seeds"][str(seed)]["pretrained"]["accuracy"])
    card = (folder / "README.md").read_text()
    assert f"seed {seed}" in card


def test_a_correlation_gain_is_the_difference_of_the_correlations():
    rng = np.random.default_rng(0)
    label, pred, base = rng.normal(size=(3, 40))
    columns = {"label": label, "pred": pred + label, "base": base}
    assert statistic_of("pearson_gain", columns) == pytest.approx(
        stats.pearsonr(label, pred + label).statistic - stats.pearsonr(label, base).statistic)
    assert statistic_of("spearman_gain", columns) == pytest.approx(
        stats.spearmanr(label, pred + label).statistic - stats.spearmanr(label, base).statistic)


def test_two_workers_give_the_bytes_of_one_whichever_fine_tune_finishes_first(
        root, tmp_path, monkeypatch):
    """The six fine-tunes of 3 seeds in two worker processes, the first finishing after
    another: every output the same bytes as the stage's fine-tunes run one after another."""
    from helpers import first_last

    from bertcore.downstream import finetune

    monkeypatch.setattr(finetune, "fine_tune_job", first_last.finetune_job)
    monkeypatch.setenv(first_last.MARKER, str(tmp_path / "a later one finished"))
    monkeypatch.setenv("FIRST_LAST_SEED", "42")
    out = tmp_path / "out"
    run_finetune(FinetuneConfig(data=str(root / "topics.jsonl"), seeds=3,
                                **(SETTINGS | {"workers": 2})), _paths(root, out), target=None)
    assert (tmp_path / "a later one finished.first after").exists()
    for name in ("finetune.json", "finetune_details.json", "finetune_items.json",
                 "finetuned/model.safetensors"):
        assert (out / name).read_bytes() == (root / "out3" / name).read_bytes(), name
    card = (out / "finetuned" / "README.md").read_text().replace(str(out), "OUT")
    assert card == (root / "out3" / "finetuned" / "README.md").read_text().replace(
        str(root / "out3"), "OUT")  # its params too: `workers` is not one that makes it
