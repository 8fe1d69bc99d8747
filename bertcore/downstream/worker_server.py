"""The server that forks a fine-tuning stage's workers (`workers.fine_tune_pool`'s), started
by the stage before it imports torch (`start_worker_server`): the server's imports (torch, the
job's module, scikit-learn: seconds) then run on another core while the stage's own do, and the
pool forks its workers as soon as the stage has its examples. Without torch, it decides from
the params alone (`planned_workers`); a server started for a run that turns out to fine-tune in
the stage's process (device `auto` on a machine with a GPU) is stopped then
(`workers.start_fine_tune_workers`)."""

from __future__ import annotations

from bertcore.common.config import CpuConfig
from bertcore.common.cpu_env import pin_kernels_environment
from bertcore.common.fork_server import fork_server, stop_fork_server
from bertcore.common.pool import available_cores
from bertcore.downstream.config import RecipeSection

# What a fine-tune imports besides its own module: the optimizers' first step imports
# torch._dynamo (torch 2.13's `_use_grad_for_differentiable`), a second of CPU per process;
# its scores scikit-learn and scipy (imported where used: downstream/metrics.py), 1.5 s more.
FINE_TUNE_IMPORTS = ("torch._dynamo", "sklearn.metrics", "scipy.stats")

_started_early = False


def workers_for(requested: int, on_cpu: bool, threads: int | None) -> int:
    """`requested`, or for 0 as many as the cores hold workers of `threads` threads each on
    the CPU, one on a GPU: the count `workers.fine_tune_workers` gives, and the one the params
    plan (`planned_workers`)."""
    if requested:
        return requested
    return max(1, available_cores() // threads) if on_cpu else 1


def planned_workers(config: RecipeSection, cpu: CpuConfig) -> int:
    """The workers `workers.fine_tune_workers` gives on the CPU, from the params alone: one
    where it depends on what torch finds (a GPU's device, torch's own thread count)."""
    if cpu.threads is None and not config.workers:
        return 1
    return workers_for(config.workers, config.device in ("cpu", "auto"), cpu.threads)


def start_worker_server(config: RecipeSection, cpu: CpuConfig, job_module: str) -> None:
    """Where the params plan several workers: the kernels' environment pinned (`cpu`, as
    `pin_cpu` pins it after), then the server started, importing `job_module` and
    FINE_TUNE_IMPORTS."""
    global _started_early
    if planned_workers(config, cpu) > 1:
        pin_kernels_environment(cpu)
        fork_server((job_module, *FINE_TUNE_IMPORTS))
        _started_early = True


def stop_early_server() -> None:
    """Stop the server `start_worker_server` started, if it did: the fine-tunes run in the
    stage's process after all."""
    global _started_early
    if _started_early:
        stop_fork_server()
        _started_early = False
