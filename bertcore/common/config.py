"""The `cpu` section of params.yaml, read by every stage that computes with torch (the code
that uses it: `bertcore.common.cpu`). Nothing here imports torch: a stage parses its params,
and refuses a bad one, before it imports what computes."""

from __future__ import annotations

from typing import Literal

from bertcore.common.validation import integer, params_section

CpuIsa = Literal["avx2", "portable", "native"]


@params_section
class CpuConfig:
    """The `cpu:` section of params.yaml: read by every stage that computes with torch."""

    isa: CpuIsa = "avx2"  # native: the best kernels of this machine (its bytes alone)
    # torch's intra-op threads (per process); null: torch's own choice, one per core
    threads: integer(ge=1) | None = 1
