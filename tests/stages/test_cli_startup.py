"""`bert`'s help and a bad value answer before anything computes: a stage imports torch, numpy
and mlflow only once its params are read (bertstages/cli.py), so a typo costs no second of
imports, and neither do the many tests that start `python -m bertstages` to see one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from helpers.bert import REPO

HEAVY = ("torch", "numpy", "mlflow", "transformers")
# (arguments, what the error says: "" for a help page)
CASES = [
    (["corpus", "--help"], ""),
    (["corpus", "--set", "corpus.workers=x"],
     "corpus.workers: 'x' is not allowed; expected 0..1024"),
    (["vocab", "--help"], ""),
    (["vocab", "--set", "vocab.min_frequency=x"],
     "vocab.min_frequency: 'x' is not allowed; expected a valid integer"),
    (["samples", "--help"], ""),
    (["samples", "--set", "samples.max_seq_length=x"],
     "samples.max_seq_length: 'x' is not allowed; expected"),
    (["pretrain", "--help"], ""),
    (["pretrain", "--set", "train.learning_rate=x"],
     "train.learning_rate: 'x' is not allowed; expected a valid number"),
    (["evaluate", "--help"], ""),
    (["evaluate", "--set", "eval.batch_size=x"],
     "eval.batch_size: 'x' is not allowed; expected a valid integer"),
    (["export", "--help"], ""),
    (["export", "--set", "export.nothing=1"], "export.nothing: unknown key"),
    (["finetune", "--help"], ""),
    (["finetune", "--set", "finetune.batch_size=x"],
     "finetune.batch_size: 'x' is not allowed; expected a valid integer"),
    (["prune", "--help"], ""),
    (["prune", "--set", "prune.fraction=x"], "prune.fraction: 'x' is not allowed; expected a"),
    (["probe", "--help"], ""),
    (["probe", "--set", "probe.seed=x"],
     "probe.seed: 'x' is not allowed; expected a valid integer"),
    (["glue", "--help"], ""),
    (["glue", "--set", "glue.seeds=x"],
     "glue.seeds: 'x' is not allowed; expected a valid integer"),
    (["fill-mask", "--help"], ""),
    (["nsp", "--help"], ""),
    (["compare", "--help"], ""),
    (["compare", "a"], "bert compare needs two sides or more"),
]

# Each command in turn in one interpreter, in-process: what it said, and which of the heavy
# modules were imported by then (so the first command to import one is the one named).
IN_ONE_PROCESS = """
import json, sys
import click
from bertstages.cli import cli
heavy, cases = sys.argv[1].split(","), json.loads(sys.argv[2])
seen = []
for args in cases:
    try:
        cli(args, prog_name="bert", standalone_mode=False)
        said = ""
    except click.ClickException as error:
        said = error.format_message()
    seen.append({"said": said, "imported": [m for m in heavy if m in sys.modules]})
print(json.dumps(seen))
"""


def test_help_and_a_bad_value_import_no_torch_numpy_or_mlflow(tmp_path):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(REPO / "params", tmp_path / "params")  # the recipe params.yaml names
    proc = subprocess.run(
        [sys.executable, "-c", IN_ONE_PROCESS, ",".join(HEAVY),
         json.dumps([args for args, _ in CASES])],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    for (args, error), result in zip(CASES, seen, strict=True):
        command = " ".join(args)
        assert error in result["said"] and bool(error) == bool(result["said"]), (command, result)
        assert result["imported"] == [], f"bert {command} imported {result['imported']}"
