"""A user's file of scores with one gone wrong (`nan`, `inf`, a spreadsheet's `#N/A`, 1e300
beyond what a model holds): one line naming the file, the line and the value, whether
finetune.task is auto or regression (issue 62, case 13), never a guess at classes."""

from __future__ import annotations

import pytest

from bertcore.common.errors import BertError
from bertcore.downstream.config import FinetuneConfig
from bertcore.downstream.finetune_task import finetune_task
from bertcore.downstream.tasks import CLASSIFICATION, read_examples, task_problem

SCORES = [f"{i / 4 + 0.5:g}" for i in range(12)]  # 0.5, 0.75, ...: a regression's scores


def scores_file(tmp_path, bad: str, suffix: str = ".csv"):
    rows = [f"the big sees the {i},{score}" for i, score in enumerate(SCORES)]
    rows[6] = f"the big sees the 6,{bad}"  # line 8 of the file, under the header
    path = tmp_path / f"scores{suffix}"
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity", "#N/A", "1e300"])
@pytest.mark.parametrize("task, why", [("auto", "every other label is a number"),
                                       ("regression", "a regression needs a score on every row")])
def test_a_score_gone_wrong_names_the_file_line_and_value(tmp_path, bad, task, why):
    path = scores_file(tmp_path, bad)
    config = FinetuneConfig(data=str(path), task=task)
    with pytest.raises(BertError) as refused:
        finetune_task(config, tmp_path / "unused.txt", tokenizer=None, max_positions=512)
    message = str(refused.value)
    assert message.startswith(f"{path}:8: label {bad!r} is ")
    assert message.endswith(f", and {why}: give that row its score, or remove it")
    assert "\n" not in message and "test_fraction" not in message


def test_names_and_whole_numbers_are_still_classes(tmp_path):
    """`NA` among names is a class of its own; whole numbers are classes, as before."""
    path = tmp_path / "named.csv"
    path.write_text("text,label\n" + "".join(f"text {i},{label}\n" for i, label in
                                             enumerate(["good", "bad", "NA"] * 3)))
    assert task_problem("auto", read_examples(path, "text", None, "label"))[0] == CLASSIFICATION
    path.write_text("text,label\n" + "".join(f"text {i},{i % 3}\n" for i in range(9)))
    assert task_problem("auto", read_examples(path, "text", None, "label"))[0] == CLASSIFICATION
