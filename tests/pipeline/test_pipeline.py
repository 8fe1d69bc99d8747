"""End to end: the repo's dvc.yaml in a fresh git + DVC repo with tiny params. `dvc repro`
runs corpus → vocab → samples → pretrain → evaluate → export, finetune, prune; `dvc exp run
-S ...` makes a second MLflow run; both runs (and the finetune/prune child runs of each) are read
back with MlflowClient; `dvc metrics show` and `dvc plots show` work. What a user comparing
the two runs sees: `dvc exp show` holds the headline metrics, each once, and no statistics;
MLflow's metrics are curves and results, never counts or baselines."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import preloaded
from helpers.bert import ONE_THREAD, REPO
from helpers.tiny_pretrain import TINY_MODEL, write_corpus

VENV_BIN = Path(sys.executable).parent
DVC = shutil.which("dvc", path=str(VENV_BIN)) or shutil.which("dvc")

pytestmark = [pytest.mark.skipif(DVC is None, reason="dvc is not installed"), pytest.mark.slow]


def tiny_pipeline_params() -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["corpus"].update(source="corpus.txt", format="lines", val_fraction=0.2)
    params["vocab"].update(vocab_size=96, min_frequency=1)
    params["samples"].update(max_seq_length=32, dupe_factor=2, workers=1)
    params["model"] = dict(TINY_MODEL)
    params["masking"]["max_predictions_per_seq"] = 5
    params["train"].update(max_steps=6, batch_size=8, learning_rate=0.003, warmup_steps=2,
                           log_every=2, eval_every=3, checkpoint_every=3)
    params["eval"].update(batch_size=16, probe_sentences=30)  # 100 by default
    params["tracking"].update(uri=None, experiment="e2e", log_checkpoints="last")
    # two fine-tune seeds: the median, spread and interval over seeds, at 2/3 of the default's cost
    params["finetune"].update(learning_rate=1e-3, epochs=1, max_seq_length=32, seeds=2)
    params["prune"].update(batches=2, batch_size=8, recovery_steps=2, throughput_steps=1)
    # One process each (the outputs do not depend on it): no torchrun and no pool starting
    # interpreters that import torch again. The experiment of the MLflow test pretrains with
    # the default (auto: one process a core, under torchrun).
    params["corpus"]["workers"] = 1
    params["train"]["nproc_per_node"] = 1
    params["finetune"]["workers"] = 1
    return params


def run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def new_repo(tmp_path: Path, name: str = "repo") -> tuple[Path, dict]:
    """A fresh git + DVC repo holding the pipeline (code, dvc.yaml, tiny params with no recipe,
    the recipe files, a corpus);
    returns it with the environment its commands run in."""
    repo = tmp_path / name
    repo.mkdir()
    for folder in ("bertcore", "bertstages", "params"):  # params: the recipes dvc.yaml lists
        shutil.copytree(REPO / folder, repo / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", repo / "dvc.yaml")
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_pipeline_params(), sort_keys=False))
    write_corpus(tmp_path / f"{name}-corpus", train_docs=60, val_docs=15)
    texts = [(tmp_path / f"{name}-corpus" / split).read_text() for split in ("train.txt",
                                                                              "val.txt")]
    (repo / "corpus.txt").write_text("\n".join(texts))
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(repo),
        **ONE_THREAD,
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
        "DVC_NO_ANALYTICS": "1",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    run(["git", "init", "-q", "-b", "main"], repo, env)
    run([DVC, "init", "-q"], repo, env)
    shutil.copy(REPO / ".dvc" / "config", repo / ".dvc" / "config")  # cache.type: links
    shutil.copytree(REPO / ".dvc" / "plots", repo / ".dvc" / "plots")  # dvc.yaml's templates
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "pipeline"], repo, env)
    return repo, env


def lock_outs(repo: Path) -> dict[str, str]:
    """The md5 of every output dvc.lock records, by path."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {out["path"]: out["md5"] for stage in lock["stages"].values()
            for out in stage.get("outs", [])}


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory) -> tuple[Path, dict, dict[str, str]]:
    """A fresh repo after its first `dvc repro` (MLflow on), its environment, and its lock's
    output hashes taken right then. A full repro takes minutes, so it is made once: the bytes
    test reads only those hashes, the MLflow test (the one that goes on in the repo) the rest.
    Its stages' `bert` are forked from a preloaded interpreter (helpers/preloaded.py), sharing
    its string hash seed; `reproduced_again`'s from one started with another seed, so output
    that depends on the seed differs between the two."""
    repo, env = new_repo(tmp_path_factory.mktemp("pipeline"))
    env = preloaded.dvc_env(env)
    run([DVC, "repro"], repo, env)
    return repo, env, lock_outs(repo)


@pytest.fixture(scope="module")
def reproduced_again(tmp_path_factory, _empty_mlflow_store) -> tuple[Path, dict, dict[str, str]]:
    """A second fresh repo after its own first `dvc repro`, as `reproduced` but forked from an
    interpreter of another string hash seed: the bytes test compares the two locks; the
    fresh-clone test commits its results and clones it (so that no third repo runs the
    pipeline from scratch), its commands in the environment returned, as a user's: every
    `bert` a process of its own. Its MLflow store starts as a copy of an empty one
    (`reproduced` creates its own): creating one costs seconds of migrations."""
    repo, env = new_repo(tmp_path_factory.mktemp("pipeline-again"), "second")
    shutil.copy(_empty_mlflow_store, repo / "mlflow.db")
    seed = str(random.SystemRandom().randrange(1, 2**32))  # `reproduced`'s is random too
    run([DVC, "repro"], repo, preloaded.dvc_env({**env, "PYTHONHASHSEED": seed}))
    return repo, env, lock_outs(repo)


def test_the_same_params_give_the_same_bytes(reproduced, reproduced_again):
    """Two fresh repos, one pipeline, run from scratch with MLflow on: every output dvc.lock
    records (data, vocabulary, samples, checkpoints, models, metrics, curves) has the same
    hash. Nothing random or timed is written into them: MLflow holds the run ids and speeds."""
    outs = [reproduced[2], reproduced_again[2]]
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert len(outs[0]) == sum(len(stage.get("outs", [])) + len(stage.get("metrics", []))
                               + len(stage.get("plots", [])) for stage in declared.values())
    different = sorted(path for path in outs[0] if outs[0][path] != outs[1][path])
    assert not different, f"outputs that differ between two runs of the same params: {different}"


def test_dvc_repro_then_an_experiment_give_two_mlflow_runs(reproduced):
    repo, env, _ = reproduced  # new_repo, then `dvc repro`
    commit = run(["git", "rev-parse", "HEAD"], repo, env).stdout.strip()

    evaluation = json.loads((repo / "metrics" / "eval.json").read_text())["eval"]
    assert list(evaluation) == [key for name in ("mlm_accuracy", "mlm_loss", "perplexity",
                                                 "nsp_accuracy", "nsp_loss")
                                for key in (name, f"{name}_ci95")]  # each with its interval
    baselines = json.loads((repo / "metrics" / "eval_details.json").read_text())
    assert 0 < baselines["mlm_baseline_accuracy"] < 1 and baselines["sequences"] > 0
    assert (repo / "models" / "hf" / "tokenizer.json").is_file()
    finetune = json.loads((repo / "metrics" / "finetune.json").read_text())["finetune"]
    assert {"pretrained", "scratch", "gain"} <= set(finetune)
    assert (repo / "models" / "finetuned" / "config.json").is_file()
    prune = json.loads((repo / "metrics" / "prune.json").read_text())["prune"]
    assert prune["heads_per_layer"] == {"before": [2], "after": [1]}
    assert (repo / "models" / "pruned" / "config.json").is_file()
    assert (repo / "mlflow.db").is_file()  # at the repo root, not in a stage's folder
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "baseline results"], repo, env)

    # with the default processes (auto: one a core, under torchrun; the baseline ran in one)
    proc = run([DVC, "exp", "run", "-S", "train.learning_rate=0.001", "-S",
                "train.nproc_per_node=auto"], repo, env)
    assert "starting fresh" in proc.stdout + proc.stderr  # the baseline's checkpoints differ

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("e2e")
    everything = client.search_runs([experiment.experiment_id],
                                    order_by=["attributes.start_time"])
    runs = [r for r in everything if "mlflow.parentRunId" not in r.data.tags]
    assert len(runs) == 2
    # finetune and prune log child runs of the pretraining run of the model they started from
    children = sorted((r.data.tags["mlflow.parentRunId"], r.info.run_name) for r in everything
                      if "mlflow.parentRunId" in r.data.tags)
    assert [(parent, name.partition("-")[0]) for parent, name in children] == sorted(
        (r.info.run_id, stage) for r in runs for stage in ("finetune", "prune"))
    # named by what differs: the experiment's runs by its name, the others by their params
    experiment = runs[1].data.tags["DVC_EXP_NAME"]
    assert runs[1].info.run_name == experiment
    assert re.fullmatch(r"tiny-6steps-[0-9a-f]{6}", runs[0].info.run_name)
    names = {name for _, name in children}
    assert {"finetune-" + experiment, "prune-" + experiment} < names and len(names) == 4
    assert [r.data.params["train.learning_rate"] for r in runs] == ["0.003", "0.001"]
    vocab_size = len((repo / "data" / "vocab" / "vocab.txt").read_text().splitlines())
    for r in runs:
        assert r.info.status == "FINISHED"
        assert r.data.params["vocab.vocab_size_actual"] == str(vocab_size)  # data/vocab
        assert r.data.tags["DVC_STAGE"] == "pretrain"
        assert len(r.data.tags["fingerprint.params"]) == 64
        history = client.get_metric_history(r.info.run_id, "train/loss")
        assert [m.step for m in history] == [2, 4, 6]
        assert [m.step for m in client.get_metric_history(r.info.run_id, "val/mlm_loss")] == [
            3, 6]
        assert "eval_mlm_accuracy" in r.data.metrics
        artifacts = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"checkpoints", "plots"} <= artifacts
        assert {a.path for a in client.list_artifacts(r.info.run_id, "plots")} == {
            "plots/pretrain_loss.png", "plots/pretrain_accuracy.png", "plots/pretrain_probes.png"}
    # pretraining: 8 train/ columns, lr, epoch, tokens_per_s_per_process, 5 val/ curves and
    # the 4 of the probes (eval.probe_sentences); prune trains no curve; finetune two per seed
    # (pretrained, scratch)
    seeds = tiny_pipeline_params()["finetune"]["seeds"]
    for r in everything:
        stage = r.info.run_name.partition("-")[0] if "mlflow.parentRunId" in r.data.tags else ""
        curves = {"prune": 0, "finetune": 2 * seeds}.get(stage, 20)
        assert_metrics_are_curves_or_results(client, r, curves)
    # the evaluation's baselines and counts: a JSON artifact, not tags of the run
    assert "eval.mlm_baseline_accuracy" not in runs[1].data.tags
    logged = client.download_artifacts(runs[1].info.run_id, "metrics/eval_details.json",
                                       str(repo.parent / "logged"))
    assert json.loads(Path(logged).read_text())["mlm_baseline_accuracy"] == pytest.approx(
        baselines["mlm_baseline_accuracy"], rel=1e-5)
    assert {a.path for a in client.list_artifacts(runs[1].info.run_id, "metrics")} == {
        "metrics/eval.json", "metrics/eval_details.json", "metrics/eval_items.json",
        "metrics/probe.json", "metrics/probe_details.json", "metrics/probe_items.json"}
    assert runs[0].data.tags["mlflow.source.git.commit"] == commit
    assert runs[0].data.tags["mlflow.source.name"] == "dvc.yaml:pretrain"
    assert_the_models_are_mlflow_models(client, runs[0], everything, commit, repo, env)
    assert_each_model_folder_has_its_card(repo)
    assert runs[1].data.tags.get("DVC_EXP_NAME")
    assert runs[0].data.params["train.learning_rate"] != runs[1].data.params[
        "train.learning_rate"]
    assert not (repo / "mlruns").exists()  # artifacts sit next to mlflow.db

    shown = json.loads(run([DVC, "metrics", "show", "--json"], repo, env).stdout)
    workspace = json.dumps(shown)
    assert "mlm_accuracy" in workspace and "nsp_accuracy" in workspace
    assert_exp_show_is_readable(repo, env)
    assert_plots_have_their_axes_and_images(repo, env)

    assert_stored_once(repo)
    assert_reruns_and_checkout_keep_the_cache(repo, env)

    # A stage sees only its own params: a new vocab_size invalidates vocab, not corpus
    # (samples and what follows rerun through their data deps), and export, whose model card
    # lists the sections that make the model.
    text = (repo / "params.yaml").read_text(encoding="utf-8")
    params = yaml.safe_load(text)
    params["vocab"]["vocab_size"] = 100
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = json.loads(run([DVC, "status", "--json"], repo, env).stdout)
    assert set(status) == {"vocab", "export"}, status
    (repo / "params.yaml").write_text(text, encoding="utf-8")  # for the test after this one


def test_a_bad_value_leaves_the_last_good_outputs_in_place(reproduced):
    """DVC deletes a stage's outputs before it runs its command, but not those marked
    `persist: true`: a stage that then stopped on a bad value left the last good run's
    outputs gone (the cached ones until `dvc checkout`, the `cache: false` metrics for good).
    Every output persists, and its stage replaces it only once the new one is whole: after a
    bad value everything is as it was, `dvc repro` has nothing to do once the value is put
    back, and a good value still reruns the stage and replaces its outputs, linked into the
    cache as before."""
    repo, env, _ = reproduced  # as `dvc repro` left it, or as the test before left it
    assert json.loads(run([DVC, "status", "--json"], repo, env).stdout) == {}
    params, lock = (repo / "params.yaml").read_text(), (repo / "dvc.lock").read_text()
    before = output_files(repo)
    failed = subprocess.run([DVC, "exp", "run", "-S", "train.max_steps=abc"], cwd=repo,
                            env=env, capture_output=True, text=True, timeout=900)
    said = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "Traceback" not in said, said
    assert [line for line in said.splitlines() if line.startswith("Error:")] == [
        "Error: train.max_steps: 'abc' is not allowed; expected a valid integer"], said
    assert output_files(repo) == before  # every stage's, cached and `cache: false`
    assert (repo / "dvc.lock").read_text() == lock
    (repo / "params.yaml").write_text(params)
    proc = run([DVC, "repro"], repo, env)
    assert "Data and pipelines are up to date" in proc.stdout + proc.stderr
    # before the command, DVC copied the stage's linked outputs out of the cache (`dvc
    # unprotect`); they are the same bytes, and linked again by:
    run([DVC, "checkout", "--relink"], repo, env)
    assert_stored_once(repo)

    changed = yaml.safe_load(params)
    changed["train"]["max_steps"] += 2
    changed["train"]["nproc_per_node"] = 1  # the experiment's run extended in one process
    (repo / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    run([DVC, "repro", "--single-item", "pretrain"], repo, env)
    after = output_files(repo)
    replaced = {path for path in after if after[path] != before.get(path)}
    assert {"models/pretrained/model.safetensors", "metrics/pretrain.json",
            "metrics/pretrain_details.json", "metrics/pretrain_log.tsv",
            "metrics/pretrain_eval.tsv"} <= replaced
    pretrain = stage_outputs("pretrain")
    assert all(any(path.startswith(out) for out in pretrain) for path in replaced), replaced
    steps = json.loads((repo / "metrics" / "pretrain.json").read_text())["pretrain"]["steps"]
    assert steps == changed["train"]["max_steps"]
    assert json.loads(run([DVC, "status", "--json"], repo, env).stdout).keys() == {
        "evaluate", "export", "finetune", "prune", "probe", "glue"}  # they read the new model
    assert_stored_once(repo)


def test_a_fresh_clone_s_mlflow_run_holds_the_reports_dvc_skips(reproduced_again, tmp_path):
    """A fresh clone retrains (its checkpoints are not in git), to the same weights, in a new
    MLflow run of its own store; DVC skips evaluate and probe, whose outputs are committed (or
    pulled) and whose deps have the same bytes. The new run holds their results, tags and
    files all the same, once: rerunning evaluate adds no second point."""
    repo, env, _ = reproduced_again  # new_repo, then `dvc repro`; nothing else changes it
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "results"], repo, env)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    run([DVC, "cache", "dir", "--local", str(repo / ".dvc" / "cache")], clone, env)
    # as `dvc pull` would: what DVC caches, not the checkpoints
    run([DVC, "checkout", "--with-deps", "evaluate", "probe"], clone, env)
    proc = run([DVC, "repro", "evaluate", "probe"], clone, env)
    said = proc.stdout + proc.stderr
    assert "Running stage 'pretrain'" in said
    assert "Running stage 'evaluate'" not in said and "Running stage 'probe'" not in said

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{clone / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("e2e").experiment_id
    (pretraining,) = client.search_runs([experiment])
    evaluation = json.loads((clone / "metrics" / "eval.json").read_text())["eval"]
    probe = json.loads((clone / "metrics" / "probe.json").read_text())["probe"]
    results = pretraining.data.metrics
    assert results["eval_mlm_accuracy"] == pytest.approx(evaluation["mlm_accuracy"])
    assert results["probe_builtin_cloze_p_at_1"] == pytest.approx(
        probe["builtin"]["cloze"]["p_at_1"])
    details = json.loads((clone / "metrics" / "eval_details.json").read_text())
    assert "eval.mlm_baseline_accuracy" not in pretraining.data.tags  # in eval_details.json
    assert details["mlm_baseline_accuracy"] > 0
    assert {a.path for a in client.list_artifacts(pretraining.info.run_id, "metrics")} == {
        "metrics/eval.json", "metrics/eval_details.json", "metrics/eval_items.json",
        "metrics/probe.json", "metrics/probe_details.json", "metrics/probe_items.json"}
    assert results["eval_mlm_accuracy_ci95_low"] == evaluation["mlm_accuracy_ci95"][0]

    run([DVC, "repro", "-f", "-s", "evaluate"], clone, env)  # the same report, logged again
    history = client.get_metric_history(pretraining.info.run_id, "eval_mlm_accuracy")
    assert [m.value for m in history] == [results["eval_mlm_accuracy"]]


def stage_outputs(stage: str | None = None) -> list[str]:
    """The paths dvc.yaml declares as outputs (outs, metrics, plots), of `stage` or of all."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return [out if isinstance(out, str) else next(iter(out))
            for name, declared in stages.items() if stage in (None, name)
            for kind in ("outs", "metrics", "plots") for out in declared.get(kind, [])]


def output_files(repo: Path) -> dict[str, str]:
    """The sha256 of every file of every output dvc.yaml declares, by path."""
    found = {}
    for out in stage_outputs():
        path = repo / out
        for file in ([path] if path.is_file() else sorted(path.rglob("*"))):
            if file.is_file():
                found[str(file.relative_to(repo))] = hashlib.sha256(file.read_bytes()).hexdigest()
    return found


def cached_outputs() -> list[str]:
    """The outputs dvc.yaml stores in DVC's cache (not `cache: false`)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return [out if isinstance(out, str) else next(iter(out)) for stage in stages.values()
            for out in stage.get("outs", [])
            if isinstance(out, str) or next(iter(out.values())).get("cache", True)]


def supports_reflinks(folder: Path) -> bool:
    probe = folder / ".reflink-probe"
    probe.write_text("x")
    try:
        done = subprocess.run(["cp", "--reflink=always", probe, f"{probe}.copy"],
                              capture_output=True).returncode == 0
    finally:
        for path in (probe, Path(f"{probe}.copy")):
            path.unlink(missing_ok=True)
    return done


def assert_stored_once(repo: Path) -> None:
    """Each file of a cached output is a link (hard or symbolic) to its object in .dvc/cache
    (the repo's cache.type), so the data is on disk once; and every object there still holds
    the content its name (its md5) says: no stage wrote into a linked output in place."""
    objects = {}
    for obj in (repo / ".dvc" / "cache" / "files" / "md5").rglob("*"):
        if obj.is_file() and not obj.name.endswith(".dir"):
            assert hashlib.md5(obj.read_bytes()).hexdigest() == obj.parent.name + obj.name, obj
            objects[obj.stat().st_ino] = obj
    files = [f for out in cached_outputs() for f in (repo / out).rglob("*") if f.is_file()]
    assert files and "models/pretrained" in cached_outputs()
    if supports_reflinks(repo):
        return  # DVC may have chosen a link whose copies share blocks without sharing inodes
    copies = [str(f.relative_to(repo)) for f in files if f.stat().st_ino not in objects]
    assert not copies, f"outputs stored twice (workspace and cache): {copies}"


def assert_reruns_and_checkout_keep_the_cache(repo: Path, env: dict) -> None:
    """A stage rerun over its linked (read-only) outputs, and back: the same bytes; outputs
    removed from the workspace come back with `dvc checkout`, linked; nothing else to do."""
    assert json.loads(run([DVC, "status", "--json"], repo, env).stdout) == {}
    before = (repo / "dvc.lock").read_text()
    params = (repo / "params.yaml").read_text(encoding="utf-8")
    for dupe_factor in (3, 2):  # 2: tiny_pipeline_params
        changed = yaml.safe_load(params)
        changed["samples"]["dupe_factor"] = dupe_factor
        (repo / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
        run([DVC, "repro", "--single-item", "samples"], repo, env)
        assert ((repo / "dvc.lock").read_text() == before) == (dupe_factor == 2)
    (repo / "params.yaml").write_text(params, encoding="utf-8")
    for out in ("data/samples", "models/hf"):
        shutil.rmtree(repo / out)
    run([DVC, "checkout"], repo, env)
    assert json.loads(run([DVC, "status", "--json"], repo, env).stdout) == {}
    assert_stored_once(repo)


# Names of counts, baselines, settings and timings (as the stages write them): never a
# one-point MLflow metric nor a `dvc exp show` metric column.
STATISTICS = ("baseline", "majority", "predictions", "examples", "truncated", "tokens_seen",
              "skipped", "documents", "characters", "unk_", "seconds", "settings", "importance",
              "requested")
COUNTS = ("count", "tokens", "sequences", "sentences", "words", "lines", "vocab_size")


def is_statistic(name: str) -> bool:
    return (any(word in name for word in STATISTICS)
            or name.replace("/", ".").rsplit(".", 1)[-1] in COUNTS)
METRICS_FILES = ("metrics/pretrain.json", "metrics/eval.json", "metrics/finetune.json",
                 "metrics/prune.json", "metrics/probe.json", "metrics/glue.json")


def assert_metrics_are_curves_or_results(client, run, curves: int) -> None:
    """A metric of a run is a curve (`train/...`, `val/...`, several points) or a final result
    (one point, no '/' in its name, so that `mlflow ui` charts it after the curves); counts and
    baselines are no metrics. `curves`: how many curves the run has."""
    found = []
    for key in run.data.metrics:
        points = client.get_metric_history(run.info.run_id, key)
        if len(points) == 1:
            assert "/" not in key and not is_statistic(key), (run.info.run_name, key)
        else:
            found.append(key)
    assert len(found) == curves, (run.info.run_name, sorted(found))


def assert_exp_show_is_readable(repo: Path, env: dict) -> None:
    """`dvc exp show` compares the headline metrics, each once, and no statistics; the README's
    command narrows it to the param that was varied and the headline."""
    shown = json.loads(run([DVC, "exp", "show", "--json"], repo, env).stdout)
    files = shown[0]["data"]["metrics"]  # the workspace: the experiment just run
    assert sorted(files) == sorted(METRICS_FILES)
    columns = {name: leaves(files[name]["data"]) for name in METRICS_FILES}
    # each file's columns under its stage's name, so that `--keep 'probe\.'` selects them
    for name, file_columns in columns.items():
        group = name.removeprefix("metrics/").removesuffix(".json")
        assert file_columns and all(c.startswith(f"{group}.") for c in file_columns), name
    assert list(columns["metrics/eval.json"]) == ["eval.mlm_accuracy", "eval.mlm_loss",
                                                  "eval.perplexity", "eval.nsp_accuracy",
                                                  "eval.nsp_loss"]
    assert {"pretrain.steps", "pretrain.train.loss"} <= set(columns["metrics/pretrain.json"])
    assert {"finetune.pretrained.accuracy", "finetune.scratch.accuracy",
            "finetune.gain.accuracy"} <= set(columns["metrics/finetune.json"])
    assert {"prune.heads.removed", "prune.val.mlm_accuracy.recovered"} <= set(
        columns["metrics/prune.json"])
    assert {"probe.builtin.cloze.p_at_1", "probe.builtin.swapped_pairs.accuracy"} <= set(
        columns["metrics/probe.json"])
    assert set(columns["metrics/glue.json"]) == {"glue.status"}  # no GLUE data: null, and why
    names = [name for file in columns.values() for name in file]
    # nothing timed: speed is the machine's, and the same params must give the same files
    assert not [name for name in names if "per_s" in name or "speed" in name or "second" in name]
    assert not [name for name in names if is_statistic(name)]
    assert len(names) == len(set(names))  # no column needs its file's name to be told apart
    # what the evaluation reports is not also in pretrain.json (its own numbers are train's)
    assert not [name for name in columns["metrics/pretrain.json"]
                if name.split(".")[1] not in ("steps", "train")]
    # the statistics and details are plain outputs beside them, out of the table
    for stats in ("corpus", "vocab", "samples", "pretrain_details", "eval_details",
                  "finetune_details", "prune_details", "probe_details", "glue_details"):
        assert (repo / "metrics" / f"{stats}.json").is_file(), stats

    # the README's command: the param that was varied beside the headline metrics
    keep = r"Experiment|train\.learning_rate|eval\.(mlm|nsp)_accuracy|finetune\.gain\.accuracy"
    table = run([DVC, "exp", "show", "--drop", ".*", "--keep", keep, "--csv"], repo,
                env).stdout.splitlines()
    assert table[0] == ("Experiment,eval.mlm_accuracy,eval.nsp_accuracy,finetune.gain.accuracy,"
                        "train.learning_rate")
    assert len(table) == 4  # the workspace, the baseline commit and the experiment


def assert_the_models_are_mlflow_models(client, pretraining, everything, commit: str, repo: Path,
                                        env: dict) -> None:
    """The pretraining run's export is an MLflow Model (transformers flavour) with the run's
    git commit, which `mlflow.pyfunc` loads and which the Model Registry takes; finetune's
    child run holds its classifier as one too (text-classification)."""
    uri = f"sqlite:///{repo / 'mlflow.db'}"
    logged = client.search_logged_models(experiment_ids=[pretraining.info.experiment_id])
    by_run = {(m.source_run_id, m.name): m for m in logged}
    model = by_run[(pretraining.info.run_id, "hf_model")]
    assert model.tags["mlflow.source.git.commit"] == commit
    finetune = next(r for r in everything if r.info.run_name.startswith("finetune-") and
                    r.data.tags["mlflow.parentRunId"] == pretraining.info.run_id)
    assert (finetune.info.run_id, "model") in by_run
    code = (f"import mlflow; mlflow.set_tracking_uri({uri!r}); "
            f"m = mlflow.pyfunc.load_model('models:/{model.model_id}'); "
            "print(m.predict({'text': ['the [MASK] is here.']})['tokens'][0][0]); "
            f"print(mlflow.register_model('models:/{model.model_id}', 'tiny').status)")
    answer, status = run([sys.executable, "-c", code], repo, env).stdout.split()[-2:]
    vocab = (repo / "data" / "vocab" / "vocab.txt").read_text().split()
    assert answer in vocab and status == "READY"


def assert_each_model_folder_has_its_card(repo: Path) -> None:
    """models/hf, models/finetuned and models/pruned each hold a Hugging Face model card that
    huggingface_hub reads, with the figures of the reports beside them."""
    from huggingface_hub import ModelCard

    evaluation = json.loads((repo / "metrics" / "eval.json").read_text())["eval"]
    tags = {"hf": "fill-mask", "finetuned": "text-classification", "pruned": "fill-mask"}
    for folder, tag in tags.items():
        card = ModelCard.load(repo / "models" / folder / "README.md")
        assert (card.data.library_name, card.data.pipeline_tag) == ("transformers", tag)
        # the card section's defaults on a user's corpus (saved/card_meta.py): its name
        assert (card.data.license, card.data.language) == ("unknown", None)
        assert card.data.base_model == (None if folder == "hf" else "bert-corpus")
        figures = {r.metric_name: r.metric_value for r in card.data.eval_results}
        if folder == "hf":
            assert figures["MLM accuracy (val split)"] == pytest.approx(
                evaluation["mlm_accuracy"], abs=1e-6)
            assert "cloze P@1 (built-in probe)" in figures
            # 6 steps know no word order: the card says so (training/evaluation/plateau.py)
            assert "- **Warning**: the model ends on the frequency plateau at step" in card.text
    assert "transformers 5" in (repo / "models" / "pruned" / "README.md").read_text()


PLOTS = {"loss", "accuracy", "probes", "glue_seeds"}  # dvc.yaml's charts, each with x and y
IMAGES = {"metrics/pretrain_loss.png", "metrics/pretrain_accuracy.png",
          "metrics/pretrain_probes.png"}  # not glue_seeds.png: its chart draws the same


def assert_plots_have_their_axes_and_images(repo: Path, env: dict) -> None:
    """`dvc plots show` draws dvc.yaml's charts, each against its x (no stage-level plot of a
    file's last column against the row number), and the PNG images of pretraining's curves,
    which its HTML shows from files beside it (tests/test_plots_page.py: the page that draws
    the charts with no network)."""
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    assert not [name for name, stage in declared["stages"].items() if "plots" in stage]
    charts = [next(iter(p.items())) for p in declared["plots"] if isinstance(p, dict)]
    assert {name for name, _ in charts} == PLOTS
    assert all(spec.get("x") and spec.get("y") for _, spec in charts)
    shown = json.loads(run([DVC, "plots", "show", "--json"], repo, env).stdout)["data"]
    kinds = {name: entries[0]["type"] if entries else None for name, entries in shown.items()}
    # no GLUE data: its chart has no point to draw (the offline page leaves it out)
    assert {name for name, kind in kinds.items() if kind == "vega"} == PLOTS - {"glue_seeds"}
    assert "glue_seeds" in kinds
    assert {name for name, kind in kinds.items() if kind == "image"} == IMAGES
    for name in PLOTS - {"glue_seeds"}:
        assert shown[name][0]["content"]["encoding"]["x"]["field"] == "step", name
    run([DVC, "plots", "show", "-o", "plots_html"], repo, env)
    html = (repo / "plots_html" / "index.html").read_text(encoding="utf-8")
    images = re.findall(r'<img src="(static/[^"]+\.png)"', html)
    assert len(images) == len(IMAGES), images
    assert all((repo / "plots_html" / image).read_bytes().startswith(b"\x89PNG")
               for image in images)
    shutil.rmtree(repo / "plots_html")


def leaves(data: dict, prefix: str = "") -> dict[str, object]:
    """The columns `dvc exp show` makes of a metrics file: dotted names of its scalars."""
    found: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            found.update(leaves(value, f"{prefix}{key}."))
        elif not isinstance(value, list):
            found[f"{prefix}{key}"] = value
    return found
