"""The GLUE stage: the regression head against transformers', every task kind fine-tuned over
seeds from a GLUE folder of small files (median, min, max; predictions, leaderboard files, the
models transformers loads, MLflow's nested runs), a task that fails keeping the others'
scores, no data by default, and `dvc exp show` reading metrics/glue.json."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers.bert import (
    ONE_THREAD,
    REPO,
    assert_one_line_error,
    run_bert,
    run_bert_interrupted,
    start_bert_paused,
)
from helpers.glue_files import write_glue_folder, write_glue_vocab
from helpers.tiny_pretrain import tiny_config
from huggingface_hub import ModelCard
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertcore.common.digests import file_sha256
from bertcore.common.dotted import flatten
from bertcore.common.outcomes import read_items
from bertcore.common.tracking import Tracker, sqlite_uri
from bertcore.data.vocab.files import read_vocab
from bertcore.downstream.finetune import task_loss
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.saved.hf import WEIGHTS_NAME, export_hf, export_hf_classifier, load_model, save_model
from bertcore.saved.model_run import MODEL_TAG

transformers = pytest.importorskip("transformers")


TASKS = ["cola", "mrpc", "stsb", "mnli"]  # single, pair with F1, regression, two dev files
SEEDS = 3


def test_regression_head_loads_in_transformers_with_the_same_outputs_and_loss(tmp_path):
    torch.manual_seed(0)
    ours = BertForSequenceClassification(tiny_config(50, 0.0), []).eval()
    assert ours.is_regression and ours.classifier.out_features == 1
    export_hf_classifier(ours, tmp_path / "hf")
    theirs = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert theirs.config.problem_type == "regression" and theirs.config.num_labels == 1
    ids = torch.randint(5, 50, (3, 9))
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    labels = torch.tensor([0.5, 4.0, 2.25])
    with torch.no_grad():
        logits = ours(ids, types, mask)
        expected = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask,
                          labels=labels)
    torch.testing.assert_close(logits, expected.logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(task_loss(ours, logits, labels), expected.loss, rtol=0,
                               atol=1e-6)


@pytest.fixture(scope="module")
def glue_workdir(tmp_path_factory) -> Path:
    """A tiny (untrained) model with its vocabulary and the MLflow run that "trained" it, a
    GLUE folder of four tasks, and params for short fine-tunes."""
    root = tmp_path_factory.mktemp("glue")
    write_glue_folder(root / "glue_data", tasks=TASKS, rows=8)
    write_glue_vocab(root, vocab_size=150)  # each seed's fine-tune then scores its own
    torch.manual_seed(3)
    model = BertPretrainingModel(tiny_config(len(read_vocab(root / "data" / "vocab"))))
    save_model(model, root / "models" / "pretrained")
    parent = Tracker.start(sqlite_uri(root / "mlflow.db"), "tiny-glue", run_name="pretrain",
                           tags={MODEL_TAG: file_sha256(root / "models/pretrained" / WEIGHTS_NAME)})
    parent.finish()
    (root / "parent_run_id").write_text(parent.run_id)
    # one worker: the fine-tunes in the stage's process (a pool of two is tested on its own,
    # where it costs its workers' start)
    params = {"glue": {"data": "glue_data", "seeds": SEEDS, "batch_size": 4, "max_steps": 3,
                       "learning_rate": 3e-3, "max_seq_length": 32, "workers": 1},
              "tracking": {"experiment": "tiny-glue"}}
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return root


def read_tsv(path: Path) -> list[dict]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.mark.slow
def test_glue_stage_scores_every_task_kind_over_seeds(glue_workdir):
    proc = run_bert("glue", cwd=glue_workdir, check=True)
    metrics = json.loads((glue_workdir / "metrics" / "glue.json").read_text())["glue"]
    details = json.loads((glue_workdir / "metrics" / "glue_details.json").read_text())
    assert list(metrics) == ["score", *TASKS]
    assert set(metrics["mrpc"]) == {"score", "f1", "accuracy", "f1_ci95", "accuracy_ci95"}
    assert set(metrics["stsb"]) == {"score", "pearson", "spearman", "pearson_ci95",
                                    "spearman_ci95"}
    assert set(metrics["mnli"]) == {"score", "mnli_m_accuracy", "mnli_mm_accuracy",
                                    "mnli_m_accuracy_ci95", "mnli_mm_accuracy_ci95"}
    assert details["averaged"] == TASKS
    # glue.json rounds a median to the precision its interval supports; the details hold it
    estimates = read_items(glue_workdir / "metrics" / "glue_items.json").estimates()
    assert metrics["score"] == pytest.approx(statistics.fmean(
        details["tasks"][key]["score"]["median"] for key in TASKS))
    for key in TASKS:
        spread = details["tasks"][key]["score"]
        assert len(spread["values"]) == SEEDS
        assert spread["median"] == pytest.approx(statistics.median(spread["values"]))
        assert spread["min"] == min(spread["values"]) and spread["max"] == max(spread["values"])
        found = estimates.get(f"{key}.score")  # cola's: rounded as its interval supports
        assert metrics[key]["score"] == pytest.approx(
            round(spread["median"], found.decimals) if found else spread["median"])
        assert details["tasks"][key]["seeds"] == [42, 43, 44]
        assert details["tasks"][key]["steps"] == 3
    assert "glue: score" in proc.stderr and "glue stsb:" in proc.stderr

    seeds = read_tsv(glue_workdir / "metrics" / "glue_seeds.tsv")
    assert len(seeds) == len(TASKS) * SEEDS
    assert sorted(float(r["score"]) for r in seeds if r["task"] == "cola") == pytest.approx(
        sorted(details["tasks"]["cola"]["score"]["values"]), abs=1e-4)

    # the dev predictions written are the median seed's: its metric again from the file
    predictions = glue_workdir / "metrics" / "glue"
    cola = read_tsv(predictions / "cola_dev.tsv")
    assert len(cola) == 8 and {"index", "text", "gold", "prediction"} <= set(cola[0])
    assert 100 * matthews_corrcoef([r["gold"] for r in cola], [r["prediction"] for r in cola]
                                   ) == pytest.approx(
        details["tasks"]["cola"]["metrics"]["matthews"]["median"], abs=1e-6)
    assert {p.name for p in predictions.glob("mnli_*.tsv")} == {"mnli_mnli_m.tsv",
                                                                 "mnli_mnli_mm.tsv"}
    # each task's model folder carries its card: the task's medians, read back by the Hub's code
    card = ModelCard.load(glue_workdir / "models" / "glue" / "CoLA" / "README.md")
    assert card.data.pipeline_tag == "text-classification"
    assert {r.metric_name: r.metric_value for r in card.data.eval_results}[
        f"cola matthews (dev, median of {SEEDS} seeds, x100)"] == pytest.approx(
        metrics["cola"]["matthews"], abs=1e-6)
    assert (glue_workdir / "metrics" / "glue_seeds.png").read_bytes().startswith(b"\x89PNG")
    submission = predictions / "submission"
    assert {p.name for p in submission.iterdir()} == {
        "CoLA.tsv", "MRPC.tsv", "STS-B.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"}
    rows = read_tsv(submission / "MNLI-m.tsv")
    assert len(rows) == 8 and set(rows[0]) == {"index", "prediction"}
    assert {r["prediction"] for r in rows} <= {"entailment", "neutral", "contradiction"}

    # STS-B's median model: transformers loads a regression head that gives the values written
    folder = glue_workdir / "models" / "glue" / "STS-B"
    model = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    assert model.config.problem_type == "regression"
    tokenizer = transformers.BertTokenizerFast.from_pretrained(folder)
    stsb = read_tsv(predictions / "stsb_dev.tsv")
    inputs = tokenizer([r["text"] for r in stsb], [r["pair"] for r in stsb], padding=True,
                       truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        values = model(**inputs).logits[:, 0].tolist()
    assert values == pytest.approx([float(r["prediction"]) for r in stsb], abs=1e-3)
    # the tiny model's values differ only below the 3 decimals written: no correlation
    assert len({r["prediction"] for r in stsb}) == 1
    assert details["tasks"]["stsb"]["score"]["values"] == [0.0] * SEEDS
    assert "stsb: pearsonr of constant predictions" in proc.stderr

    # the seeds differ, and the model written is the median seed's (its predictions score it)
    mrpc = read_tsv(predictions / "mrpc_dev.tsv")
    model = transformers.BertForSequenceClassification.from_pretrained(
        glue_workdir / "models" / "glue" / "MRPC").eval()
    inputs = tokenizer([r["text"] for r in mrpc], [r["pair"] for r in mrpc], padding=True,
                       truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        labels = [model.config.id2label[i] for i in model(**inputs).logits.argmax(-1).tolist()]
    assert labels == [r["prediction"] for r in mrpc]
    golds = [r["gold"] for r in mrpc]
    score = 50 * (f1_score(golds, labels, pos_label="1") + accuracy_score(golds, labels))
    seed_scores = details["tasks"]["mrpc"]["score"]["values"]
    assert len(set(seed_scores)) > 1
    assert score == pytest.approx(statistics.median(seed_scores))

    # MLflow: the suite under the pretraining run, every fine-tune nested under the suite
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(glue_workdir / "mlflow.db"))
    parent_id = (glue_workdir / "parent_run_id").read_text()
    experiment = client.get_run(parent_id).info.experiment_id
    suites = client.search_runs([experiment],
                                filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    assert len(suites) == 1 and suites[0].info.run_name.startswith("glue-")
    suite = suites[0]
    assert suite.data.metrics["score"] == pytest.approx(metrics["score"])
    nested = client.search_runs(
        [experiment], filter_string=f"tags.mlflow.parentRunId = '{suite.info.run_id}'")
    assert len(nested) == len(TASKS) * SEEDS
    assert {r.info.status for r in nested} == {"FINISHED"}
    by_name = {r.info.run_name: r for r in nested}
    cola_runs = [by_name[f"cola-lr0.003-bs4-seed{seed}"] for seed in (42, 43, 44)]
    assert sorted(100 * r.data.metrics["score"] for r in cola_runs) == pytest.approx(
        sorted(details["tasks"]["cola"]["score"]["values"]))
    assert client.get_run(parent_id).data.metrics["glue_score"] == pytest.approx(
        metrics["score"])


@pytest.mark.slow
def test_a_task_that_fails_keeps_the_scores_of_the_others(glue_workdir, tmp_path):
    folder = write_glue_folder(tmp_path / "glue", tasks=["sst2", "rte"], rows=6)
    dev = folder / "RTE" / "dev.tsv"
    lines = dev.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\tmaybe"
    dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "glue.json"
    proc = run_bert("glue", "--set", f"glue.data={folder}", "--set", "glue.seeds=1",
                    "--set", "tracking.enabled=false", "--metrics", str(out),
                    "--seeds", str(tmp_path / "seeds.tsv"),
                    "--predictions", str(tmp_path / "predictions"),
                    "--out", str(tmp_path / "models"), cwd=glue_workdir)
    assert_one_line_error(proc, "1 task(s) left out", "dev.tsv:4", "maybe")
    metrics = json.loads(out.read_text())["glue"]
    assert list(metrics) == ["score", "sst2"]
    details = json.loads((tmp_path / "glue_details.json").read_text())
    assert "dev.tsv:4" in details["failed"]["rte"] and details["averaged"] == ["sst2"]


def test_a_task_the_tokenizer_reads_as_unk_stops_before_any_training(glue_workdir, tmp_path):
    """SST-2 in Greek for a vocabulary of Latin letters: every word is [UNK], and the model
    would be scored on guesses from nothing."""
    folder = write_glue_folder(tmp_path / "glue", tasks=["sst2", "rte"], rows=6)
    train = folder / "SST-2" / "train.tsv"
    header, *rows = train.read_text(encoding="utf-8").splitlines()
    greek = [f"ένα κείμενο {i} εδώ\t{row.rsplit(chr(9), 1)[1]}" for i, row in enumerate(rows)]
    train.write_text("\n".join([header, *greek]) + "\n", encoding="utf-8")
    out = tmp_path / "glue.json"
    proc = run_bert("glue", "--set", f"glue.data={folder}", "--set", "tracking.enabled=false",
                    "--metrics", str(out), "--seeds", str(tmp_path / "seeds.tsv"),
                    "--predictions", str(tmp_path / "predictions"),
                    "--out", str(tmp_path / "models"), cwd=glue_workdir)
    # 3 words [UNK] and a digit, known, per row
    assert_one_line_error(proc, "the tokenizer in data/vocab reads 18 of the 24 tokens of "
                          f"{train} (its first 6 rows) as [UNK] (75%)", "trained with")
    assert not out.exists() and not (tmp_path / "models").exists()


def test_a_model_folder_whose_tokenizer_has_5_tokens_is_refused(glue_workdir, tmp_path):
    """glue.model saved with transformers 5's BertTokenizerFast(vocab_file=...), which ignores
    the file: 5 tokens, every word [UNK]; refused before anything is read or trained."""
    model = tmp_path / "bert"
    export_hf(load_model(glue_workdir / "models" / "pretrained"), model)
    vocab = glue_workdir / "data" / "vocab" / "vocab.txt"
    transformers.BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(model)
    out = tmp_path / "glue.json"
    proc = run_bert("glue", "--set", f"glue.data={write_glue_folder(tmp_path / 'glue', ['rte'])}",
                    "--set", f"glue.model={model}", "--set", "tracking.enabled=false",
                    "--metrics", str(out), cwd=glue_workdir)
    size = len(read_vocab(glue_workdir / "data" / "vocab"))
    assert_one_line_error(proc, f"the tokenizer in {model} has 5 tokens, its model {size}: "
                          "it does not cover")
    assert not out.exists()


def test_without_glue_data_it_says_so_and_writes_empty_outputs(tmp_path):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = run_bert("glue", cwd=tmp_path, check=True)
    assert "no GLUE data (glue.data is null)" in proc.stderr
    assert json.loads((tmp_path / "metrics" / "glue.json").read_text()) == {"glue": {
        "score": None, "status": "no GLUE data (glue.data is null)"}}
    assert (tmp_path / "metrics" / "glue_seeds.tsv").read_text() == "task\tseed\tscore\n"
    items = read_items(tmp_path / "metrics" / "glue_items.json")  # valid, and empty
    assert (items.stage, items.sets, items.figures) == ("glue", {}, {})
    assert not any((tmp_path / "metrics" / "glue").iterdir())
    assert not any((tmp_path / "models" / "glue").iterdir())


def test_bad_glue_params_in_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = run_bert("glue", "--set", "glue.tasks=[cola, sts]", cwd=tmp_path)
    assert_one_line_error(proc, "glue.tasks", "cola, sst2")
    proc = run_bert("glue", "--set", f"glue.data={tmp_path / 'nowhere'}", cwd=tmp_path)
    assert_one_line_error(proc, "nowhere")


@pytest.mark.slow
def test_dvc_exp_show_has_the_glue_score_and_the_task_medians(glue_workdir, tmp_path):
    """A DVC project of the glue stage alone: `dvc exp show` has its columns."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("models", "data", "glue_data"):
        (repo / name).symlink_to(glue_workdir / name)
    params = yaml.safe_load((glue_workdir / "params.yaml").read_text())
    params["glue"].update(seeds=1, tasks=["cola", "stsb"])
    params["tracking"] = {"enabled": False}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    stage = {"cmd": f"{sys.executable} -m bertstages glue", "deps": ["glue_data"],
             "params": ["glue"], "metrics": [{"metrics/glue.json": {"cache": False}}]}
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"glue": stage}}))
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO)}

    def run(*command: str) -> str:
        done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    dvc = str(Path(sys.executable).with_name("dvc"))
    run("git", "init", "-q")
    run(dvc, "init", "-q")
    run(dvc, "repro", "-q")
    run("git", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "glue")
    shown = run(dvc, "exp", "show", "--no-pager", "--csv")
    header, workspace = list(csv.reader(shown.splitlines()))[:2]
    glue = json.loads((repo / "metrics" / "glue.json").read_text())["glue"]
    columns = dict(zip(header, workspace, strict=True))
    for column, value in (("glue.score", glue["score"]),
                          ("glue.cola.matthews", glue["cola"]["matthews"]),
                          ("glue.stsb.score", glue["stsb"]["score"]),
                          ("glue.stsb.pearson", glue["stsb"]["pearson"])):
        assert float(columns[column]) == pytest.approx(value, rel=1e-4), (column, columns)


def test_the_grid_keeps_the_recipe_of_the_best_median_on_dev(monkeypatch, tmp_path):
    """Turc et al.'s grid: 4 learning rates x 5 batch sizes, 4 epochs, each with every seed;
    the point whose median (not best seed) is highest is the task's, and only its median
    seed keeps its model on disk."""
    from bertcore.common.null_tracker import NullTracker
    from bertcore.downstream import glue
    from bertcore.downstream.glue import suite
    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.fine_tunes import FineTuned
    from bertcore.downstream.glue.records import FinishedRuns

    config = GlueConfig(grid=True, seeds=3)
    recipes = config.recipes(hidden_size=128)
    assert len(recipes) == 20 and {r.epochs for r in recipes} == {4.0}
    assert {(r.learning_rate, r.batch_size) for r in recipes} == {
        (lr, bs) for lr in (3e-4, 1e-4, 5e-5, 3e-5) for bs in (8, 16, 32, 64, 128)}

    def score(recipe) -> float:  # batch 16 at 1e-4 has the best median, 8 at 3e-4 the best seed
        if (recipe.learning_rate, recipe.batch_size) == (3e-4, 8):
            return [0.9, 0.1, 0.1][recipe.seed - config.seed]
        best = (recipe.learning_rate, recipe.batch_size) == (1e-4, 16)
        return (0.6 if best else 0.5) + 0.01 * (recipe.seed - config.seed)

    def fine_tune_job(job):
        run = suite.SeedRun(job.recipe, {"dev": {"accuracy": score(job.recipe)}},
                            score(job.recipe), 1, 0, {})
        return FineTuned(FinishedRuns(job.runs_dir).save(job.name, run,
                                                         lambda folder: folder.mkdir()))

    monkeypatch.setattr(suite, "fine_tune_job", fine_tune_job)
    tokenizer = type("Tokenizer", (), {"to_str": lambda self: "{}",
                                       "token_to_id": lambda self, token: 0})()
    model = suite.GlueModel(type("Encoder", (), {"config": tiny_config(50)})(), tokenizer,
                            Path(), "tiny", "0" * 64)
    data = suite.TaskData(glue.tasks.GLUE_TASKS["rte"], [], {"dev": []}, {}, {})
    finished = FinishedRuns(tmp_path)
    result = suite.run_task(data, suite.Suite(model, config, torch.device("cpu"),
                                              lambda name, params: NullTracker(), finished))
    assert [p.parent.name for p in tmp_path.glob("*/model")] == [result.median_run().folder.name]
    assert result.median_run().recipe.seed == 43 and len(list(tmp_path.iterdir())) == 60
    chosen = result.runs[0].recipe
    assert (chosen.learning_rate, chosen.batch_size) == (1e-4, 16)
    assert [run.recipe.seed for run in result.runs] == [42, 43, 44]
    assert result.spread().median == pytest.approx(0.61)
    assert len(result.tried) == 20
    assert dict(((r.learning_rate, r.batch_size), m) for r, m in result.tried)[(3e-4, 8)] == 0.1


# ---------------------------------------------------------- resume, and failed runs
def glue_args(out: Path, *settings: str) -> list[str]:
    """`bert glue` writing every output (and its finished fine-tunes) under `out`."""
    return ["glue", "--set", "tracking.enabled=false",
            *[arg for setting in settings for arg in ("--set", setting)],
            "--metrics", str(out / "glue.json"), "--seeds", str(out / "seeds.tsv"),
            "--predictions", str(out / "predictions"), "--out", str(out / "models"),
            "--runs", str(out / "runs")]


def output_digests(out: Path) -> dict[str, str]:
    """sha256 of every file of the stage's outputs under `out` (not its finished runs); of a
    model card, of its text with `out` (which its loading snippet names) as OUT."""
    return {str(path.relative_to(out)): (
        hashlib.sha256(path.read_text().replace(str(out), "OUT").encode()).hexdigest()
        if path.name == "README.md" else file_sha256(path))
        for path in sorted(out.rglob("*"))
        if path.is_file() and "runs" not in path.relative_to(out).parts}


@pytest.mark.slow
def test_each_median_has_its_interval_over_seeds_and_dev_examples(glue_workdir, tmp_path):
    """glue_items.json holds every seed's prediction of every dev example: each figure of
    glue.json again from it, with the 95% interval beside it; the same bytes when every
    fine-tune is reused from its record."""
    args = glue_args(tmp_path, "glue.tasks=[cola, mrpc, stsb, mnli]", "glue.seeds=2")
    proc = run_bert(*args, cwd=glue_workdir, check=True)
    metrics = json.loads((tmp_path / "glue.json").read_text())["glue"]
    details = json.loads((tmp_path / "glue_details.json").read_text())
    items = read_items(tmp_path / "glue_items.json")
    assert set(items.figures) == {
        "cola.matthews", "cola.score", "mrpc.f1", "mrpc.accuracy", "stsb.pearson",
        "stsb.spearman", "mnli.mnli_m_accuracy", "mnli.mnli_mm_accuracy"}
    assert set(items.sets) == {"cola_dev", "mrpc_dev", "stsb_dev", "mnli_mnli_m",
                               "mnli_mnli_mm"}
    for name, figure in items.figures.items():
        task, column = name.split(".")
        spread = details["tasks"][task][column if column == "score" else "metrics"]
        spread = spread if column == "score" else spread[column]
        found = figure.estimate()
        # the figure from the items is the median over seeds of the official metric, x100
        assert found.value == pytest.approx(spread["median"], abs=1e-4), name
        assert figure.run_labels == ("42", "43") and figure.runs.shape == (1, 2, 8)
        assert metrics[task][column] == round(spread["median"], found.decimals)
        assert metrics[task][f"{column}_ci95"] == found.interval()
        assert found.contains(found.value), name
        assert details["intervals"][name].startswith(found.text())
    assert "mrpc.score_ci95" not in flatten(metrics) and "score_ci95" not in metrics
    assert details["intervals"]["mrpc.score"].startswith("none drawn")
    cola = items.estimates()["cola.score"]
    assert f"glue cola: {cola.text()} (95% interval over seeds and dev examples;" in proc.stderr

    before = (tmp_path / "glue_items.json").read_bytes()
    again = run_bert(*args, cwd=glue_workdir, check=True)
    assert "glue: mnli: 2 of 2 fine-tunes reused" in again.stderr
    assert (tmp_path / "glue_items.json").read_bytes() == before


def test_a_max_seq_length_beyond_the_models_positions_is_refused_before_training(
        glue_workdir, tmp_path):
    proc = run_bert(*glue_args(tmp_path, "glue.max_seq_length=65"), cwd=glue_workdir)
    assert_one_line_error(proc, "glue.max_seq_length=65", "max_position_embeddings=64")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "glue.json").exists()


@pytest.mark.slow
def test_a_suite_killed_midway_resumes_without_redoing_finished_fine_tunes(glue_workdir,
                                                                           tmp_path):
    args = glue_args(tmp_path / "resumed", "glue.tasks=[cola, mrpc]")
    proc, _ = start_bert_paused(*args, at="bertcore.downstream.glue.suite:log_fine_tune",
                                signum=signal.SIGKILL, cwd=glue_workdir, nth=4)
    proc.kill()  # as the OOM killer: after cola's 3 seeds and mrpc's first
    proc.communicate(timeout=60)
    runs = tmp_path / "resumed" / "runs"
    finished = {path: path.stat().st_mtime_ns for path in runs.glob("*/record.json")}
    assert len(finished) == 4 and not (tmp_path / "resumed" / "glue.json").exists()

    proc = run_bert(*args, cwd=glue_workdir, check=True)
    assert "glue: cola: 3 of 3 fine-tunes reused from" in proc.stderr
    assert "glue: mrpc: 1 of 3 fine-tunes reused from" in proc.stderr
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in finished.items())
    # only the median seed of each task keeps its model on disk
    assert len(list(runs.glob("*/record.json"))) == 6 and len(list(runs.glob("*/model"))) == 2

    fresh = run_bert(*glue_args(tmp_path / "fresh", "glue.tasks=[cola, mrpc]"),
                     cwd=glue_workdir, check=True)
    assert "reused" not in fresh.stderr
    resumed = output_digests(tmp_path / "resumed")
    assert resumed == output_digests(tmp_path / "fresh")  # the same bytes, models included
    assert "models/CoLA/model.safetensors" in resumed and "predictions/mrpc_dev.tsv" in resumed
    assert "glue_items.json" in resumed  # every seed's dev predictions, reused or not


def test_a_suite_stopped_midway_says_its_finished_fine_tunes_stay(glue_workdir, tmp_path):
    """SIGTERM after two fine-tunes: no output written, and the line says so of the outputs
    only; the two fine-tunes saved stay, which a rerun reuses."""
    args = glue_args(tmp_path / "out", "glue.tasks=[cola]")
    proc = run_bert_interrupted(*args, at="bertcore.downstream.glue.suite:log_fine_tune",
                                signum=signal.SIGTERM, cwd=glue_workdir, nth=2)
    runs = tmp_path / "out" / "runs"
    assert len(list(runs.glob("*/record.json"))) == 2
    assert_one_line_error(proc, f"interrupted by SIGTERM: no output was written; 2 finished "
                                f"fine-tunes stay in {runs}: `bert glue` run again reuses the "
                                "ones of this model, data and recipe",
                          code=128 + signal.SIGTERM)
    assert not (tmp_path / "out" / "glue.json").exists()


@pytest.mark.slow  # its workers' start: ~15 s on 2 loaded cores
def test_a_pool_stopped_midway_keeps_what_its_workers_finished(glue_workdir, tmp_path):
    """SIGTERM once the suite took its first fine-tune, two workers fine-tuning: no output
    is written, and the line names the fine-tunes saved by then (whichever worker finished
    them), which a rerun reuses. (The workers end at once: tests/stages/test_worker_faults.py;
    the bytes of a pool are those of one process: tests/unit/downstream/glue.)"""
    args = glue_args(tmp_path / "out", "glue.tasks=[cola]", "glue.workers=2")
    proc = run_bert_interrupted(*args, at="bertcore.downstream.glue.suite:log_fine_tune",
                                signum=signal.SIGTERM, cwd=glue_workdir, nth=1)
    runs = tmp_path / "out" / "runs"
    # (a worker ended while it saved leaves its staging folder, `.NAME.tmp-...`: not counted)
    saved = len([p for p in runs.glob("*/record.json") if not p.parent.name.startswith(".")])
    assert 1 <= saved <= SEEDS and not (tmp_path / "out" / "glue.json").exists()
    stay = f"{saved} finished fine-tune{'s stay' if saved > 1 else ' stays'} in {runs}"
    assert_one_line_error(proc, f"interrupted by SIGTERM: no output was written; {stay}: "
                                "`bert glue` run again reuses the ones of this model, data "
                                "and recipe", code=128 + signal.SIGTERM)

    again = run_bert(*args[:-6], "--set", "glue.workers=1", *args[-6:], cwd=glue_workdir,
                     check=True)
    assert f"glue: cola: {saved} of {SEEDS} fine-tunes reused from" in again.stderr
    assert (tmp_path / "out" / "glue.json").is_file()


@pytest.mark.slow
def test_a_failed_run_leaves_the_last_good_runs_outputs_as_they_were(glue_workdir, tmp_path):
    out = tmp_path / "out"
    run_bert(*glue_args(out, "glue.tasks=[cola, mrpc]", "glue.seeds=1"), cwd=glue_workdir,
             check=True)
    before = output_digests(out)
    assert "models/MRPC/model.safetensors" in before and "predictions/cola_dev.tsv" in before

    # every task left out: RTE labelled 0/1
    folder = write_glue_folder(tmp_path / "glue", tasks=["rte"], rows=6)
    for name in ("train.tsv", "dev.tsv"):
        path = folder / "RTE" / name
        path.write_text(path.read_text(encoding="utf-8").replace("\tnot_entailment\n", "\t1\n")
                        .replace("\tentailment\n", "\t0\n"), encoding="utf-8")
    proc = run_bert(*glue_args(out, f"glue.data={folder}", "glue.seeds=1"), cwd=glue_workdir)
    assert output_digests(out) == before
    assert_one_line_error(proc, "glue: every task left out", "label '0'",
                          "the outputs of the last run are as they were")

    # a task that diverges (no weight decay: with it, such a rate is refused before training)
    proc = run_bert(*glue_args(out, "glue.tasks=[cola, mrpc]", "glue.seeds=1",
                               "glue.learning_rate=1e10", "glue.weight_decay=0"),
                    cwd=glue_workdir)
    assert output_digests(out) == before
    assert_one_line_error(proc, "glue: cola diverged with seed 42", "lower glue.learning_rate",
                          "No output was written")


def test_no_fine_tuned_model_or_gradient_outlives_its_fine_tune(glue_workdir, tmp_path,
                                                                 monkeypatch):
    """Memory: a suite holds one fine-tune at a time; each model is on disk once it ends."""
    import gc

    from bertcore.common.null_tracker import NullTracker
    from bertcore.downstream.glue import fine_tunes, inputs, suite
    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.records import FinishedRuns
    from bertcore.downstream.glue.tasks import GLUE_TASKS

    trained = []
    original = fine_tunes.train_classifier

    def train_classifier(model, *args, **kwargs):
        trained.append(model)  # the test's own reference: its gradients must be gone
        return original(model, *args, **kwargs)

    monkeypatch.setattr(fine_tunes, "train_classifier", train_classifier)
    config = GlueConfig(data=str(glue_workdir / "glue_data"), tasks=["cola", "mrpc"], seeds=2,
                        batch_size=4, max_steps=2, max_seq_length=32)
    model = inputs.glue_model(config, str(glue_workdir / "models" / "pretrained"),
                             str(glue_workdir / "data" / "vocab"))
    results = suite.run_glue([GLUE_TASKS["cola"], GLUE_TASKS["mrpc"]], suite.Suite(
        model, config, torch.device("cpu"), lambda name, params: NullTracker(),
        FinishedRuns(tmp_path)))
    assert len(trained) == 4 and all(p.grad is None for m in trained for p in m.parameters())
    trained.clear()
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is BertForSequenceClassification]
    medians = [result.median_run().model_dir for result in results]
    assert all((folder / WEIGHTS_NAME).is_file() for folder in medians)


bert = run_bert


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA GPU")
def test_glue_device_cuda_without_a_gpu_names_glue_device(tmp_path):
    write_glue_folder(tmp_path / "glue", tasks=["rte"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"glue": {
        "data": "glue", "device": "cuda"}, "tracking": {"enabled": False}}))
    proc = bert("glue", cwd=tmp_path)
    assert_one_line_error(proc, "glue.device is cuda but no CUDA GPU is available: use auto or "
                                "cpu", code=1)
    assert "train.device" not in proc.stderr
