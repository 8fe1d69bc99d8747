"""Where users' tools look for embeddings and ONNX, on a tiny export made here by the export
stage's library call: the ONNX encoder (`export.onnx`) answers in onnxruntime as transformers
does at any batch size and length, sentence-transformers loads the folder offline and embeds
by mean pooling, and neither changes the weights."""

from __future__ import annotations

import hashlib
import importlib.util

import numpy as np
import onnxruntime
import pytest
import torch
import transformers

from bertcore.common.errors import BertError
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab
from bertcore.data.vocab.training import train_tokenizer
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.hf import WEIGHTS_NAME, save_model
from bertcore.saved.onnx_export import INPUTS, ONNX_FILE, OUTPUTS
from bertcore.saved.sentence_embeddings import SENTENCE_FILES
from bertcore.training.run.export import export_pretrained

SENTENCES = ["paris is the capital of france.", "berlin is the capital of germany.",
             "the cat sat on the mat.", "the dog slept on the rug."]
MAX_LENGTH = 32


def export(root, out, onnx: bool):
    return export_pretrained(root / "pretrained", root / "vocab", out, root / "no-metrics",
                             {"model": {"preset": "tiny"}}, None, onnx=onnx)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny BERT (random weights, seeded, two layers) with its vocabulary, exported (`hf`,
    without ONNX); and the root of the three."""
    root = tmp_path_factory.mktemp("model")
    (root / "vocab").mkdir()
    save_vocab(train_tokenizer([SENTENCES], VocabConfig(vocab_size=60, min_frequency=1)),
               root / "vocab")
    torch.manual_seed(0)
    bert = BertPretrainingModel(BertConfig(
        vocab_size=len((root / "vocab" / "vocab.txt").read_text().splitlines()),
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=MAX_LENGTH)).eval()
    save_model(bert, root / "pretrained")
    export(root, root / "hf", onnx=False)
    return root


def transformers_encoder(folder):
    return transformers.BertModel.from_pretrained(folder).eval()


def inputs(batch: int, length: int, vocab_size: int, seed: int) -> dict[str, torch.Tensor]:
    """Random tokens, both segments, and every row but the first padded at its end."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(1, batch):
        mask[row, length - row * length // (batch + 1):] = 0
    segments = torch.zeros(batch, length, dtype=torch.long)
    segments[:, length // 2:] = 1
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=segments)


@pytest.mark.slow  # torch's exporter: about 8 s of CPU, the first export in a process
def test_the_onnx_encoder_answers_as_transformers_at_any_batch_and_length(exported):
    folder = exported / "with-onnx"
    export(exported, folder, onnx=True)
    # the ONNX file is beside the weights, not in them
    assert sha256(folder / WEIGHTS_NAME) == sha256(exported / "hf" / WEIGHTS_NAME)
    session = onnxruntime.InferenceSession(str(folder / ONNX_FILE),
                                           providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(INPUTS)
    assert [i.shape for i in session.get_inputs()] == [["batch", "sequence"]] * len(INPUTS)
    assert [o.name for o in session.get_outputs()] == list(OUTPUTS)
    encoder = transformers_encoder(folder)
    for seed, (batch, length) in enumerate([(1, 5), (3, 17), (4, MAX_LENGTH)]):
        given = inputs(batch, length, encoder.config.vocab_size, seed)
        with torch.no_grad():
            expected = encoder(**given)
        got = session.run(list(OUTPUTS), {k: v.numpy() for k, v in given.items()})
        for name, value in zip(OUTPUTS, got, strict=True):
            np.testing.assert_allclose(value, expected[name].numpy(), atol=1e-4, rtol=0,
                                       err_msg=f"{name} at batch {batch}, length {length}")


def test_sentence_transformers_embeds_the_export_by_mean_pooling(exported):
    from sentence_transformers import SentenceTransformer  # ~2 s of imports: not at collection

    folder = exported / "hf"
    texts = ["the cat sat on the mat.", "paris", "berlin is the capital of germany and of "
             "the dog that slept on the rug."]  # padded to the longest in one batch
    embeddings = SentenceTransformer(str(folder), device="cpu").encode(
        texts, batch_size=len(texts), convert_to_tensor=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    # cut at the model's length, as sentence-transformers cuts the longest
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] == MAX_LENGTH
    assert (batch["attention_mask"] == 0).any()  # the padding is left out of the mean
    with torch.no_grad():
        hidden = transformers_encoder(folder)(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(embeddings, mean, atol=1e-5, rtol=0)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_export_without_onnx_replaces_one_with_it(exported, tmp_path):
    """`export.onnx: false` after `true`: the folder is the stage's own output, replaced."""
    folder = tmp_path / "hf"
    export(exported, folder, onnx=False)
    (folder / ONNX_FILE).parent.mkdir()
    (folder / ONNX_FILE).write_bytes(b"an earlier export's ONNX model")
    export(exported, folder, onnx=False)
    assert not (folder / "onnx").exists()
    assert all((folder / name).is_file() for name in SENTENCE_FILES)
    assert sha256(folder / WEIGHTS_NAME) == sha256(exported / "hf" / WEIGHTS_NAME)


def test_onnx_without_the_exporter_is_one_line_before_any_work(exported, tmp_path,
                                                               monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxscript" else find_spec(name, *a))
    with pytest.raises(BertError) as error:
        export(exported, tmp_path / "out", onnx=True)
    assert str(error.value) == ("export.onnx needs onnxscript, which is not installed: "
                                "pip install 'bertpretrain[onnx]'")
    assert not (tmp_path / "out").exists()
