"""What the model card of a pretrained model says (`saved/card.py` writes it): its shape, what
it was trained on and how long, the figures of evaluate, probe and GLUE beside their
baselines (each with its 95% interval where the report has one beside it, `<name>_ci95`), and
how to load it. It reads the reports as the stages wrote them (their metrics
under the stage's group, their details beside), and only those made from the weights the card
goes with (the details' `model_sha256`), so a card never shows another model's figures."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.common.report import details_file, read_report_file
from bertcore.model.config import BertConfig
from bertcore.saved.card import CardFacts, Figure, figure_at
from bertcore.saved.card_meta import CardMeta
from bertcore.saved.run_reports import MODEL_KEY

LOAD_SNIPPET = """\
from transformers import BertForPreTraining, pipeline

fill = pipeline("fill-mask", model="{folder}")     # its tokenizer is in the folder
fill("the [MASK] of the module is set here.")
model = BertForPreTraining.from_pretrained("{folder}")  # MLM and NSP heads
"""


def read_report(metrics_file: str | Path, group: str, weights: str | None
                ) -> tuple[dict, dict] | None:
    """A stage's (metrics, details) as written under `group`, when its details say it scored
    the weights of sha256 `weights` (any weights when None); else None."""
    files = (Path(metrics_file), details_file(metrics_file))
    if not all(path.is_file() for path in files):
        return None
    metrics = read_report_file(files[0]).get(group)
    details = read_report_file(files[1])
    if not isinstance(metrics, dict) or (weights is not None and details.get(MODEL_KEY) != weights):
        return None
    return metrics, details


def pretrained_facts(config: BertConfig, folder: str, reports: Mapping[str, tuple[dict, dict]],
                     reproduce: Mapping[str, Any], meta: CardMeta | None = None) -> CardFacts:
    """The card of a pretrained BERT (fill-mask). `reports`: group -> (metrics, details) of
    pretrain, eval, probe, glue, those there are; `folder`: where the load snippet reads it
    from; `reproduce`: the params sections that make it; `meta`: its name, licence, language
    and corpus (the `card:` params)."""
    shape = (f"{config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
             f"{config.num_attention_heads} heads, {config.vocab_size} tokens")
    source = f" on `{meta.corpus_source}`" if meta else ""
    summary = (f"A BERT ({shape}) pretrained from scratch with masked language modelling and "
               f"next sentence prediction by this project's pipeline{source}. Small models "
               "trained on little text: read each figure beside its baseline.")
    figures = []
    for group, figures_of in (("eval", _eval), ("probe", _probe), ("glue", _glue)):
        if group in reports:
            figures += figures_of(*reports[group], meta)
    pretrain = reports.get("pretrain")
    return CardFacts(
        name=meta.model_name if meta else "bert",
        title="BERT pretrained from scratch (MLM + NSP)", summary=summary,
        pipeline_tag="fill-mask", figures=figures, load=LOAD_SNIPPET.format(folder=folder),
        reproduce=reproduce, meta=meta, model_type=f"BERT encoder ({shape}), MLM and NSP heads",
        datasets=[meta.dataset] if meta else [], uses=USES, limitations=LIMITATIONS,
        training_data=training_data(meta),
        training_procedure=_procedure(reproduce, *(pretrain or ({}, {}))))


USES = """\
### Direct Use

Filling a masked word (`fill-mask`) and scoring whether one sentence follows another (the NSP
head), in text like the corpus it was trained on.

### Downstream Use

A starting point to fine-tune on a task over such text (`bert finetune`, `bert glue`): the
figures below show how far pretraining helps against the same model from random init.

### Out-of-Scope Use

Text unlike its corpus (another language, another domain), generating text, and any decision
about people: it is a small model trained on little text, made to study pretraining."""
LIMITATIONS = """\
It knows only what its corpus holds, with its corpus's biases, and in a vocabulary trained on
it: words it did not see are split into pieces or unknown. A model this small, trained this
briefly, predicts frequent words well and rare ones poorly: read each figure below beside its
baseline and its interval, not on its own."""


def training_data(meta: CardMeta | None) -> str:
    """What the model was trained on: the corpus, and the built-in one's origin and terms."""
    if meta is None:
        return ""
    text = (f"The corpus `{meta.corpus_source}` (`{meta.dataset}`), cleaned, deduplicated and "
            "split by the corpus stage into train and held-out val sentences by a hash of "
            "each document; the vocabulary (WordPiece) was trained on its train split.")
    if meta.builtin:
        text += (" The built-in corpus is Python's own documentation, as the interpreter "
                 "ships it (`pydoc_data.topics`): English technical prose, under the PSF "
                 "License Version 2 (https://docs.python.org/3/license.html).")
    licence = meta.license_name or meta.license
    return text + (f" The model's licence as the card states it: `{licence}` (params "
                   "`card.license`: the terms of the corpus it was trained on decide it).")


# the hyper-parameters a card lists: (params section, key, what it is)
HYPERPARAMETERS = (("model", "preset", "size preset"), ("model", "recipe", "recipe"),
                   ("samples", "max_seq_length", "sequence length"),
                   ("masking", "mlm_probability", "masked share of tokens"),
                   ("masking", "whole_word", "whole-word masking"),
                   ("train", "batch_size", "batch size (sequences)"),
                   ("train", "max_steps", "optimizer steps"),
                   ("train", "learning_rate", "peak learning rate"),
                   ("train", "warmup_steps", "warmup steps"), ("train", "schedule", "schedule"),
                   ("train", "adam_betas", "AdamW betas"),
                   ("train", "adam_epsilon", "AdamW epsilon"),
                   ("train", "weight_decay", "weight decay"),
                   ("train", "max_grad_norm", "gradient clipping (norm)"),
                   ("train", "precision", "precision"), ("train", "seed", "seed"),
                   ("phase2", "enabled", "second phase (longer sequences)"))


def hyperparameters(reproduce: Mapping[str, Any], keys=HYPERPARAMETERS) -> str:
    """`#### Training Hyperparameters`: the params of `keys` that `reproduce` holds."""
    lines = [f"- {name}: {value}" for section, key, name in keys
             if (value := (reproduce.get(section) or {}).get(key, None)) is not None]
    return "#### Training Hyperparameters\n\n" + "\n".join(lines) if lines else ""


def _procedure(reproduce: Mapping[str, Any], metrics: dict, details: dict) -> str:
    """Pretraining: its objective, its hyper-parameters, what the run did and ran on."""
    parts = ["Masked language modelling and next sentence prediction from random init "
             "(or `model.init_from`), by the pretrain stage.", hyperparameters(reproduce)]
    if metrics:
        parts.append("#### What the run did\n\n" + _training(metrics, details))
    ran = details.get("computed_with") or {}
    if ran:
        parts.append("#### Trained with\n\n" + ", ".join(f"{key} {value}"
                                                          for key, value in ran.items()))
    return "\n\n".join(part for part in parts if part)


def _training(metrics: dict, details: dict) -> str:
    lines = [f"- optimizer steps: {metrics.get('steps')}"]
    if isinstance(details.get("tokens_seen"), int):
        lines.append(f"- tokens seen: {details['tokens_seen']:,}")
    if isinstance(details.get("parameters"), int):
        lines.append(f"- parameters: {details['parameters']:,}")
    train = metrics.get("train") or {}
    if "loss" in train:
        lines.append(f"- final train loss: {train['loss']:.4f}")
    if details.get("plateau"):
        lines.append(f"- **Warning**: {details['plateau']}")
    return "\n".join(lines)


def _eval(metrics: dict, details: dict, meta: CardMeta | None) -> list[Figure]:
    val = _val_split(meta)
    return [*figure_at("MLM accuracy (val split)", metrics, "mlm_accuracy",
                       details.get("mlm_baseline_accuracy"), "most frequent token", **val),
            *figure_at("MLM perplexity (val split)", metrics, "perplexity",
                       metric_type="perplexity", **val),
            *figure_at("NSP accuracy (val split)", metrics, "nsp_accuracy",
                       details.get("nsp_baseline_accuracy"), "majority class", **val)]


def _val_split(meta: CardMeta | None, what: str = "held-out val split") -> dict[str, Any]:
    """A figure's dataset: the corpus's held-out val split (the probes: made of it)."""
    if meta is None:
        return {"dataset": what}
    return {"dataset": f"{meta.dataset} ({what})", "dataset_type": meta.dataset,
            "dataset_split": "validation"}


def _probe(metrics: dict, details: dict, meta: CardMeta | None) -> list[Figure]:
    probes = _val_split(meta, "built-in probes of the val split")
    builtin, about = metrics.get("builtin") or {}, details.get("builtin") or {}
    cloze, cloze_about = builtin.get("cloze") or {}, about.get("cloze") or {}
    frequency = cloze_about.get("frequency_baseline") or {}
    figures = [*figure_at("cloze P@1 (built-in probe)", cloze, "p_at_1",
                          frequency.get("p_at_1"), "word frequency", **probes),
               *figure_at("cloze P@10 (built-in probe)", cloze, "p_at_10",
                          frequency.get("p_at_10"), "word frequency", **probes)]
    # the pairs' scoring, as `bert probe` names it (pll.NAMES); reports before it: PLL
    scoring = {"pll_word_l2r": "PLL-word-l2r"}.get(details.get("scoring", "pll"), "PLL")
    for pairs in ("swapped_pairs", "replaced_pairs"):
        unigram = (about.get(pairs) or {}).get("unigram_baseline") or {}
        figures += figure_at(f"{pairs.replace('_', ' ')} {scoring} accuracy (built-in probe)",
                             builtin.get(pairs), "accuracy", unigram.get("accuracy"), "unigram",
                             **probes)
    return figures


def _glue(metrics: dict, details: dict, meta: CardMeta | None) -> list[Figure]:
    seeds = details.get("seeds")
    figures = figure_at(f"GLUE score (dev, median of {seeds} seeds, x100)", metrics, "score",
                        metric_type="glue", dataset="GLUE dev",
                        dataset_type="glue", dataset_split="validation")
    for task, scores in metrics.items():
        if isinstance(scores, dict):
            figures += figure_at(f"{task} (dev, median, x100)", scores, "score",
                                 metric_type=task, dataset=f"GLUE {task} dev",
                                 dataset_type="glue", dataset_config=task.lower(),
                                 dataset_split="validation")
    return figures
