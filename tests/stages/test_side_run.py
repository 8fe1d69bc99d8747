"""A side run of pretraining (`bert pretrain --out elsewhere`) and the pipeline's reports: it
is refused in one line while it would rewrite them, writes its own where pointed, and the
export's model card shows only the reports made from the weights it exports; a
`--metrics-dir` that does not exist is named, not read as a model without reports."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from helpers.bert import assert_one_line_error, run_bert
from helpers.tiny_pretrain import build_data, tiny_config, write_params

from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model

SIDE = ("--out", "side", "--checkpoints", "side-checkpoints", "--set", "train.max_steps=5")
OWN_REPORTS = ("--log", "side-metrics/log.tsv", "--eval-log", "side-metrics/eval.tsv")


bert = run_bert


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def card(workdir: Path) -> str:
    bert("export", cwd=workdir, check=True)
    return (workdir / "models" / "hf" / "README.md").read_text(encoding="utf-8")


@pytest.fixture()
def workdir(tmp_path_factory, tmp_path) -> Path:
    (tmp_path / "data").symlink_to(build_data(tmp_path_factory.mktemp("side")))
    write_params(tmp_path / "params.yaml", train={"max_steps": 8, "eval_every": 0,
                                                  "checkpoint_every": 0},
                 tracking={"enabled": False})
    return tmp_path


def test_a_side_run_leaves_the_pipeline_s_reports_and_card_to_the_pipeline_s_model(workdir):
    bert("pretrain", cwd=workdir, check=True)  # the pipeline's model: 8 steps
    assert "- optimizer steps: 8\n" in card(workdir)
    metrics = workdir / "metrics"
    before = files(metrics)

    proc = bert("pretrain", *SIDE, cwd=workdir)
    assert_one_line_error(
        proc, "--out side is not models/pretrained, but --metrics, --log, --eval-log are left "
        "at the reports of models/pretrained (metrics/pretrain*): give this run's reports "
        "paths of their own (--metrics PATH --log PATH --eval-log PATH)", code=1)
    proc = bert("pretrain", *SIDE, "--metrics", "side-metrics/pretrain.json", cwd=workdir)
    assert_one_line_error(proc, "but --log, --eval-log are left", code=1)
    assert files(metrics) == before and not (workdir / "side").exists()

    # pointed at reports of its own: those, not the pipeline's, say 5 steps
    bert("pretrain", *SIDE, "--metrics", "side-metrics/pretrain.json", *OWN_REPORTS,
         cwd=workdir, check=True)
    side = json.loads((workdir / "side-metrics" / "pretrain.json").read_text())["pretrain"]
    assert side["steps"] == 5 and files(metrics) == before
    assert "- optimizer steps: 8\n" in card(workdir)

    # pointed at the pipeline's pretrain.json on purpose: it now reports the side model, by
    # the sha256 of its weights, and the 8-step model's card leaves it out
    bert("pretrain", *SIDE, "--metrics", "metrics/pretrain.json", *OWN_REPORTS, cwd=workdir,
         check=True)
    details = json.loads((metrics / "pretrain_details.json").read_text())
    weights = hashlib.sha256((workdir / "side" / "model.safetensors").read_bytes()).hexdigest()
    assert details["model_sha256"] == weights
    text = card(workdir)
    # the params (its hyper-parameters) stay; what the pipeline's run did is left out
    assert "#### What the run did" not in text and "tokens seen" not in text, text


def test_a_metrics_folder_that_does_not_exist_is_named_and_nothing_is_exported(workdir):
    """A typo in `--metrics-dir` is no model without reports: one line naming the folder,
    and the export already there stays as it was."""
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(len(read_vocab(workdir / "data" / "vocab"))))
    save_model(model, workdir / "models" / "pretrained")
    before = card(workdir)  # metrics/ is not there: the default, said in the summary
    proc = bert("export", cwd=workdir, check=True)
    assert "(no reports: metrics does not exist)" in proc.stderr
    proc = bert("export", "--metrics-dir", "metrcs", cwd=workdir)
    assert_one_line_error(proc, "--metrics-dir metrcs does not exist: point it at the folder "
                                "of the reports the card shows", code=1)
    assert (workdir / "models" / "hf" / "README.md").read_text(encoding="utf-8") == before
