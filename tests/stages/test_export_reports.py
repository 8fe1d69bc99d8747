"""`bert export` reads the reports in the metrics folder for its model card: one that a git
merge of experiments left with conflict markers, one cut short, one that is a JSON list, are
one line naming the file and what to do (issue 62, case 15), and nothing is exported."""

from __future__ import annotations

import shutil

import pytest
from helpers.bert import assert_one_line_error, run_bert
from helpers.damaged_reports import DAMAGED


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_report_is_one_line_naming_it(model_dir, tmp_path, damage):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    (work / "metrics").mkdir(exist_ok=True)
    text, message = DAMAGED[damage]
    (work / "metrics" / "eval.json").write_text(text)
    (work / "metrics" / "eval_details.json").write_text("{}\n")
    proc = run_bert("export", "--out", "exported", cwd=work)
    assert_one_line_error(proc, f"metrics/eval.json{message}")
    assert not (work / "exported").exists()
