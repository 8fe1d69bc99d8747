"""Where a model runs and in which precision: the device, the autocast dtype. The hardware,
beside the CPU's (`cpu.py`): pretraining, evaluation and every downstream stage pick their
device here, from the params values `config.py` checks."""

from __future__ import annotations

import contextlib

import torch

from bertcore.common.config import Precision
from bertcore.common.errors import BertError


def resolve_device(name: str = "auto", local_rank: int = 0,
                   setting: str = "train.device") -> torch.device:
    """`auto`: this process's GPU (`local_rank`, under torchrun) when CUDA is available, else
    the CPU. `setting`: the param or option that chose `name` (glue.device, --device), for
    messages."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise BertError(f"{setting} is {name}, no device: use auto, cpu, cuda or cuda:N"
                        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BertError(f"{setting} is {name} but no CUDA GPU is available: use auto or "
                            "cpu")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def device_name(device: torch.device) -> str:
    """`cpu`, or the GPU's name (`cuda: NVIDIA H200`): what a record of the arithmetic says."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


def resolve_precision(precision: Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype (None: plain float32). `auto`: bf16 on a CUDA GPU that has it."""
    if precision == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def autocast(device: torch.device, dtype: torch.dtype | None):
    """torch.autocast for `dtype` on `device`, or nothing for plain float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
