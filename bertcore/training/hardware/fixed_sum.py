"""Sums whose bytes do not depend on the number of processes: a fixed binary tree.

Floating-point addition is commutative but not associative, so a sum's bytes are fixed by the
way its terms are paired. The M terms of a step (M a power of two: one gradient per
micro-batch) are added in one binary tree over their indices: (0+1), (2+3), ..., then those
pairs' sums pairwise, up to the root. Each of W processes (a power of two dividing M) holds
the contiguous run of M/W terms below one node of that tree, sums it in the tree's order
(`TreeSum`), and the W subtree sums are gathered onto every process and added in the same
tree (`tree_sum`): every process gets the root, and one process alone computes the very
same additions. An elementwise addition of two tensors is exact to its order alone (no
reduction inside it), whatever the threads.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def tree_sum(terms: Sequence[torch.Tensor]) -> torch.Tensor:
    """The sum of `terms` (a power of two of them) in the fixed binary tree over their
    indices: neighbours pairwise, level by level."""
    level = list(terms)
    if not level or len(level) & (len(level) - 1):
        raise ValueError(f"a fixed tree sums a power of two of terms, not {len(level)}")
    while len(level) > 1:
        level = [level[i] + level[i + 1] for i in range(0, len(level), 2)]
    return level[0]


class TreeSum:
    """The same tree, built as the terms come (each added once it is computed, so at most
    log2(M) + 1 partial sums are held): `add` the terms in index order, `total` is
    `tree_sum` of them."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, torch.Tensor]] = []  # (subtree height, its sum)

    def add(self, term: torch.Tensor) -> None:
        height, node = 0, term
        while self._stack and self._stack[-1][0] == height:
            _, left = self._stack.pop()
            height, node = height + 1, left + node
        self._stack.append((height, node))

    @property
    def total(self) -> torch.Tensor:
        if len(self._stack) != 1:
            raise ValueError("a fixed tree sums a power of two of terms, "
                             f"not {sum(2**h for h, _ in self._stack)}")
        return self._stack[0][1]
