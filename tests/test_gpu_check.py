"""The device check stays runnable: its dry run (tiny sizes on the CPU, mlflow and dvc
unimportable, as on the GPU machine) passes every check and prints the summary line."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_gpu_check_dry_run():
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--dry-run"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu_check (dry run): seq_per_s="), last
    for check in ("data", "pretrain_cpu", "resume_cpu", "ddp_gloo", "fp16"):
        assert f" {check}=ok" in last, last
    assert "FAIL" not in last and "compiled_seq_per_s=" in last and "s64_util=" in last
