"""The pretrain stage with `train.compile: true` end to end without a graph break, as eager
(tests/unit/training/loop/test_step.py: the step itself)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.bert import ONE_THREAD, run_bert
from helpers.tiny_pretrain import write_params


def log_row(folder: Path, name: str, index: int) -> dict[str, float]:
    """One row of a `bert pretrain` log (metrics/NAME, a TSV) as numbers."""
    header, *rows = (folder / "metrics" / name).read_text().splitlines()
    return {key: float(value) if value else float("nan")
            for key, value in zip(header.split("\t"), rows[index].split("\t"), strict=True)}


@pytest.mark.slow
def test_compiled_training_end_to_end_without_graph_breaks(data, tmp_path):
    (tmp_path / "data").symlink_to(data)
    # no dropout: Inductor draws its own random numbers, so dropout masks would differ;
    # cpu.isa native: compiling on the CPU with the kernels pinned is refused (stages/test_cpu.py)
    write_params(tmp_path / "params.yaml", train={"max_steps": 4, "log_every": 2,
                                                 "eval_every": 0, "checkpoint_every": 2},
                 model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
                 tracking={"enabled": False}, cpu={"isa": "native"})
    env = {**ONE_THREAD, "TORCH_LOGS": "graph_breaks,recompiles",
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    compiled = run_bert("pretrain", "--set", "train.compile=true", cwd=tmp_path, env=env,
                        check=True)
    assert "graph break" not in compiled.stderr.lower(), compiled.stderr
    with_compile = json.loads((tmp_path / "metrics" / "pretrain.json").read_text())["pretrain"]
    # the same run in eager mode, in another folder (train.compile is part of the params
    # fingerprint: here it would start fresh over the compiled run's checkpoints)
    eager_dir = tmp_path / "eager"
    eager_dir.mkdir()
    os.symlink(data, eager_dir / "data")
    (eager_dir / "params.yaml").write_text((tmp_path / "params.yaml").read_text())
    run_bert("pretrain", cwd=eager_dir, check=True)
    eager = json.loads((eager_dir / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert with_compile["steps"] == eager["steps"] == 4
    # without dropout the two agree to the last bits (measured: 0 to 5e-8 apart after four
    # updates; Inductor's fused kernels may round differently, and Adam amplifies that)
    assert with_compile["train"]["loss"] == pytest.approx(eager["train"]["loss"], rel=1e-5)
    assert log_row(tmp_path, "pretrain_eval.tsv", -1)["mlm_loss"] == pytest.approx(
        log_row(eager_dir, "pretrain_eval.tsv", -1)["mlm_loss"], rel=1e-5)
