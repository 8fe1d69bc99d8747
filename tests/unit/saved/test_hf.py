"""Weights on disk: our save/load round trip, export to a directory transformers loads with no
missing or unexpected weight, and import of a directory transformers wrote."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch
from helpers.tiny_pretrain import tiny_config as tiny_pretrain_config
from safetensors.torch import load_file

from bertcore.common.errors import BertError
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab
from bertcore.data.vocab.training import train_tokenizer
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.hf import export_hf, load_model, save_model
from bertcore.saved.hf_names import from_hf_state_dict

transformers = pytest.importorskip("transformers")

SENTENCES = [
    "the cat sat on the mat.",
    "the dog sat on the log.",
    "a bird flew over the house.",
    "paris is the capital of france.",
    "berlin is the capital of germany.",
]


def tiny_config(**overrides) -> BertConfig:
    values = dict(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertConfig(**{**values, **overrides})


def sample_inputs(vocab_size: int):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab_size, (2, 10), generator=g)
    attention_mask = torch.ones(2, 10, dtype=torch.long)
    attention_mask[1, 7:] = 0
    token_type_ids = torch.zeros(2, 10, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)


@pytest.fixture
def vocab_dir(tmp_path):
    config = VocabConfig(vocab_size=64, min_frequency=1)
    tokenizer = train_tokenizer([SENTENCES], config)
    out = tmp_path / "vocab"
    out.mkdir()
    save_vocab(tokenizer, out)
    return out


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record):
        self.records.append(record.getMessage())


def test_export_loads_in_transformers_with_no_warning_and_same_outputs(tmp_path, vocab_dir):
    torch.manual_seed(0)
    ours = BertPretrainingModel(
        tiny_config(vocab_size=len(vocab_dir.joinpath("vocab.txt").read_text().split()))
    ).eval()
    out = tmp_path / "hf"
    export_hf(ours, out, vocab_dir=vocab_dir)

    files = {p.name for p in out.iterdir()}
    assert files == {
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForPreTraining"]
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 32  # the model's positions, not 512
    keys = set(load_file(out / "model.safetensors"))
    assert "bert.encoder.layer.1.attention.self.query.weight" in keys
    assert not keys & {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}

    records = _Records()
    hf_logger = logging.getLogger("transformers")
    hf_logger.addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            theirs, info = transformers.BertForPreTraining.from_pretrained(
                out, output_loading_info=True
            )
    finally:
        hf_logger.removeHandler(records)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    # transformers 5 reports missing/unexpected weights as a WARNING "LOAD REPORT": none at all.
    assert records.records == []
    loading_warnings = [
        str(w.message)
        for w in caught
        if any(word in str(w.message).lower() for word in ("weight", "missing", "unexpected"))
    ]
    assert not loading_warnings, loading_warnings
    # The tie survived the trip: HF's decoder is its word embedding matrix.
    decoder = theirs.cls.predictions.decoder.weight
    assert decoder.data_ptr() == theirs.bert.embeddings.word_embeddings.weight.data_ptr()

    inputs = sample_inputs(ours.config.vocab_size)
    with torch.no_grad():
        a = ours(**inputs)
        b = theirs.eval()(**inputs)
    real = inputs["attention_mask"].bool()
    assert (a.mlm_logits - b.prediction_logits)[real].abs().max() <= 1e-5
    assert (a.nsp_logits - b.seq_relationship_logits).abs().max() <= 1e-5

    tokenizer = transformers.BertTokenizerFast.from_pretrained(out)
    ids = tokenizer("the cat sat.", "the dog sat.")["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3 and len(set(ids)) > 3


def test_transformers_save_pretrained_imports_into_ours(tmp_path):
    torch.manual_seed(1)
    config = tiny_config(type_vocab_size=3, hidden_act="gelu")
    theirs = transformers.BertForPreTraining(transformers.BertConfig(**config.to_dict())).eval()
    theirs.save_pretrained(tmp_path / "from_hf")
    ours = load_model(tmp_path / "from_hf").eval()
    assert ours.config == config
    inputs = sample_inputs(config.vocab_size)
    with torch.no_grad():
        a = ours(**inputs)
        b = theirs(**inputs)
    real = inputs["attention_mask"].bool()
    assert (a.mlm_logits - b.prediction_logits)[real].abs().max() <= 1e-5
    assert (a.nsp_logits - b.seq_relationship_logits).abs().max() <= 1e-5


def test_save_and_load_ours_round_trips_exactly(tmp_path):
    torch.manual_seed(2)
    model = BertPretrainingModel(tiny_config())
    save_model(model, tmp_path / "model")
    assert {p.name for p in (tmp_path / "model").iterdir()} == {"config.json", "model.safetensors"}
    loaded = load_model(tmp_path / "model")
    assert loaded.config == model.config and loaded.missing_weights == []
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    # Export, then import the export: same weights again.
    export_hf(model, tmp_path / "hf")
    again = load_model(tmp_path / "hf")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name


def test_head_less_checkpoint_loads_only_when_not_strict(tmp_path):
    config = tiny_config()
    transformers.BertModel(transformers.BertConfig(**config.to_dict())).save_pretrained(
        tmp_path / "m"
    )
    with pytest.raises(BertError, match="lacks"):
        load_model(tmp_path / "m")
    model = load_model(tmp_path / "m", strict=False)
    assert model.missing_weights and all(
        n.startswith(("mlm_head.", "nsp_head.")) for n in model.missing_weights
    )


def test_legacy_names_are_understood():
    """TF-era checkpoints: LayerNorm gamma/beta, a BertModel without the `bert.` prefix,
    the decoder bias under its tied name."""
    torch.manual_seed(3)
    model = BertPretrainingModel(tiny_config(num_hidden_layers=1))
    from bertcore.saved.hf_names import to_hf_state_dict

    hf = to_hf_state_dict(model.state_dict(), 1)
    legacy = {}
    for name, tensor in hf.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        )
        name = name.removeprefix("bert.")
        legacy["cls.predictions.decoder.bias" if name == "cls.predictions.bias" else name] = tensor
    legacy["embeddings.position_ids"] = torch.arange(32)[None]
    state, unexpected = from_hf_state_dict(legacy, 1)
    assert set(state) == set(model.state_dict()) and not unexpected  # nothing missing
    for name, tensor in model.state_dict().items():
        assert torch.equal(state[name], tensor), name


def test_one_line_errors_for_unusable_dirs(tmp_path, vocab_dir):
    with pytest.raises(BertError, match="not found"):
        load_model(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BertError, match=r"config\.json"):
        load_model(tmp_path / "empty")
    model = BertPretrainingModel(tiny_config(vocab_size=40))
    save_model(model, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(BertError, match="no model weights"):
        load_model(tmp_path / "m")
    save_model(model, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "vocab_size": 50}))
    with pytest.raises(BertError, match=r"do not fit its config\.json"):
        load_model(tmp_path / "m")
    with pytest.raises(BertError, match=r"has \d+ tokens but the model only 40"):
        export_hf(model, tmp_path / "hf", vocab_dir=vocab_dir)
    assert not (tmp_path / "hf").exists()


def nonfinite_model() -> BertPretrainingModel:
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_pretrain_config(64))
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("inf")
    return model


@pytest.mark.parametrize("write", [save_model, export_hf], ids=["save_model", "export_hf"])
def test_weights_that_are_not_finite_are_never_written(tmp_path, write):
    with pytest.raises(BertError, match=r"NaN or infinite values .*no model was written"):
        write(nonfinite_model(), tmp_path / "out")
    assert not (tmp_path / "out").exists()
