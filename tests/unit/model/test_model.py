"""The model: config validation, presets, and equivalence with transformers' BertForPreTraining
(same weights -> same logits, losses and gradients), plus the loss/count contract."""

from __future__ import annotations

import pytest
import torch

from bertcore.common.errors import ConfigError
from bertcore.model.bert import BertConfig, BertPretrainingModel, pretraining_loss
from bertcore.model.config import ModelConfig
from bertcore.saved.hf_names import to_hf_state_dict
from bertcore.training.data.masking import labels_to_slots
from bertstages.params import parse_section

transformers = pytest.importorskip("transformers")

TIED = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}


def random_config(seed: int) -> BertConfig:
    g = torch.Generator().manual_seed(seed)

    def pick(*choices):
        return choices[int(torch.randint(len(choices), (1,), generator=g))]

    heads = pick(1, 2, 4)
    return BertConfig(
        vocab_size=pick(37, 64, 101),
        hidden_size=heads * pick(4, 8),
        num_hidden_layers=pick(1, 2, 3),
        num_attention_heads=heads,
        intermediate_size=pick(16, 40),
        max_position_embeddings=pick(24, 40),
        type_vocab_size=pick(2, 3),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def random_batch(config: BertConfig, seed: int, batch: int = 4, length: int = 17):
    """Padding in the batch (rows of different lengths), segments A and B, labels on some
    real tokens, NSP labels of both classes."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([length, length - 6, 5, length - 1])[:batch]
    pos = torch.arange(length)
    attention_mask = (pos[None] < lengths[:, None]).long()
    input_ids = torch.randint(5, config.vocab_size, (batch, length), generator=g) * attention_mask
    token_type_ids = ((pos[None] >= (lengths[:, None] // 2)) & attention_mask.bool()).long()
    chosen = (torch.rand(batch, length, generator=g) < 0.3) & attention_mask.bool()
    chosen[:, 1] = True  # at least one label per row
    mlm_labels = torch.where(
        chosen, torch.randint(0, config.vocab_size, (batch, length), generator=g), -100
    )
    nsp_labels = torch.tensor([0, 1, 1, 0])[:batch]
    return input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels


def hf_twin(model: BertPretrainingModel, attn_implementation: str):
    """transformers' BertForPreTraining with our model's weights."""
    hf_config = transformers.BertConfig(**model.config.to_dict())
    twin = transformers.BertForPreTraining._from_config(
        hf_config, attn_implementation=attn_implementation
    )
    state = to_hf_state_dict(model.state_dict(), model.config.num_hidden_layers)
    result = twin.load_state_dict(state, strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) <= TIED, result
    return twin.eval()


# ------------------------------------------------------------------------------- config
def test_presets_have_the_published_sizes():
    sizes = {
        name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
        for name in ("tiny", "mini", "small", "medium", "base", "large")
        for c in [BertConfig.from_preset(name)]
    }
    assert sizes == {
        "tiny": (2, 128, 2, 512),
        "mini": (4, 256, 4, 1024),
        "small": (4, 512, 8, 2048),
        "medium": (8, 512, 8, 2048),
        "base": (12, 768, 12, 3072),
        "large": (24, 1024, 16, 4096),
    }
    base = BertConfig.from_preset("base")
    assert (base.layer_norm_eps, base.initializer_range, base.hidden_act) == (1e-12, 0.02, "gelu")
    with torch.device("meta"):  # sizes only, no memory or init time
        n = BertPretrainingModel(BertConfig.from_preset("base")).num_parameters()
    assert abs(n - 110_106_428) < 1_000  # BERT-base with its heads, as HF counts it


def test_every_hidden_act_the_config_accepts_is_an_activation_of_the_model():
    """The config (torch-free) lists the names; the model maps them: the two lists agree."""
    from bertcore.model.bert import ACTIVATIONS
    from bertcore.model.config import HIDDEN_ACTS

    assert tuple(ACTIVATIONS) == HIDDEN_ACTS
    for act in HIDDEN_ACTS:
        model = BertPretrainingModel(BertConfig.from_preset("tiny", vocab_size=16, hidden_act=act))
        assert model.encode(torch.tensor([[1, 2, 3]])).shape == (1, 3, 128)


def test_preset_overrides_and_validation():
    config = BertConfig.from_preset("tiny", vocab_size=99, hidden_size=64)
    assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (99, 64, 256)
    with pytest.raises(ConfigError, match="hidden_size"):
        BertConfig.from_preset("tiny", hidden_size=129)  # not a multiple of 2 heads
    with pytest.raises(ConfigError, match="preset"):
        BertConfig.from_preset("huge")
    with pytest.raises(ConfigError, match="num_layers"):
        BertConfig.from_preset("tiny", num_layers=3)
    with pytest.raises(ConfigError, match="hidden_dropout_prob"):
        BertConfig(hidden_dropout_prob=1.5)
    with pytest.raises(ConfigError, match="pad_token_id"):
        BertConfig(vocab_size=10, pad_token_id=10)


def test_model_params_section_parses_and_names_the_key():
    params = {"model": {"preset": "mini", "num_hidden_layers": 2, "hidden_dropout_prob": 0.0}}
    config = parse_section(params, "model", ModelConfig).to_config(vocab_size=500)
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (2, 256, 500)
    assert config.hidden_dropout_prob == 0.0
    with pytest.raises(ConfigError, match=r"model\.hidden_size.*num_attention_heads"):
        parse_section({"model": {"num_attention_heads": 3}}, "model", ModelConfig)
    with pytest.raises(ConfigError, match=r"model\.vocab_size"):
        parse_section({"model": {"vocab_size": 3}}, "model", ModelConfig)


def test_init_follows_bert():
    torch.manual_seed(0)
    model = BertPretrainingModel(BertConfig.from_preset("tiny", vocab_size=3000))
    layer = model.layers[0]
    assert abs(model.embeddings.tokens.weight[1:].std().item() - 0.02) < 1e-3
    assert abs(layer.ffn_in.weight.std().item() - 0.02) < 1e-3
    assert torch.all(model.embeddings.tokens.weight[0] == 0)  # [PAD] row, as HF
    assert torch.all(layer.attention.qkv.bias == 0) and torch.all(model.mlm_head.bias == 0)
    assert torch.all(layer.ffn_norm.weight == 1) and layer.ffn_norm.eps == 1e-12


def test_param_groups_split_matrices_from_biases_and_layernorm():
    model = BertPretrainingModel(random_config(1))
    decay, no_decay = model.param_groups(0.01)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.01, 0.0)
    ids = lambda group: {id(p) for p in group["params"]}  # noqa: E731
    names = {id(p): n for n, p in model.named_parameters()}
    assert ids(decay) | ids(no_decay) == set(names) and not ids(decay) & ids(no_decay)
    assert all(n.endswith("bias") or "norm" in n for n in map(names.get, ids(no_decay)))
    assert all(n.endswith("weight") and "norm" not in n for n in map(names.get, ids(decay)))


# --------------------------------------------------------------------- equivalence with HF
@pytest.mark.parametrize(
    "seed,attn_implementation", [(0, "sdpa"), (1, "eager"), (2, "sdpa"), (3, "eager")]
)
def test_same_function_as_transformers(seed, attn_implementation):
    torch.manual_seed(seed)
    config = random_config(seed)
    ours = BertPretrainingModel(config).eval()
    theirs = hf_twin(ours, attn_implementation)
    input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels = random_batch(config, seed)

    # Without labels: full logits.
    with torch.no_grad():
        out = ours(input_ids, token_type_ids, attention_mask)
        ref = theirs(
            input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask
        )
    real = attention_mask.bool()  # HF's logits at padded positions are as meaningless as ours
    assert (out.mlm_logits - ref.prediction_logits)[real].abs().max() <= 1e-5
    assert (out.nsp_logits - ref.seq_relationship_logits).abs().max() <= 1e-5

    # With labels: logits on the labelled positions only, loss = mean MLM + mean NSP.
    out = ours(input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels)
    ref = theirs(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        attention_mask=attention_mask,
        labels=mlm_labels,
        next_sentence_label=nsp_labels,
    )
    selected = mlm_labels != -100
    assert (out.mlm_logits - ref.prediction_logits[selected]).abs().max() <= 1e-5
    assert abs(out.loss.item() - ref.loss.item()) <= 1e-6 * abs(ref.loss.item())

    out.loss.backward()
    ref.loss.backward()
    ours_grads = to_hf_state_dict(
        {n: p.grad for n, p in ours.named_parameters()}, config.num_hidden_layers
    )
    theirs_params = dict(theirs.named_parameters())
    assert set(ours_grads) == set(theirs_params) - TIED
    for name, grad in ours_grads.items():
        torch.testing.assert_close(grad, theirs_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("seed", [0, 1])
def test_static_slots_give_the_losses_and_gradients_of_transformers(seed):
    """The training form of the labels (fixed [B, P] slots, unused ones ignored) computes
    exactly what HF's [B, L] labels compute: same loss, same gradients."""
    torch.manual_seed(seed)
    config = random_config(seed)
    ours = BertPretrainingModel(config).eval()
    theirs = hf_twin(ours, "sdpa")
    input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels = random_batch(config, seed)
    slots = int((mlm_labels != -100).sum(1).max()) + 3  # some slots stay unused
    positions, targets = (torch.from_numpy(a) for a in labels_to_slots(mlm_labels.numpy(), slots))
    out = ours(input_ids, token_type_ids, attention_mask, nsp_labels=nsp_labels,
               mlm_positions=positions, mlm_targets=targets)
    ref = theirs(input_ids=input_ids, token_type_ids=token_type_ids,
                 attention_mask=attention_mask, labels=mlm_labels, next_sentence_label=nsp_labels)
    assert out.mlm_logits.shape == (4, slots, config.vocab_size)
    used = targets != -100
    assert (out.mlm_logits[used] - ref.prediction_logits[mlm_labels != -100]).abs().max() <= 1e-5
    assert out.mlm_count.item() == int(used.sum())
    assert abs(out.loss.item() - ref.loss.item()) <= 1e-6 * abs(ref.loss.item())
    out.loss.backward()
    ref.loss.backward()
    ours_grads = to_hf_state_dict(
        {n: p.grad for n, p in ours.named_parameters()}, config.num_hidden_layers
    )
    theirs_params = dict(theirs.named_parameters())
    for name, grad in ours_grads.items():
        torch.testing.assert_close(grad, theirs_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)


def test_sums_counts_and_correct_counts():
    torch.manual_seed(5)
    config = random_config(5)
    model = BertPretrainingModel(config).eval()
    input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels = random_batch(config, 5)
    with torch.no_grad():
        full = model(input_ids, token_type_ids, attention_mask)
        out = model(input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels)
    selected = mlm_labels != -100
    logits, targets = full.mlm_logits[selected], mlm_labels[selected]
    assert out.mlm_logits.shape == (int(selected.sum()), config.vocab_size)
    assert out.mlm_count.item() == targets.numel() and out.nsp_count.item() == 4
    expected = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
    torch.testing.assert_close(out.mlm_loss_sum, expected)
    assert out.mlm_correct.item() == (logits.argmax(-1) == targets).sum().item()
    assert out.nsp_correct.item() == (full.nsp_logits.argmax(-1) == nsp_labels).sum().item()
    weighted = pretraining_loss(out, mlm_denominator=10, nsp_denominator=8, nsp_weight=0.5)
    torch.testing.assert_close(weighted, out.mlm_loss_sum / 10 + 0.5 * out.nsp_loss_sum / 8)


def test_accumulated_micro_batches_with_global_counts_equal_one_batch():
    """Sums + a global denominator: two halves accumulated give the full batch's gradient."""
    torch.manual_seed(6)
    config = random_config(6)
    model = BertPretrainingModel(config)
    batch = random_batch(config, 6)
    model(*batch).loss.backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    halves = [[t[:2] for t in batch], [t[2:] for t in batch]]
    mlm_total = int((batch[3] != -100).sum())
    for half in halves:
        out = model(*half)
        pretraining_loss(out, mlm_denominator=mlm_total, nsp_denominator=4).backward()
    for full, p in zip(whole, model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, full, rtol=1e-4, atol=1e-6)


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(7)
    config = random_config(7)
    model = BertPretrainingModel(config).eval()
    input_ids = torch.randint(5, config.vocab_size, (1, 9))
    padded = torch.cat([input_ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 9), torch.zeros(1, 6)], dim=1).long()
    with torch.no_grad():
        short = model(input_ids)
        long = model(padded, attention_mask=mask)
    torch.testing.assert_close(long.mlm_logits[:, :9], short.mlm_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(long.nsp_logits, short.nsp_logits, atol=1e-5, rtol=1e-5)


def test_a_batch_without_mlm_labels_gives_a_finite_loss():
    torch.manual_seed(8)
    config = random_config(8)
    model = BertPretrainingModel(config)
    input_ids, token_type_ids, attention_mask, _, nsp_labels = random_batch(config, 8)
    no_labels = torch.full_like(input_ids, -100)
    out = model(input_ids, token_type_ids, attention_mask, no_labels, nsp_labels)
    assert out.mlm_count.item() == 0 and out.mlm_logits.shape == (0, config.vocab_size)
    torch.testing.assert_close(out.loss, out.nsp_loss_sum / 4)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
