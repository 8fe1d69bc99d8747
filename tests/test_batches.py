"""Data order: per-epoch permutation, the split of a global batch over ranks and accumulation
micro-batches, exact resume, worker-count independence, evaluation batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import save_samples

from bertcore.common.errors import BertError, ConfigError
from bertcore.data.samples.store import SampleStore
from bertcore.training.batches import PretrainingBatches, epoch_order, eval_batches
from bertcore.training.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    PretrainingCollator,
    VocabSpec,
    slots_to_labels,
)

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


def global_steps(store, batch_size, accumulation, world_size, epoch=0, start_step=0, workers=0):
    """Per optimizer step: all ranks' micro-batch rows, rank by rank, micro-batch by
    micro-batch; plus the micro-batch sizes seen."""
    per_rank = [
        list(
            PretrainingBatches(
                store, collator(), batch_size, accumulation, seed=3, rank=rank,
                world_size=world_size, num_workers=workers,
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
    order = epoch_order(103, seed=3, epoch=0)
    seen = [sample_index(row) for step in one_process for row in step]
    assert seen == order[: 6 * 16].tolist()
    assert sorted(order.tolist()) == list(range(103))
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
    batches = PretrainingBatches(store, collator(), 16, 2, seed=3, rank=rank, world_size=2)
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


def test_invalid_settings(store):
    with pytest.raises(ConfigError, match="batch_size"):
        PretrainingBatches(store, collator(), 16, 3, seed=0)  # 16 not divisible by 3
    with pytest.raises(ConfigError, match="batch_size"):
        PretrainingBatches(store, collator(), 8, 2, seed=0, world_size=8)
    with pytest.raises(ConfigError, match="rank"):
        PretrainingBatches(store, collator(), 8, 1, seed=0, rank=2, world_size=2)
    with pytest.raises(BertError, match="batch_size"):
        PretrainingBatches(ListStore(5), collator(), 8, 1, seed=0)
    batches = PretrainingBatches(store, collator(), 16, 1, seed=0)
    assert batches.steps_per_epoch == 6 and batches.micro_batch_size == 16
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
