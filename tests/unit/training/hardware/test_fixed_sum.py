"""The fixed tree that adds the micro-batches' gradients: the same bytes however the terms
are split into the processes' subtrees, and other bytes in another order (so the tree, not
luck, fixes them)."""

from __future__ import annotations

import pytest
import torch

from bertcore.training.hardware.fixed_sum import TreeSum, tree_sum

M = 8  # micro-batches


def terms() -> list[torch.Tensor]:
    """Float32 terms of wide magnitudes: their sum depends on the order of the additions."""
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(4096, generator=generator) * 10.0 ** (i % 4) for i in range(M)]


def split_sum(parts: list[torch.Tensor], processes: int) -> torch.Tensor:
    """What `processes` processes compute: each its contiguous run of the terms added as they
    come (TreeSum), then the subtrees' sums added in the tree (Distributed.tree_sum)."""
    share = len(parts) // processes
    subtrees = []
    for rank in range(processes):
        subtree = TreeSum()
        for term in parts[rank * share:(rank + 1) * share]:
            subtree.add(term)
        subtrees.append(subtree.total)
    return tree_sum(subtrees)


def test_every_split_into_processes_gives_the_same_bytes():
    parts = terms()
    one = split_sum(parts, 1)
    assert torch.equal(one, tree_sum(parts))
    for processes in (2, 4, 8):
        assert torch.equal(split_sum(parts, processes), one), processes
    # the terms are order-sensitive: left to right, or the processes' subtrees added left to
    # right (an all-reduce's order), give other bytes
    left_to_right = parts[0].clone()
    for term in parts[1:]:
        left_to_right += term
    assert not torch.equal(left_to_right, one)
    halves = [split_sum(parts[:4], 1), split_sum(parts[4:6], 1), split_sum(parts[6:], 1)]
    assert not torch.equal(halves[0] + halves[1] + halves[2], one)


def test_a_tree_takes_a_power_of_two_of_terms():
    with pytest.raises(ValueError, match="not 3"):
        tree_sum(terms()[:3])
    partial = TreeSum()
    for term in terms()[:3]:
        partial.add(term)
    with pytest.raises(ValueError, match="not 3"):
        _ = partial.total
