"""Data order: per-epoch permutation, the split of a global batch over ranks and accumulation
micro-batches, exact resume, worker-count independence, length bins, evaluation batches (the
order itself, its memory and its mixing: test_order.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from helpers.batches import slots_to_labels
from helpers.samples import save_samples

from bertcore.common.errors import BertError, ConfigError
from bertcore.data.samples.store import SampleStore
from bertcore.training.data import order
from bertcore.training.data.batches import PretrainingBatches, eval_batches
from bertcore.training.data.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    PretrainingCollator,
    VocabSpec,
    padded_length,
)
from bertcore.training.data.order import NO_BINS, EpochOrder, LengthBins

VOCAB_SIZE = 5000


class ListStore:
    """Stand-in for bertcore.data.samples.store.SampleStore. Sample i carries 5 + i at position 1
    (never lost: masking only replaces it in the inputs, and the label keeps the original)."""

    def __init__(self, count: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.samples = []
        for i in range(count):
            len_a, len_b = (int(x) for x in rng.integers(2, 30, 2))
            a = rng.integers(5, VOCAB_SIZE, len_a)
            a[0] = 5 + i
            b = rng.integers(5, VOCAB_SIZE, len_b)
            ids = np.concatenate([[2], a, [3], b, [3]]).astype(np.uint16)
            self.samples.append((ids, len_a + 2, i % 3 == 0))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        return self.samples[index]

    @property
    def lengths(self):
        return np.array([len(sample[0]) for sample in self.samples])


def collator(seed: int = 5) -> PretrainingCollator:
    return PretrainingCollator(MaskingConfig(), VocabSpec(VOCAB_SIZE), seed)


def rows(batch: dict[str, torch.Tensor]) -> list[tuple]:
    """Each sample of a batch, padding stripped: (masked ids, labels, types, nsp)."""
    out = []
    labels = slots_to_labels(batch["mlm_positions"], batch["mlm_targets"],
                             batch["input_ids"].shape[1])
    for r, n in enumerate(batch["attention_mask"].sum(1).tolist()):
        out.append(
            (
                tuple(batch["input_ids"][r, :n].tolist()),
                tuple(labels[r, :n].tolist()),
                tuple(batch["token_type_ids"][r, :n].tolist()),
                int(batch["nsp_labels"][r]),
            )
        )
    return out


def sample_index(row: tuple) -> int:
    inputs, labels = row[0], row[1]
    original = labels[1] if labels[1] != IGNORE_INDEX else inputs[1]
    return original - 5


def global_steps(store, batch_size, accumulation, world_size, epoch=0, start_step=0, workers=0,
                 bins=NO_BINS):
    """Per optimizer step: all ranks' micro-batch rows, rank by rank, micro-batch by
    micro-batch; plus the micro-batch sizes seen."""
    per_rank = [
        list(
            PretrainingBatches(
                store, collator(), batch_size, accumulation * world_size, seed=3, rank=rank,
                world_size=world_size, num_workers=workers, bins=bins,
            ).iterate(epoch, start_step)
        )
        for rank in range(world_size)
    ]
    steps = []
    for step in zip(*per_rank, strict=True):
        step_rows, sizes = [], []
        for rank_micro in step:
            assert len(rank_micro) == accumulation
            for micro in rank_micro:
                sizes.append(micro["input_ids"].shape[0])
                step_rows += rows(micro)
        assert set(sizes) == {batch_size // (world_size * accumulation)}
        steps.append(step_rows)
    return steps


@pytest.fixture(scope="module")
def store():
    return ListStore(103)


@pytest.fixture(scope="module")
def one_process(store):
    return global_steps(store, batch_size=16, accumulation=1, world_size=1)


def test_one_process_epoch_is_the_seeded_permutation(store, one_process):
    assert len(one_process) == 103 // 16  # last partial batch dropped
    epoch = EpochOrder(103, seed=3, epoch=0)(np.arange(103))
    seen = [sample_index(row) for step in one_process for row in step]
    assert seen == epoch[: 6 * 16].tolist()
    assert sorted(epoch.tolist()) == list(range(103))
    for step in one_process:
        for row in step:
            assert row[3] == int(sample_index(row) % 3 == 0)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("accumulation", [1, 2])
def test_ranks_and_micro_batches_partition_the_global_batch(
    store, one_process, world_size, accumulation
):
    steps = global_steps(store, 16, accumulation, world_size)
    assert len(steps) == len(one_process)
    for got, expected in zip(steps, one_process, strict=True):
        # Same samples with the same masks; concatenated rank-major they are even in order.
        assert sorted(got) == sorted(expected)
        assert got == expected


def test_ranks_get_disjoint_shards(store):
    shards = [
        {sample_index(row) for step in global_steps_rank(store, rank) for row in step}
        for rank in range(2)
    ]
    assert not shards[0] & shards[1]
    assert len(shards[0]) == len(shards[1]) == 6 * 8


def global_steps_rank(store, rank):
    batches = PretrainingBatches(store, collator(), 16, 4, seed=3, rank=rank, world_size=2)
    return [[row for micro in step for row in rows(micro)] for step in batches.iterate(0)]


def test_epochs_reorder_and_remask(store, one_process):
    second = global_steps(store, 16, 1, 1, epoch=1)
    first_order = [sample_index(row) for step in one_process for row in step]
    second_order = [sample_index(row) for step in second for row in step]
    assert first_order != second_order
    by_index = {sample_index(row): row for step in one_process for row in step}
    remasked = sum(
        by_index[sample_index(row)][1] != row[1]
        for step in second
        for row in step
        if sample_index(row) in by_index
    )
    common = len(set(first_order) & set(second_order))
    assert remasked >= 0.9 * common


@pytest.mark.parametrize("start_step", [0, 1, 4, 6])
def test_resume_yields_exactly_the_remaining_steps(store, one_process, start_step):
    resumed = global_steps(store, 16, 2, 2, start_step=start_step)
    assert resumed == one_process[start_step:]


def test_workers_give_identical_tensors(store):
    def tensors(workers):
        batches = PretrainingBatches(store, collator(), 16, 2, seed=3, num_workers=workers)
        return [micro for step in batches.iterate(2, start_step=1) for micro in step]

    serial, parallel = tensors(0), tensors(2)
    assert len(serial) == len(parallel) == 10
    for a, b in zip(serial, parallel, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name])


# ------------------------------------------------------------------------------ length bins
BINS = LengthBins(width=8, max_length=64)  # ListStore's lengths: 7..61


@pytest.fixture(scope="module")
def long_store():
    return ListStore(400, seed=1)


@pytest.fixture(scope="module")
def binned(long_store):
    return global_steps(long_store, batch_size=8, accumulation=1, world_size=1, bins=BINS)


def test_binned_steps_draw_each_from_one_bin_and_every_sample_at_most_once(long_store, binned):
    bin_of = BINS.of(long_store.lengths)
    sizes = np.bincount(bin_of, minlength=BINS.count)
    assert len(binned) == (sizes // 8).sum() < 400 // 8  # each bin's remainder is dropped
    steps = [[sample_index(row) for row in step] for step in binned]
    for step in steps:
        assert len(set(bin_of[step])) == 1
    seen = [index for step in steps for index in step]
    assert len(seen) == len(set(seen))
    left = np.bincount(bin_of[np.setdiff1d(np.arange(400), seen)], minlength=BINS.count)
    assert (left == sizes % 8).all()
    # consecutive steps come from different bins, in the stream's order, not bin after bin
    changes = sum(bin_of[a[0]] != bin_of[b[0]] for a, b in itertools.pairwise(steps))
    assert changes > len(steps) / 2


def test_binned_micro_batches_pad_to_within_a_bin(long_store, binned):
    unbinned = global_steps(long_store, 8, 1, 1)
    assert len(unbinned) == 400 // 8

    def padding(steps):
        tokens = [len(row[0]) for step in steps for row in step]
        padded = [padded_length(max(len(row[0]) for row in step)) * len(step) for step in steps]
        return 1 - sum(tokens) / sum(padded)

    assert padding(binned) < 0.12 < 0.25 < padding(unbinned)


@pytest.mark.parametrize("world_size, accumulation", [(2, 1), (2, 2), (4, 2)])
def test_binned_steps_are_the_same_for_any_split_and_resume_exactly(long_store, binned,
                                                                    world_size, accumulation):
    assert global_steps(long_store, 8, accumulation, world_size, bins=BINS) == binned
    for start_step in (1, 17, len(binned) - 1, len(binned)):
        resumed = global_steps(long_store, 8, accumulation, world_size, start_step=start_step,
                               bins=BINS)
        assert resumed == binned[start_step:]


def test_the_steps_do_not_depend_on_how_the_stream_is_chunked(long_store, binned, monkeypatch):
    """The positions are dealt into the bins a chunk at a time: the steps, and where a
    resumed epoch picks up, are those of one stream, whatever the chunk."""
    for chunk in (1, 7, 64):
        monkeypatch.setattr(order, "CHUNK", chunk)
        assert global_steps(long_store, 8, 1, 1, bins=BINS) == binned
        assert global_steps(long_store, 8, 1, 1, start_step=30, bins=BINS) == binned[30:]


def test_binned_workers_give_identical_tensors(long_store):
    def tensors(workers):
        batches = PretrainingBatches(long_store, collator(), 16, 2, seed=3, bins=BINS,
                                     num_workers=workers)
        return [micro for step in batches.iterate(1, start_step=2) for micro in step]

    serial, parallel = tensors(0), tensors(2)
    assert len(serial) == len(parallel) > 10
    for a, b in zip(serial, parallel, strict=True):
        for name in a:
            assert torch.equal(a[name], b[name])


def test_a_batch_no_bin_holds_names_the_section_batch_size_and_bin_width(long_store):
    with pytest.raises(BertError, match=r"only 5 training samples for a batch of 8: lower "
                                        r"phase2\.batch_size"):
        PretrainingBatches(ListStore(5), collator(), 8, 1, seed=0, section="phase2")
    largest = int(np.bincount(BINS.of(long_store.lengths)).max())
    with pytest.raises(BertError, match=rf"no length bin of the 400 training samples holds a "
                                        rf"batch of {largest + 1} .* holds {largest}\): lower "
                                        r"phase2\.batch_size or raise phase2\.length_bin_width"):
        PretrainingBatches(long_store, collator(), largest + 1, 1, seed=0, bins=BINS,
                           section="phase2")


def test_invalid_settings(store):
    with pytest.raises(ConfigError, match="batch_size"):
        PretrainingBatches(store, collator(), 16, 32, seed=0)  # 16 not divisible by 32
    with pytest.raises(BertError, match=r"8 processes cannot share train\.micro_batches"):
        PretrainingBatches(store, collator(), 8, 2, seed=0, world_size=8)
    with pytest.raises(BertError, match=r"3 processes .* run 1, 2 or 4 processes"):
        PretrainingBatches(store, collator(), 12, 4, seed=0, world_size=3)
    with pytest.raises(ConfigError, match="rank"):
        PretrainingBatches(store, collator(), 8, 2, seed=0, rank=2, world_size=2)
    with pytest.raises(BertError, match=r"lower train\.batch_size"):
        PretrainingBatches(ListStore(5), collator(), 8, 1, seed=0)
    with pytest.raises(ConfigError, match="length_bin_width"):
        LengthBins(width=0, max_length=64)
    batches = PretrainingBatches(store, collator(), 16, 1, seed=0)
    assert batches.steps_per_epoch == 6
    assert len(next(batches.iterate(0))[0]["input_ids"]) == 16  # one micro-batch of 16
    with pytest.raises(ConfigError, match="start_step"):
        next(batches.iterate(0, start_step=7))
    assert list(batches.iterate(0, start_step=6)) == []


def test_eval_batches_are_sequential_fixed_and_shardable(store):
    loader = eval_batches(store, collator(seed=1), batch_size=16)
    assert len(loader) == 7
    first = [row for batch in loader for row in rows(batch)]
    again = [row for batch in loader for row in rows(batch)]
    assert [sample_index(row) for row in first] == list(range(103))
    assert first == again
    shards = [
        [row for batch in eval_batches(store, collator(seed=1), 16, rank=r, world_size=2)
         for row in rows(batch)]
        for r in range(2)
    ]
    assert sorted(shards[0] + shards[1]) == sorted(first)
    assert len(shards[0]) == 3 * 16 + 7 and len(shards[1]) == 3 * 16


def test_works_over_the_on_disk_sample_store(tmp_path, store):
    """The same batches from bertcore.data.samples.store.SampleStore (memory-mapped, reopened by
    path in DataLoader workers) as from the in-memory stand-in holding the same samples."""
    split = tmp_path / "train"
    save_samples(split, store.samples)
    on_disk = SampleStore(split)

    def tensors(source, workers):
        batches = PretrainingBatches(source, collator(), 16, 2, seed=3, num_workers=workers)
        return [micro for step in batches.iterate(1, start_step=3) for micro in step]

    def evaluation(source):
        return list(eval_batches(source, collator(), 32, num_workers=2))

    pairs = list(zip(tensors(store, 0), tensors(on_disk, 2), strict=True))
    pairs += list(zip(evaluation(store), evaluation(on_disk), strict=True))
    assert len(pairs) == 6 + 4
    for a, b in pairs:
        for name in a:
            assert torch.equal(a[name], b[name])


@pytest.mark.parametrize("workers", [0, 2])
def test_loading_leaves_the_global_torch_rng_alone(store, workers):
    """Dropout draws from the global RNG: loading batches must not shift it, or a resumed
    run would see other dropout masks than an uninterrupted one."""
    torch.manual_seed(11)
    expected = torch.rand(4)
    torch.manual_seed(11)
    batches = PretrainingBatches(store, collator(), 16, 1, seed=3, num_workers=workers)
    next(iter(batches.iterate(0, 1)))
    list(eval_batches(store, collator(seed=1), batch_size=16, num_workers=workers))
    assert torch.equal(torch.rand(4), expected)


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
