"""The finished fine-tunes a GLUE rerun reuses (bertcore/downstream/glue/records.py): reused
only for the same inputs, weights, tokenizer, data, recipe and seed, length, device and code
(each part of the key changed fine-tunes again), never when damaged (a file that does not
match its digest, predictions cut, empty or without its dev arrays: one line, and fine-tuned
again), and a --runs folder's other contents never touched. Tiny fine-tunes of one step."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers.glue_files import write_glue_folder, write_glue_vocab
from helpers.tiny_pretrain import tiny_config

from bertcore.common.null_tracker import NullTracker
from bertcore.data.vocab.files import read_vocab
from bertcore.downstream.glue import inputs as glue_inputs
from bertcore.downstream.glue import suite as glue_suite
from bertcore.downstream.glue.config import GlueConfig
from bertcore.downstream.glue.fine_tunes import GlueJob
from bertcore.downstream.glue.records import (
    PREDICTIONS,
    RECORD,
    RECORD_NAME,
    FinishedRuns,
    fine_tune_name,
)
from bertcore.downstream.glue.tasks import GLUE_TASKS
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import WEIGHTS_NAME, save_model

RTE = GLUE_TASKS["rte"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A GLUE folder of RTE, its vocabulary, and two tiny models of other weights."""
    root = tmp_path_factory.mktemp("glue_records")
    write_glue_folder(root / "glue_data", tasks=["rte"], rows=8)
    write_glue_vocab(root, vocab_size=150)
    size = len(read_vocab(root / "data" / "vocab"))
    for seed, name in ((3, "pretrained"), (4, "other")):
        torch.manual_seed(seed)
        save_model(BertPretrainingModel(tiny_config(size)), root / "models" / name)
    return root


def glue_config(root: Path, **changes) -> GlueConfig:
    settings = {"seeds": 1, "batch_size": 4, "max_steps": 1, "max_seq_length": 32}
    return GlueConfig(data=str(root / "glue_data"), tasks=["rte"], **(settings | changes))


def suite_for(root: Path, runs: Path, config: GlueConfig | None = None,
              model: str = "pretrained", device: str = "cpu", **fields) -> glue_suite.Suite:
    config = config or glue_config(root)
    encoder = glue_inputs.glue_model(config, str(root / "models" / model),
                                    str(root / "data" / "vocab"))
    return glue_suite.Suite(encoder, config, torch.device(device),
                            lambda name, params: NullTracker(), FinishedRuns(runs), **fields)


def run_rte(suite: glue_suite.Suite, data: glue_suite.TaskData | None = None
            ) -> glue_suite.TaskResult:
    return glue_suite.run_task(data or glue_suite.read_task(RTE, suite.config), suite)


# ----------------------------------------------------------------- the key (issue 62, 4, 19)
def test_each_part_of_the_key_changed_fine_tunes_again(workdir, tmp_path):
    runs = tmp_path / "runs"
    run_rte(suite_for(workdir, runs))
    again = suite_for(workdir, runs)
    run_rte(again)
    assert again.finished.reused == 1  # nothing changed: reused

    data = glue_suite.read_task(RTE, glue_config(workdir))
    first = data.train[0]
    other_data = dataclasses.replace(data, train=[
        dataclasses.replace(first, text=first.text + " changed"), *data.train[1:]])
    tokenizer = suite_for(workdir, runs).model.tokenizer.__class__.from_str(
        suite_for(workdir, runs).model.tokenizer.to_str())
    tokenizer.add_tokens(["zzzunseen"])
    variants = {
        "weights": lambda: (suite_for(workdir, runs, model="other"), None),
        "tokenizer": lambda: (with_tokenizer(suite_for(workdir, runs), tokenizer), None),
        "data": lambda: (suite_for(workdir, runs), other_data),
        # (steps: a part of the recipe the record's name does not spell out)
        "recipe": lambda: (suite_for(workdir, runs, glue_config(workdir, max_steps=2)), None),
        "seed": lambda: (suite_for(workdir, runs, glue_config(workdir, seed=7)), None),
        "length": lambda: (suite_for(workdir, runs, glue_config(workdir, max_seq_length=31)),
                           None),
        "code": lambda: (suite_for(workdir, runs, code="the code after a fix"), None),
    }
    for part, make in variants.items():
        suite, changed_data = make()
        records = len(list(runs.iterdir()))
        run_rte(suite, changed_data)
        assert suite.finished.reused == 0, part
        assert len(list(runs.iterdir())) == records + 1, part


def with_tokenizer(suite: glue_suite.Suite, tokenizer) -> glue_suite.Suite:
    suite.model.tokenizer = tokenizer
    return suite


def test_the_device_and_the_code_are_parts_of_a_records_name(workdir, tmp_path):
    """(No second device here to fine-tune on: the names a run on it would look for.)"""
    data = glue_suite.read_task(RTE, glue_config(workdir))
    recipe = glue_config(workdir).recipes(128)[0]

    def name(suite: glue_suite.Suite) -> str:
        return suite.finished.name(RTE.key, recipe, suite.identity(data))

    cpu = suite_for(workdir, tmp_path)
    assert name(cpu) != name(suite_for(workdir, tmp_path, device="meta"))
    assert name(cpu) != name(suite_for(workdir, tmp_path, code="other code"))
    assert cpu.code == glue_suite.fine_tuning_code()


def test_a_records_folder_is_its_runs_name_and_its_key(workdir, tmp_path):
    """One name per fine-tune: its MLflow run's, and its record's folder with the key's 16
    hex digits after it (the folder name a --runs folder's records are known by)."""
    recipe = glue_config(workdir).recipes(128)[0]
    suite = suite_for(workdir, tmp_path)
    folder = suite.finished.name(RTE.key, recipe, suite.identity(
        glue_suite.read_task(RTE, glue_config(workdir))))
    run = GlueJob(RTE, recipe, folder, None, None, tmp_path, tmp_path, "cpu", 0, 1, False)
    assert run.run_name == fine_tune_name(RTE.key, recipe) == "rte-lr0.0003-bs4-seed42"
    assert folder.startswith(f"{run.run_name}-") and len(folder) == len(run.run_name) + 17
    assert RECORD_NAME.fullmatch(folder)


def test_the_code_digest_follows_the_source_of_the_packages(tmp_path, monkeypatch):
    from bertcore.common.digests import source_digest

    for name in ("pkg_one", "pkg_two"):  # the same source under two names: a cache apiece
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "sub" / "loop.py").write_text("LEARNING = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = source_digest(("pkg_one",))
    (tmp_path / "pkg_two" / "sub" / "loop.py").write_text("LEARNING = 2\n")
    assert source_digest(("pkg_two",)) != before


def test_the_code_in_the_key_is_the_code_glue_runs():
    """FINE_TUNING_CODE: packages that hold every bertcore module dvc.yaml's glue stage depends
    on (exactly the code it runs: tests/test_layout.py), none of them needless: a record is
    never reused across a change of the code that made it."""
    repo = Path(__file__).resolve().parents[4]
    deps = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["glue"]["deps"]
    modules = {dep.removesuffix(".py").replace("/", ".") for dep in deps
               if dep.startswith("bertcore/")}
    covered = {package: {m for m in modules if m == package or m.startswith(package + ".")}
               for package in glue_suite.FINE_TUNING_CODE}
    assert set().union(*covered.values()) == modules
    assert all(covered.values()), covered


# ------------------------------------------------------ damaged records (issue 62, 5 and 14)
def damage_model(record: Path) -> None:
    weights = record / "model" / WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def cut_predictions(record: Path) -> None:
    path = record / PREDICTIONS
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def empty_predictions(record: Path) -> None:
    (record / PREDICTIONS).write_bytes(b"")


def predictions_without_dev(record: Path) -> None:
    """Its test arrays alone, the record's digest of the file made to match."""
    from bertcore.common.digests import file_sha256

    with np.load(record / PREDICTIONS) as arrays:
        kept = {key: arrays[key] for key in arrays.files if not key.startswith("dev.")}
    np.savez(record / PREDICTIONS, **kept)
    info = json.loads((record / RECORD).read_text())
    info["files"][PREDICTIONS] = file_sha256(record / PREDICTIONS)
    (record / RECORD).write_text(json.dumps(info))


@pytest.mark.parametrize("damage, why", [
    (damage_model, f"model/{WEIGHTS_NAME} does not match its digest"),
    (cut_predictions, f"{PREDICTIONS} does not match its digest"),
    (empty_predictions, f"{PREDICTIONS} does not match its digest"),
    (predictions_without_dev, "its dev predictions are none, not {'dev': 8}"),
])
def test_a_damaged_record_is_said_in_one_line_and_fine_tuned_again(workdir, tmp_path, caplog,
                                                                   damage, why):
    runs = tmp_path / "runs"
    first = run_rte(suite_for(workdir, runs)).median_run()
    whole = {path.name: path.read_bytes() for path in (first.folder / "model").iterdir()}
    damage(first.folder)
    again = suite_for(workdir, runs)
    with caplog.at_level(logging.WARNING):
        result = run_rte(again)
    assert again.finished.reused == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"glue: the saved fine-tune {first.folder} is damaged or unreadable "
                        f"({why}): fine-tuning it again"]
    rerun = result.median_run()
    assert {path.name: path.read_bytes() for path in rerun.model_dir.iterdir()} == whole
    assert list(rerun.dev_predictions) == ["dev"] and len(rerun.dev_predictions["dev"]) == 8
    third = suite_for(workdir, runs)
    run_rte(third)
    assert third.finished.reused == 1  # whole again


# ------------------------------------------------ a --runs folder of the user's (issue 62, 2)
def test_dropping_models_touches_only_the_folders_own_records(workdir, tmp_path):
    runs = tmp_path / "my_experiments"
    theirs = {"exp1/model/pytorch_model.bin": b"exp1's weights",
              "exp2/model/weights.pt": b"exp2's weights",
              "rte-lr3e-05-bs4-seed42-0123456789abcdef/model/x.bin": b"named as ours, no record"}
    for name, data in theirs.items():
        (runs / name).parent.mkdir(parents=True)
        (runs / name).write_bytes(data)
    first = run_rte(suite_for(workdir, runs, glue_config(workdir, seeds=2)))
    dropped = [run for run in first.runs if run is not first.median_run()]
    assert len(dropped) == 1 and dropped[0].model_dir is None
    # a suite of another task keeps its median; every other record of ours loses its model
    FinishedRuns(runs).drop_models_except([])
    assert first.median_run().model_dir is None
    assert {name: (runs / name).read_bytes() for name in theirs} == theirs
