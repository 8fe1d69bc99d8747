"""Outputs put in place together: a stage that writes several (glue's reports, predictions
and models; a report's metrics, details and items) stages each whole (`atomic`), then
renames them into place one after another with SIGTERM and Ctrl-C held
(`interrupt.signals_held`), so that a signal leaves the last run's outputs or this run's,
never some of each. A signal that waited stops the stage after the renames, and its message
names what this run wrote (`Interrupted.replaced`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from bertcore.common.interrupt import signals_held


@contextlib.contextmanager
def outputs_together() -> Iterator[contextlib.ExitStack]:
    """A stack to enter each output's `atomic_file` or `atomic_dir` on: a failure in the block
    replaces none of them; once it succeeds, all are put in place, signals held."""
    with contextlib.ExitStack() as outputs:
        yield outputs
        with signals_held():
            outputs.close()
