"""Long runs: extending a finished run (only train.max_steps / train.epochs changed) resumes
it with the schedule re-planned, recorded as a new MLflow run that names the one it extends;
the samples fingerprint reads meta.json alone when the samples stage recorded the arrays'
hashes; the torchrun relaunch passes the stage's own options through."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
from pathlib import Path

import pytest
from helpers.bert import assert_one_line_error, run_bert, run_bert_interrupted
from helpers.tiny_pretrain import TINY_MODEL, tiny_config, write_params

from bertcore.common.config import CpuConfig
from bertcore.common.digests import file_sha256, fingerprint_files
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.schedule import learning_rate
from bertcore.common.tracking import TrackingConfig, sqlite_uri
from bertcore.data.samples.build import build_samples
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.samples.store import samples_fingerprint
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import load_tokenizer, read_vocab, save_vocab, vocab_fingerprint
from bertcore.data.vocab.training import LineBatches, train_tokenizer
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.config import ModelConfig
from bertcore.training.checkpoints.checkpoint import CheckpointDir
from bertcore.training.checkpoints.identity import phase1_identity
from bertcore.training.checkpoints.resume import plan_resume
from bertcore.training.config import Phase2Config, PretrainConfig, TrainConfig
from bertcore.training.data.masking import MaskingConfig
from bertcore.training.evaluation.metrics import EvalConfig
from bertstages.pretrain import torchrun_command

TINY_RECIPELESS = {k: v for k, v in TINY_MODEL.items() if k != "preset"}


def bert(*args: str, cwd: Path):
    return run_bert(*args, cwd=cwd, check=True)


def tsv(path: Path) -> list[dict[str, str]]:
    header, *rows = path.read_text().splitlines()
    return [dict(zip(header.split("\t"), row.split("\t"), strict=True)) for row in rows]


@pytest.mark.slow
def test_extending_a_run_resumes_with_the_schedule_replanned(data, tmp_path, mlflow_db):
    (tmp_path / "data").symlink_to(data)
    mlflow_db(tmp_path)
    write_params(tmp_path / "params.yaml",
                 model={"recipe": "mine"},
                 train={"max_steps": 4, "warmup_steps": 1, "learning_rate": 0.003,
                        "log_every": 2, "eval_every": 0, "checkpoint_every": 2, "keep_last": 2},
                 tracking={"experiment": "extend"})
    (tmp_path / "params" / "recipes").mkdir(parents=True)
    (tmp_path / "params" / "recipes" / "mine.yaml").write_text(
        "model: {preset: tiny}\ntrain: {adam_betas: [0.9, 0.95], warmup_steps: 3}\n")
    log = tmp_path / "metrics" / "pretrain_log.tsv"
    bert("pretrain", cwd=tmp_path)
    first_rows = tsv(log)

    extended = bert("pretrain", "--set", "train.max_steps=8", cwd=tmp_path)
    assert "starting fresh" not in extended.stderr
    assert "resuming from" in extended.stderr and "step 4 of 8" in extended.stderr
    assert "train.max_steps 4 -> 8" in extended.stderr
    assert "re-planned to end at step 8 instead of 4" in extended.stderr
    rows = tsv(log)
    assert [int(r["step"]) for r in rows] == [2, 4, 6, 8]
    assert rows[:2] == first_rows
    # the rate of each step follows the plan of its time: 4 steps first, then 8
    planned = [learning_rate(0.003, 1, 1, 4), learning_rate(0.003, 3, 1, 4),
               learning_rate(0.003, 5, 1, 8), learning_rate(0.003, 7, 1, 8)]
    assert [float(r["learning_rate"]) for r in rows] == pytest.approx(planned, rel=1e-6)
    assert planned[1] < planned[2]  # re-planned: the rate went back up at step 6
    pretrained = json.loads((tmp_path / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert pretrained["steps"] == 8
    checkpoints = CheckpointDir(tmp_path / "models" / "checkpoints")
    assert [c.step for c in checkpoints.all()] == [4, 6, 8]  # 4: the finished run's last

    # MLflow: the extension is a new run (params cannot change inside one) that names the
    # run it extends and carries the whole curve; the first run keeps its own 4 steps.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(tmp_path / "mlflow.db"))
    experiment = client.get_experiment_by_name("extend")
    first, second = client.search_runs([experiment.experiment_id],
                                       order_by=["attributes.start_time"])
    assert first.info.status == second.info.status == "FINISHED"
    assert first.data.params["train.max_steps"] == "4"
    # the params as they resolved: every key of the sections pretraining reads, the recipe's
    # (its betas; warmup_steps written in params.yaml wins) and the defaults included
    sections = {"model": ModelConfig(preset="tiny", recipe="mine", **TINY_RECIPELESS),
                "train": TrainConfig(max_steps=4, warmup_steps=1, learning_rate=0.003,
                                     log_every=2, eval_every=0, checkpoint_every=2, keep_last=2,
                                     batch_size=8, seed=7, adam_betas=[0.9, 0.95],
                                     nproc_per_node=1),
                "masking": MaskingConfig(mlm_probability=0.15, max_predictions_per_seq=5),
                "eval": EvalConfig(batch_size=16, seed=3, probe_sentences=30), "cpu": CpuConfig(),
                "phase2": Phase2Config(),
                "tracking": TrackingConfig(uri=None, experiment="extend", log_checkpoints="last")}
    resolved = flatten({name: dataclasses.asdict(config) for name, config in sections.items()})
    assert {key: first.data.params.get(key) for key in resolved} == \
        {key: "null" if value is None else str(value) for key, value in resolved.items()}
    assert "model.recipe_values" not in first.data.params
    assert second.data.params["train.max_steps"] == "8"
    assert second.data.tags["extends_run"] == first.info.run_id
    assert second.data.tags["extended_at_step"] == "4"
    assert "extends_run" not in first.data.tags

    def history(run, key="train/loss"):
        return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]

    assert [s for s, _ in history(first)] == [2, 4]
    assert [s for s, _ in history(second)] == [2, 4, 6, 8]
    assert [v for _, v in history(second)][:2] == pytest.approx([v for _, v in history(first)],
                                                                rel=1e-6)
    assert [m.name for m in client.search_logged_models(  # the export, an MLflow Model
        experiment_ids=[second.info.experiment_id],
        filter_string=f"source_run_id = '{second.info.run_id}'")] == ["hf_model"]

    # Shortened below the latest checkpoint: a fresh run, whose checkpoints replace the old,
    # which are set aside.
    shorter = bert("pretrain", "--set", "train.max_steps=3", cwd=tmp_path)
    assert "past the new end of the run" in shorter.stderr and "starting fresh" in shorter.stderr
    assert [c.step for c in checkpoints.all()] == [2, 3]
    replaced = CheckpointDir(tmp_path / "models" / "checkpoints" / "replaced")
    assert [c.step for c in replaced.all()] == [4, 6, 8]
    assert [int(r["step"]) for r in tsv(log)] == [2, 3]
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time"])
    assert len(runs) == 3 and "extends_run" not in runs[2].data.tags


def steps_in(folder: Path) -> list[int]:
    return [c.step for c in CheckpointDir(folder).all()]


def six_step_run(data: Path, folder: Path) -> None:
    """`folder` set up for a run of 6 steps with a checkpoint every 3, tracking off."""
    (folder / "data").symlink_to(data)
    write_params(folder / "params.yaml", train={"max_steps": 6, "checkpoint_every": 3,
                                                "eval_every": 0, "log_every": 1},
                 tracking={"enabled": False})


@pytest.mark.slow
def test_an_interrupted_extension_keeps_the_finished_run_and_its_model(data, tmp_path):
    six_step_run(data, tmp_path)
    root, model = tmp_path / "models" / "checkpoints", tmp_path / "models" / "pretrained"
    bert("pretrain", cwd=tmp_path)
    finished = {p.name: file_sha256(p) for p in (root / "step-00000006").iterdir()}
    weights = file_sha256(model / "model.safetensors")
    assert weights == finished["model.safetensors"]
    # extended to 400 steps, stopped by SIGTERM while step 12's checkpoint is written: it
    # stops after step 13, with a checkpoint; keep_last 2 rotated step 9 away, not step 6
    stopped = run_bert_interrupted("pretrain", "--set", "train.max_steps=400",
                                   at="bertcore.training.loop.checkpointer:capture_rng_state",
                                   nth=2, signum=signal.SIGTERM, cwd=tmp_path)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "interrupted by SIGTERM after step 13" in stopped.stderr
    assert "replaces" not in stopped.stderr
    assert steps_in(root) == [6, 12, 13]
    assert {p.name: file_sha256(p) for p in (root / "step-00000006").iterdir()} == finished
    assert file_sha256(model / "model.safetensors") == weights  # the finished run's model
    # run again: the extension resumes where it stopped
    resumed = run_bert_interrupted("pretrain", "--set", "train.max_steps=400",
                                   at="bertcore.training.loop.checkpointer:capture_rng_state",
                                   nth=1, signum=signal.SIGTERM, cwd=tmp_path)
    assert "resuming from models/checkpoints/step-00000013 (step 13 of 400)" in resumed.stderr
    assert steps_in(root) == [6, 15, 16]  # 6 outlives every rotation


@pytest.mark.slow
def test_a_run_that_starts_fresh_sets_aside_the_checkpoints_it_replaces(data, tmp_path):
    six_step_run(data, tmp_path)
    root = tmp_path / "models" / "checkpoints"
    aside = root / "replaced"
    bert("pretrain", cwd=tmp_path)
    first = {p.name: file_sha256(p) for p in (root / "step-00000006").iterdir()}

    # shortened below its checkpoints: a fresh run (a shorter one cannot be cut from a longer
    # one's schedule), which says first what it sets aside, where, and how to remove it
    shorter = bert("pretrain", "--set", "train.max_steps=4", cwd=tmp_path)
    line = ("this run replaces checkpoints step-00000003, step-00000006 in models/checkpoints: "
            "setting them aside in models/checkpoints/replaced, never resumed from there; "
            "delete that folder when you no longer want them (train.keep_replaced: false "
            "deletes replaced checkpoints instead)")
    assert line in shorter.stderr
    assert shorter.stderr.index(line) < shorter.stderr.index("pretrain: 4 steps")
    assert steps_in(root) == [3, 4] and steps_in(aside) == [3, 6]
    assert {p.name: file_sha256(p) for p in (aside / "step-00000006").iterdir()} == first

    # other params: a fresh run; its set of replaced checkpoints takes the old one's place
    other = bert("pretrain", "--set", "train.learning_rate=0.001", cwd=tmp_path)
    assert ("this run replaces checkpoints step-00000003, step-00000004 in models/checkpoints: "
            "setting them aside in models/checkpoints/replaced (instead of step-00000003, "
            "step-00000006 set aside there before, deleted now)") in other.stderr
    assert steps_in(root) == [3, 6] and steps_in(aside) == [3, 4]

    # the first params again, and the user says otherwise: the replaced checkpoints are
    # deleted, said first; those set aside are never resumed (step 4 would be extended)
    again = bert("pretrain", "--set", "train.keep_replaced=false", cwd=tmp_path)
    assert ("this run replaces checkpoints step-00000003, step-00000006 in models/checkpoints: "
            "deleting them (train.keep_replaced: false)") in again.stderr
    assert "resuming" not in again.stderr and "starting fresh" in again.stderr
    assert steps_in(root) == [3, 6] and steps_in(aside) == [3, 4]
    assert {p.name: file_sha256(p) for p in (root / "step-00000006").iterdir()} == first
    proc = run_bert("pretrain", "--set", "train.keep_replaced=sometimes", cwd=tmp_path)
    assert_one_line_error(proc, "train.keep_replaced", code=2)


def test_only_a_checkpoint_of_the_same_inputs_is_resumed(data, tmp_path):
    """Samples rebuilt (another seed) or another vocabulary: start fresh, saying which; the
    same inputs: resume; only the length changed: extend."""
    run = PretrainConfig(ModelConfig(), MaskingConfig(), TrainConfig(learning_rate=0.003),
                         EvalConfig(), TrackingConfig())
    same = phase1_identity(run, data / "vocab", data / "samples", 8)
    checkpoints = CheckpointDir(tmp_path / "ckpt")
    model = BertPretrainingModel(tiny_config(len(read_vocab(data / "vocab"))))
    # as the loop writes it: with the end the run was planned to reach
    checkpoints.save(4, model, {"step": 4}, {**same.meta(world_size=1), "total_steps": 8})
    assert plan_resume(checkpoints.latest(), same, 8).checkpoint.step == 4
    longer_run = phase1_identity(run, data / "vocab", data / "samples", 12)
    longer = plan_resume(checkpoints.latest(), longer_run, 12)
    assert longer.extends and longer.previous_total == 8

    samples = tmp_path / "samples"
    samples.mkdir()
    build_samples({s: data / "corpus" / f"{s}.txt" for s in ("train", "val")},
                  load_tokenizer(data / "vocab"), samples,
                  SamplesConfig(max_seq_length=32, dupe_factor=2, workers=1, random_seed=1),
                  vocab_fingerprint(data / "vocab"))
    vocab = tmp_path / "vocab"
    vocab.mkdir()
    config = VocabConfig(vocab_size=90, min_frequency=1)
    save_vocab(train_tokenizer(LineBatches(data / "corpus" / "train.txt"), config), vocab)
    for what, identity in (
        ("samples", phase1_identity(run, data / "vocab", samples, 8)),
        ("vocab", phase1_identity(run, vocab, data / "samples", 8)),
    ):
        plan = plan_resume(checkpoints.latest(), identity, 8)
        assert plan.checkpoint is None, what
        assert f"made with other {what}: starting fresh" in plan.notice, plan.notice


def test_samples_fingerprint_reads_meta_json_alone_when_it_has_the_array_hashes(data, tmp_path):
    samples = tmp_path / "samples"
    shutil.copytree(data / "samples", samples)
    meta_file = samples / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta.pop("arrays_sha256", None)
    meta_file.write_text(json.dumps(meta))
    # samples without their arrays' hashes are none the samples stage writes: rebuild them
    with pytest.raises(BertError, match="rebuild the samples with `bert samples`"):
        samples_fingerprint(samples)

    # samples that record their arrays' hashes (the samples stage writes them): meta.json only
    meta["arrays_sha256"] = {"train": "a" * 64, "val": "b" * 64}
    meta_file.write_text(json.dumps(meta))
    recorded = samples_fingerprint(samples)
    assert recorded == fingerprint_files([meta_file])
    for path in (samples / "train").glob("*.npy"):
        path.unlink()  # never read
    assert samples_fingerprint(samples) == recorded
    meta["arrays_sha256"]["train"] = "c" * 64  # other arrays: another fingerprint
    meta_file.write_text(json.dumps(meta))
    assert samples_fingerprint(samples) != recorded


def test_torchrun_gets_the_stage_options_untouched():
    from torch.distributed.run import get_args_parser

    stage = ["pretrain", "--log", "x.tsv", "--set", "train.max_steps=3", "--metrics", "m.json"]
    command = torchrun_command(2, 1, stage, "logs")
    assert command[1:3] == ["-m", "torch.distributed.run"]
    parsed = get_args_parser().parse_args(command[3:])
    assert (parsed.nproc_per_node, parsed.max_restarts, parsed.module) == ("2", 1, True)
    assert parsed.log_dir == "logs"
    assert parsed.training_script == "bertstages"
    assert parsed.training_script_args == stage


def test_rerunning_a_finished_run_writes_its_report_with_the_same_bytes(data, tmp_path):
    """`dvc repro` after a code change reruns pretrain, which finds its run finished, reads
    the last train row back from the log and evaluates the last step again: the report and
    the eval log are the same bytes as the run's own."""
    (tmp_path / "data").symlink_to(data)
    write_params(tmp_path / "params.yaml",
                 train={"max_steps": 2, "warmup_steps": 1, "log_every": 1, "eval_every": 0,
                        "checkpoint_every": 0},
                 tracking={"enabled": False})
    files = [tmp_path / "metrics" / name for name in ("pretrain.json", "pretrain_eval.tsv")]
    bert("pretrain", cwd=tmp_path)
    first = [path.read_bytes() for path in files]
    files[0].unlink()
    bert("pretrain", cwd=tmp_path)
    assert [path.read_bytes() for path in files] == first


def test_the_last_checkpoint_holds_the_last_evaluation_and_a_rerun_keeps_its_bytes(data,
                                                                                    tmp_path):
    """A run whose checkpoint steps include its last: that checkpoint is written after the
    final evaluation (its eval log ends with the last step), so rerunning the finished run
    (`dvc repro` after a code change) leaves every checkpoint the same bytes, and a fresh
    `dvc repro` gives the checkpoints a rerun gives."""
    (tmp_path / "data").symlink_to(data)
    write_params(tmp_path / "params.yaml",
                 train={"max_steps": 2, "warmup_steps": 1, "log_every": 1, "eval_every": 0,
                        "checkpoint_every": 1},
                 tracking={"enabled": False})
    root = tmp_path / "models" / "checkpoints"
    bert("pretrain", cwd=tmp_path)
    first = {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
    assert steps_in(root) == [1, 2]
    assert [row["step"] for row in tsv(root / "step-00000002" / "eval_log.tsv")] == ["2"]
    bert("pretrain", cwd=tmp_path)
    assert {path: path.read_bytes() for path in root.rglob("*") if path.is_file()} == first
