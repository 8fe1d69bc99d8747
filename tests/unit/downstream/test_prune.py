"""Head pruning: gates, importance against finite differences, the choice of heads, the really
smaller model, and its Hugging Face export with zeroed heads (both directions)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertcore.common.errors import ConfigError
from bertcore.downstream.config import PruneConfig
from bertcore.downstream.heads import (
    choose_heads,
    head_gate_gradients,
    head_importance,
    normalise_per_layer,
    prune_by_importance,
    prune_heads,
    speed_ratio,
)
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.hf import CONFIG_NAME, WEIGHTS_NAME, export_hf, load_model
from bertcore.saved.hf_names import to_hf_state_dict

transformers = pytest.importorskip("transformers")


def tiny(dtype=torch.float32, **changes) -> BertPretrainingModel:
    values = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=24, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertPretrainingModel(BertConfig(**{**values, **changes})).to(dtype).eval()
    # Random (not zero) biases and LayerNorm: a wrongly placed row or column would show.
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def batch(vocab_size: int = 40, size: int = 3, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (size, 12), generator=g)
    attention_mask = torch.ones(size, 12, dtype=torch.long)
    attention_mask[0, 9:] = 0
    token_type_ids = torch.zeros(size, 12, dtype=torch.long)
    token_type_ids[:, 6:] = 1
    mlm_labels = torch.full((size, 12), -100)
    mlm_labels[:, 2] = input_ids[:, 2]
    mlm_labels[1:, 7] = input_ids[1:, 7]
    return dict(input_ids=input_ids, token_type_ids=token_type_ids,
                attention_mask=attention_mask, mlm_labels=mlm_labels,
                nsp_labels=torch.arange(size) % 2)


def outputs(model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        out = model(**{k: v for k, v in inputs.items() if k not in ("mlm_labels", "nsp_labels")})
    real = inputs["attention_mask"].bool()
    return out.mlm_logits[real], out.nsp_logits


def set_gates(model, gates):
    for layer, gate in zip(model.layers, gates, strict=True):
        layer.attention.head_gate = gate


def test_a_gate_of_ones_is_the_unpruned_model():
    model, inputs = tiny(), batch()
    expected = outputs(model, inputs)
    set_gates(model, [torch.ones(4), torch.ones(3, 4)])  # per head, and per sequence and head
    for a, b in zip(outputs(model, inputs), expected, strict=True):
        assert torch.equal(a, b)


def test_gate_zero_is_the_head_removed_is_the_zeroed_hf_export(tmp_path):
    model, inputs = tiny(), batch()
    gate = torch.ones(4)
    gate[2] = 0.0
    set_gates(model, [torch.ones(4), gate])
    gated = outputs(model, inputs)
    set_gates(model, [None, None])
    assert (outputs(model, inputs)[0] - gated[0]).abs().max() > 1e-3  # head 2 of layer 1 matters

    pruned = copy.deepcopy(model)
    prune_heads(pruned, {1: [2]})
    assert pruned.config.pruned_heads == {1: [2]} and pruned.config.heads_per_layer == [4, 3]
    assert pruned.layers[1].attention.qkv.weight.shape == (3 * 24, 32)
    assert pruned.layers[1].attention.out.weight.shape == (32, 24)
    assert pruned.num_parameters() == model.num_parameters() - 4 * 32 * 8 - 3 * 8
    for a, b in zip(outputs(pruned, inputs), gated, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)

    # bertcore -> Hugging Face: full shapes, the head's rows and columns zero, same function
    export_hf(pruned, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / CONFIG_NAME).read_text())
    assert config["pruned_heads"] == {"1": [2]} and config["num_attention_heads"] == 4
    weights = load_file(tmp_path / "hf" / WEIGHTS_NAME)
    prefix = "bert.encoder.layer.1.attention."
    for name in ("query", "key", "value"):
        assert weights[f"{prefix}self.{name}.weight"].shape == (32, 32)
        assert not weights[f"{prefix}self.{name}.weight"][16:24].any()
        assert not weights[f"{prefix}self.{name}.bias"][16:24].any()
        assert weights[f"{prefix}self.{name}.weight"][24:].abs().sum() > 0
    assert not weights[f"{prefix}output.dense.weight"][:, 16:24].any()
    theirs = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        hf = theirs(**{k: inputs[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
    real = inputs["attention_mask"].bool()
    torch.testing.assert_close(hf.prediction_logits[real], gated[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(hf.seq_relationship_logits, gated[1], rtol=0, atol=1e-5)

    # Hugging Face -> bertcore: pruned_heads read, the smaller model rebuilt
    loaded = load_model(tmp_path / "hf")
    assert loaded.config == pruned.config
    assert loaded.num_parameters() == pruned.num_parameters()
    for name, tensor in pruned.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_a_transformers_4_checkpoint_with_physically_pruned_heads_loads(tmp_path):
    model = tiny()
    prune_heads(model, {0: [0, 3], 1: [1]})
    folder = tmp_path / "v4"
    folder.mkdir()
    # What transformers 4.x wrote: smaller query/key/value/output tensors, pruned_heads in config.
    tensors = to_hf_state_dict(model.state_dict(), 2)
    tensors.pop("cls.predictions.decoder.weight", None)
    save_file({k: v.contiguous() for k, v in tensors.items()}, folder / WEIGHTS_NAME)
    config = {**model.config.to_dict(), "model_type": "bert",
              "pruned_heads": {"0": [0, 3], "1": [1]}}
    (folder / CONFIG_NAME).write_text(json.dumps(config))
    assert load_file(folder / WEIGHTS_NAME)[
        "bert.encoder.layer.0.attention.self.query.weight"].shape == (16, 32)
    loaded = load_model(folder)
    assert loaded.config.heads_per_layer == [2, 3]
    inputs = batch()
    for a, b in zip(outputs(loaded, inputs), outputs(model, inputs), strict=True):
        assert torch.equal(a, b)


def loss_in_float64(model, inputs) -> float:
    """The batch's pretraining loss (mean MLM + mean NSP) times its size, computed in float64
    from the logits (the model's own loss is computed in float32)."""
    with torch.no_grad():
        out = model(**{k: inputs[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
    labels = inputs["mlm_labels"]
    mlm = torch.nn.functional.cross_entropy(out.mlm_logits[labels != -100], labels[labels != -100])
    nsp = torch.nn.functional.cross_entropy(out.nsp_logits, inputs["nsp_labels"])
    return float(mlm + nsp) * len(labels)


def test_importance_matches_finite_differences():
    model, inputs = tiny(torch.float64, initializer_range=0.2), batch(size=3)
    grads = head_gate_gradients(model, inputs)
    assert [g.shape for g in grads] == [(3, 4), (3, 4)]
    assert min(g.abs().min() for g in grads) > 1e-4  # every head matters a little here
    eps = 1e-6
    for layer in range(2):
        for x in range(3):
            for h in range(4):
                losses = []
                for sign in (1, -1):
                    gates = [torch.ones(3, 4, dtype=torch.float64) for _ in range(2)]
                    gates[layer][x, h] += sign * eps
                    set_gates(model, gates)
                    losses.append(loss_in_float64(model, inputs))
                set_gates(model, [None, None])
                numeric = (losses[0] - losses[1]) / (2 * eps)
                assert grads[layer][x, h].item() == pytest.approx(numeric, rel=1e-4)
    # The importance is the mean |gradient| over all sequences of all batches.
    other = batch(size=2, seed=5)
    expected = [(g.abs().sum(0) + o.abs().sum(0)) / 5
                for g, o in zip(grads, head_gate_gradients(model, other), strict=True)]
    importance = head_importance(model, [inputs, other])
    for a, b in zip(importance, expected, strict=True):
        torch.testing.assert_close(a, b)
    for scores in normalise_per_layer(importance):
        assert scores.norm().item() == pytest.approx(1.0)
    assert all(layer.attention.head_gate is None for layer in model.layers)
    assert all(p.grad is None for p in model.parameters())


def test_least_important_heads_go_and_a_layer_is_never_emptied():
    model = tiny(num_attention_heads=2, num_hidden_layers=3)
    scores = [torch.tensor([0.01, 0.02]), torch.tensor([0.9, 0.03]), torch.tensor([0.5, 0.6])]
    assert choose_heads(model, scores, 1) == {0: [0]}
    # layer 0's second head is next in line but the last of its layer: skipped
    assert choose_heads(model, scores, 2) == {0: [0], 1: [1]}
    assert choose_heads(model, scores, 3) == {0: [0], 1: [1], 2: [0]}
    assert choose_heads(model, scores, 6) == {0: [0], 1: [1], 2: [0]}

    steps = prune_by_importance(model, lambda m: [torch.rand(n) for n in
                                                  m.config.heads_per_layer], 0.99)
    assert model.config.heads_per_layer == [1, 1, 1]
    assert (steps.requested, steps.possible) == (5, 3)
    with pytest.raises(ConfigError, match="at least one head"):
        BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=8,
                   pruned_heads={0: [0, 1]})


def test_iterative_pruning_rescores_after_each_step_of_ten_percent():
    calls = []

    def score(model):
        calls.append(list(model.config.heads_per_layer))
        # head 0 of each layer matters least, then head 1, ...: re-scoring sees the survivors
        return [torch.arange(1.0, n + 1) for n in model.config.heads_per_layer]

    model = tiny(num_attention_heads=5, hidden_size=40, num_hidden_layers=2)
    steps = prune_by_importance(model, score, 0.4, iterative=True)
    assert calls == [[5, 5], [4, 5], [4, 4], [3, 4]]  # 10% of 10 heads = 1 head per step
    assert model.config.pruned_heads == {0: [0, 1], 1: [0, 1]}
    assert len(steps.removed) == 4
    one_shot = tiny(num_attention_heads=5, hidden_size=40, num_hidden_layers=2)
    calls.clear()
    prune_by_importance(one_shot, score, 0.4)
    assert len(calls) == 1 and one_shot.config.pruned_heads == {0: [0, 1], 1: [0, 1]}


@pytest.mark.parametrize("key, value", [("fraction", 1.0), ("fraction", -0.1), ("batches", 0),
                                        ("recovery_steps", -1), ("device", "tpu")])
def test_bad_params_are_config_errors(key, value):
    with pytest.raises(ConfigError, match=key):
        PruneConfig(**{key: value})


def test_a_speed_ratio_says_when_it_is_within_the_noise():
    """Rounds timed side by side: the fastest of each model gives the ratio; when some rounds
    were faster and some slower, the difference is noise (a busy machine's, not the model's)."""
    noisy = speed_ratio(before=[100.0, 40.0, 90.0], after=[60.0, 80.0, 95.0])
    assert noisy["speedup"] == pytest.approx(0.95)
    assert (noisy["low"], noisy["high"]) == (pytest.approx(0.6), pytest.approx(2.0))
    assert noisy["within_noise"]
    faster = speed_ratio(before=[50.0, 45.0, 48.0], after=[100.0, 70.0, 96.0])
    assert faster["speedup"] == pytest.approx(2.0) and not faster["within_noise"]
    assert speed_ratio([7.0, 8.0], [7.0, 8.0]) == {"speedup": 1.0, "low": 1.0, "high": 1.0,
                                                   "within_noise": True}
