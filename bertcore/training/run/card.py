"""What the model card of a pretrained model says (`model/card.py` writes it): its shape, what
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
from bertcore.model.card import CardFacts, Figure, figure_at
from bertcore.model.config import BertConfig
from bertcore.model.run_reports import MODEL_KEY

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
                     reproduce: Mapping[str, Any], corpus_source: str | None = None
                     ) -> CardFacts:
    """The card of a pretrained BERT (fill-mask). `reports`: group -> (metrics, details) of
    pretrain, eval, probe, glue, those there are; `folder`: where the load snippet reads it
    from; `reproduce`: the params sections that make it."""
    shape = (f"{config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
             f"{config.num_attention_heads} heads, {config.vocab_size} tokens")
    source = f" on `{corpus_source}`" if corpus_source else ""
    summary = (f"A BERT ({shape}) pretrained from scratch with masked language modelling and "
               f"next sentence prediction by this project's pipeline{source}. Small models "
               "trained on little text: read each figure beside its baseline.")
    sections = {}
    if "pretrain" in reports:
        sections["Training"] = _training(*reports["pretrain"])
    figures = []
    for group, figures_of in (("eval", _eval), ("probe", _probe), ("glue", _glue)):
        if group in reports:
            figures += figures_of(*reports[group])
    return CardFacts(
        name=Path(folder).name or "bert", title="BERT pretrained from scratch (MLM + NSP)",
        summary=summary, pipeline_tag="fill-mask", figures=figures, sections=sections,
        load=LOAD_SNIPPET.format(folder=folder), reproduce=reproduce,
        language="en" if (corpus_source or "").startswith("builtin:") else None)


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


def _eval(metrics: dict, details: dict) -> list[Figure]:
    return [*figure_at("MLM accuracy (val split)", metrics, "mlm_accuracy",
                       details.get("mlm_baseline_accuracy"), "most frequent token"),
            *figure_at("MLM perplexity (val split)", metrics, "perplexity",
                       metric_type="perplexity"),
            *figure_at("NSP accuracy (val split)", metrics, "nsp_accuracy",
                       details.get("nsp_baseline_accuracy"), "majority class")]


def _probe(metrics: dict, details: dict) -> list[Figure]:
    builtin, about = metrics.get("builtin") or {}, details.get("builtin") or {}
    cloze, cloze_about = builtin.get("cloze") or {}, about.get("cloze") or {}
    frequency = cloze_about.get("frequency_baseline") or {}
    figures = [*figure_at("cloze P@1 (built-in probe)", cloze, "p_at_1",
                          frequency.get("p_at_1"), "word frequency", dataset="built-in probes"),
               *figure_at("cloze P@10 (built-in probe)", cloze, "p_at_10",
                          frequency.get("p_at_10"), "word frequency", dataset="built-in probes")]
    # the pairs' scoring, as `bert probe` names it (pll.NAMES); reports before it: PLL
    scoring = {"pll_word_l2r": "PLL-word-l2r"}.get(details.get("scoring", "pll"), "PLL")
    for pairs in ("swapped_pairs", "replaced_pairs"):
        unigram = (about.get(pairs) or {}).get("unigram_baseline") or {}
        figures += figure_at(f"{pairs.replace('_', ' ')} {scoring} accuracy (built-in probe)",
                             builtin.get(pairs), "accuracy", unigram.get("accuracy"), "unigram",
                             dataset="built-in probes")
    return figures


def _glue(metrics: dict, details: dict) -> list[Figure]:
    seeds = details.get("seeds")
    figures = figure_at(f"GLUE score (dev, median of {seeds} seeds, x100)", metrics, "score",
                        metric_type="glue", dataset="GLUE dev")
    for task, scores in metrics.items():
        if isinstance(scores, dict):
            figures += figure_at(f"{task} (dev, median, x100)", scores, "score",
                                 metric_type=task, dataset=f"GLUE {task} dev")
    return figures
