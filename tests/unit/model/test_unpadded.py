"""The unpadded encoder (`encode(..., unpad=True)`, `bertcore.model.packing`) is the padded
model's function: in float32 the same outputs and the same gradient of every parameter, to
1e-5, on batches of mixed lengths, through every head (MLM on slots, on labels and on every
position; NSP; the classifier and the regression head), with pruned heads and head gates."""

from __future__ import annotations

import pytest
import torch

from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.model.packing import Packing

TOLERANCE = 1e-5


def config(seed: int, **overrides) -> BertConfig:
    """A small random architecture, dropout off (its masks are drawn per shape)."""
    g = torch.Generator().manual_seed(seed)
    heads = [2, 4][seed % 2]
    fields = dict(vocab_size=int(torch.randint(40, 90, (1,), generator=g)),
                  hidden_size=heads * 8, num_hidden_layers=2, num_attention_heads=heads,
                  intermediate_size=40, max_position_embeddings=32, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    return BertConfig(**{**fields, **overrides})


def mixed_batch(config: BertConfig, seed: int) -> dict[str, torch.Tensor]:
    """Six rows of lengths 1 to the full 19, padded after their tokens; two segments; MLM
    labels on some real tokens (at least one per row) and their slots; NSP labels of both
    classes."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([19, 3, 11, 1, 7, 14])
    length, rows = 19, len(lengths)
    columns = torch.arange(length)
    mask = columns[None] < lengths[:, None]
    ids = torch.randint(5, config.vocab_size, (rows, length), generator=g) * mask
    types = ((columns[None] >= lengths[:, None] // 2) & mask).long()
    chosen = (torch.rand(rows, length, generator=g) < 0.4) & mask
    chosen[:, 0] = True  # a label in every row
    labels = torch.where(chosen, torch.randint(0, config.vocab_size, (rows, length),
                                               generator=g), -100)
    slots = int(chosen.sum(1).max()) + 2  # some slots unused
    positions = torch.zeros(rows, slots, dtype=torch.long)
    targets = torch.full((rows, slots), -100)
    for row in range(rows):
        where = chosen[row].nonzero().squeeze(1)
        positions[row, : len(where)], targets[row, : len(where)] = where, labels[row, where]
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask.long(),
                mlm_labels=labels, mlm_positions=positions, mlm_targets=targets,
                nsp_labels=torch.tensor([0, 1, 1, 0, 1, 0]))


def outputs_and_gradients(model: torch.nn.Module, run) -> tuple[list[torch.Tensor], dict]:
    """`run(model)` -> (outputs, scalar to differentiate); the outputs and every gradient."""
    model.zero_grad(set_to_none=True)
    outputs, scalar = run(model)
    scalar.backward()
    return ([o.detach() for o in outputs],
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})


def assert_same_function(model: torch.nn.Module, run) -> None:
    """`run(model, unpad)` gives the same outputs and gradients padded and unpadded."""
    padded = outputs_and_gradients(model, lambda m: run(m, False))
    unpadded = outputs_and_gradients(model, lambda m: run(m, True))
    for ours, reference in zip(unpadded[0], padded[0], strict=True):
        torch.testing.assert_close(ours, reference, rtol=TOLERANCE, atol=TOLERANCE)
    assert unpadded[1].keys() == padded[1].keys()
    for name, grad in padded[1].items():
        torch.testing.assert_close(unpadded[1][name], grad, rtol=TOLERANCE, atol=TOLERANCE,
                                   msg=name)


@pytest.mark.parametrize("seed", [0, 1])
def test_pretraining_losses_logits_and_gradients_are_the_padded_ones(seed):
    torch.manual_seed(seed)
    model = BertPretrainingModel(config(seed)).train()
    batch = mixed_batch(model.config, seed)

    def slots(m, unpad):  # the training form: MLM on fixed slots, NSP
        out = m(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                nsp_labels=batch["nsp_labels"], mlm_positions=batch["mlm_positions"],
                mlm_targets=batch["mlm_targets"], unpad=unpad)
        used = out.mlm_logits[batch["mlm_targets"] != -100]
        return [used, out.nsp_logits, out.mlm_loss_sum, out.nsp_loss_sum], out.loss

    def labels(m, unpad):  # Hugging Face's form: MLM on the labelled positions
        out = m(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                mlm_labels=batch["mlm_labels"], nsp_labels=batch["nsp_labels"], unpad=unpad)
        return [out.mlm_logits, out.loss], out.loss

    def every_position(m, unpad):  # no labels: logits everywhere, compared on real tokens
        out = m(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                unpad=unpad)
        real = out.mlm_logits[batch["attention_mask"].bool()]
        return [real, out.nsp_logits], real.square().mean() + out.nsp_logits.sum()

    for run in (slots, labels, every_position):
        assert_same_function(model, run)


@pytest.mark.parametrize("labels", [["no", "yes", "maybe"], []], ids=["classes", "regression"])
def test_classifier_logits_and_gradients_are_the_padded_ones(labels):
    torch.manual_seed(2)
    model = BertForSequenceClassification(config(2), labels).train()
    batch = mixed_batch(model.config, 2)

    def run(m, unpad):
        logits = m(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                   unpad=unpad)
        return [logits], (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum()

    assert_same_function(model, run)


def test_pruned_heads_and_head_gates_are_the_padded_ones():
    """A pruned layer's fewer heads, and the gates whose gradient head pruning reads."""
    torch.manual_seed(3)
    model = BertPretrainingModel(config(3, pruned_heads={0: [1, 3]})).train()
    batch = mixed_batch(model.config, 3)
    for layer in model.layers:
        layer.attention.head_gate = torch.ones(6, layer.attention.num_heads, requires_grad=True)

    def run(m, unpad):
        for layer in m.layers:
            layer.attention.head_gate.grad = None
        out = m(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                nsp_labels=batch["nsp_labels"], mlm_positions=batch["mlm_positions"],
                mlm_targets=batch["mlm_targets"], unpad=unpad)
        out.loss.backward(retain_graph=True)
        gates = [layer.attention.head_gate.grad.clone() for layer in m.layers]
        return [out.loss, *gates], out.loss

    assert_same_function(model, run)


def test_without_padding_or_without_a_mask_unpadding_changes_nothing():
    torch.manual_seed(4)
    model = BertPretrainingModel(config(4)).eval()
    ids = torch.randint(5, model.config.vocab_size, (3, 12))
    with torch.no_grad():
        reference = model.encode(ids)
        assert torch.equal(model.encode(ids, unpad=True), reference)
        full = model.encode(ids, attention_mask=torch.ones_like(ids), unpad=True)
    torch.testing.assert_close(full, reference, rtol=TOLERANCE, atol=TOLERANCE)


def test_packing_keeps_the_real_rows_in_order_and_pads_with_zeros():
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 0, 0]])
    x = torch.arange(12.0).view(3, 4, 1).expand(3, 4, 2)
    packing = Packing.of(mask)
    packed = packing.unpad(x)
    assert packed[:, 0].tolist() == [0, 1, 5, 6, 7, 8]
    assert packing.columns.tolist() == [0, 1, 1, 2, 3, 0]
    assert torch.equal(packing.pad(packed), x * mask[..., None])
