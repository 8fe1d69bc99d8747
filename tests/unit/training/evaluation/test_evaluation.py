"""Held-out metrics against sums computed by hand: a tiny model scores uneven batches (short
last batch, sequences with different numbers of masked tokens) through `eval_batches` and
`evaluate`, and every number is recomputed here from the model's full-sequence logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.samples import save_samples
from helpers.tiny_pretrain import tiny_config

from bertcore.model.bert import BertPretrainingModel
from bertcore.training.data.batches import eval_batches
from bertcore.training.data.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    PretrainingCollator,
    VocabSpec,
)
from bertcore.training.evaluation.metrics import (
    SCORES,
    EvalSums,
    SequenceOutcomes,
    evaluate,
    score_figure,
)
from bertcore.training.hardware.distributed import Distributed

VOCAB = 48
FREQUENT, SECOND = 7, 8  # the most frequent token, and the one the model is pushed towards


class Samples:
    """37 samples `[CLS] A [SEP] B [SEP]` of 7..39 tokens: 40% FREQUENT, 25% SECOND, the rest
    spread over the vocabulary; one in three has a random B."""

    def __init__(self, count: int = 37):
        rng = np.random.default_rng(0)
        self.samples = []
        for i in range(count):
            len_a, len_b = (int(x) for x in rng.integers(2, 19, 2))
            body = rng.choice([FREQUENT, SECOND, -1], p=[0.4, 0.25, 0.35], size=len_a + len_b)
            body = np.where(body < 0, rng.integers(5, VOCAB, body.shape), body)
            ids = np.concatenate([[2], body[:len_a], [3], body[len_a:], [3]]).astype(np.uint16)
            self.samples.append((ids, len_a + 2, int(i % 3 == 0)))

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index):
        return self.samples[index]


@pytest.fixture(scope="module")
def model() -> BertPretrainingModel:
    torch.manual_seed(0)
    net = BertPretrainingModel(tiny_config(VOCAB, dropout=0.1))
    with torch.no_grad():  # not a constant guess: most, not all, predictions are SECOND
        net.mlm_head.bias[SECOND] += 2.0
    return net


def batches(batch_size: int):
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5), VocabSpec(VOCAB),
                                   seed=3)
    return eval_batches(Samples(), collator, batch_size)


@torch.no_grad()
def by_hand(model: BertPretrainingModel, loader, max_batches: int | None = None) -> dict:
    """The metrics from the logits of every position (the MLM head on the whole sequence, not
    on the slots), picked at the masked positions, summed in float64 over all batches."""
    model.eval()
    mlm_loss = mlm_correct = nsp_loss = nsp_correct = 0.0
    targets_seen, nsp_labels, per_batch = [], [], []
    for number, batch in enumerate(loader):
        if max_batches is not None and number >= max_batches:
            break
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        rows = torch.arange(len(batch["input_ids"]))[:, None].expand_as(batch["mlm_positions"])
        used = batch["mlm_targets"] != IGNORE_INDEX
        logits = out.mlm_logits[rows[used], batch["mlm_positions"][used]].double()  # [N, V]
        targets = batch["mlm_targets"][used]
        mlm_loss += float(F.cross_entropy(logits, targets, reduction="sum"))
        mlm_correct += float((logits.argmax(-1) == targets).sum())
        nsp = out.nsp_logits.double()
        nsp_loss += float(F.cross_entropy(nsp, batch["nsp_labels"], reduction="sum"))
        nsp_correct += float((nsp.argmax(-1) == batch["nsp_labels"]).sum())
        targets_seen += targets.tolist()
        nsp_labels += batch["nsp_labels"].tolist()
        per_batch.append(int(used.sum()))
    count, sequences = len(targets_seen), len(nsp_labels)
    ones = sum(nsp_labels) / sequences
    return {
        "mlm_loss": mlm_loss / count,
        "mlm_accuracy": mlm_correct / count,
        "perplexity": math.exp(mlm_loss / count),
        "nsp_loss": nsp_loss / sequences,
        "nsp_accuracy": nsp_correct / sequences,
        "mlm_baseline_accuracy": max(np.bincount(targets_seen)) / count,
        "nsp_baseline_accuracy": max(ones, 1 - ones),
        "mlm_predictions": count,
        "sequences": sequences,
        "per_batch": per_batch,
    }


def test_metrics_are_the_sums_over_all_batches_divided_once(model):
    model.train()  # as during pretraining: evaluate must score in eval mode, then restore it
    expected = by_hand(model, batches(8))
    model.train()
    got = evaluate(model, batches(8)).to_dict()
    assert model.training
    # uneven batches: a short last one, and batches with different numbers of masked tokens,
    # so that a mean of per-batch means, or a wrong count, gives other numbers
    assert len(expected["per_batch"]) == 5 and expected["sequences"] == 37
    assert len(set(expected.pop("per_batch"))) > 2
    assert got == pytest.approx(expected, rel=1e-5)
    assert got["perplexity"] == math.exp(got["mlm_loss"])
    for name in ("mlm_accuracy", "nsp_accuracy", "mlm_baseline_accuracy",
                 "nsp_baseline_accuracy"):
        assert 0.0 < got[name] < 1.0, name  # strictly inside: a wrong count would show
    assert got["mlm_accuracy"] != got["mlm_baseline_accuracy"]
    # the result does not depend on the batch size (the masks of evaluation are fixed)
    assert evaluate(model, batches(37)).to_dict() == pytest.approx(got, rel=1e-5)


def test_max_batches_scores_the_first_batches_only(model):
    expected = by_hand(model, batches(8), max_batches=2)
    expected.pop("per_batch")
    got = evaluate(model, batches(8), max_batches=2).to_dict()
    assert got["sequences"] == 16
    assert got == pytest.approx(expected, rel=1e-5)


def test_bf16_evaluation_is_close_to_float32_but_not_float32(model):
    full = evaluate(model, batches(8)).to_dict()
    half = evaluate(model, batches(8), autocast_dtype=torch.bfloat16).to_dict()
    for name in ("mlm_loss", "nsp_loss"):
        assert half[name] != full[name], name  # autocast was on
        assert half[name] == pytest.approx(full[name], rel=1e-2), name


def test_scoring_a_batch_never_reads_the_device(model):
    # On a GPU a read (.item(), a shape that depends on values, as torch.bincount's) makes the
    # host wait on every batch. Fake tensors carry shapes but no values: any such read raises.
    from torch._subclasses.fake_tensor import FakeTensorMode

    batch = next(iter(batches(8)))
    with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True) as fake:
        fake_batch = {k: fake.from_tensor(v) for k, v in batch.items()}
        sums, items = EvalSums(VOCAB, torch.device("cpu")), SequenceOutcomes()
        out = model(**fake_batch)
        sums.add(out, fake_batch)
        sums.add(out, fake_batch)
        items.add(out, fake_batch)  # nor does recording each sequence's outcomes
    # and the same code on real tensors gives the numbers evaluate reads
    real = EvalSums(VOCAB, torch.device("cpu"))
    with torch.no_grad():
        real.add(model.eval()(**batch), batch)
    model.train()
    expected = evaluate(model, [batch]).to_dict()
    assert real.read(Distributed()).to_dict() == pytest.approx(expected, rel=1e-6)


def test_each_sequence_s_outcomes_add_up_to_the_sums(model):
    """What `evaluate` records per sequence, asked to, is what its sums add up: the MLM
    counts exactly, the losses to float round-off; each sequence's against the logits of the
    whole sequence, by hand; the same columns whatever the batch size, and the same sums
    as without them."""
    items = SequenceOutcomes()
    got = evaluate(model, batches(8), items=items)
    assert got == evaluate(model, batches(8))  # the sums untouched
    columns = items.columns()
    assert list(columns) == ["mlm_correct", "mlm_predicted", "mlm_loss_sum", "nsp_right",
                             "nsp_loss"]
    assert {len(column) for column in columns.values()} == {got.sequences}
    assert columns["mlm_predicted"].sum() == got.mlm_predictions
    assert columns["mlm_correct"].sum() / columns["mlm_predicted"].sum() == got.mlm_accuracy
    assert columns["nsp_right"].sum() / got.sequences == got.nsp_accuracy
    assert columns["mlm_loss_sum"].sum() / got.mlm_predictions == pytest.approx(got.mlm_loss,
                                                                                 rel=1e-6)
    assert columns["nsp_loss"].mean() == pytest.approx(got.nsp_loss, rel=1e-6)
    assert len(set(columns["mlm_predicted"].tolist())) > 2  # sequences of several lengths
    assert 0 < columns["mlm_correct"].sum() < columns["mlm_predicted"].sum()

    # each sequence by hand, from the MLM head on every position
    model.eval()
    row = 0
    for batch in batches(8):
        with torch.no_grad():
            out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        for i in range(len(batch["input_ids"])):
            used = batch["mlm_targets"][i] != IGNORE_INDEX
            logits = out.mlm_logits[i, batch["mlm_positions"][i][used]].double()
            targets = batch["mlm_targets"][i][used]
            assert columns["mlm_predicted"][row] == int(used.sum())
            assert columns["mlm_correct"][row] == int((logits.argmax(-1) == targets).sum())
            assert columns["mlm_loss_sum"][row] == pytest.approx(
                float(F.cross_entropy(logits, targets, reduction="sum")), rel=1e-5, abs=1e-6)
            nsp = out.nsp_logits[i].double()
            label = batch["nsp_labels"][i]
            assert columns["nsp_right"][row] == int(nsp.argmax() == label)
            assert columns["nsp_loss"][row] == pytest.approx(
                float(F.cross_entropy(nsp[None], label[None])), rel=1e-5, abs=1e-6)
            row += 1
    assert row == got.sequences
    one_batch = SequenceOutcomes()
    evaluate(model, batches(37), items=one_batch)
    for name, column in one_batch.columns().items():
        np.testing.assert_allclose(column, columns[name], rtol=1e-6, err_msg=name)

    # each score as a statistic of the columns: the value the sums give, inside its interval
    for score in SCORES:
        found = score_figure(score, "val", columns).estimate()
        assert found.value == pytest.approx(getattr(got, score), rel=1e-6), score
        assert found.low <= getattr(got, score) <= found.high and found.low < found.high, score


def test_an_interval_shrinks_as_the_val_pairs_grow(model):
    """Of the same model and masks, more val pairs: a narrower interval, about 1/sqrt(n)."""
    items = SequenceOutcomes()
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5), VocabSpec(VOCAB),
                                   seed=3)
    evaluate(model, eval_batches(Samples(400), collator, 64), items=items)
    columns = items.columns()
    for score in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        widths = []
        for n in (25, 100, 400):
            found = score_figure(score, "val", {k: v[:n] for k, v in columns.items()}).estimate()
            assert found.low <= found.value <= found.high
            widths.append(found.high - found.low)
        assert widths[0] > widths[1] > widths[2] > 0, (score, widths)
        assert widths[0] / widths[2] == pytest.approx(4, rel=0.5), (score, widths)


class PairSamples:
    """NSP samples as the store gives them, (ids, B's start, is_random_next): a B that follows
    shares words with its A (the same topic), a random B comes from another topic, unless
    `topical` is false: then B shares A's words or not whatever its label."""

    def __init__(self, count: int, seed: int, topical: bool = True):
        rng = np.random.default_rng(seed)
        self.samples = []
        for _ in range(count):
            random_next = int(rng.integers(2))
            topic, other = rng.choice(10, size=2, replace=False)
            shares = not random_next if topical else bool(rng.integers(2))
            a = 10 + 20 * topic + rng.choice(20, size=8)
            b = 10 + 20 * (topic if shares else other) + rng.choice(20, size=8)
            ids = np.array([2, *a, 3, *b, 3])
            self.samples.append((ids, len(a) + 2, random_next))
        # what the pairs point into: every A and B
        self.tokens = np.concatenate([np.delete(ids, [0, b_start - 1, len(ids) - 1])
                                      for ids, b_start, _ in self.samples])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


def test_bag_of_words_nsp_reads_the_shared_words_of_a_and_b():
    """The model-free NSP baseline `bert evaluate` reports: near perfect where a following B
    shares its A's words, near chance where sharing words says nothing of the label."""
    from bertcore.training.evaluation.nsp_baseline import bag_of_words_nsp

    assert bag_of_words_nsp(PairSamples(400, 0), PairSamples(200, 1)) >= 0.95
    unrelated = bag_of_words_nsp(PairSamples(400, 0, topical=False),
                                 PairSamples(200, 1, topical=False))
    assert 0.38 <= unrelated <= 0.62


def test_bert_evaluate_scores_each_length_with_its_masks_and_refuses_an_empty_val(tmp_path):
    """`bert evaluate`'s library: phase 1's val split and phase 2's (its MLM slots scaled to
    its length), each scored as `evaluate` scores the batches of `val_batches`, the longer
    one under `length_<N>` in both files; an empty val split is one line naming the key."""
    from helpers.tiny_pretrain import build_data

    from bertcore.common.errors import BertError
    from bertcore.data.samples.store import PHASE2_DIR, SampleStore
    from bertcore.data.vocab.files import read_vocab
    from bertcore.training.evaluation.metrics import CONTEXT, SCORES, EvalConfig, val_batches
    from bertcore.training.run.heldout import (
        heldout_report,
        heldout_splits,
        score_heldout,
        val_split,
    )

    data = build_data(tmp_path, phase2_length=64)
    samples, masking = data / "samples", MaskingConfig(max_predictions_per_seq=5)
    splits = heldout_splits(samples, data / "vocab", masking)
    assert [split.max_seq_length for split in splits] == [32, 64]
    assert [split.masking.max_predictions_per_seq for split in splits] == [5, 10]
    tokens = read_vocab(data / "vocab")
    torch.manual_seed(0)
    net = BertPretrainingModel(tiny_config(len(tokens), max_position_embeddings=64))
    vocab, config = VocabSpec.from_tokens(tokens), EvalConfig(batch_size=16, seed=3)
    scores, context = heldout_report(score_heldout(net, splits, vocab, config, torch.device("cpu")))
    assert list(scores) == [*SCORES, "length_64"]
    assert list(context) == [*CONTEXT, "nsp_bag_of_words_accuracy", "length_64"]
    longer = SampleStore(samples / PHASE2_DIR / "val")
    alone = evaluate(net, val_batches(longer, splits[1].masking, vocab, config))
    assert scores["length_64"] == alone.scores()
    assert context["length_64"]["mlm_predictions"] > 5 * context["length_64"]["sequences"]

    save_samples(samples / "val", [])
    with pytest.raises(BertError, match=r"val split .* is empty: raise corpus\.val_fraction"):
        val_split(samples)
