"""The model card's reports read back: one a merge left with git's conflict markers, one cut
short, one a JSON list, is one line naming the file and what to do (issue 62, case 15)."""

from __future__ import annotations

import json

import pytest
from helpers.damaged_reports import DAMAGED, REPORT

from bertcore.common.errors import BertError
from bertcore.training.run.card import read_report


@pytest.mark.parametrize("damage", list(DAMAGED))
@pytest.mark.parametrize("which", ["eval.json", "eval_details.json"])
def test_a_damaged_report_is_one_line_naming_it(tmp_path, damage, which):
    text, message = DAMAGED[damage]
    for name in ("eval.json", "eval_details.json"):
        (tmp_path / name).write_text(text if name == which else json.dumps(REPORT))
    with pytest.raises(BertError) as refused:
        read_report(tmp_path / "eval.json", "eval", None)
    assert str(refused.value).startswith(f"{tmp_path / which}{message}")
