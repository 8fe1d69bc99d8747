"""The CPU kernels and thread count are pinned (`cpu:`), so the weights do not depend on what
the machine has or what its environment says: the same run with the host pretending to have
less (AVX2 where it has AVX-512) and another thread count gives the same bytes, and
metrics/pretrain_details.json says what ran."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys

import pytest
import torch
from helpers.bert import REPO, assert_one_line_error, run_bert
from helpers.tiny_pretrain import build_data, write_params

from bertcore.common.cpu import CpuConfig, mkl_branch
from bertcore.common.cpu_env import PINNED_NAMES as UNPINNED  # what a run must not inherit
from bertcore.common.errors import ConfigError
from bertstages.params import load_params, parse_section

# What a host pretending to have less sets from outside; and another thread count
PRETENDING = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}


def pretrain(root, data, env: dict, isa: str = "avx2") -> tuple[str, dict]:
    """`bert pretrain` (4 steps, tracking off) in `root`: the weights' sha256 and the details."""
    write_params(root / "params.yaml", train={"max_steps": 4, "checkpoint_every": 0,
                                              "eval_every": 0},
                 tracking={"enabled": False}, cpu={"threads": 1, "isa": isa})
    run_bert("pretrain", "--samples", str(data / "samples"), "--vocab", str(data / "vocab"),
             cwd=root, env=env, check=True)
    weights = (root / "models" / "pretrained" / "model.safetensors").read_bytes()
    details = json.loads((root / "metrics" / "pretrain_details.json").read_text())
    return hashlib.sha256(weights).hexdigest(), details


def test_weights_do_not_change_when_the_host_pretends_to_have_less(tmp_path, monkeypatch):
    """On a machine with AVX-512 the unpinned kernels are AVX-512's; pinned, a run is the same
    bytes as one whose environment caps the kernels at AVX2 and asks for 2 threads."""
    for name in UNPINNED:
        monkeypatch.delenv(name, raising=False)
    data = build_data(tmp_path)
    (tmp_path / "as-it-is").mkdir()
    (tmp_path / "pretending").mkdir()
    as_it_is = pretrain(tmp_path / "as-it-is", data, {"OMP_NUM_THREADS": "1"})
    pretending = pretrain(tmp_path / "pretending", data,
                          {**PRETENDING, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    assert as_it_is[0] == pretending[0]
    assert as_it_is[1] == pretending[1]  # the records too: what ran is the same

    ran = as_it_is[1]["computed_with"]
    assert ran["device"] == "cpu" and ran["threads"] == 1
    assert ran["torch"] == torch.__version__ and ran["python"] == platform.python_version()
    if platform.machine() in ("x86_64", "AMD64"):  # AVX2 itself, or an older processor's own
        assert ran["cpu_capability"] in ("AVX2", "DEFAULT")
    assert ran["onednn_max_cpu_isa"] == "AVX2"
    assert ran["mkl_cbwr"] in ("AVX2", "AUTO", None)  # AUTO: MKL on a processor not Intel's


@pytest.mark.skipif(mkl_branch() is None, reason="a torch without MKL")
def test_portable_runs_mkl_compatible_branch_whatever_the_environment(tmp_path, monkeypatch):
    """`cpu.isa: portable` is MKL's COMPATIBLE branch (the one both Intel and AMD honour), with
    ATen and oneDNN at AVX2: the environment cannot change it, and its bytes are not those of
    `avx2` (whose MKL branch is another)."""
    for name in UNPINNED:
        monkeypatch.delenv(name, raising=False)
    data = build_data(tmp_path)
    runs = {}
    for name, isa, env in (("portable", "portable", {}), ("pretending", "portable", PRETENDING),
                           ("avx2", "avx2", {})):
        (tmp_path / name).mkdir()
        runs[name] = pretrain(tmp_path / name, data, {**env, "OMP_NUM_THREADS": "1"}, isa)
    assert runs["portable"] == runs["pretending"]
    ran = runs["portable"][1]["computed_with"]
    assert ran["mkl_cbwr"] == "COMPATIBLE" and ran["onednn_max_cpu_isa"] == "AVX2"
    if platform.machine() in ("x86_64", "AMD64"):
        assert ran["cpu_capability"] in ("AVX2", "DEFAULT")
    assert runs["avx2"][1]["computed_with"]["mkl_cbwr"] != "COMPATIBLE"
    assert runs["avx2"][0] != runs["portable"][0]


_COMPUTED_FIRST = """
import torch
from bertcore.common.cpu import CpuConfig, pin_cpu
a = torch.randn(64, 64)
a @ a  # ATen and MKL choose their kernels here
pin_cpu(CpuConfig())
"""


@pytest.mark.skipif(mkl_branch() is None, reason="a torch without MKL")
def test_pinning_after_torch_computed_is_refused():
    """Kernels chosen before the pinning would give the machine's bytes under the pinned
    params: an error naming the way out, not a silent record of AVX2."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in UNPINNED:
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", _COMPUTED_FIRST], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "before cpu.isa: avx2 could pin them" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("override", "fragment"), [
    ("cpu.threads=0", "cpu.threads: 0 is not allowed; expected greater than or equal to 1"),
    ("cpu.isa=avx512",
     "cpu.isa: 'avx512' is not allowed; expected 'avx2', 'portable' or 'native'"),
])
def test_bad_cpu_params_name_the_key(tmp_path, override, fragment):
    path = tmp_path / "params.yaml"
    path.write_text("cpu: {}\n")
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_section(load_params(path, [override]), "cpu", CpuConfig)


def test_a_bad_cpu_param_stops_the_stage_in_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("cpu:\n  threads: many\n")
    proc = run_bert("evaluate", cwd=tmp_path)
    assert_one_line_error(proc, "cpu.threads: 'many' is not allowed; expected a valid integer",
                          code=2)


def test_compiling_on_the_cpu_with_pinned_kernels_is_refused(tmp_path):
    # measured: train.compile with cpu.isa avx2 on the CPU gave a train loss of 0.0
    write_params(tmp_path / "params.yaml", train={"max_steps": 2, "compile": True,
                                                 "device": "cpu"},
                 tracking={"enabled": False})
    proc = run_bert("pretrain", cwd=tmp_path)
    assert_one_line_error(proc, "train.compile", "cpu.isa: native")
    assert not (tmp_path / "models").exists()
