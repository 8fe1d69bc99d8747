"""The per-item outcomes file: what is written is read back, the same outcomes give the same
bytes, a file of another format or a damaged one is one line, and the metrics file gets each
figure's interval beside it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertcore.common.errors import BertError
from bertcore.common.intervals import Runs
from bertcore.common.outcomes import (
    Figure,
    ItemSet,
    StageItems,
    items_digest,
    items_file,
    one_run,
    read_items,
    write_items,
)
from bertcore.common.report import result_values, with_items


def stage_items() -> StageItems:
    rng = np.random.default_rng(0)
    seeds = rng.integers(0, 2, (3, 40))
    return StageItems("finetune", {"test": ItemSet(items_digest("texts", 40), 40, "test pair")}, {
        "pretrained.accuracy": Figure("test", Runs.of_one("mean", "median", x=seeds),
                                      run_labels=("42", "43", "44")),
        "loss": one_run("ratio", "test", False, num=rng.random(40) * 3, den=np.full(40, 7)),
    })


def test_what_is_written_is_read_back(tmp_path):
    items = stage_items()
    path = write_items(tmp_path / "finetune_items.json", items)
    back = read_items(path)
    assert back.sets == items.sets
    assert back.figures["pretrained.accuracy"].run_labels == ("42", "43", "44")
    assert back.figures["pretrained.accuracy"].runs.shape == (1, 3, 40)
    assert not back.figures["loss"].higher_is_better
    found, wanted = back.estimates(), items.estimates()
    assert found["pretrained.accuracy"] == wanted["pretrained.accuracy"]  # integers: exact
    assert found["loss"].value == pytest.approx(wanted["loss"].value, rel=1e-6)


def test_the_same_outcomes_give_the_same_bytes(tmp_path):
    first = write_items(tmp_path / "a.json", stage_items()).read_bytes()
    assert write_items(tmp_path / "b.json", stage_items()).read_bytes() == first
    assert len(first.splitlines()) < 60  # a column is one line, not one number a line


def test_the_items_file_sits_beside_the_metrics():
    assert items_file("metrics/eval.json").as_posix() == "metrics/eval_items.json"


@pytest.mark.parametrize("text", ['{"format": "other"}', "{not json", '{"format": '
                                  '"bert-items/1", "stage": "x", "sets": {}, "figures": '
                                  '{"a": {"set": "missing"}}}'])
def test_a_file_of_another_format_or_damaged_is_one_line(tmp_path, text):
    path = tmp_path / "eval_items.json"
    path.write_text(text)
    with pytest.raises(BertError) as caught:
        read_items(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_the_metrics_get_each_interval_beside_the_figure():
    items = stage_items()
    metrics = {"pretrained": {"accuracy": 0.512345678}, "loss": 0.4321, "steps": 7}
    found, details, estimates = with_items(metrics, {"n": 1}, items)
    accuracy = estimates["pretrained.accuracy"]
    assert found["pretrained"]["accuracy"] == round(0.512345678, accuracy.decimals)
    assert found["pretrained"]["accuracy_ci95"] == accuracy.interval()
    assert found["steps"] == 7 and "steps_ci95" not in found
    assert list(found["pretrained"]) == ["accuracy", "accuracy_ci95"]  # beside the figure
    assert details["n"] == 1 and "over 40 test pairs and 3 runs" in (
        details["intervals"]["pretrained.accuracy"])
    results = result_values(found, "finetune_")
    assert results["finetune_pretrained_accuracy_ci95_low"] == accuracy.interval()[0]
    assert results["finetune_pretrained_accuracy_ci95_high"] == accuracy.interval()[1]
    json.dumps(found)  # plain JSON
