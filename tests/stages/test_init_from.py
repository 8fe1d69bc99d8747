"""Continued pretraining (`model.init_from`): a run that starts from an existing BERT folder
(made here by transformers, or by our own pipeline) computes transformers' losses at its first
step, improves on the model it started from, starts what the folder lacks as a fresh model
would (and says so), refuses another vocabulary or a contradicting architecture in one line,
and never resumes a checkpoint begun from other weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from helpers.bert import assert_one_line_error, run_bert
from helpers.tiny_pretrain import TINY_MODEL, tiny_params, write_corpus

from bertcore.common.errors import BertError
from bertcore.common.tracking import sqlite_uri
from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import IGNORE_INDEX, BertPretrainingModel
from bertcore.model.config import ModelConfig
from bertcore.saved.hf import load_model
from bertcore.saved.init_from import InitModel
from bertcore.training.checkpoints.checkpoint import CheckpointDir
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec

transformers = pytest.importorskip("transformers")

FRESH = "): it starts from a fresh init"  # ends each notice, after the group's HF name
POOLER, MLM, NSP = ("the pooler", "the MLM transform and output bias", "the NSP head")


def bert(*args: str, cwd: Path, check: bool = True):
    return run_bert(*args, cwd=cwd, check=check)


def hf_bert(folder: Path, vocab_dir: Path, kind: str = "BertForPreTraining", seed: int = 0,
            vocab_size: int | None = None, initializer_range: float = 0.02,
            bin_file: bool = False) -> Path:
    """A tiny BERT made and saved by transformers (the shape of TINY_MODEL), with the
    tokenizer of `vocab_dir` saved beside it, as a model folder on the hub looks."""
    config = transformers.BertConfig(
        vocab_size=vocab_size or len(read_vocab(vocab_dir)), hidden_size=32,
        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, initializer_range=initializer_range)
    torch.manual_seed(seed)
    model = getattr(transformers, kind)(config)
    if folder.exists():
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    if bin_file:  # the legacy format: a pickled state dict, read with weights_only=True
        (folder / "model.safetensors").unlink()
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    transformers.BertTokenizerFast.from_pretrained(vocab_dir).save_pretrained(folder)
    return folder


def params_with(path: Path, model: dict, **sections) -> dict:
    """tiny_params with the `model:` section replaced by `model`."""
    params = tiny_params(**sections)
    params["model"] = model
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return params


def tsv(path: Path) -> list[dict[str, float]]:
    header, *rows = path.read_text().splitlines()
    return [{k: float(v) for k, v in zip(header.split("\t"), row.split("\t"), strict=True)
             if v} for row in rows]


def workdir_on(data: Path, tmp_path: Path) -> Path:
    (tmp_path / "data").symlink_to(data)
    return tmp_path


# ------------------------------------------------------------------------ the same function
def test_the_first_step_computes_the_losses_of_transformers(data, tmp_path):
    """vocab.source and model.init_from = one folder saved by transformers: the vocab stage
    takes its vocabulary, and the first step's MLM and NSP losses are those of transformers'
    BertForPreTraining on the same batch (same masks, dropout off by override)."""
    write_corpus(tmp_path / "data" / "corpus")
    # initializer_range 0.3: confident, wrong predictions, far from any random init's ln(V)
    folder = hf_bert(tmp_path / "bert", data / "vocab", initializer_range=0.3, seed=3)
    params = params_with(
        tmp_path / "params.yaml",
        {"init_from": "bert", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
        train={"max_steps": 1, "log_every": 1, "eval_every": 0, "checkpoint_every": 0},
        tracking={"enabled": False},
    )
    params.update(vocab={"source": "bert"},
                  samples={"max_seq_length": 32, "dupe_factor": 2, "workers": 1})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    bert("vocab", cwd=tmp_path)
    assert read_vocab(tmp_path / "data" / "vocab") == read_vocab(data / "vocab")
    bert("samples", cwd=tmp_path)
    proc = bert("pretrain", cwd=tmp_path)
    assert proc.stderr.count("model.preset is not used") == 1, proc.stderr
    assert "fresh init" not in proc.stderr  # a BertForPreTraining folder has every weight
    (first,) = tsv(tmp_path / "metrics" / "pretrain_log.tsv")

    # The same first batch, rebuilt as the stage builds it.
    tokens = read_vocab(tmp_path / "data" / "vocab")
    train = params["train"]
    collator = PretrainingCollator(MaskingConfig(**params["masking"]),
                                   VocabSpec.from_tokens(tokens), seed=train["seed"])
    batches = PretrainingBatches(SampleStore(tmp_path / "data" / "samples" / "train"),
                                 collator, train["batch_size"], 1, seed=train["seed"])
    (batch,) = next(batches.iterate(0, 0))
    labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
    for row, (positions, targets) in enumerate(zip(batch["mlm_positions"],
                                                   batch["mlm_targets"], strict=True)):
        used = targets != IGNORE_INDEX
        labels[row, positions[used]] = targets[used]
    assert (labels != IGNORE_INDEX).sum() > 10

    theirs = transformers.BertForPreTraining.from_pretrained(folder).eval()
    with torch.no_grad():
        out = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                     attention_mask=batch["attention_mask"])
    mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), labels.flatten(),
                          ignore_index=IGNORE_INDEX).item()
    nsp = F.cross_entropy(out.seq_relationship_logits, batch["nsp_labels"]).item()
    assert mlm > 5.0  # far from ln(96) = 4.56: a random init would not give these numbers
    assert first["mlm_loss"] == pytest.approx(mlm, abs=1e-5)
    assert first["nsp_loss"] == pytest.approx(nsp, abs=1e-5)


# ------------------------------------------------------------------ continuing our own model
@pytest.mark.slow
def test_continued_pretraining_improves_on_the_model_it_starts_from(data, tmp_path):
    """Pretrain, export (models/hf), then continue from the export: val MLM loss goes below
    the exported model's (scored by `bert evaluate`), and the new export loads in
    transformers with the same outputs as ours."""
    work = workdir_on(data, tmp_path)
    params_with(work / "params.yaml", dict(TINY_MODEL),
                train={"max_steps": 60, "eval_every": 0, "checkpoint_every": 0},
                tracking={"enabled": False})
    bert("pretrain", cwd=work)
    bert("export", cwd=work)
    shutil.move(work / "models" / "hf", work / "start")
    shutil.rmtree(work / "models")
    bert("evaluate", "--model", "start", "--out", "before.json", cwd=work)
    before = json.loads((work / "before.json").read_text())["eval"]

    # The shape set in model: may stay, as long as it agrees with the folder's config.json.
    params_with(work / "params.yaml", {**TINY_MODEL, "init_from": "start"},
                train={"max_steps": 30, "learning_rate": 0.003, "seed": 8, "eval_every": 0,
                       "checkpoint_every": 0},
                tracking={"enabled": False})
    bert("pretrain", cwd=work)
    bert("evaluate", "--out", "after.json", cwd=work)
    after = json.loads((work / "after.json").read_text())["eval"]
    # measured: 3.96 -> 3.90 (the same 30 steps from random weights end at 4.08-4.10)
    assert after["mlm_loss"] < before["mlm_loss"] - 0.02, (before, after)

    bert("export", "--out", "continued", cwd=work)
    ours = load_model(work / "models" / "pretrained").eval()
    theirs, info = transformers.BertForPreTraining.from_pretrained(
        work / "continued", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids = torch.tensor([[2, 10, 11, 12, 3, 13, 14, 3]])
    with torch.no_grad():
        a, b = ours(ids), theirs.eval()(ids)
    assert (a.mlm_logits - b.prediction_logits).abs().max() <= 1e-5
    assert (a.nsp_logits - b.seq_relationship_logits).abs().max() <= 1e-5


# ------------------------------------------------------------ what the folder does not hold
@pytest.mark.parametrize(("kind", "bin_file", "fresh"), [
    ("BertForMaskedLM", False, {POOLER, NSP}),
    ("BertModel", True, {MLM, NSP}),
])
def test_weights_a_folder_lacks_start_as_in_a_fresh_model(data, tmp_path, caplog, kind,
                                                          bin_file, fresh):
    folder = hf_bert(tmp_path / "bert", data / "vocab", kind=kind, seed=1, bin_file=bin_file)
    theirs = getattr(transformers, kind).from_pretrained(folder)
    init = InitModel.open(ModelConfig(init_from=str(folder)))
    with caplog.at_level("WARNING", logger="bertcore.saved.hf"):
        torch.manual_seed(11)
        model = init.load()
    torch.manual_seed(11)
    new = BertPretrainingModel(init.config)
    notices = [r.getMessage() for r in caplog.records if "fresh init" in r.getMessage()]
    assert len(notices) == len(fresh), notices
    for group in fresh:
        assert sum(f"has no weights for {group} (" in n for n in notices) == 1, (group, notices)
    assert all(n.endswith(FRESH) for n in notices), notices
    prefixes = {POOLER: "pooler.", MLM: "mlm_head.", NSP: "nsp_head."}
    for name, tensor in model.state_dict().items():
        if name.startswith(tuple(prefixes[g] for g in fresh)):
            assert torch.equal(tensor, new.state_dict()[name]), name  # as a fresh model
    encoder = theirs.bert if kind != "BertModel" else theirs
    query = encoder.encoder.layer[0].attention.self.query.weight
    assert torch.equal(model.layers[0].attention.qkv.weight[:32], query)
    assert torch.equal(model.embeddings.tokens.weight, encoder.embeddings.word_embeddings.weight)


def test_the_stage_names_each_group_that_starts_fresh(data, tmp_path):
    work = workdir_on(data, tmp_path)
    hf_bert(work / "bert", data / "vocab", kind="BertForMaskedLM")
    params_with(work / "params.yaml", {"init_from": "bert"},
                train={"max_steps": 2, "eval_every": 0, "checkpoint_every": 0},
                tracking={"enabled": False})
    proc = bert("pretrain", cwd=work)
    lines = [line for line in proc.stderr.splitlines() if "fresh init" in line]
    assert len(lines) == 2, proc.stderr
    assert f"has no weights for {POOLER} (bert.pooler{FRESH}" in lines[0], lines
    assert f"has no weights for {NSP} (cls.seq_relationship{FRESH}" in lines[1], lines


# -------------------------------------------------------------------------- one-line errors
def test_another_vocabulary_is_one_line_with_both_sizes_and_the_first_difference(data,
                                                                               tmp_path):
    work = workdir_on(data, tmp_path)
    size = len(read_vocab(data / "vocab"))
    folder = hf_bert(work / "bert", data / "vocab", vocab_size=size + 4)
    params_with(work / "params.yaml", {"init_from": "bert"}, tracking={"enabled": False})
    proc = bert("pretrain", cwd=work, check=False)
    assert_one_line_error(proc, f"({size} tokens)", f"({size + 4} tokens)",
                          "vocab.source", "bert")
    assert not (work / "models").exists()

    # Same size, one token changed: the message names it.
    tokens = read_vocab(data / "vocab")
    (folder / "config.json").write_text(json.dumps(
        {**json.loads((folder / "config.json").read_text()), "vocab_size": size}))
    (folder / "tokenizer.json").unlink()
    changed = [*tokens[:50], "zebra", *tokens[51:]]
    (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in changed))
    init = InitModel.open(ModelConfig(init_from=str(folder)))  # tokens from its vocab.txt
    with pytest.raises(BertError) as caught:
        init.check_vocab(tokens, data / "vocab")
    message = str(caught.value)
    assert f"id 50: 'zebra' in the model, {tokens[50]!r} in" in message, message
    assert f"({size} tokens)" in message


def test_an_architecture_that_contradicts_the_folder_is_one_line_naming_the_key(data,
                                                                              tmp_path):
    work = workdir_on(data, tmp_path)
    hf_bert(work / "bert", data / "vocab")
    params_with(work / "params.yaml", {"init_from": "bert", "num_hidden_layers": 3},
                tracking={"enabled": False})
    proc = bert("pretrain", cwd=work, check=False)
    assert_one_line_error(proc, "model.num_hidden_layers", "3", "bert/config.json", code=2)
    proc = bert("pretrain", "--set", "model.num_hidden_layers=1",
                "--set", "model.max_position_embeddings=512", cwd=work, check=False)
    assert_one_line_error(proc, "model.max_position_embeddings", "512", code=2)
    proc = bert("pretrain", "--set", "model.init_from=nowhere", cwd=work, check=False)
    assert_one_line_error(proc, "model.init_from not found: nowhere")


# -------------------------------------------------------------------- resume and experiments
@pytest.mark.slow
def test_a_changed_init_model_starts_fresh_and_mlflow_records_what_it_started_from(data,
                                                                                 tmp_path):
    work = workdir_on(data, tmp_path)
    folder = hf_bert(work / "bert", data / "vocab", seed=1)
    params_with(work / "params.yaml", {"init_from": "bert"},
                train={"max_steps": 4, "eval_every": 0, "checkpoint_every": 2},
                tracking={"experiment": "init"})
    bert("pretrain", cwd=work)
    checkpoints = CheckpointDir(work / "models" / "checkpoints")
    first = checkpoints.latest().fingerprints["init_model"]

    again = bert("pretrain", cwd=work)  # the same folder: the finished run is resumed
    assert "resuming from" in again.stderr and "starting fresh" not in again.stderr

    hf_bert(folder, data / "vocab", seed=2)  # other weights at the same path
    changed = bert("pretrain", cwd=work)
    assert "starting fresh" in changed.stderr, changed.stderr
    assert "other initial model (the content of model.init_from)" in changed.stderr
    second = checkpoints.latest().fingerprints["init_model"]
    assert second != first and len(second) == 64

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(work / "mlflow.db"))
    experiment = client.get_experiment_by_name("init")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time"])
    assert [r.data.tags["fingerprint.init_model"] for r in runs] == [first, second]
    assert all(r.data.params["model.init_from"] == "bert" for r in runs)


@pytest.mark.slow
def test_under_torchrun_the_processes_start_from_the_folder_as_one_process_does(data,
                                                                                 tmp_path):
    """Rank 0 alone reads the folder (it hands its weights to the others): two processes
    give the losses and weights of one process, to the bit."""
    work = workdir_on(data, tmp_path)
    hf_bert(work / "bert", data / "vocab", kind="BertForMaskedLM", initializer_range=0.3)
    params_with(work / "params.yaml",
                {"init_from": "bert", "hidden_dropout_prob": 0.0,
                 "attention_probs_dropout_prob": 0.0},
                train={"max_steps": 3, "log_every": 1, "eval_every": 0, "checkpoint_every": 0},
                tracking={"enabled": False})
    runs = {}
    for nproc in (1, 2):
        bert("pretrain", "--set", f"train.nproc_per_node={nproc}", "--checkpoints", f"c{nproc}",
             "--out", f"m{nproc}", "--log", f"log{nproc}.tsv", "--metrics", f"p{nproc}.json",
             "--eval-log", f"eval{nproc}.tsv", cwd=work)
        runs[nproc] = tsv(work / f"log{nproc}.tsv")
    assert runs[2] == runs[1]  # the micro-batches' gradients added in one fixed tree: same bytes
    assert (work / "m2" / "model.safetensors").read_bytes() == (
        work / "m1" / "model.safetensors").read_bytes()
