"""The model cards as the Hub reads them (issue 59): huggingface_hub's `ModelCard` finds the
licence, the datasets, the language and (fine-tuned, pruned, GLUE) the base model in each
card's metadata, the results parse into `EvalResult`s named after the corpus, not the folder,
and the body has the Hub template's sections. Built from report dicts: no model, no stage."""

from __future__ import annotations

import re

import pytest
from huggingface_hub import EvalResult, ModelCard

from bertcore.downstream.cards import finetuned_facts, glue_task_facts, pruned_facts
from bertcore.model.config import BertConfig
from bertcore.saved.card import card_text
from bertcore.saved.card_meta import card_meta, corpus_name
from bertcore.saved.config import CardConfig
from bertcore.training.run.card import pretrained_facts

BUILTIN = card_meta(CardConfig(), "builtin:python-docs")
REPORTS = {
    "pretrain": ({"steps": 8, "train": {"loss": 6.5}}, {"tokens_seen": 1000, "parameters": 50,
                                                       "computed_with": {"torch": "2.13.0"}}),
    "eval": ({"mlm_accuracy": 0.25, "mlm_accuracy_ci95": [0.24, 0.26], "nsp_accuracy": 0.6},
             {"mlm_baseline_accuracy": 0.05, "nsp_baseline_accuracy": 0.5}),
}
REPRODUCE = {"model": {"preset": "tiny"}, "train": {"batch_size": 32, "learning_rate": 0.002}}
# the Hub template's sections (huggingface_hub's templates/modelcard_template.md) a card keeps
SECTIONS = ("## Model Details", "## Uses", "### Direct Use", "### Out-of-Scope Use",
            "## Bias, Risks, and Limitations", "## How to Get Started with the Model",
            "### Training Data", "### Training Procedure", "#### Training Hyperparameters",
            "## Evaluation", "### Results", "## Framework versions")


def pretrained_card(meta=BUILTIN) -> str:
    config = BertConfig.from_preset("tiny", vocab_size=1000)
    return card_text(pretrained_facts(config, "models/hf", REPORTS, REPRODUCE, meta))


def test_the_pretrained_card_has_the_hub_s_metadata_and_sections():
    text = pretrained_card()
    card = ModelCard(text)
    data = card.data
    assert (data.license, data.license_name) == ("other", "psf-2.0")
    assert data.license_link == "https://docs.python.org/3/license.html"
    assert (data.datasets, data.language) == (["python-docs"], ["en"])
    assert data.model_name == "bert-python-docs"  # the model-index's name: not the folder's
    assert all(isinstance(result, EvalResult) for result in data.eval_results)
    mlm = {r.metric_name: r for r in data.eval_results}["MLM accuracy (val split)"]
    assert (mlm.dataset_type, mlm.dataset_split, mlm.metric_value) == (
        "python-docs", "validation", 0.25)
    assert "held-out val split" in mlm.dataset_name and "python-docs" in mlm.dataset_name
    # what the Hub validates offline: the metadata round-trips through ModelCardData
    assert ModelCard(card.content).data.to_dict() == data.to_dict()
    for heading in SECTIONS:
        assert f"\n{heading}\n" in card.text, heading
    assert "Python's own documentation" in card.text  # the training data says what it was
    assert "- peak learning rate: 0.002" in card.text
    assert "- optimizer steps: 8" in card.text  # what the run did
    assert re.search(r"\n- Transformers \d+\.\d+", card.text)
    assert text == pretrained_card()  # the same facts: the same bytes, no date in them
    assert not re.search(r"20\d\d-\d\d-\d\d", text)


def test_a_card_is_the_same_file_with_any_count_of_processes():
    """How many processes shared the work (`workers`, `nproc_per_node`, `num_workers`) makes
    the same weights, so it is no part of what reproduces them: the card is the same bytes
    on a machine of any size, and still shows every other param."""
    def card(nproc, workers) -> str:
        reproduce = {**REPRODUCE, "corpus": {"seed": 7, "workers": workers},
                     "train": {**REPRODUCE["train"], "nproc_per_node": nproc, "num_workers": 2}}
        config = BertConfig.from_preset("tiny", vocab_size=1000)
        return card_text(pretrained_facts(config, "models/hf", REPORTS, reproduce, BUILTIN))

    assert card(1, 1) == card("auto", 0)
    reproduced = card(1, 1).split("## How to reproduce it")[1]
    assert "seed: 7" in reproduced and "learning_rate: 0.002" in reproduced
    assert "workers" not in reproduced and "nproc_per_node" not in reproduced


def test_a_user_s_corpus_leaves_licence_and_language_to_the_user():
    meta = card_meta(CardConfig(), "/data/my_notes.jsonl")
    card = ModelCard(pretrained_card(meta))
    assert (card.data.license, card.data.language) == ("unknown", None)
    assert (card.data.datasets, card.data.model_name) == (["my_notes"], "bert-my_notes")
    chosen = card_meta(CardConfig(model_name="me/bert-notes", license="cc-by-4.0",
                                  language=["en", "fr"], dataset="me/notes"), "/data/x.txt")
    card = ModelCard(pretrained_card(chosen))
    assert (card.data.license, card.data.language) == ("cc-by-4.0", ["en", "fr"])
    assert (card.data.datasets, card.data.model_name) == (["me/notes"], "me/bert-notes")


@pytest.mark.parametrize(("source", "name"), [
    ("builtin:python-docs", "python-docs"), ("hf:wikitext:wikitext-2-raw-v1", "wikitext"),
    ("books/*.txt", "books"), ("corpus.parquet", "corpus"), ("texts/", "texts")])
def test_a_corpus_is_named_by_its_source(source, name):
    assert corpus_name(source) == name


def test_the_downstream_cards_name_their_base_model_language_and_licence():
    finetuned = finetuned_facts(
        "models/finetuned",
        {"task": "builtin:same-document", "pretrained": {"accuracy": 0.7},
         "scratch": {"accuracy": 0.6}},
        {"data": {"labels": ["0", "1"]}, "majority_class": {"accuracy": 0.5}},
        {"finetune": {"data": "builtin:same-document", "learning_rate": 1e-4}}, BUILTIN)
    pruned = pruned_facts("models/pruned",
                          {"val": {"mlm_accuracy": {"pruned": 0.2, "before": 0.25}}},
                          {}, {"prune": {"fraction": 0.5}}, BUILTIN)
    glue = glue_task_facts("models/glue/CoLA", "CoLA", {"CoLA": {"mcc": 20.5}},
                           {"tasks": {"CoLA": {"seeds": [1, 2]}}}, {"glue": {"seeds": 2}},
                           BUILTIN)
    for facts, datasets in ((finetuned, ["python-docs-same-document"]),
                            (pruned, ["python-docs"]), (glue, ["glue"])):
        card = ModelCard(card_text(facts))
        assert card.data.base_model == "bert-python-docs"
        assert (card.data.language, card.data.license) == (["en"], "other")
        assert card.data.datasets == datasets
        assert card.data.model_name.startswith("bert-python-docs-")
        assert all(isinstance(r, EvalResult) for r in card.data.eval_results)
        for heading in ("## Uses", "### Training Data", "## Framework versions"):
            assert f"\n{heading}\n" in card.text, heading
    cola = ModelCard(card_text(glue)).data.eval_results[0]
    assert (cola.dataset_type, cola.dataset_config, cola.dataset_split) == (
        "glue", "cola", "validation")
    # GLUE on another BERT folder (glue.model): that folder is the base model
    other = glue_task_facts("models/glue/CoLA", "CoLA", {"CoLA": {"mcc": 20.5}}, {},
                            {"glue": {"model": "/models/bert-base-uncased/"}}, BUILTIN)
    assert ModelCard(card_text(other)).data.base_model == "bert-base-uncased"
