"""Report files damaged three ways, as a git merge of experiments, a cut write or a hand edit
leave them, with the end of the one line that names each (after the file's name)."""

from __future__ import annotations

import json

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
