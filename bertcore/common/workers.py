"""How many worker processes a data stage runs, from its `workers` key (0: one per core)."""

from __future__ import annotations

import logging

from bertcore.common.pool import available_cores

log = logging.getLogger(__name__)


def worker_count(requested: int, key: str) -> int:
    """`requested` (the value of `key`, e.g. corpus.workers), or one per core for 0. More
    than the cores is allowed, the output being the same, but warned of: the workers then
    take turns on the cores, each holding its own memory (64 on 2 cores ran 4x slower)."""
    cores = available_cores()
    if requested > cores:
        log.warning("%s: %d workers on the %d cores this stage may use take turns on them, "
                    "each with its own memory, and run slower than %d: set %s: 0 (one per "
                    "core)", key, requested, cores, cores, key)
    return requested or cores
