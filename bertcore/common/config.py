"""Where torch computes, as params say it: the `cpu` section of params.yaml, read by every
stage that computes with torch (the code that uses it: `bertcore.common.cpu`), and the
`device` and `precision` values of the sections that name them (train, finetune, glue, prune;
the code: `bertcore.common.devices`). Nothing here imports torch: a stage parses its params,
and refuses a bad one, before it imports what computes."""

from __future__ import annotations

from typing import Literal

from bertcore.common.validation import DEVICE_PATTERN, DEVICES, integer, params_section, text

Precision = Literal["auto", "fp32", "bf16", "fp16"]
# A params `device` (train, finetune, prune): auto (cuda if available, else cpu) or a torch one
Device = text(pattern=DEVICE_PATTERN, allowed=DEVICES)
CpuIsa = Literal["avx2", "portable", "native"]


@params_section
class CpuConfig:
    """The `cpu:` section of params.yaml: read by every stage that computes with torch."""

    isa: CpuIsa = "avx2"  # native: the best kernels of this machine (its bytes alone)
    # torch's intra-op threads (per process); null: torch's own choice, one per core
    threads: integer(ge=1) | None = 1
