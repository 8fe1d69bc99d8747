"""`bert export` reads the reports in the metrics folder for its model card: one that a git
merge of experiments left with conflict markers, one cut short, one that is a JSON list, are
one line naming the file and what to do (issue 62, case 15), and nothing is exported."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.bert import ONE_THREAD, assert_one_line_error, run_bert

REPORT = {"eval": {"mlm_accuracy": 0.25, "perplexity": 90.0}}
DAMAGED = {
    "conflict": ('{\n<<<<<<< HEAD\n  "eval": {"mlm_accuracy": 0.25}\n=======\n'
                 '  "eval": {"mlm_accuracy": 0.31}\n>>>>>>> exp-2\n}\n',
                 "metrics/eval.json:2 holds git's merge-conflict markers: resolve the conflict"),
    "cut": (json.dumps(REPORT, indent=2)[:30],
            "metrics/eval.json:3 is not valid JSON (cut short or damaged): rerun the stage"),
    "list": ("[1, 2]\n", "metrics/eval.json holds a JSON list, not the object a stage's report "
             "is: rerun the stage that writes it, or restore it (`git checkout -- "
             "metrics/eval.json`"),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_report_is_one_line_naming_it(model_dir, tmp_path, damage):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    (work / "metrics").mkdir(exist_ok=True)
    text, message = DAMAGED[damage]
    (work / "metrics" / "eval.json").write_text(text)
    (work / "metrics" / "eval_details.json").write_text("{}\n")
    proc = run_bert("export", "--out", "exported", cwd=work, env=ONE_THREAD)
    assert_one_line_error(proc, message)
    assert not (work / "exported").exists()
