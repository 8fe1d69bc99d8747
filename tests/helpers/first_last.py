"""Fine-tune jobs whose first finishes after another one, for the tests that a stage takes
its fine-tunes' results in their order, not as they finish: the first job waits until a later
one has finished (a marker file, `FIRST_LAST_MARKER` in the environment, which the workers
inherit; `<marker>.first after` says that it waited for one). Imported by the test, which
puts them in place of the stage's job function, and by the worker processes (tests/ is on
their path, so as `helpers.first_last`). With one worker the first would wait WAIT_S: for
pools of two or more only."""

from __future__ import annotations

import os
import time
from pathlib import Path

from bertcore.downstream import finetune
from bertcore.downstream.glue import fine_tunes

MARKER = "FIRST_LAST_MARKER"
WAIT_S = 120  # at most: a test machine's worst


def _first_after_another(is_first: bool, run):
    marker = Path(os.environ[MARKER])
    if is_first:
        deadline = time.monotonic() + WAIT_S
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if marker.exists():  # what the test checks: the first did finish after another
            marker.with_name(marker.name + ".first after").touch()
        return run()
    result = run()
    marker.touch()
    return result


def finetune_job(job):
    """`finetune.fine_tune_job`, the first seed's pretrained fine-tune finishing later."""
    first = job.which == "pretrained" and job.recipe.seed == int(os.environ["FIRST_LAST_SEED"])
    return _first_after_another(first, lambda: finetune.fine_tune_job(job))


def glue_job(job):
    """`fine_tunes.fine_tune_job`, the first task's first seed finishing later."""
    first = (job.task.key, job.recipe.seed) == (os.environ["FIRST_LAST_TASK"],
                                                int(os.environ["FIRST_LAST_SEED"]))
    return _first_after_another(first, lambda: fine_tunes.fine_tune_job(job))
