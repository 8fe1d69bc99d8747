"""The task the finetune stage fine-tunes on (`finetune.data`): a built-in one made from the
held-out split or a user's labelled file, split, classification or regression, and encoded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.common.outcomes import items_digest
from bertcore.downstream.builtin_tasks import BUILTIN_TASKS, builtin_task
from bertcore.downstream.config import FinetuneConfig
from bertcore.downstream.tasks import (
    REGRESSION,
    EncodedExamples,
    encode_examples,
    label_names,
    read_examples,
    regression_targets,
    require_fits,
    split_examples,
    task_problem,
)


@dataclass
class FinetuneTask:
    """A labelled task, encoded: its name (a column of `dvc exp show`), where it came from,
    classification or regression and why, the class names ([] for regression), both splits,
    and the test split's identity (`items_digest` of its texts and labels: two runs with the
    same digest scored the same items)."""

    name: str
    description: str
    problem: str
    problem_from: str  # finetune.task, or what `auto` found in the labels
    labels: list[str]
    train: EncodedExamples
    test: EncodedExamples
    test_digest: str
    pairs: bool = False  # sentence pairs: a second text to each example

    @property
    def is_regression(self) -> bool:
        return self.problem == REGRESSION


def finetune_task(config: FinetuneConfig, corpus_file: str | Path, tokenizer,
                  max_positions: int) -> FinetuneTask:
    """The task `finetune.data` names, split and encoded: a built-in one made from the
    held-out `corpus_file`, or a user's file (split by `test_fraction` unless `test_data`
    gives the test split), classification or regression by `finetune.task`. Its mistakes are
    found in a second, before anything slow."""
    if config.data in BUILTIN_TASKS:
        if config.test_data:
            raise BertError(f"finetune.test_data is for a file of your own; {config.data} "
                            "makes its own test split (set it to null)")
        train, test = builtin_task(config.data, corpus_file, config.test_fraction, config.seed)
        name, description = config.data, BUILTIN_TASKS[config.data].description
        problem, why = task_problem(config.task, train)  # classes (config.py refuses regression)
    else:
        fields = (config.text_field, config.text_pair_field, config.label_field)
        train = read_examples(config.data, *fields)
        test = read_examples(config.test_data, *fields) if config.test_data else None
        problem, why = task_problem(config.task, [*train, *(test or [])])
        if test is None:  # stratified by class (a regression's scores are no classes)
            train, test = split_examples(train, config.test_fraction, config.seed,
                                         stratified=problem != REGRESSION)
        name, description = Path(config.data).name, config.data
    if problem == REGRESSION:
        regression_targets(train, test)
    labels = [] if problem == REGRESSION else label_names(train, test)
    require_fits("finetune", config.max_seq_length, max_positions)
    return FinetuneTask(name, description, problem, why, labels,
                        encode_examples(train, tokenizer, labels, config.max_seq_length),
                        encode_examples(test, tokenizer, labels, config.max_seq_length),
                        items_digest([[e.text, e.pair, e.label] for e in test]),
                        pairs=any(e.pair is not None for e in train))
