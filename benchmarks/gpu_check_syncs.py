"""Does the CPU ever wait for the GPU in a training step? Two independent answers, on CUDA only:

- host syncs: CUDA's sync debug mode warns on every call that makes the host wait (a copy to
  the host, `.item()`, a synchronize, a data-dependent shape); the figure is the TOTAL over a
  number of steps, written `syncs/steps` (a mean rounded down would read 1 sync in 3 steps as
  0);
- a busy stream: a step that never waits returns while the GPU still has its work queued, so
  the stream is busy when the step returns; `busy/steps` counts the steps for which it was.

`datapath_check` measures both over steps fed as training feeds them: `Trainer.train()`,
batches from the sample store through the DataLoader (pinned on a GPU), the model as given
(compiled or not).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class StepSyncs:
    syncs: int  # host syncs over all the steps counted
    busy: int  # steps after which the GPU stream still had work
    steps: int
    compiled_steps: int = 0  # steps left out because dynamo compiled during them

    def require_none(self, what: str) -> None:
        """The check: no host sync, and the stream busy after every step."""
        assert self.syncs == 0 and self.busy == self.steps, (
            f"{what}: {self.syncs} host syncs in {self.steps} steps, stream busy after "
            f"{self.busy} of them")

    def figures(self, prefix: str) -> dict[str, str]:
        return {f"{prefix}_syncs": f"{self.syncs}/{self.steps}",
                f"{prefix}_busy": f"{self.busy}/{self.steps}"}


class SyncWatch:
    """While entered (CUDA only): sync debug mode on, its warnings collected; `mark()` returns
    the syncs since the previous mark and whether the stream is busy now."""

    def __init__(self, device):
        self.device = device
        self._seen = 0

    def __enter__(self) -> SyncWatch:
        import torch

        torch.cuda.synchronize(self.device)
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def mark(self) -> tuple[int, bool]:
        import torch

        busy = not torch.cuda.current_stream(self.device).query()  # not a sync itself
        syncs = [w for w in self._caught[self._seen:] if "synchroniz" in str(w.message).lower()]
        self._seen = len(self._caught)
        return len(syncs), busy

    def __exit__(self, *exc) -> None:
        import torch

        torch.cuda.set_sync_debug_mode("default")
        self._catcher.__exit__(*exc)
        torch.cuda.synchronize(self.device)


def count_step_syncs(step: Callable[[], object], device, steps: int) -> StepSyncs | None:
    """Host syncs and busy stream over `steps` calls of `step` (None off CUDA)."""
    if device.type != "cuda":
        return None
    syncs = busy = 0
    with SyncWatch(device) as watch:
        for _ in range(steps):
            step()
            found, was_busy = watch.mark()
            syncs, busy = syncs + found, busy + was_busy
    return StepSyncs(syncs, busy, steps)


def graphs_compiled() -> int:
    """How many graphs dynamo has compiled so far in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def datapath_check(trainer, batches, steps: int, device) -> StepSyncs | None:
    """`steps` optimizer steps of `Trainer.train()` over `batches` (a PretrainingBatches) with
    `trainer` (a StepRunner, its model compiled or not), counting syncs and busy-stream steps
    from the second step on (the first follows the loop's own read of the counters), leaving
    out steps during which dynamo compiled. Also runs on the CPU (the code path), returning
    None there."""
    import dataclasses

    from bertcore.training.loop.step import PhaseSteps
    from bertcore.training.loop.trainer import Trainer

    # a phase of `steps` more steps over `batches`: nothing logs, evaluates or saves before it
    config = dataclasses.replace(trainer.config, max_steps=trainer.step + steps, epochs=None)
    trainer.phase = PhaseSteps(config, batches)
    per_step: list[tuple[int, bool, bool]] = []  # syncs, busy, compiled during the step
    cuda = device.type == "cuda"
    compiled_before = [graphs_compiled()]

    def on_step(result) -> None:
        found, busy = watch.mark() if cuda else (0, False)
        compiled = graphs_compiled()
        per_step.append((found, busy, compiled != compiled_before[0]))
        compiled_before[0] = compiled

    if not cuda:
        Trainer(trainer, on_step=on_step, progress=False).train()
        return None
    with SyncWatch(device) as watch:
        Trainer(trainer, on_step=on_step, progress=False).train()
    counted = [(s, b) for s, b, compiled in per_step[1:] if not compiled]
    return StepSyncs(syncs=sum(s for s, _ in counted), busy=sum(b for _, b in counted),
                     steps=len(counted),
                     compiled_steps=sum(compiled for *_, compiled in per_step[1:]))
