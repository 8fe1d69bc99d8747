"""What `cpu.isa` puts into the environment (`pin_kernels_environment`): the variables that
torch's kernel libraries read at their first kernel (cpu.py says which and why). Without
torch, so that a stage can set them before it imports torch, and start processes then that
inherit them (a fork server: downstream/worker_server.py)."""

from __future__ import annotations

import logging
import os

from bertcore.common.config import CpuConfig

log = logging.getLogger("bertcore.common.cpu")  # its messages are the pinning's

# What each pinned `cpu.isa` puts into the environment before the first kernel (read by this
# process, and inherited by the processes it starts: torchrun's).
# The modes differ only in MKL's branch: ATen and oneDNN choose by instruction set, not vendor.
_AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PINNED_ENV = {
    "avx2": {**_AVX2_KERNELS, "MKL_CBWR": "AVX2"},
    "portable": {**_AVX2_KERNELS, "MKL_CBWR": "COMPATIBLE"},
}
# The environment variables the pinning sets (a benchmark leaves them out of its workers').
PINNED_NAMES = tuple(PINNED_ENV["avx2"])


def pin_kernels_environment(config: CpuConfig) -> bool:
    """Set the variables `config.isa` pins (none for `native`), replacing values from outside
    (the bytes must not depend on the environment); whether it pins."""
    pinned = PINNED_ENV.get(config.isa)
    if pinned is None:
        return False
    replaced = {name: os.environ[name] for name, value in pinned.items()
                if os.environ.get(name, value) != value}
    if replaced:
        log.info("cpu.isa %s: replacing %s from the environment", config.isa,
                 ", ".join(f"{name}={value}" for name, value in replaced.items()))
    os.environ.update(pinned)
    return True
