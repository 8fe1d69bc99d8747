"""How torch computes on the CPU: the kernels' instruction set and the number of threads,
pinned so that the same params give the same bytes on other x86-64 machines with AVX2.

Three libraries inside torch pick their kernels by the processor they find, and kernels of
another vector width add up in another order: ATen's own kernels (`ATEN_CPU_CAPABILITY`;
AVX-512 where the processor has it), MKL's matrix products (`MKL_CBWR`, its conditional
numerical reproducibility: one fixed code branch) and oneDNN's primitives (GELU;
`ONEDNN_MAX_CPU_ISA`). The number of intra-op threads changes the bytes too: reductions split
their work by it (measured with torch 2.13: 1, 2, 3, 4, 8 and 16 threads, six different
weights after five steps).

`pin_cpu` sets the three variables (`PINNED_ENV`, in cpu_env.py: they need no torch), replacing
values from outside (the bytes must not depend on the environment; `cpu.isa: native` is the way
to leave them), and torch's thread count to `cpu.threads`. Each library reads its variable at
its first kernel, not when torch is imported, so a stage pins right after reading its params,
before it builds or loads a model; torch, or MKL, found to have chosen before that is an error.
`cpu_record` reads back what is in effect. MKL honours a branch other than AUTO or COMPATIBLE
only on Intel processors and runs AUTO elsewhere: `isa: avx2` (MKL's AVX2 branch, AUTO on AMD)
gives the same bytes among machines of one vendor, `isa: portable` (MKL's COMPATIBLE branch,
honoured by both vendors; ATen and oneDNN at AVX2, which choose by instruction set, not vendor)
among Intel and AMD machines alike, at the cost docs/training.md measures.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
from pathlib import Path
from typing import Any

import torch

from bertcore.common.config import CpuConfig
from bertcore.common.cpu_env import PINNED_ENV, pin_kernels_environment
from bertcore.common.errors import BertError

log = logging.getLogger(__name__)

# MKL's branch constants (mkl_cbwr_get(MKL_CBWR_BRANCH)) by name; 1: CNR off
MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
                8: "SSE4_2", 9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}
MKL_CBWR_BRANCH = 1


def pin_cpu(config: CpuConfig) -> None:
    """Pin the kernels and the thread count of this process (and of those it starts) before
    torch computes anything; BertError if torch already chose its kernels."""
    pinned = pin_kernels_environment(config)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    if pinned:
        _check_pinned(config.isa)


def refuse_compile_on_pinned_cpu(compile_mode: bool | str, device: str, config: CpuConfig) -> None:
    """BertError for train.compile on the CPU with the kernels pinned to AVX2: Inductor's code
    then trains wrong (measured, torch 2.13: a train loss of 0.0 where eager gives 5.24)."""
    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if compile_mode and config.isa in PINNED_ENV and not on_cuda:
        raise BertError(f"train.compile on the CPU trains wrong with cpu.isa: {config.isa} "
                        "(torch 2.13): set cpu.isa: native to compile on the CPU, or "
                        "train.compile: false")


def _check_pinned(isa: str) -> None:
    """That the kernels are those `isa` pins: torch or MKL that chose before the pinning (this
    process computed already) is an error; a processor without AVX2 gets its own, with a
    warning."""
    capability = torch.backends.cpu.get_cpu_capability()
    branch = mkl_branch()
    chose_before = branch == "OFF" or (isa == "portable" and branch not in (None, "COMPATIBLE"))
    if capability.startswith("AVX512") or chose_before:
        raise BertError(f"torch chose its CPU kernels ({capability}, MKL branch {branch}) "
                        f"before cpu.isa: {isa} could pin them: run the stage in a process of "
                        "its own, or set cpu.isa: native")
    if capability != "AVX2":
        log.warning("cpu.isa %s: this %s processor has no AVX2 (torch runs %s kernels): its "
                    "bytes match only machines like it", isa, platform.machine(), capability)


def mkl_branch() -> str | None:
    """MKL's code branch in effect (its conditional numerical reproducibility: OFF, AUTO,
    AVX2, ...), from `mkl_cbwr_get` as the torch library that links MKL in exports it; None
    in a torch without MKL."""
    for library in sorted((Path(torch.__file__).parent / "lib").glob("*torch_cpu.*")):
        try:
            code = ctypes.CDLL(str(library)).mkl_serv_cbwr_get(MKL_CBWR_BRANCH)
        except (OSError, AttributeError):
            continue
        return MKL_BRANCHES.get(code, str(code))
    return None


def cpu_record() -> dict[str, Any]:
    """What this process computes with, beyond the params: the same on a rerun on the same
    machine, and what to compare when two machines give other bytes."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr": mkl_branch(),
        # as set: oneDNN's own choice below the cap is not exposed by torch
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "threads": torch.get_num_threads(),
    }
