"""A samples folder is checked against its meta.json when pretrain, evaluate or prune read it
(`SamplesCheck`): a folder damaged after `bert samples` wrote it is one line naming the file
and how to rebuild it, never silent training on wrong data nor a traceback from numpy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.bert import assert_one_line_error, run_bert
from helpers.tiny_pretrain import TINY_MODEL, build_data, write_params

from bertcore.common.errors import BertError
from bertcore.common.tracking import TrackingConfig
from bertcore.data.samples.verify import REBUILD, SamplesCheck
from bertcore.model.config import ModelConfig
from bertcore.training.config import Phase2Config, TrainConfig
from bertcore.training.data.masking import MaskingConfig
from bertcore.training.evaluation.metrics import EvalConfig
from bertcore.training.run.heldout import heldout_splits
from bertcore.training.run.inputs import PretrainInputs, PretrainPaths
from bertcore.training.run.pretrain import PretrainConfig

VOCAB_SIZE = 96  # build_data's


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """data/{corpus,vocab,samples} with phase 2's samples (32 and 64 tokens)."""
    return build_data(tmp_path_factory.mktemp("verify"), phase2_length=64)


def mapped(path: Path) -> np.ndarray:
    """The array of a .npy file, to change in place (its header stays as written)."""
    return np.load(path, mmap_mode="r+")


def shift_ids(samples: Path) -> None:
    ids = mapped(samples / "train" / "tokens.npy")
    ids[ids >= 5] = 5 + (ids[ids >= 5] - 4) % (VOCAB_SIZE - 5)  # still words of the vocabulary
    ids.flush()


def invert_labels(folder: Path) -> None:
    labels = mapped(folder / "train" / "is_random_next.npy")
    labels[:] = 1 - labels
    labels.flush()


def change_meta(samples: Path, **values) -> None:
    path = samples / "meta.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def cut_tokens(samples: Path) -> None:
    path = samples / "val" / "tokens.npy"
    path.write_bytes(path.read_bytes()[:-10])


def label_of_7(samples: Path) -> None:
    labels = mapped(samples / "val" / "is_random_next.npy")
    labels[3] = 7
    labels.flush()


def damage_header(samples: Path) -> None:
    path = samples / "train" / "segment_starts.npy"
    raw = bytearray(path.read_bytes())
    raw[10:40] = b"{'descr': <i8', 'fortran_ord"  # a quote lost, the rest shifted
    path.write_bytes(bytes(raw))


def flip_to_out_of_range(samples: Path) -> None:
    path = samples / "train" / "tokens.npy"
    raw = bytearray(path.read_bytes())
    raw[128 + 2 * 40 + 1] ^= 0x80  # the high byte of token 40: an id past 32767
    path.write_bytes(bytes(raw))


def segment_past_the_tokens(samples: Path) -> None:
    starts = mapped(samples / "train" / "segment_starts.npy")
    starts[5, 1] = len(np.load(samples / "train" / "tokens.npy", mmap_mode="r")) - 2
    starts.flush()


def segment_too_long(samples: Path) -> None:
    lengths = mapped(samples / "train" / "segment_lengths.npy")
    lengths[7, 0] = 40  # A alone past max_seq_length 32
    lengths.flush()


# damage -> what the line must say besides "is damaged" and how to rebuild
DAMAGES = {
    "ids shifted": (shift_ids, ["train arrays", "arrays_sha256"]),
    "labels inverted": (invert_labels, ["train arrays", "arrays_sha256"]),
    "phase 2's labels inverted": (lambda s: invert_labels(s / "phase2"),
                                  ["phase2 is damaged", "train arrays", "arrays_sha256"]),
    "cls_id changed": (lambda s: change_meta(s, cls_id=3), ["cls_id 3", "[CLS] is id 2"]),
    "tokens.npy cut short": (cut_tokens, ["val/tokens.npy is cut short"]),
    "a label of 7": (label_of_7, ["is_random_next.npy holds NSP label 7 for pair 3",
                                  "expected 0 or 1"]),
    "damaged header": (damage_header, ["train/segment_starts.npy has no readable .npy header"]),
    "a segment past the tokens": (segment_past_the_tokens,
                                  ["segment_starts.npy and segment_lengths.npy put pair 5 at",
                                   "outside the 6933 tokens of"]),
    "a pair too long": (segment_too_long, ["segment_lengths.npy makes pair 7",
                                           "past meta.json's max_seq_length 32"]),
    "ids out of range": (flip_to_out_of_range, ["train/tokens.npy holds token id", "at 40",
                                                f"outside the {VOCAB_SIZE} ids"]),
}


def damaged_copy(data: Path, root: Path, damage) -> Path:
    samples = root / "samples"
    shutil.copytree(data / "samples", samples)
    damage(samples)
    return samples


def pretrain_inputs(samples: Path, vocab: Path, root: Path) -> PretrainInputs:
    """What `bert pretrain` opens, with phase 2 on."""
    config = PretrainConfig(ModelConfig(**TINY_MODEL), MaskingConfig(), TrainConfig(),
                            EvalConfig(), TrackingConfig(),
                            Phase2Config(enabled=True, max_seq_length=64))
    paths = PretrainPaths(samples, vocab, *(root / name for name in
                                            ("ckpt", "out", "m.json", "d.json", "l.tsv", "e.tsv")))
    return PretrainInputs.open(config, paths)


def test_undamaged_samples_pass(data, tmp_path):
    check = SamplesCheck(data / "vocab")
    assert check(data / "samples")["max_seq_length"] == 32
    assert check(data / "samples" / "phase2")["max_seq_length"] == 64
    inputs = pretrain_inputs(data / "samples", data / "vocab", tmp_path)
    assert len(inputs.phase2_train) and len(inputs.train_store)
    assert [s.max_seq_length for s in heldout_splits(data / "samples", data / "vocab",
                                                     MaskingConfig())] == [32, 64]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_samples_are_one_line_before_pretrain_or_evaluate_reads_them(data, tmp_path,
                                                                             damage):
    plant, fragments = DAMAGES[damage]
    samples = damaged_copy(data, tmp_path, plant)
    for read in (lambda: pretrain_inputs(samples, data / "vocab", tmp_path),
                 lambda: heldout_splits(samples, data / "vocab", MaskingConfig())):
        with pytest.raises(BertError) as raised:
            read()
        line = str(raised.value)
        assert "\n" not in line
        assert f"the samples folder {samples}" in line and line.endswith(REBUILD), line
        for fragment in fragments:
            assert fragment in line, (fragment, line)


@pytest.mark.slow  # two runs of `bert pretrain`
def test_pretrain_stops_on_inverted_labels_and_trains_on_the_rebuilt_folder(data, tmp_path):
    samples = damaged_copy(data, tmp_path, invert_labels)
    write_params(tmp_path / "params.yaml", train={"max_steps": 2, "checkpoint_every": 0,
                                                  "eval_every": 0},
                 tracking={"enabled": False}, cpu={"threads": 1})
    args = ("pretrain", "--samples", str(samples), "--vocab", str(data / "vocab"))
    proc = run_bert(*args, cwd=tmp_path)
    assert_one_line_error(proc, "is damaged", "arrays_sha256", "dvc repro samples --force")
    assert not (tmp_path / "models").exists()

    shutil.rmtree(samples)
    shutil.copytree(data / "samples", samples)  # as `bert samples` wrote it
    run_bert(*args, cwd=tmp_path, check=True)
    assert (tmp_path / "models" / "pretrained" / "model.safetensors").is_file()


def test_prune_stops_on_a_damaged_header(data, tmp_path):
    samples = damaged_copy(data, tmp_path, damage_header)
    (tmp_path / "params.yaml").write_text("tracking:\n  enabled: false\n")
    proc = run_bert("prune", "--samples", str(samples), "--vocab", str(data / "vocab"),
                    "--model", str(tmp_path / "no-model"), cwd=tmp_path)
    assert_one_line_error(proc, "is damaged", "segment_starts.npy has no readable .npy header",
                          "dvc repro samples --force")
