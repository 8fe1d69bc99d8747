"""Training throughput on one GPU: our BERT vs transformers' BertForPreTraining, bf16 autocast.

BERT-base, sequence 128, the same batch and masks for every model; fused AdamW; each model
warms up, then runs timed steps (CUDA-synchronised). Reports sequences/s and MFU against a
bf16 matmul measured in the same run, where model FLOPs per token are the usual
6 × parameters (word embeddings counted once, as the MLM decoder; position and segment tables
are lookups) + 12 × layers × sequence × hidden for attention. The same nominal count is used
for both models, so MFU compares like with like (ours does less work for it: the MLM head runs
on masked positions only).

    benchmarks/gpu.sh              # BERT-base on the GPU; < 5 minutes
    benchmarks/gpu.sh --dry-run    # tiny sizes, few steps, CPU is fine: keeps the script honest
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_step import hf_inputs, make_batch

from bertcore.hf import to_hf_state_dict
from bertcore.model import BertConfig, BertForPretraining


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops_per_s(device: torch.device, n: int, repeats: int = 10) -> float:
    """bf16 matmul FLOP/s of this device (median of `repeats`)."""
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


def model_flops_per_token(config: BertConfig, seq: int) -> float:
    with torch.device("meta"):
        params = BertForPretraining(config).num_parameters()
    lookups = (config.max_position_embeddings + config.type_vocab_size) * config.hidden_size
    attention = 12 * config.num_hidden_layers * seq * config.hidden_size
    return 6 * (params - lookups) + attention


def time_steps(step, device: torch.device, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    synchronize(device)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile run")
    parser.add_argument("--dry-run", action="store_true", help="tiny model, few steps, any device")
    args = parser.parse_args()
    if args.dry_run:
        args.preset, args.seq, args.batch, args.vocab_size = "tiny", 32, 8, 1000
        args.steps, args.warmup, args.no_compile = 2, 1, True

    from transformers import BertConfig as HFBertConfig
    from transformers import BertForPreTraining

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        print(f"device: {torch.cuda.get_device_name(device)}; torch {torch.__version__}")
    else:
        print(f"device: CPU ({torch.get_num_threads()} threads); torch {torch.__version__}")

    torch.manual_seed(0)
    config = BertConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    batch = make_batch(args.batch, args.seq, args.vocab_size, torch.Generator().manual_seed(0))
    batch = {k: v.to(device) for k, v in batch.items()}
    hf_batch = hf_inputs(batch)
    fused = device.type == "cuda"

    def make_step(model, inputs, param_groups):
        optimizer = torch.optim.AdamW(param_groups, lr=1e-4, fused=fused)
        model.train()

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(**inputs).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    def ours_model():
        torch.manual_seed(0)
        return BertForPretraining(config).to(device)

    def transformers_model():
        reference = BertForPretraining(config)
        model = BertForPreTraining._from_config(
            HFBertConfig(**config.to_dict()), attn_implementation="sdpa"
        )
        model.load_state_dict(
            to_hf_state_dict(reference.state_dict(), config.num_hidden_layers), strict=False
        )
        return model.to(device)

    def hf_groups(model):
        decay = [p for p in model.parameters() if p.ndim >= 2]
        rest = [p for p in model.parameters() if p.ndim < 2]
        return [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]

    runs = [("ours", lambda: (m := ours_model(), make_step(m, batch, m.param_groups(0.01))))]
    if not args.no_compile:

        def compiled():
            model = ours_model()
            step = make_step(torch.compile(model), batch, model.param_groups(0.01))
            return model, step

        runs.append(("ours+compile", compiled))
    runs.append(
        ("transformers", lambda: (m := transformers_model(), make_step(m, hf_batch, hf_groups(m))))
    )

    results = {}
    for name, build in runs:
        model, step = build()
        start = time.perf_counter()
        seconds = time_steps(step, device, args.warmup, args.steps)
        results[name] = seconds
        print(f"{name}: {seconds * 1e3:.1f} ms/step ({time.perf_counter() - start:.0f} s in all)")
        del model, step
        if device.type == "cuda":
            torch.cuda.empty_cache()

    peak = matmul_flops_per_s(device, 256 if args.dry_run else 8192)
    per_step = model_flops_per_token(config, args.seq) * args.batch * args.seq
    b, length = batch["input_ids"].shape
    print(
        f"\npreset={args.preset} batch={b} seq={length} real_tokens="
        f"{int(batch['attention_mask'].sum())}/{b * length} vocab={args.vocab_size} bf16 autocast"
    )
    print(f"bf16 matmul: {peak / 1e12:.1f} TFLOP/s; model FLOPs per step {per_step / 1e12:.3f} T")
    print("| model | ms/step | sequences/s | TFLOP/s | MFU | vs transformers |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, seconds in results.items():
        print(
            f"| {name} | {seconds * 1e3:.1f} | {b / seconds:,.0f} "
            f"| {per_step / seconds / 1e12:.1f} | {per_step / seconds / peak:.1%} "
            f"| {results['transformers'] / seconds:.2f}× |"
        )
    best = min((s, n) for n, s in results.items() if n != "transformers")
    print(
        f"best={best[1]} sequences_per_s={b / best[0]:.0f} "
        f"speedup_vs_transformers={results['transformers'] / best[0]:.2f} "
        f"mfu={per_step / best[0] / peak:.3f}"
    )


if __name__ == "__main__":
    main()
