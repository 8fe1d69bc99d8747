"""BERT's second phase (params.yaml `phase2`): a tiny run of 6 steps at 32 tokens, then 6 at 64.
Stopped in phase 2 it resumes to the bytes of a straight run, in one MLflow run; new phase-2
params restart phase 2 from phase 1's last checkpoint, more phase-2 steps extend it; the
samples stage builds the longer samples beside phase 1's untouched ones; compiled and under
DDP both phases train as eager and one process do; the exported model reads 64 tokens in
transformers with our outputs; every mistake is one line naming the key. The whole pipeline
under DVC (killed in phase 2, or phase 2 turned on after phase 1):
tests/pipeline/test_phases_pipeline.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.bert import ONE_THREAD, REPO, assert_one_line_error, run_bert, run_bert_interrupted
from helpers.tiny_pretrain import build_data, write_params
from safetensors.torch import load_file

from bertcore.common.digests import file_sha256
from bertcore.common.outcomes import read_items
from bertcore.common.schedule import learning_rate
from bertcore.common.tracking import sqlite_uri
from bertcore.data.samples.store import SampleStore, read_meta
from bertcore.saved.card import interval_text
from bertcore.saved.hf import load_model
from bertcore.training.data.masking import MaskingConfig
from bertcore.training.run.phases import first_epoch, scaled_masking

PHASE2 = {"enabled": True, "max_seq_length": 64, "max_steps": 6, "batch_size": 4,
          "learning_rate": 0.002, "warmup_steps": 2}
TRAIN = {"max_steps": 6, "log_every": 1, "eval_every": 3, "checkpoint_every": 3, "keep_last": 2}
# dropout on: resuming must restore the random numbers, in phase 2 too
DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"), phase2_length=64)


def workdir(folder: Path, data: Path, *, tracking: bool = False, **sections) -> Path:
    """A folder with the tiny data and params of a two-phase run (`sections` update them)."""
    folder.mkdir(parents=True)
    (folder / "data").symlink_to(data)
    merged = {"model": DROPOUT, "train": TRAIN, "phase2": PHASE2,
              "tracking": {"enabled": tracking, "experiment": "phases"}}
    for name, values in sections.items():
        merged[name] = {**merged.get(name, {}), **values}
    write_params(folder / "params.yaml", **merged)
    return folder


def bert(*args: str, cwd: Path, env: dict | None = None):
    return run_bert(*args, cwd=cwd, env=env, check=True)


def outputs(folder: Path) -> dict[str, str]:
    """sha256 of every file the pretrain stage wrote (models/, metrics/), by path."""
    return {str(path.relative_to(folder)): file_sha256(path)
            for root in ("models", "metrics") for path in sorted((folder / root).rglob("*"))
            if path.is_file() and not path.name.startswith(".")}


def tsv(path: Path) -> list[dict[str, float]]:
    header, *rows = path.read_text().splitlines()
    return [dict(zip(header.split("\t"), map(float, row.split("\t")), strict=True))
            for row in rows]


def checkpoint_steps(folder: Path, within: str = "") -> list[int]:
    """The steps of the checkpoints in models/checkpoints (`within`: in that folder of it)."""
    found = (folder / "models" / "checkpoints" / within).iterdir()
    return sorted(int(p.name[5:]) for p in found if re.fullmatch(r"step-\d+", p.name))


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory, _empty_mlflow_store) -> Path:
    """The two phases in one uninterrupted run, tracked in MLflow. (MLflow draws from Python's
    random generator when it names a new run, after the run seeded it: tracked or not, the
    RNG states in the checkpoints differ.)"""
    folder = workdir(tmp_path_factory.mktemp("straight") / "run", data, tracking=True)
    shutil.copy(_empty_mlflow_store, folder / "mlflow.db")
    proc = bert("pretrain", cwd=folder)
    assert "phase 2: steps 7-12 on samples of up to 64 tokens" in proc.stderr
    return folder


def test_one_run_in_two_phases(straight):
    rows = tsv(straight / "metrics" / "pretrain_log.tsv")
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    # each phase on its own schedule: phase 2 warms up again to its own peak, from step 7
    planned = [learning_rate(0.003, s - 1, 2, 6) for s in range(1, 7)]
    planned += [learning_rate(0.002, s - 7, 2, 6) for s in range(7, 13)]
    assert [r["learning_rate"] for r in rows] == pytest.approx(planned, rel=1e-6)
    # phase 2 begins a new epoch: its data order and masks are no replay of phase 1's
    assert rows[5]["epoch"] < 1 <= rows[6]["epoch"]
    evaluations = tsv(straight / "metrics" / "pretrain_eval.tsv")
    assert [int(r["step"]) for r in evaluations] == [3, 6, 9, 12]  # 6: phase 1's last
    pretrained = json.loads((straight / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert pretrained["steps"] == 12
    details = json.loads((straight / "metrics" / "pretrain_details.json").read_text())
    assert details["phase2"] == {"first_step": 7, "steps": 6, "max_seq_length": 64,
                                 "batch_size": 4}
    # phase 1's last checkpoint is kept beside phase 2's last two (keep_last 2)
    assert checkpoint_steps(straight) == [6, 9, 12]
    meta = json.loads((straight / "models/checkpoints/step-00000012/meta.json").read_text())
    assert meta["phase"] == 2 and meta["params"]["phase2"]["max_steps"] == 6
    assert "phase" not in json.loads(
        (straight / "models/checkpoints/step-00000006/meta.json").read_text())


def test_the_phase_2_numbers():
    # 40 slots at 128 tokens became 160 at 512 (Google: 20 at 128, 80 at 512)
    assert scaled_masking(MaskingConfig(), 128, 512).max_predictions_per_seq == 160
    assert scaled_masking(MaskingConfig(max_predictions_per_seq=5), 32, 64) == MaskingConfig(
        max_predictions_per_seq=5 * 2)
    assert scaled_masking(MaskingConfig(), 128, 128) == MaskingConfig()
    # phase 2 starts at the first epoch phase 1 did not reach
    assert [first_epoch(steps, 10) for steps in (5, 10, 11, 30)] == [1, 1, 2, 3]


@pytest.mark.slow
def test_stopped_in_phase_2_it_resumes_exactly_in_one_mlflow_run(data, straight, tmp_path,
                                                                mlflow_db):
    work = workdir(tmp_path / "run", data, tracking=True)
    mlflow_db(work)
    # SIGTERM while phase 2's first checkpoint (step 9) is being written: the run stops after
    # the next step, with a checkpoint of it
    stopped = run_bert_interrupted("pretrain",
                                   at="bertcore.training.loop.checkpointer:capture_rng_state",
                                   nth=3, signum=signal.SIGTERM, cwd=work)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    step = int(re.search(r"interrupted by SIGTERM after step (\d+)", stopped.stderr).group(1))
    assert 9 < step < 12, stopped.stderr
    resumed = bert("pretrain", cwd=work, env={"PYTHONPATH": str(REPO)})
    assert f"resuming from models/checkpoints/step-{step:08d} (step {step} of 12, phase 2)" in (
        resumed.stderr)

    def without(found: dict[str, str], step: int) -> dict[str, str]:
        return {path: digest for path, digest in found.items() if f"step-{step:08d}" not in path}

    # the same bytes as the straight run, but for the checkpoint of the step it stopped at,
    # kept instead of step 9's
    assert without(outputs(work), step) == without(outputs(straight), 9)
    assert checkpoint_steps(work) == [6, step, 12]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(work / "mlflow.db"))
    runs = client.search_runs([client.get_experiment_by_name("phases").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    run = runs[0]

    def steps(key: str) -> list[int]:
        return sorted(m.step for m in client.get_metric_history(run.info.run_id, key))

    assert steps("train/loss") == list(range(1, 13))  # phase 2 continues phase 1's curve
    assert steps("val/mlm_loss") == [3, 6, 9, 12]
    assert run.data.tags["phase"] == "2" and run.data.tags["phase2.first_step"] == "7"
    assert run.data.params["phase2.max_seq_length"] == "64"


@pytest.mark.slow
def test_new_phase_2_params_restart_it_at_phase_1s_end_and_more_steps_extend_it(straight,
                                                                               tmp_path):
    work = tmp_path / "run"
    shutil.copytree(straight, work, symlinks=True)
    log = work / "metrics" / "pretrain_log.tsv"
    phase1_end = {path: digest for path, digest in outputs(work).items() if "step-00000006" in path}

    proc = bert("pretrain", "--set", "phase2.learning_rate=0.001", cwd=work)
    assert "phase2.learning_rate 0.002 -> 0.001" in proc.stderr
    assert "phase 2 starts over from phase 1's end" in proc.stderr
    assert "starting fresh" not in proc.stderr  # phase 1 is not trained again
    assert "steps 7-12 on samples of up to 64 tokens (batch 4, learning rate 0.001), from " \
           "models/checkpoints/step-00000006" in proc.stderr
    rows, before = tsv(log), tsv(straight / "metrics" / "pretrain_log.tsv")
    assert rows[:6] == before[:6]
    assert [r["learning_rate"] for r in rows[6:]] == pytest.approx(
        [learning_rate(0.001, s - 7, 2, 6) for s in range(7, 13)], rel=1e-6)
    assert {p: d for p, d in outputs(work).items() if "step-00000006" in p} == phase1_end
    assert checkpoint_steps(work) == [6, 9, 12]
    # the old phase 2's, replaced, were set aside, said before phase 2 began
    assert checkpoint_steps(work, "replaced") == [9, 12]
    said = proc.stderr.index("setting them aside in models/checkpoints/replaced")
    assert "step-00000009, step-00000012" in proc.stderr and said < proc.stderr.index(
        "phase 2: steps 7-12")

    longer = bert("pretrain", "--set", "phase2.learning_rate=0.001", "--set",
                  "phase2.max_steps=8", cwd=work)
    assert "resuming from models/checkpoints/step-00000012 (step 12 of 14, phase 2)" in (
        longer.stderr)
    assert "re-planned to end at step 14 instead of 12" in longer.stderr
    rows = tsv(log)
    assert [int(r["step"]) for r in rows] == list(range(1, 15))
    assert [r["learning_rate"] for r in rows[12:]] == pytest.approx(
        [learning_rate(0.001, s - 7, 2, 8) for s in (13, 14)], rel=1e-6)
    assert json.loads((work / "metrics" / "pretrain.json").read_text())["pretrain"]["steps"] == 14
    # 12, the end of the shorter phase 2, is kept: keep_last never takes a finished one
    assert checkpoint_steps(work) == [6, 12, 14]
    assert "replaces" not in longer.stderr

    # another phase 1: no phase-2 checkpoint of the old one is resumed, all starts fresh
    other = bert("pretrain", "--set", "phase2.learning_rate=0.001", "--set",
                 "phase2.max_steps=8", "--set", "train.learning_rate=0.002", cwd=work)
    assert "other phase 1 (its params, data or length)" in other.stderr
    assert "resuming" not in other.stderr and "starting fresh" in other.stderr
    assert checkpoint_steps(work) == [6, 12, 14]
    assert checkpoint_steps(work, "replaced") == [6, 12, 14]  # the old run's, instead of 9, 12
    assert tsv(log)[0]["learning_rate"] == pytest.approx(learning_rate(0.002, 0, 2, 6))


@pytest.mark.slow
def test_phase_2_turned_off_gives_phase_1s_model_and_on_again_finds_phase_2_done(straight,
                                                                                tmp_path):
    work = tmp_path / "run"
    shutil.copytree(straight, work, symlinks=True)
    finished = outputs(work)
    phase2_files = {p: d for p, d in finished.items() if re.search(r"step-000000(09|12)", p)}

    off = bert("pretrain", "--set", "phase2.enabled=false", cwd=work)
    assert "phase 2 is off: the run ends with phase 1 at step 6, whose model goes to " \
           "models/pretrained; phase 2's checkpoints after it (step-00000009, " \
           "step-00000012) stay where they are, for phase2.enabled: true" in off.stderr
    assert "resuming from models/checkpoints/step-00000006 (step 6 of 6)" in off.stderr
    assert "replaces" not in off.stderr
    assert "val (length 32): MLM accuracy" in off.stderr  # phase 1's length, scored at
    # phase 1's result, from its last checkpoint; phase 2's checkpoints untouched
    assert file_sha256(work / "models/pretrained/model.safetensors") == file_sha256(
        work / "models/checkpoints/step-00000006/model.safetensors")
    assert json.loads((work / "metrics" / "pretrain.json").read_text())["pretrain"]["steps"] == 6
    assert checkpoint_steps(work) == [6, 9, 12]
    assert {p: d for p, d in outputs(work).items() if p in phase2_files} == phase2_files

    on = bert("pretrain", cwd=work)  # params.yaml has phase 2 on
    assert "resuming from models/checkpoints/step-00000012 (step 12 of 12, phase 2)" in (
        on.stderr)
    assert "phase 2: steps" not in on.stderr  # found done, not trained again
    assert "val (length 64): MLM accuracy" in on.stderr
    # the finished two-phase run's model, weights and record, to the byte (a finished run's
    # last checkpoint is written again, its content the same)
    kept = re.compile(r"models/pretrained/|model\.safetensors$|metrics/pretrain_(log|details)")
    assert {p: d for p, d in outputs(work).items() if kept.search(p)} == {
        p: d for p, d in finished.items() if kept.search(p)}

    # MLflow: phase 1 alone was a run of its own, going on from the two-phase one, which
    # keeps phase 2's model
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(work / "mlflow.db"))
    both, alone = client.search_runs([client.get_experiment_by_name("phases").experiment_id],
                                     order_by=["attributes.start_time"])
    assert alone.data.params["phase2.enabled"] == "False"
    assert alone.data.tags["extends_run"] == both.info.run_id
    assert both.data.tags["model.sha256"] == file_sha256(
        work / "models/pretrained/model.safetensors")
    assert alone.data.tags["model.sha256"] == file_sha256(
        work / "models/checkpoints/step-00000006/model.safetensors")


def test_phase_2_must_be_longer_than_phase_1(data, tmp_path):
    work = workdir(tmp_path / "run", data,
                   samples={"max_seq_length": 32, "dupe_factor": 2, "workers": 1})
    # as long as phase 1's samples, or shorter: one line naming the key, before any work
    for stage, length in (("samples", 32), ("samples", 16), ("pretrain", 32)):
        out = ["--out", "samples", "--metrics", "samples.json"] if stage == "samples" else []
        proc = run_bert(stage, *out, "--set", f"phase2.max_seq_length={length}", cwd=work)
        where = ("samples.max_seq_length is 32" if stage == "samples" else
                 "those in data/samples are up to 32")
        assert_one_line_error(proc, f"phase2.max_seq_length: {length} is not longer than "
                              f"phase 1's samples ({where})", "phase2.enabled: false", code=2)
    assert not (work / "models").exists() and not (work / "samples").exists()
    # with phase 2 off its length is not checked
    bert("samples", "--out", "off", "--metrics", "off.json", "--set", "phase2.enabled=false",
         "--set", "phase2.max_seq_length=16", cwd=work)
    assert "phase2" not in json.loads((work / "off.json").read_text())


def test_evaluate_names_the_length_of_each_score(straight, tmp_path):
    proc = bert("evaluate", "--out", str(tmp_path / "eval.json"), "--set",
                "tracking.enabled=false", cwd=straight)
    first, second = [line for line in proc.stderr.splitlines() if line.startswith("evaluate")]
    assert first.startswith("evaluate (length 32): MLM accuracy ")
    assert second.startswith("evaluate (length 64): MLM accuracy ")
    scores = json.loads((tmp_path / "eval.json").read_text())["eval"]
    # each with its interval, to the precision the interval supports
    for line, written in ((first, scores), (second, scores["length_64"])):
        mlm = interval_text(written["mlm_accuracy"], *written["mlm_accuracy_ci95"])
        assert f"MLM accuracy {mlm}" in line
    items = read_items(tmp_path / "eval_items.json")
    assert list(items.sets) == ["val", "val_length_64"]


def test_the_samples_stage_builds_phase_2s_beside_phase_1s_untouched(data, tmp_path):
    work = workdir(tmp_path / "run", data,
                   samples={"max_seq_length": 32, "dupe_factor": 2, "workers": 1})
    for state in ("off", "on"):
        bert("samples", "--out", state, "--metrics", f"{state}.json", "--set",
             f"phase2.enabled={state == 'on'}", cwd=work)

    def files(folder: Path) -> dict[str, str]:
        return {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*"))
                if p.is_file()}

    off, on = files(work / "off"), files(work / "on")
    assert {p: d for p, d in on.items() if not p.startswith("phase2/")} == off
    assert read_meta(work / "on" / "phase2")["max_seq_length"] == 64
    lengths = SampleStore(work / "on" / "phase2" / "train").lengths
    assert lengths.max() <= 64 and (lengths > 32).mean() > 0.5  # really longer
    assert "phase2" not in json.loads((work / "off.json").read_text())
    assert json.loads((work / "on.json").read_text())["phase2"]["train"]["count"] == len(lengths)


@pytest.mark.slow
def test_phase_2_mistakes_are_one_line_naming_the_key(data, tmp_path):
    work = workdir(tmp_path / "run", data)
    for args, fragments, code in [
        (["phase2.batch_size=6", "phase2.micro_batches=4"],
         ["phase2.batch_size: 6 is not allowed", "phase2.micro_batches (4)"], 2),
        (["phase2.warmup=3"], ["phase2.warmup: unknown key"], 2),
        (["phase2.max_seq_length=128"], ["phase2.max_seq_length is 128 but the model has "
                                         "max_position_embeddings=64",
                                         "raise model.max_position_embeddings"], 1),
        (["phase2.max_seq_length=48"], ["phase 2", "up to 64 tokens",
                                        "phase2.max_seq_length is 48", "bert samples"], 1),
        (["train.max_minutes=5"], ["phase2.enabled", "train.max_minutes: null"], 2),
    ]:
        overrides = [item for value in args for item in ("--set", value)]
        proc = run_bert("pretrain", *overrides, cwd=work)
        assert_one_line_error(proc, *fragments, code=code)
    assert not (work / "models").exists()
    proc = run_bert("samples", "--out", "samples", "--set", "phase2.max_seq_length=4",
                    cwd=work)
    assert_one_line_error(proc, "phase2.max_seq_length: 4 is not allowed", code=2)

    bare = tmp_path / "bare"  # samples built with phase 2 off
    shutil.copytree(data, bare / "data", ignore=shutil.ignore_patterns("phase2"))
    shutil.copy(work / "params.yaml", bare / "params.yaml")
    proc = run_bert("pretrain", cwd=bare)
    assert_one_line_error(proc, "phase2.enabled", "holds no samples of phase 2", "bert samples")


def test_a_phase_2_batch_its_samples_cannot_fill_names_phase_2s_params(data, tmp_path):
    """Issue 30, case 10: a phase-2 batch larger than phase 2's samples said "lower
    train.batch_size"; and one that no length bin fills names the bins too."""
    work = workdir(tmp_path / "run", data)
    store = SampleStore(data / "samples" / "phase2" / "train")
    count = len(store)
    proc = run_bert("pretrain", "--set", f"phase2.batch_size={count + 1}",
                    "--set", "phase2.micro_batches=1", cwd=work)
    assert_one_line_error(proc, f"only {count} training samples for a batch of {count + 1}",
                          "lower phase2.batch_size, or make more: raise samples.dupe_factor",
                          code=1)
    assert "train.batch_size" not in proc.stderr
    fullest = int(np.bincount((store.lengths - 1) // 32).max())  # phase 2's bins: 32 tokens
    assert fullest < count
    proc = run_bert("pretrain", "--set", f"phase2.batch_size={fullest + 1}",
                    "--set", "phase2.micro_batches=1", cwd=work)
    assert_one_line_error(proc, f"of phase2.length_bin_width=32 holds {fullest}",
                          "lower phase2.batch_size or raise phase2.length_bin_width", code=1)
    assert not (work / "models").exists()


def test_the_exported_model_reads_phase_2_lengths_in_transformers(data, straight, tmp_path):
    transformers = pytest.importorskip("transformers")
    bert("export", "--out", str(tmp_path / "hf"), cwd=straight)
    theirs = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ours = load_model(straight / "models" / "pretrained").eval()
    store = SampleStore(data / "samples" / "phase2" / "val")
    rows = [i for i in range(len(store)) if len(store[i][0]) > 48][:6]
    length = max(len(store[i][0]) for i in rows)
    assert 48 < length <= 64  # past every position phase 1 saw
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for row, index in enumerate(rows):
        tokens, b_start, _ = store[index]
        ids[row, :len(tokens)] = torch.from_numpy(tokens.astype(np.int64))
        mask[row, :len(tokens)] = 1
        types[row, b_start:len(tokens)] = 1
    with torch.no_grad():
        a = ours(input_ids=ids, token_type_ids=types, attention_mask=mask)
        b = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    real = mask.bool()
    assert (a.mlm_logits - b.prediction_logits)[real].abs().max() <= 1e-5
    assert (a.nsp_logits - b.seq_relationship_logits).abs().max() <= 1e-5


# `bert ARGS` with torch.compile on the aot_eager backend: the graphs inductor would get, no
# code generated (minutes on a CPU otherwise)
_AOT_EAGER = r"""
import sys, torch
real = torch.compile
torch.compile = lambda model, **kw: real(model, **{**kw, "backend": "aot_eager"})
from bertstages.cli import cli
cli(sys.argv[1:], prog_name="bert")
"""


NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# compiling on the CPU with the kernels pinned to AVX2 is refused (test_cpu.py): the runs
# compared with the eager one take the native kernels, as it does, so they run the same ones
NATIVE = {"isa": "native"}


@pytest.fixture(scope="module")
def eager(data, tmp_path_factory) -> Path:
    """The eager reference of the compiled and DDP runs (one run for both): the two phases,
    no dropout, the native kernels."""
    folder = workdir(tmp_path_factory.mktemp("eager") / "run", data, model=NO_DROPOUT,
                     cpu=NATIVE)
    bert("pretrain", cwd=folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["compile", "ddp"])
def test_compiled_and_under_ddp_both_phases_train_as_eager_in_one_process(data, eager,
                                                                         tmp_path, setting):
    other = workdir(tmp_path / setting, data, model=NO_DROPOUT, cpu=NATIVE)
    if setting == "compile":  # fullgraph: a graph break in either phase fails the run
        proc = subprocess.run([sys.executable, "-c", _AOT_EAGER, "pretrain", "--set",
                               "train.compile=fullgraph"], cwd=other, capture_output=True,
                              text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD})
        assert proc.returncode == 0, proc.stderr
    else:  # two processes: each phase's global batch split over both
        proc = bert("pretrain", "--set", "train.nproc_per_node=2", cwd=other)
        meta = json.loads((other / "models/checkpoints/step-00000012/meta.json").read_text())
        assert meta["world_size"] == 2 and meta["phase"] == 2
    assert "phase 2: steps 7-12" in proc.stderr
    rows, expected = (tsv(f / "metrics" / "pretrain_log.tsv") for f in (other, eager))
    if setting == "ddp":  # the gradient added in one fixed tree: the same bytes
        assert rows == expected
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in expected], rel=1e-5)
    weights, reference = (load_file(f / "models/pretrained/model.safetensors")
                          for f in (other, eager))
    for name, tensor in reference.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
