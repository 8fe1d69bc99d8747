"""The benchmark scripts' bad arguments are one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.bert import REPO


@pytest.mark.parametrize("script, args, said", [
    ("epoch_order.py", ["--samples", "0"], "argument --samples: 0 is not an integer >= 1"),
    ("epoch_order.py", ["--samples", "10"], "--samples 10 is fewer than --batch-size 256"),
    ("eval_items.py", ["--pairs", "1"], "argument --pairs: 1 is not an integer >= 2"),
    ("eval_items.py", ["--passes", "x"], "argument --passes: invalid integer >= 1 value: 'x'"),
    ("scale.py", ["--gb", "0"], "argument --gb: 0 is not a number > 0"),
    ("scale.py", ["--workers", "0"], "argument --workers: 0 is not an integer >= 1"),
    ("scale.py", ["--workers", "abc"], "argument --workers: 'abc' is not a comma-separated "
                                       "list of integers >= 1"),
    ("scale.py", ["--source", "no/such/corpus"], "--source: corpus source not found: "
                                                 "no/such/corpus"),
    ("repro_processes.py", ["--steps", "1"], "argument --steps: 1 is not an integer >= 2"),
    ("repro_processes.py", ["--set", "steps=3"], "argument --set: 'steps=3' is not "
                                                 "section.key=value"),
])
def test_a_benchmark_scripts_bad_argument_is_one_line(tmp_path, script, args, said):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert errors == [f"{script}: error: {said}"] or (
        len(errors) == 1 and errors[0].startswith(f"{script}: error: {said}")), proc.stderr
