"""Dynamic MLM masking: counts, rates (on >= 10^5 tokens), what is never touched, seeding,
whole words, and the collated batch format.

Tolerances: selection rate within ±0.5 percentage points of 15% where the cap does not bind;
the 80/10/10 split within ±1 point each (about ±4 standard deviations at these sizes). All
draws are seeded, so the tests are deterministic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.batches import slots_to_labels
from helpers.bert import REPO

from bertcore.common.errors import BertError, ConfigError
from bertcore.training.data.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    PretrainingCollator,
    VocabSpec,
    labels_to_slots,
    num_to_predict,
    sample_keys,
)
from bertstages.params import load_params, parse_section

VOCAB_SIZE = 1000
FIRST_CONTINUATION = 700  # ids >= 700 play `##` pieces
MASK, CLS, SEP, UNK = 4, 2, 3, 1


def dense_labels(batch: dict) -> torch.Tensor:
    """The batch's MLM slots as [B, L] labels (IGNORE_INDEX where nothing is predicted)."""
    return slots_to_labels(batch["mlm_positions"], batch["mlm_targets"],
                           batch["input_ids"].shape[1])


def make_vocab() -> VocabSpec:
    flags = np.arange(VOCAB_SIZE) >= FIRST_CONTINUATION
    return VocabSpec(VOCAB_SIZE, is_continuation=flags)


def make_items(count: int, seed: int = 0, epoch: int = 0, max_len: int = 128):
    """[CLS] A [SEP] B [SEP] with lengths 12..max_len, a few [UNK]s inside the text."""
    rng = np.random.default_rng(seed)
    items = []
    for index in range(count):
        total = int(rng.integers(12, max_len + 1))
        len_a = int(rng.integers(1, total - 4))
        len_b = total - 3 - len_a
        a = rng.integers(5, VOCAB_SIZE, len_a)
        b = rng.integers(5, VOCAB_SIZE, len_b)
        ids = np.concatenate([[CLS], a, [SEP], b, [SEP]]).astype(np.uint16)
        ids[rng.random(total) < 0.01] = UNK
        ids[0], ids[len_a + 1], ids[-1] = CLS, SEP, SEP
        items.append((epoch, index, ids, len_a + 2, index % 2))
    return items


def collate_all(items, config, seed=7, batch_size=64, vocab=None):
    """Collate in batches; return per-sample (masked, labels) trimmed to the sample length."""
    collator = PretrainingCollator(config, vocab or make_vocab(), seed)
    rows = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        batch = collator(chunk)
        labels = dense_labels(batch)
        for row, item in enumerate(chunk):
            n = len(item[2])
            rows.append((batch["input_ids"][row, :n].numpy(), labels[row, :n].numpy()))
    return rows


def candidates_of(ids: np.ndarray) -> np.ndarray:
    return ids.astype(np.int64) >= 5


@pytest.fixture(scope="module")
def items():
    items = make_items(2500)
    assert sum(len(item[2]) for item in items) >= 100_000
    return items


def outcome_fractions(items, rows):
    selected = masked = replaced = kept = 0
    for item, (inputs, labels) in zip(items, rows, strict=True):
        original = item[2].astype(np.int64)
        sel = labels != IGNORE_INDEX
        selected += sel.sum()
        masked += (sel & (inputs == MASK)).sum()
        kept += (sel & (inputs == original)).sum()
        replaced += (sel & (inputs != MASK) & (inputs != original)).sum()
    return selected, masked / selected, replaced / selected, kept / selected


def test_selection_rate_and_80_10_10_on_many_tokens(items):
    # the cap never binds here
    config = MaskingConfig(mlm_probability=0.15, max_predictions_per_seq=1000)
    rows = collate_all(items, config)
    candidates = sum(candidates_of(item[2]).sum() for item in items)
    selected, masked, replaced, kept = outcome_fractions(items, rows)
    assert candidates >= 90_000
    assert abs(selected / candidates - 0.15) < 0.005
    assert abs(masked - 0.8) < 0.01
    assert abs(replaced - 0.1) < 0.01
    assert abs(kept - 0.1) < 0.01


@pytest.mark.parametrize(("probability", "cap"), [(0.15, 20), (0.15, 5), (0.4, 40)])
def test_count_per_sequence_is_googles_with_cap(items, probability, cap):
    config = MaskingConfig(mlm_probability=probability, max_predictions_per_seq=cap)
    rows = collate_all(items[:600], config)
    for item, (_, labels) in zip(items, rows, strict=False):
        n = int(candidates_of(item[2]).sum())
        expected = min(cap, max(1, round(n * probability)))
        assert (labels != IGNORE_INDEX).sum() == expected


def test_num_to_predict():
    counts = np.array([0, 1, 3, 10, 30, 200])
    assert num_to_predict(counts, MaskingConfig(0.15, 20)).tolist() == [0, 1, 1, 2, 4, 20]
    assert num_to_predict(counts, MaskingConfig(0.4, 40)).tolist() == [0, 1, 1, 4, 12, 40]


@pytest.mark.parametrize("whole_word", [False, True])
def test_specials_padding_and_untouched_positions(items, whole_word):
    config = MaskingConfig(whole_word=whole_word)
    collator = PretrainingCollator(config, make_vocab(), seed=3)
    batch = collator(items[:500])
    lengths = batch["attention_mask"].sum(1)
    ids = np.zeros(batch["input_ids"].shape, dtype=np.int64)
    for row, item in enumerate(items[:500]):
        ids[row, : len(item[2])] = item[2]
    ids = torch.from_numpy(ids)
    labels = dense_labels(batch)
    selected = labels != IGNORE_INDEX
    assert not (selected & (ids < 5)).any()  # [PAD] [UNK] [CLS] [SEP] [MASK] never selected
    padding = torch.arange(ids.shape[1])[None] >= lengths[:, None]
    assert not (selected & padding).any()
    assert (batch["input_ids"][padding] == 0).all()
    assert torch.equal(batch["input_ids"][~selected], ids[~selected])
    assert torch.equal(labels[selected], ids[selected])
    replaced = selected & (batch["input_ids"] != MASK) & (batch["input_ids"] != ids)
    assert replaced.sum() > 100
    assert (batch["input_ids"][replaced] >= 5).all()
    assert (batch["input_ids"][replaced] < VOCAB_SIZE).all()


def test_random_replacements_cover_the_non_special_range(items):
    rows = collate_all(items, MaskingConfig(max_predictions_per_seq=1000))
    replacements = np.concatenate(
        [inp[(lab != IGNORE_INDEX) & (inp != MASK) & (inp != lab)] for inp, lab in rows]
    )
    assert replacements.min() >= 5 and replacements.max() < VOCAB_SIZE
    # Uniform over 5..999: mean 502, sd of the mean ~ 288 / sqrt(n).
    assert abs(replacements.mean() - 502) < 4 * 288 / np.sqrt(len(replacements))


def test_two_epochs_see_different_masks(items):
    config = MaskingConfig()
    first = collate_all(items[:300], config)
    again = collate_all(items[:300], config)
    later = collate_all([(1, *item[1:]) for item in items[:300]], config)
    other_seed = collate_all(items[:300], config, seed=8)
    same = [np.array_equal(a[1], b[1]) for a, b in zip(first, again, strict=True)]
    epoch_same = [np.array_equal(a[1], b[1]) for a, b in zip(first, later, strict=True)]
    seed_same = [np.array_equal(a[1], b[1]) for a, b in zip(first, other_seed, strict=True)]
    assert all(same)
    assert sum(epoch_same) < 10  # only a few tiny sequences can coincide
    assert sum(seed_same) < 10


@pytest.mark.parametrize("whole_word", [False, True])
def test_mask_depends_only_on_seed_epoch_index(items, whole_word):
    """Same samples in other batches, other orders, other padding: identical masks."""
    config = MaskingConfig(whole_word=whole_word)
    subset = items[:200]
    reference = collate_all(subset, config, batch_size=200)
    rng = np.random.default_rng(1)
    order = rng.permutation(len(subset))
    shuffled = [subset[i] for i in order]
    # Mixed with long unrelated samples (more padding) and in batches of 7.
    extra = [(0, 10_000 + i, *rest) for i, (_, _, *rest) in enumerate(make_items(40, seed=9))]
    mixed = []
    for start in range(0, len(shuffled), 5):
        mixed += shuffled[start : start + 5] + extra[(start // 5) % 40 :][:2]
    rows = collate_all(mixed, config, batch_size=7)
    by_index = {item[1]: row for item, row in zip(mixed, rows, strict=True)}
    for item, (inputs, labels) in zip(subset, reference, strict=True):
        got_inputs, got_labels = by_index[item[1]]
        assert np.array_equal(inputs, got_inputs)
        assert np.array_equal(labels, got_labels)


def words_of(ids: np.ndarray) -> list[list[int]]:
    """Reference word split: a candidate token plus the `##` candidates right after it."""
    words: list[list[int]] = []
    previous_candidate = False
    for pos, token in enumerate(ids.astype(np.int64)):
        candidate = token >= 5
        if candidate and token >= FIRST_CONTINUATION and previous_candidate:
            words[-1].append(pos)
        elif candidate:
            words.append([pos])
        previous_candidate = candidate
    return words


def test_whole_word_matches_googles_sequential_walk(items):
    """Selected sets equal a plain-Python Google walk over words ordered by the same keys;
    never a partial word; never more than the count; one 80/10/10 fate per word."""
    from bertcore.training.data.masking import position_hashes

    config = MaskingConfig(whole_word=True)
    subset = items[:800]
    rows = collate_all(subset, config, seed=11)
    exact = 0
    fates = {"mask": 0, "random": 0, "keep": 0}  # of the selected words
    random_pieces = drew_their_own_id = 0
    for item, (inputs, labels) in zip(subset, rows, strict=True):
        ids = item[2]
        words = words_of(ids)
        key = sample_keys(11, np.array([0]), np.array([item[1]]))
        select_key = position_hashes(key, len(ids))[0, :, 0]
        count = int(num_to_predict(np.array([sum(map(len, words))]), config)[0])
        chosen: list[int] = []
        for word in sorted(words, key=lambda w: int(select_key[w[0]])):
            if len(chosen) >= count:
                break
            if len(chosen) + len(word) > count:
                continue
            chosen += word
        selected = labels != IGNORE_INDEX
        assert sorted(np.flatnonzero(selected).tolist()) == sorted(chosen)
        exact += len(chosen) == count
        for word in words:
            picked = selected[word]
            assert picked.all() or not picked.any()
            if not picked.any():
                continue
            got, kept = inputs[word], inputs[word] == ids[word]
            if (got == MASK).all():
                fates["mask"] += 1
                continue
            assert not (got == MASK).any()  # never partly [MASK]
            if kept.all():
                fates["keep"] += 1
            else:
                fates["random"] += 1
                if len(word) > 1:
                    random_pieces += len(word)
                    drew_their_own_id += int(kept.sum())
    assert exact >= 0.95 * len(subset)
    assert sum(len(w) > 1 for item in subset for w in words_of(item[2])) > 1000
    words = sum(fates.values())
    assert abs(fates["mask"] / words - 0.8) < 0.03, fates
    assert abs(fates["random"] / words - 0.1) < 0.03, fates
    assert abs(fates["keep"] / words - 0.1) < 0.03, fates
    # A replaced word has every piece replaced: a piece of it keeps its id only when the
    # random draw hit that very id (1 in 995), never as a "kept" piece of a half-kept word.
    assert random_pieces > 200
    assert drew_their_own_id <= 2 + 3 * random_pieces / 995, (drew_their_own_id, random_pieces)


def test_whole_word_keeps_80_10_10(items):
    rows = collate_all(items, MaskingConfig(0.15, whole_word=True,
                                              max_predictions_per_seq=1000))
    selected, masked, replaced, kept = outcome_fractions(items, rows)
    candidates = sum(candidates_of(item[2]).sum() for item in items)
    assert 0.14 < selected / candidates <= 0.15 + 0.005
    assert abs(masked - 0.8) < 0.01
    assert abs(replaced - 0.1) < 0.01
    assert abs(kept - 0.1) < 0.01


def test_collated_batch_format():
    items = make_items(5, max_len=40)
    batch = PretrainingCollator(MaskingConfig(), make_vocab(), seed=0)(items)
    names = {"input_ids", "token_type_ids", "attention_mask", "mlm_positions", "mlm_targets",
             "nsp_labels"}
    assert set(batch) == names
    # the MLM slots: a static [B, max_predictions_per_seq] shape, positions in order
    slots = MaskingConfig().max_predictions_per_seq
    assert batch["mlm_positions"].shape == batch["mlm_targets"].shape == (len(items), slots)
    used = batch["mlm_targets"] != IGNORE_INDEX
    assert (batch["mlm_positions"][~used] == 0).all()
    labels = dense_labels(batch)
    longest = max(len(item[2]) for item in items)
    width = batch["input_ids"].shape[1]
    assert width % 8 == 0 and longest <= width < longest + 8
    for value in batch.values():
        assert value.dtype == torch.long
    assert batch["nsp_labels"].tolist() == [item[4] for item in items]
    for row, (_, _, ids, b_start, _) in enumerate(items):
        n = len(ids)
        expected_types = [0] * b_start + [1] * (n - b_start) + [0] * (width - n)
        assert batch["token_type_ids"][row].tolist() == expected_types
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (width - n)
        assert (labels[row, n:] == IGNORE_INDEX).all()
        count = int(used[row].sum())
        assert used[row, :count].all() and not used[row, count:].any()  # used slots first
        positions = batch["mlm_positions"][row, :count]
        assert (positions.diff() > 0).all() and (positions < n).all()
        assert torch.equal(batch["mlm_targets"][row, :count], torch.from_numpy(
            ids.astype(np.int64))[positions])


def test_sequence_without_candidates_and_exact_multiple_of_8():
    empty = np.array([CLS, SEP, UNK, SEP], dtype=np.uint16)
    full = np.array([CLS, *range(10, 24), SEP], dtype=np.uint16)  # 16 tokens
    collator = PretrainingCollator(MaskingConfig(0.15), make_vocab(), 0)
    batch = collator([(0, 0, empty, 2, 1), (0, 1, full, 5, 0)])
    assert batch["input_ids"].shape == (2, 16)
    labels = dense_labels(batch)
    assert (labels[0] == IGNORE_INDEX).all()
    assert (labels[1] != IGNORE_INDEX).sum() == 2  # round(14 * 0.15)


def test_config_validation_and_params_section():
    with pytest.raises(ConfigError, match="mlm_probability"):
        MaskingConfig(mlm_probability=0.0)
    with pytest.raises(ConfigError, match="mlm_probability"):
        MaskingConfig(mlm_probability=1.0)
    with pytest.raises(ConfigError, match="max_predictions_per_seq"):
        MaskingConfig(max_predictions_per_seq=0)
    parsed = parse_section(load_params(REPO / "params.yaml"), "masking", MaskingConfig)
    assert parsed == MaskingConfig(0.3, 40, False)
    with pytest.raises(ConfigError, match=r"masking\.mlm_probability"):
        parse_section({"masking": {"mlm_probability": 2}}, "masking", MaskingConfig)
    with pytest.raises(ValueError, match="is_continuation"):
        PretrainingCollator(MaskingConfig(whole_word=True), VocabSpec(100), 0)
    foreign = np.array([CLS, 50, 150, SEP], dtype=np.uint16)  # id 150 >= vocab size 100
    with pytest.raises(BertError, match="another vocabulary"):
        PretrainingCollator(MaskingConfig(), VocabSpec(100), 0)([(0, 0, foreign, 3, 0)])


def test_vocab_spec_from_tokens():
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s", "cat", "##ing"]
    spec = VocabSpec.from_tokens(tokens)
    assert (spec.vocab_size, spec.num_special, spec.mask_id) == (9, 5, 4)
    assert spec.is_continuation.tolist() == [False] * 6 + [True, False, True]
    # Google's layout: [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], then words.
    google = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    spec = VocabSpec.from_tokens([*google, "a", "##b"])
    assert (spec.num_special, spec.cls_id, spec.mask_id, spec.vocab_size) == (104, 101, 103, 106)
    with pytest.raises(ConfigError):
        VocabSpec.from_tokens(["[PAD]", "a"])


def test_labels_and_slots_convert_both_ways():
    labels = np.full((3, 10), IGNORE_INDEX)
    labels[0, [2, 5, 7]] = [11, 12, 13]
    labels[2, [9]] = [14]
    positions, targets = labels_to_slots(labels, slots=4)
    assert positions.tolist() == [[2, 5, 7, 0], [0, 0, 0, 0], [9, 0, 0, 0]]
    assert targets.tolist() == [[11, 12, 13, -100], [-100] * 4, [14, -100, -100, -100]]
    assert torch.equal(slots_to_labels(positions, targets, 10), torch.from_numpy(labels))
    # more slots than positions, and a sequence with more labels than slots
    positions, targets = labels_to_slots(labels[:, :4], slots=6)
    assert positions.shape == (3, 6) and targets[0].tolist() == [11] + [-100] * 5
    with pytest.raises(ValueError, match="3 labelled positions"):
        labels_to_slots(labels, slots=2)
