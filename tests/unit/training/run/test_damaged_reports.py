"""The model card's reports read back: one a merge left with git's conflict markers, one cut
short, one a JSON list, is one line naming the file and what to do (issue 62, case 15)."""

from __future__ import annotations

import json

import pytest

from bertcore.common.errors import BertError
from bertcore.training.run.card import read_report

REPORT = {"eval": {"mlm_accuracy": 0.25, "perplexity": 90.0}}
DAMAGED = {
    "conflict": ('{\n<<<<<<< HEAD\n  "eval": {"mlm_accuracy": 0.25}\n=======\n'
                 '  "eval": {"mlm_accuracy": 0.31}\n>>>>>>> exp-2\n}\n',
                 ":2 holds git's merge-conflict markers: resolve the conflict"),
    "cut": (json.dumps(REPORT, indent=2)[:30],
            ":3 is not valid JSON (cut short or damaged): rerun the stage that writes it"),
    "list": ("[1, 2]\n", " holds a JSON list, not the object a stage's report is: rerun the "
             "stage that writes it, or restore it (`git checkout -- "),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
@pytest.mark.parametrize("which", ["eval.json", "eval_details.json"])
def test_a_damaged_report_is_one_line_naming_it(tmp_path, damage, which):
    text, message = DAMAGED[damage]
    for name in ("eval.json", "eval_details.json"):
        (tmp_path / name).write_text(text if name == which else json.dumps(REPORT))
    with pytest.raises(BertError) as refused:
        read_report(tmp_path / "eval.json", "eval", None)
    assert str(refused.value).startswith(f"{tmp_path / which}{message}")
