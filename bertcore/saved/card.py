"""A Hugging Face model card (README.md) for a model folder the pipeline writes, made with
huggingface_hub's `ModelCard.from_template` (a template of the Hub template's sections,
rendered locally: nothing fetched): the metadata block the Hub reads (`ModelCardData`:
library, pipeline tag, licence, language, datasets, base model, the results as `EvalResult`s
of its `model-index`), then what the model is, its uses and limits, what it was trained on
and how, its figures beside their baselines (each with its 95% interval where the report has
one: `<name>_ci95` beside the figure), how to load it, what reproduces it and the installed
framework versions. Only facts that are the same for the same params go into it (no
date, no machine, no run id), so the folder stays the same bytes for the same params; the
git commit goes only into the copy logged to MLflow (`with_commit`)."""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from bertcore.common.atomic import atomic_file
from bertcore.common.intervals import Estimate
from bertcore.saved.card_meta import CardMeta

CARD_NAME = "README.md"
INTERVALS_NOTE = ("In brackets: the 95% interval of the figure over the items it was measured "
                  "on (the bootstrap), each figure to the precision its interval supports.")


@dataclass(frozen=True)
class Figure:
    """One result of the model (x100 or as is), read beside its baseline."""

    name: str  # "MLM accuracy (val split)"
    value: float
    baseline: float | None = None
    baseline_name: str = ""  # "most frequent token"
    metric_type: str = "accuracy"  # the Hub's metric type (accuracy, f1, ...)
    dataset: str = "held-out val split"  # the results' dataset, by name
    dataset_type: str = ""  # its id (the Hub's dataset type): the corpus's name, glue; "": custom
    dataset_config: str | None = None  # GLUE's task
    dataset_split: str | None = None  # validation, test
    interval: tuple[float, float] | None = None  # its 95% interval, where the report has one

    def value_text(self) -> str:
        """`0.2608`, or with an interval `0.261 [0.255, 0.267]` (the precision it supports)."""
        if self.interval is None:
            return f"{self.value:.4f}"
        return interval_text(self.value, *self.interval)

    def baseline_text(self) -> str:
        """The baseline to the figure's precision, and what it is; "" without one."""
        if self.baseline is None:
            return ""
        decimals = 4 if self.interval is None else written_decimals(self.value, *self.interval)
        return f"{self.baseline:.{decimals}f} ({self.baseline_name})"


def interval_text(value: float, low: float, high: float, signed: bool = False) -> str:
    """A figure and its interval as a report wrote them, shown as the stage showed them:
    `0.261 [0.255, 0.267]`, to the decimals they were written with (`written_decimals`)."""
    decimals, sign = written_decimals(value, low, high), "+" if signed else ""
    return (f"{value:{sign}.{decimals}f} [{low:{sign}.{decimals}f}, "
            f"{high:{sign}.{decimals}f}]")


def written_decimals(value: float, low: float, high: float) -> int:
    """The decimals a report rounded a figure and its interval to (`Estimate.rounded`: those
    its interval supported), from the numbers as written. Recomputed from the rounded ends,
    the half-width can cross a power of ten (a decimal more or fewer than written); the
    numbers as JSON writes them drop trailing zeros (fewer): the more of the two, but at most
    one less than recomputed, is what was written, unless all three ended in 0."""
    recomputed = Estimate(value, low, high).decimals
    if not high > low:  # no width: nothing was rounded to it
        return recomputed
    shown = max(_decimals_shown(number) for number in (value, low, high))
    return max(shown, recomputed - 1)


def _decimals_shown(number: float) -> int:
    """The decimals of `number` as JSON writes it (the shortest repr): 0.26 -> 2, 81.0 -> 0."""
    exponent = decimal.Decimal(repr(float(number))).normalize().as_tuple().exponent
    return max(0, -int(exponent))


@dataclass(frozen=True)
class CardFacts:
    """What a model card says, in the Hub template's sections (`CARD_TEMPLATE`); `sections`:
    more titled paragraphs or lists, after the results."""

    name: str  # the model's name in the model-index
    title: str
    summary: str
    pipeline_tag: str  # fill-mask | text-classification
    figures: Sequence[Figure] = ()
    sections: Mapping[str, str] = field(default_factory=dict)
    load: str = ""  # a Python snippet
    reproduce: Mapping[str, Any] = field(default_factory=dict)  # params sections
    meta: CardMeta | None = None  # licence, language, the corpus (`card:` params)
    model_type: str = ""  # what the model is: "BERT (2 layers, ...)"
    base_model: str | None = None  # the model it was made from (fine-tuned, pruned)
    datasets: Sequence[str] = ()  # what it was trained on, by name
    uses: str = ""  # intended uses, and those it is not for
    limitations: str = ""
    training_data: str = ""
    training_procedure: str = ""  # with its hyperparameters


# The Hub's model card template (huggingface_hub's templates/modelcard_template.md) cut to the
# sections the pipeline knows the answer to, in its order and with its headings; rendered by
# `ModelCard.from_template` (Jinja2), nothing read from the Hub
CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ title }}

{{ summary }}

## Model Details

{{ model_details }}
{% for heading, text in body %}
{{ heading }}

{{ text }}
{% endfor %}"""


def card_text(facts: CardFacts, commit: str | None = None) -> str:
    """The card: the Hub's metadata (`ModelCardData`, its results as `EvalResult`s) between
    `---` lines, then the template's sections in Markdown."""
    from huggingface_hub import ModelCard

    body = [(heading, text.strip()) for heading, text in _sections(facts, commit) if text]
    card = ModelCard.from_template(card_data(facts), template_str=CARD_TEMPLATE,
                                   title=facts.title, summary=facts.summary,
                                   model_details=_model_details(facts), body=body)
    return card.content.rstrip("\n") + "\n"


def card_data(facts: CardFacts) -> Any:
    """The card's metadata block as the Hub reads it (`huggingface_hub.ModelCardData`)."""
    from huggingface_hub import EvalResult, ModelCardData

    meta = facts.meta
    return ModelCardData(
        library_name="transformers", pipeline_tag=facts.pipeline_tag,
        license=meta.license if meta else None,
        license_name=meta.license_name if meta else None,
        license_link=meta.license_link if meta else None,
        language=list(meta.language) or None if meta else None,
        datasets=list(facts.datasets) or None, base_model=facts.base_model,
        tags=["bert", facts.pipeline_tag], model_name=facts.name,
        eval_results=[EvalResult(task_type=facts.pipeline_tag,
                                 dataset_type=f.dataset_type or "custom", dataset_name=f.dataset,
                                 dataset_config=f.dataset_config, dataset_split=f.dataset_split,
                                 metric_type=f.metric_type, metric_name=f.name,
                                 metric_value=round(f.value, 6))
                      for f in facts.figures] or None)


def _model_details(facts: CardFacts) -> str:
    meta = facts.meta
    licence = (meta.license_name or meta.license) if meta else ""
    rows = [("Model type", facts.model_type),
            ("Language(s) (NLP)", ", ".join(meta.language) if meta else ""),
            ("License", f"[{licence}]({meta.license_link})" if meta and meta.license_link
             else licence),
            ("Finetuned from model", f"`{facts.base_model}`" if facts.base_model else ""),
            ("Developed with", "this project's pipeline (the `bert` command, DVC and MLflow)")]
    return "\n".join(f"- **{name}:** {value}" for name, value in rows if value)


def _sections(facts: CardFacts, commit: str | None) -> list[tuple[str, str]]:
    """(heading, text) in the Hub template's order; those without text are left out."""
    load = f"```python\n{facts.load.strip()}\n```" if facts.load else ""
    return [("## Uses", facts.uses), ("## Bias, Risks, and Limitations", facts.limitations),
            ("## How to Get Started with the Model", load),
            ("## Training Details\n\n### Training Data", facts.training_data),
            ("### Training Procedure", facts.training_procedure),
            ("## Evaluation\n\n### Results", _results(facts.figures)),
            *((f"## {title}", text) for title, text in facts.sections.items()),
            ("## How to reproduce it", _reproduce(facts.reproduce, commit)),
            ("## Framework versions", framework_versions())]


def _results(figures: Sequence[Figure]) -> str:
    if not figures:
        return ""
    lines = ["| figure | value | baseline |", "| --- | --- | --- |"]
    lines += [f"| {f.name} | {f.value_text()} | {f.baseline_text()} |" for f in figures]
    if any(f.interval is not None for f in figures):
        lines += ["", INTERVALS_NOTE]
    return "\n".join(lines)


# Params that say how many processes share the work, never what it makes (the same bytes with
# any of their values): left out of a card, which is then the same file on any machine.
PROCESS_COUNTS = ("workers", "num_workers", "nproc_per_node")


def _reproduce(reproduce: Mapping[str, Any], commit: str | None) -> str:
    if not reproduce and not commit:
        return ""
    lead = (f"The pipeline's code at git commit `{commit}`, with these params:" if commit else
            "`dvc repro` with these params.yaml sections (the git commit whose dvc.lock "
            "records this folder holds the code):")
    shown = {name: {key: value for key, value in section.items() if key not in PROCESS_COUNTS}
             if isinstance(section, Mapping) else section for name, section in reproduce.items()}
    plain = json.loads(json.dumps(shown, default=str))  # tuples: lists
    return f"{lead}\n\n```yaml\n{yaml.safe_dump(plain, sort_keys=False).strip()}\n```"


def framework_versions() -> str:
    """The installed versions of the libraries that write and load the folder (facts of the
    build, as the torch build is of the weights: the same for the same installation)."""
    lines = []
    for name, package in FRAMEWORKS:
        try:
            lines.append(f"- {name} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    return "\n".join(lines)


FRAMEWORKS = (("Transformers", "transformers"), ("PyTorch", "torch"),
              ("Tokenizers", "tokenizers"), ("huggingface_hub", "huggingface_hub"))


def write_card(folder: str | Path, facts: CardFacts) -> Path:
    """README.md in `folder` (a staging folder: written whole, never over an old one)."""
    path = Path(folder) / CARD_NAME
    with atomic_file(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(card_text(facts))
    return path


def figure_of(name: str, value: Any, baseline: Any = None, baseline_name: str = "",
              interval: Any = None, **more: Any) -> list[Figure]:
    """[Figure] when `value` is a number, [] when the report has none; `interval` kept when it
    is two numbers ([low, high], as a report's `<name>_ci95`)."""
    if not _number(value):
        return []
    base = baseline if isinstance(baseline, int | float) else None
    ends = (tuple(float(end) for end in interval)
            if isinstance(interval, list | tuple) and len(interval) == 2
            and all(_number(end) and math.isfinite(end) for end in interval) else None)
    return [Figure(name, float(value), base, baseline_name if base is not None else "",
                   interval=ends, **more)]


def figure_at(name: str, scores: Any, key: str, baseline: Any = None, baseline_name: str = "",
              **more: Any) -> list[Figure]:
    """`figure_of` the report's `scores[key]`, with its interval `scores[key + "_ci95"]` when
    the report has one beside it; [] when `scores` is no mapping or has no such number."""
    if not isinstance(scores, Mapping):
        return []
    return figure_of(name, scores.get(key), baseline, baseline_name,
                     scores.get(f"{key}_ci95"), **more)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
