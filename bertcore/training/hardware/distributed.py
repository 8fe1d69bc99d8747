"""One process or many (torchrun): the few collective operations the training loop needs.

`Distributed` is a plain object passed to the loop; with one process every method is a no-op,
so the loop reads the same either way. What is summed over the processes in floating point is
summed in a fixed tree (`tree_sum`, `fixed_sum`), so its bytes do not depend on how many
there are; `all_reduce_sum` is for counts (whole numbers, exact in any order). Under torchrun
(WORLD_SIZE > 1 in the environment) `Distributed.from_env` joins the process group: NCCL on
GPUs, gloo on CPU.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bertcore.common.errors import BertError
from bertcore.training.hardware.fixed_sum import tree_sum

log = logging.getLogger(__name__)


def require_launcher(host: str, port: int) -> None:
    """torchrun's launcher listens on its store before it starts its workers: a store that
    refuses the connection means it is gone (killed while this worker started), and torch's
    TCPStore would retry it for the group's whole timeout. Another failure is left to it."""
    try:
        socket.create_connection((host, port), timeout=10).close()
    except ConnectionRefusedError:
        raise BertError(f"torchrun's launcher is gone (nothing listens on its store at "
                        f"{host}:{port}); start the run again") from None
    except OSError:
        pass


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized: bool = False  # True when this object joined a process group (and must leave)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """Several processes, or one that joined a process group (torchrun with one process:
        the collectives run as with many, e.g. to check NCCL on one GPU)."""
        return self.world_size > 1 or self.initialized

    @classmethod
    def from_env(cls, device_type: str, timeout_s: float = 1800.0) -> Distributed:
        """Join the process group torchrun describes in the environment (or stay alone)."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
            return cls()  # not started by torchrun
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        if not dist.is_initialized():
            timeout = datetime.timedelta(seconds=timeout_s)
            extra: dict[str, Any] = {}
            if backend == "nccl":
                extra["device_id"] = torch.device("cuda", local_rank)
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                # torchrun keeps its store across restarts (--max-restarts): without a prefix
                # per attempt, restarted workers read the dead workers' addresses and hang.
                attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
                host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
                require_launcher(host, port)
                agent_store = dist.TCPStore(
                    host,
                    port,
                    world_size,
                    is_master=False,
                    timeout=timeout,
                )
                extra["store"] = dist.PrefixStore(f"bert/attempt-{attempt}", agent_store)
                extra.update(rank=rank, world_size=world_size)
            dist.init_process_group(backend=backend, timeout=timeout, **extra)
            log.info("rank %d of %d joined the %s process group", rank, world_size, backend)
        return cls(rank, world_size, local_rank, initialized=True)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over all processes, in place (returned for convenience): in an order
        that depends on their number, so for whole numbers only (counts, votes)."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def tree_sum(self, subtree: torch.Tensor) -> torch.Tensor:
        """The sum of every process's `subtree` (its contiguous run of the terms, summed in
        their fixed tree: `fixed_sum.TreeSum`), added in the same tree in rank order: the
        same bytes on every process, and for any number of them (a power of two)."""
        if not self.enabled:
            return subtree
        gathered = [torch.empty_like(subtree) for _ in range(self.world_size)]
        dist.all_gather(gathered, subtree.contiguous())
        return tree_sum(gathered)

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0's `tensor` on every process, in place."""
        if self.enabled:
            dist.broadcast(tensor, src=0)
        return tensor

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """Every process's `obj`, indexed by rank."""
        if not self.enabled:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every process."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self) -> None:
        if self.initialized and dist.is_initialized():
            dist.destroy_process_group()
