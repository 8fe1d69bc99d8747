"""`bert compare` as a user runs it, on outcomes files written here: folders, a git
repository's revisions and a DVC experiment's ref, an MLflow run, and the comparison logged
into MLflow and read back through its client."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.bert import assert_one_line_error, run_bert

from bertcore.common.outcomes import ItemSet, StageItems, one_run, write_items
from bertcore.common.tracking import sqlite_uri

N, K = 300, 30  # items, and the items B gets right that A got wrong


def eval_outcomes(x: np.ndarray, digest: str = "val-items") -> StageItems:
    return StageItems("eval", {"val": ItemSet(digest, len(x), "val pair, masks of eval.seed")},
                      {"nsp_accuracy": one_run("mean", "val", x=x),
                       "mlm_accuracy": one_run("ratio", "val", num=x * 3 + 2,
                                               den=np.full(len(x), 8))})


def a_and_b() -> tuple[np.ndarray, np.ndarray]:
    x = (np.random.default_rng(0).random(N) < 0.6).astype(int)
    y = x.copy()
    y[np.flatnonzero(x == 0)[:K]] = 1
    return x, y


def write_run(folder: Path, x: np.ndarray, digest: str = "val-items", seed: int = 42) -> Path:
    write_items(folder / "metrics" / "eval_items.json", eval_outcomes(x, digest))
    (folder / "params.yaml").write_text(f"train:\n  seed: {seed}\n", encoding="utf-8")
    return folder


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def nsp(data: dict) -> dict:
    return next(f for f in data["figures"] if f["figure"] == "nsp_accuracy")


def test_two_folders_a_planted_shift_in_the_table_markdown_and_json(tmp_path):
    x, y = a_and_b()
    write_run(tmp_path / "a", x), write_run(tmp_path / "b", y)
    proc = run_bert("compare", "a", "b/metrics", "--json", "out.json", "--markdown", "out.md",
                    cwd=tmp_path, check=True)
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 120 for line in lines), proc.stdout
    assert "eval · val: 1 × 300 paired (seeds × items)" in lines
    shown = next(line for line in lines if line.strip().startswith("nsp_accuracy"))
    assert shown.split()[-2:] == ["B", "better"] and f"+{K / N:.3f}" in shown
    data = json.loads((tmp_path / "out.json").read_text())
    figure = nsp(data)
    assert figure["differences"]["B"]["value"] == pytest.approx(K / N, abs=1e-12)
    assert figure["differences"]["B"]["verdict"] == "B better"
    assert figure["differences"]["B"]["paired"] is True
    assert figure["sides"]["A"]["digest"] == "val-items"
    assert [s["sources"][0]["resolved"] for s in data["sides"]] == [
        str(tmp_path / "a" / "metrics"), str(tmp_path / "b" / "metrics")]
    assert [s["seeds"] for s in data["sides"]] == [[42], [42]]
    assert "| eval.nsp_accuracy |" in (tmp_path / "out.md").read_text()


def test_other_items_compared_unpaired_in_one_line_or_refused(tmp_path):
    x, y = a_and_b()
    write_run(tmp_path / "a", x), write_run(tmp_path / "b", y, digest="another-vocab")
    proc = run_bert("compare", "a", "b", cwd=tmp_path, check=True)
    said = [line for line in proc.stdout.splitlines() if "items differ" in line]
    assert len(said) == 1 and said[0].endswith("compared unpaired"), proc.stdout
    assert "1 × 300 unpaired" in proc.stdout
    refused = run_bert("compare", "a", "b", "--paired-only", cwd=tmp_path)
    assert_one_line_error(refused, "eval val: b's items differ from a's", "--paired-only")
    unknown = run_bert("compare", "a", "nowhere", cwd=tmp_path)
    assert_one_line_error(unknown, "'nowhere' is no folder holding *_items.json",
                          "no DVC experiment or git revision")


def test_git_revisions_and_a_dvc_experiments_ref(tmp_path):
    x, y = a_and_b()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for outcomes, message in ((x, "before"), (y, "recipe")):
        write_run(repo, outcomes)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message)
    before, recipe = git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")
    # what `dvc exp run -n recipe-s1` leaves: refs/exps/<baseline[:2]>/<baseline[2:]>/<name>
    git(repo, "update-ref", f"refs/exps/{before[:2]}/{before[2:]}/recipe-s1", recipe)
    proc = run_bert("compare", "HEAD~1", "recipe-s1", "--json", str(tmp_path / "out.json"),
                    cwd=repo, check=True)
    data = json.loads((tmp_path / "out.json").read_text())
    assert [s["sources"][0]["resolved"] for s in data["sides"]] == [before, recipe]
    assert [s["sources"][0]["kind"] for s in data["sides"]] == ["git", "git"]
    assert nsp(data)["differences"]["B"]["value"] == pytest.approx(K / N, abs=1e-12)
    assert nsp(data)["differences"]["B"]["verdict"] == "B better"
    assert f"A = HEAD~1 (git {before[:8]})" in proc.stdout


def test_an_mlflow_run_against_a_folder_and_the_comparison_logged(tmp_path):
    from mlflow.tracking import MlflowClient

    x, y = a_and_b()
    write_run(tmp_path / "before", x)
    recipe = write_run(tmp_path / "recipe", y)
    uri = sqlite_uri(tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("bert-pretrain",
                                          (tmp_path / "mlartifacts").resolve().as_uri())
    run = client.create_run(experiment)
    client.log_param(run.info.run_id, "train.seed", "42")
    client.log_artifacts(run.info.run_id, str(recipe / "metrics"), "metrics")
    client.set_terminated(run.info.run_id)
    proc = run_bert("compare", "before", f"mlflow:{run.info.run_id}", "--mlflow",
                    "--tracking-uri", uri, cwd=tmp_path, check=True)
    assert "nsp_accuracy" in proc.stdout and "B better" in proc.stdout
    logged = client.search_runs([client.get_experiment_by_name("bert-compare").experiment_id])
    assert len(logged) == 1
    data = logged[0].data
    assert data.tags["compare.B.sources"] == f"mlflow:{run.info.run_id}"
    assert data.tags["compare.A.sources"] == f"folder:{tmp_path / 'before' / 'metrics'}"
    assert data.tags["compare.A.seeds"] == data.tags["compare.B.seeds"] == "42"
    assert data.metrics["B-A.eval.nsp_accuracy"] == pytest.approx(K / N, abs=1e-12)
    assert (data.metrics["B-A.eval.nsp_accuracy_ci95_low"] > 0
            and data.metrics["B-A.eval.nsp_accuracy_ci95_high"] > K / N)
    files = {f.path for f in client.list_artifacts(logged[0].info.run_id, "compare")}
    assert files == {"compare/comparison.md", "compare/comparison.json"}
    saved = json.loads(Path(client.download_artifacts(
        logged[0].info.run_id, "compare/comparison.json", str(tmp_path))).read_text())
    assert saved["sides"][1]["sources"][0]["resolved"] == run.info.run_id
