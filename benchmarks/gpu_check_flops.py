"""What a training step of BERT costs in matmul FLOPs, counted two ways, and what the device
delivers: its bf16 matmul rate, measured.

- executed: what a model really runs, per step (forward x3): the encoder on every padded token,
  attention on L x L, the MLM head on the rows it is given (ours: the masked slots;
  transformers: every token), pooler and NSP;
- the conventional 6N: 6 x parameters + 12 x layers x length x hidden per token, for every
  token; it credits the vocabulary projection to every token and counts padding.
"""

from __future__ import annotations

import statistics
import time


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops_per_s(device, n: int, repeats: int = 10) -> float:
    """bf16 matmul FLOP/s of this device, measured now (median of `repeats`)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def executed_flops(config, batch: int, length: int, head_rows: int,
                   tokens: int | None = None) -> float:
    """Matmul FLOPs one training step executes (3 x forward): the encoder's projections and
    feed-forward layers on every padded token (unpadded: on its `tokens` real ones),
    attention on L x L, the MLM head on `head_rows` rows, pooler and NSP."""
    h, i, layers, v = (config.hidden_size, config.intermediate_size,
                       config.num_hidden_layers, config.vocab_size)
    tokens = batch * length if tokens is None else tokens
    encoder = tokens * 2 * layers * (4 * h * h + 2 * h * i)
    attention = layers * 4 * batch * length * length * h
    heads = head_rows * 2 * (h * h + h * v) + batch * 2 * (h * h + 2 * h)
    return 3.0 * (encoder + attention + heads)


def model_flops(config, batch: int, length: int) -> float:
    """The conventional count: 6 x parameters (word embeddings once, as the tied decoder;
    position and segment tables are lookups) + 12 x layers x length x hidden, per token, for
    every token (padding too) and the vocabulary projection on every token."""
    import torch

    from bertcore.model.bert import BertPretrainingModel

    with torch.device("meta"):
        params = BertPretrainingModel(config).num_parameters()
    lookups = (config.max_position_embeddings + config.type_vocab_size) * config.hidden_size
    per_token = 6 * (params - lookups) + 12 * config.num_hidden_layers * length * config.hidden_size
    return per_token * batch * length
