"""A Hugging Face model card (README.md) for a model folder the pipeline writes: the metadata
block the Hub reads (library, pipeline tag, language, the results as its `model-index`), then
what the model is, what it was trained on, its figures beside their baselines, how to load
it and what reproduces it. Only facts that are the same for the same params go into it (no
date, no machine, no run id), so the folder stays the same bytes for the same params; the
git commit goes only into the copy logged to MLflow (`with_commit`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bertcore.common.atomic import atomic_file

CARD_NAME = "README.md"


@dataclass(frozen=True)
class Figure:
    """One result of the model (x100 or as is), read beside its baseline."""

    name: str  # "MLM accuracy (val split)"
    value: float
    baseline: float | None = None
    baseline_name: str = ""  # "most frequent token"
    metric_type: str = "accuracy"  # the Hub's metric type (accuracy, f1, ...)
    dataset: str = "held-out val split"


@dataclass(frozen=True)
class CardFacts:
    """What a model card says. `sections`: titled paragraphs or lists, in order."""

    name: str  # the model's name in the model-index
    title: str
    summary: str
    pipeline_tag: str  # fill-mask | text-classification
    figures: Sequence[Figure] = ()
    sections: Mapping[str, str] = field(default_factory=dict)
    load: str = ""  # a Python snippet
    reproduce: Mapping[str, Any] = field(default_factory=dict)  # params sections
    language: str | None = None


def card_text(facts: CardFacts, commit: str | None = None) -> str:
    """The card: YAML metadata between `---` lines, then Markdown."""
    from huggingface_hub import EvalResult, ModelCardData

    data = ModelCardData(
        library_name="transformers", pipeline_tag=facts.pipeline_tag, language=facts.language,
        tags=["bert", facts.pipeline_tag], model_name=facts.name,
        eval_results=[EvalResult(task_type=facts.pipeline_tag, dataset_type="custom",
                                 dataset_name=f.dataset, metric_type=f.metric_type,
                                 metric_name=f.name, metric_value=round(f.value, 6))
                      for f in facts.figures] or None)
    body = [f"# {facts.title}", "", facts.summary, ""]
    if facts.figures:
        body += ["## Results", "", "| figure | value | baseline |", "| --- | --- | --- |"]
        body += [f"| {f.name} | {f.value:.4f} | " + (
            f"{f.baseline:.4f} ({f.baseline_name})" if f.baseline is not None else "") + " |"
            for f in facts.figures]
        body.append("")
    for title, text in facts.sections.items():
        body += [f"## {title}", "", text, ""]
    if facts.load:
        body += ["## How to load it", "", "```python", facts.load.strip(), "```", ""]
    if facts.reproduce or commit:
        body += ["## How to reproduce it", ""]
        if commit:
            body += [f"The pipeline's code at git commit `{commit}`, with these params:", ""]
        else:
            body += ["`dvc repro` with these params.yaml sections (the git commit whose "
                     "dvc.lock records this folder holds the code):", ""]
        plain = json.loads(json.dumps(facts.reproduce, default=str))  # tuples: lists
        body += ["```yaml", yaml.safe_dump(plain, sort_keys=False).strip(), "```", ""]
    return f"---\n{data.to_yaml()}\n---\n" + "\n".join(body)


def write_card(folder: str | Path, facts: CardFacts) -> Path:
    """README.md in `folder` (a staging folder: written whole, never over an old one)."""
    path = Path(folder) / CARD_NAME
    with atomic_file(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(card_text(facts))
    return path


def figure_of(name: str, value: Any, baseline: Any = None, baseline_name: str = "",
              **more: Any) -> list[Figure]:
    """[Figure] when `value` is a number, [] when the report has none."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return []
    base = baseline if isinstance(baseline, int | float) else None
    return [Figure(name, float(value), base, baseline_name if base is not None else "", **more)]
