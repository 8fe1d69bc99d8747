"""Issue 47, section 5: each message names what to change, and no user's mistake is a
traceback: a model folder a param names without its tokenizer, `~` in every path param, a
BLiMP file with a byte-order mark, a .csv separated by `;` or tabs, a device the machine has
not, a weight decay that blows the weights up, a one-document corpus's too few samples,
seeds numpy or torch refuse, `--device gpu`, the benchmark scripts' arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers.bert import ONE_THREAD, REPO, assert_one_line_error, run_bert
from helpers.glue_files import write_glue_folder

from bertcore.common.errors import BertError
from bertcore.downstream.config import GlueConfig
from bertcore.downstream.glue.suite import glue_model
from bertcore.downstream.glue.tasks import tasks_in
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.minimal_pairs import read_minimal_pairs
from bertcore.downstream.probes.probing import ProbePaths, probe_model
from bertcore.downstream.tasks import read_examples
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec


def bert(*args: str, cwd: Path):
    return run_bert(*args, cwd=cwd, env=ONE_THREAD)


PAIR = {"sentence_good": "The cats sleep.", "sentence_bad": "The cats sleeps.",
        "UID": "agreement"}


def model_folder_without_tokenizer(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 30}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("key", ["glue.model", "probe.model"])
def test_a_model_folder_a_param_names_without_its_tokenizer_names_the_param(tmp_path, key):
    """--vocab goes with the pipeline's model only: it is no advice for glue.model or
    probe.model."""
    folder = model_folder_without_tokenizer(tmp_path / "bert")
    with pytest.raises(BertError) as raised:
        if key == "glue.model":
            glue_model(GlueConfig(model=str(folder)), "models/pretrained", "data/vocab")
        else:
            probe_model(ProbeConfig(model=str(folder)), ProbePaths(
                "models/pretrained", "data/vocab", tmp_path / "val.txt", tmp_path / "train.txt",
                tmp_path / "probe.json", tmp_path / "items"), "cpu", None)
    assert str(raised.value) == (
        f"{key}: {folder} has no tokenizer (tokenizer.json or vocab.txt): give a BERT folder "
        f"with its own (`bert export` writes one), or set {key} to null for the pipeline's "
        "model and its vocabulary")
    assert "--vocab" not in str(raised.value)


def test_tilde_is_the_home_folder_in_every_path_param(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "task.csv").write_text("text,label\nhello there,a\ngood bye,b\n")
    assert [e.label for e in read_examples("~/task.csv", "text", None, "label")] == ["a", "b"]
    (tmp_path / "blimp.jsonl").write_text(json.dumps(PAIR) + "\n")
    assert len(read_minimal_pairs("~/blimp.jsonl")) == 1
    write_glue_folder(tmp_path / "glue", tasks=["rte"])
    assert [task.key for task in tasks_in("~/glue", None)] == ["rte"]
    model_folder_without_tokenizer(tmp_path / "bert")
    for key in ("glue.model", "probe.model"):  # found: the next check speaks
        with pytest.raises(BertError, match=f"^{key}: {tmp_path / 'bert'} has no tokenizer"):
            if key == "glue.model":
                glue_model(GlueConfig(model="~/bert"), "models/pretrained", "data/vocab")
            else:
                probe_model(ProbeConfig(model="~/bert"), ProbePaths(
                    "m", "v", tmp_path / "val.txt", tmp_path / "train.txt",
                    tmp_path / "probe.json", tmp_path / "items"), "cpu", None)


def test_a_blimp_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "blimp.jsonl"
    path.write_text("\ufeff" + json.dumps(PAIR) + "\n" + json.dumps(PAIR) + "\n",
                    encoding="utf-8")
    pairs = read_minimal_pairs(path)
    assert [(p.good, p.bad) for p in pairs] == [("The cats sleep.", "The cats sleeps.")] * 2


@pytest.mark.parametrize("name, text, said", [
    ("semi.csv", "text;label\nhello there;a\n",
     "('text;label') separated by semicolons, not commas as in a .csv file: save it with "
     "commas"),
    ("tabs.csv", "text\tlabel\nhello there\ta\n",
     "separated by tabs, not commas as in a .csv file: save it with commas, or name it .tsv"),
    ("commas.tsv", "text,label\nhello there,a\n",
     "separated by commas, not tabs as in a .tsv file: save it with tabs, or name it .csv"),
])
def test_a_table_separated_otherwise_than_its_name_says_is_told_so(tmp_path, name, text, said):
    (tmp_path / name).write_text(text)
    with pytest.raises(BertError) as raised:
        read_examples(tmp_path / name, "text", None, "label")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / name}: its header is one column") and \
        message.endswith(said), message
    assert "label_field" not in str(raised.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA GPU")
def test_glue_device_cuda_without_a_gpu_names_glue_device(tmp_path):
    write_glue_folder(tmp_path / "glue", tasks=["rte"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"glue": {
        "data": "glue", "device": "cuda"}, "tracking": {"enabled": False}}))
    proc = bert("glue", cwd=tmp_path)
    assert_one_line_error(proc, "glue.device is cuda but no CUDA GPU is available: use auto or "
                                "cpu", code=1)
    assert "train.device" not in proc.stderr


def test_bert_probe_device_gpu_is_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = bert("probe", "--device", "gpu", cwd=tmp_path)
    assert_one_line_error(proc, "Invalid value for '--device': 'gpu' is no device; use auto, "
                                "cpu, cuda, cuda:N or mps", code=2)


@pytest.mark.parametrize("section, value", [
    ("glue", "1e300"), ("finetune", "1e300"), ("finetune", "5000")])
def test_a_weight_decay_that_blows_up_the_weights_is_refused_naming_it(tmp_path, section,
                                                                      value):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = bert(section, "--set", f"{section}.weight_decay={value}", cwd=tmp_path)
    assert_one_line_error(proc, f"{section}.weight_decay: ", "AdamW multiplies every weight "
                          "by 1 - learning_rate x weight_decay", "lower weight_decay below "
                          "3333.33", code=2)
    assert "lower the learning rate" not in proc.stderr


@pytest.mark.parametrize("key", ["glue.seed", "finetune.seed"])
@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_out_of_range_is_one_line(tmp_path, key, seed):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = bert(key.split(".")[0], "--set", f"{key}={seed}", cwd=tmp_path)
    assert_one_line_error(proc, f"{key}: {seed} is not allowed; expected "
                                "0..9223372036854775807", code=2)


class FewSamples:
    """The samples of a one-document corpus: fewer than a batch."""

    lengths = None

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index):
        raise AssertionError("not read")


def test_too_few_samples_say_what_makes_more():
    collator = PretrainingCollator(MaskingConfig(), VocabSpec(vocab_size=10, pad_id=0, cls_id=2,
                                                              sep_id=3, mask_id=4), seed=0)
    with pytest.raises(BertError) as raised:
        PretrainingBatches(FewSamples(), collator, 32, 1, seed=0)
    assert str(raised.value) == (
        "only 16 training samples for a batch of 32: lower train.batch_size, or make more: "
        "raise samples.dupe_factor (each pass over the train split pairs it anew) or add text "
        "to corpus.source")


@pytest.mark.parametrize("script, args, said", [
    ("epoch_order.py", ["--samples", "0"], "argument --samples: 0 is not an integer >= 1"),
    ("epoch_order.py", ["--samples", "10"], "--samples 10 is fewer than --batch-size 256"),
    ("scale.py", ["--gb", "0"], "argument --gb: 0 is not a number > 0"),
    ("scale.py", ["--workers", "0"], "argument --workers: 0 is not an integer >= 1"),
    ("scale.py", ["--workers", "abc"], "argument --workers: 'abc' is not a comma-separated "
                                       "list of integers >= 1"),
    ("scale.py", ["--source", "no/such/corpus"], "--source: corpus source not found: "
                                                 "no/such/corpus"),
])
def test_a_benchmark_scripts_bad_argument_is_one_line(tmp_path, script, args, said):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert errors == [f"{script}: error: {said}"] or (
        len(errors) == 1 and errors[0].startswith(f"{script}: error: {said}")), proc.stderr
