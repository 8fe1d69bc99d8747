"""One training step (forward, backward, AdamW) of our BERT vs transformers' BertForPreTraining.

Same config, same weights, same batch and masks; the models alternate A B C A B C after a
warm-up so that load from other processes hits all alike: ours (the encoder on the padded
batch, as pretraining runs it), ours unpadded (`unpad=True`: the encoder on the real tokens
alone; its first loss checked against ours) and transformers'. Prints the median step time of
each, the ratios, and our achieved FLOP/s against this machine's float32 matmul FLOP/s
measured in the same run. The last line is machine-readable:

    speedup_vs_transformers=X.XX matmul_fraction=Y.YY unpadded_vs_padded=Z.ZZ

    python benchmarks/model_step.py            # preset mini, seq 128, batch 32
    python benchmarks/model_step.py --quick    # a short run (smaller batch, fewer steps)
    python benchmarks/model_step.py --seq 512 --batch 8 --short 0.5   # half the rows short

`--pinning` instead measures what pinning the CPU kernels costs
(`bertcore.common.cpu`): our step in one process per setting (the kernels are chosen
once per process), the same model and batch in each, stepping in turn A B B A ... so that load
from other processes hits all alike; the first setting is the reference. A setting is
ISA[:THREADS]: `native` (this machine's best kernels, torch's own thread count), `avx2:1` (what
`cpu: {isa: avx2, threads: 1}` runs), ...
The last line gives each setting's median step time over the reference's:

    native=1.00 avx2:1=X.XX

    python benchmarks/model_step.py --pinning      # native vs the cpu section's defaults
    python benchmarks/model_step.py --pinning --preset base --batch 8 --variants native avx2:2 avx2
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bertcore.common.config import CpuConfig
from bertcore.common.cpu import cpu_record, pin_cpu
from bertcore.common.cpu_env import PINNED_NAMES
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.hf_names import to_hf_state_dict
from bertcore.training.data.masking import labels_to_slots

MAX_PREDICTIONS = 20  # Google's max_predictions_per_seq at length 128


def make_batch(batch: int, seq: int, vocab: int, generator: torch.Generator,
               max_predictions: int = MAX_PREDICTIONS, short_fraction: float = 0.1) -> dict:
    """A pretraining-like batch: most pairs fill the target length, `short_fraction` are short
    (Google's short_seq_prob, 0.1), padded to the longest; 15% of real non-special tokens
    labelled (at most `max_predictions`)."""
    short = torch.rand(batch, generator=generator) < short_fraction
    lengths = torch.where(
        short,
        torch.randint(8, seq + 1, (batch,), generator=generator),
        torch.randint(int(0.85 * seq), seq + 1, (batch,), generator=generator),
    )
    width = int(lengths.max())
    positions = torch.arange(width)
    attention_mask = (positions[None, :] < lengths[:, None]).long()
    input_ids = torch.randint(5, vocab, (batch, width), generator=generator) * attention_mask
    input_ids[:, 0] = 2  # [CLS]
    input_ids[torch.arange(batch), lengths - 1] = 3  # final [SEP]
    middle = lengths // 2
    input_ids[torch.arange(batch), middle] = 3  # [SEP] between A and B
    token_type_ids = ((positions[None, :] > middle[:, None]) & attention_mask.bool()).long()
    mlm_labels = torch.full((batch, width), -100)
    for row in range(batch):
        candidates = [i for i in range(1, int(lengths[row]) - 1) if i != int(middle[row])]
        count = min(max_predictions, max(1, round(0.15 * len(candidates))))
        order = torch.randperm(len(candidates), generator=generator)[:count]
        chosen = torch.tensor(candidates)[order]
        mlm_labels[row, chosen] = input_ids[row, chosen]
        input_ids[row, chosen] = 4  # [MASK]
    nsp_labels = torch.randint(0, 2, (batch,), generator=generator)
    return dict(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        attention_mask=attention_mask,
        mlm_labels=mlm_labels,
        nsp_labels=nsp_labels,
    )


def ours_inputs(batch: dict, slots: int = MAX_PREDICTIONS) -> dict:
    """The same batch as our trainer feeds it: the MLM labels in `slots` static slots."""
    positions, targets = labels_to_slots(batch["mlm_labels"].cpu().numpy(), slots)
    device = batch["input_ids"].device
    return dict(
        input_ids=batch["input_ids"],
        token_type_ids=batch["token_type_ids"],
        attention_mask=batch["attention_mask"],
        mlm_positions=torch.from_numpy(positions).to(device),
        mlm_targets=torch.from_numpy(targets).to(device),
        nsp_labels=batch["nsp_labels"],
    )


def hf_inputs(batch: dict) -> dict:
    """The same batch under transformers' argument names (labels, next_sentence_label)."""
    return dict(
        input_ids=batch["input_ids"],
        token_type_ids=batch["token_type_ids"],
        attention_mask=batch["attention_mask"],
        labels=batch["mlm_labels"],
        next_sentence_label=batch["nsp_labels"],
    )


def step_flops(config: BertConfig, batch: dict) -> float:
    """Matmul FLOPs of one training step of OUR model (3 × forward; padding included since
    it is computed; the MLM head only on its static slots, used or not)."""
    b, length = batch["input_ids"].shape
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = b * length
    labelled = batch["mlm_positions"].numel()
    per_token_linear = 2 * layers * (4 * h * h + 2 * h * i)
    attention = layers * 4 * b * length * length * h  # QK^T and AV
    heads = labelled * 2 * (h * h + h * config.vocab_size) + b * 2 * (h * h + 2 * h)
    return 3.0 * (tokens * per_token_linear + attention + heads)


def matmul_flops_per_s(shapes, repeats: int = 5) -> float:
    """This machine's float32 matmul FLOP/s: the best median over a few (m, k, n) shapes."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        best = max(best, 2 * m * k * n / statistics.median(times))
    return best


def main() -> None:
    args = parse_args()
    if args.worker:
        pinning_worker(args, ours_training)
    elif args.pinning:
        compare_pinning(args, __file__, ["--seq", str(args.seq)])
    else:
        compare_transformers(args)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=30522, help="BERT's uncased vocab")
    parser.add_argument("--steps", type=int, default=8, help="measured steps per model")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--short", type=float, default=0.1,
                        help="share of short rows (Google's short_seq_prob)")
    parser.add_argument("--quick", action="store_true", help="batch 8, 3 steps: a smoke run")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's own choice)"
    )
    add_pinning_options(parser)
    parser.add_argument("--rounds", type=int, default=6,
                        help="--pinning: rounds of --steps steps per setting")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.steps, args.warmup, args.rounds = 8, 3, 1, 2
    return args


def add_pinning_options(parser: argparse.ArgumentParser) -> None:
    """--pinning, --variants and a worker's --worker (finetune_step.py's too)."""
    default = CpuConfig()
    parser.add_argument("--pinning", action="store_true",
                        help="pinned vs native CPU kernels instead of ours vs transformers")
    parser.add_argument("--variants", nargs="+", metavar="ISA[:THREADS]",
                        default=["native", f"{default.isa}:{default.threads or 'auto'}"],
                        help="--pinning's settings, the first the reference (default: native "
                             "and the cpu section's defaults)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def compare_transformers(args: argparse.Namespace) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import BertConfig as HFBertConfig
    from transformers import BertForPreTraining

    torch.manual_seed(0)
    config = BertConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    ours = BertPretrainingModel(config)
    hf_config = HFBertConfig(**config.to_dict())
    theirs = BertForPreTraining._from_config(hf_config, attn_implementation="sdpa")
    result = theirs.load_state_dict(
        to_hf_state_dict(ours.state_dict(), config.num_hidden_layers), strict=False
    )
    assert not result.unexpected_keys and set(result.missing_keys) <= {
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
    }, result
    batch = make_batch(args.batch, args.seq, args.vocab_size, torch.Generator().manual_seed(0),
                       short_fraction=args.short)
    ours_batch = ours_inputs(batch)
    unpadded = copy.deepcopy(ours)
    first_losses = {}

    def ours_step(optimizer, model=ours, unpad=False):
        out = model(**ours_batch, unpad=unpad)
        first_losses.setdefault(unpad, out.loss.item())
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def theirs_step(optimizer):
        out = theirs(**hf_inputs(batch))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    decay = [p for p in theirs.parameters() if p.ndim >= 2]
    no_decay = [p for p in theirs.parameters() if p.ndim < 2]
    runs = {
        # fused AdamW for both, as our trainer uses it: the difference is the models'
        "ours": (ours_step, torch.optim.AdamW(ours.param_groups(0.01), lr=1e-4, fused=True)),
        "ours-unpadded": (lambda optimizer: ours_step(optimizer, unpadded, unpad=True),
                          torch.optim.AdamW(unpadded.param_groups(0.01), lr=1e-4, fused=True)),
        "transformers": (
            theirs_step,
            torch.optim.AdamW(
                [
                    {"params": decay, "weight_decay": 0.01},
                    {"params": no_decay, "weight_decay": 0.0},
                ],
                lr=1e-4,
                fused=True,
            ),
        ),
    }
    # The reference rate: a big square matmul and this model's own FFN shapes, measured before
    # and after the steps (the best counts, so a busy moment cannot flatter our fraction).
    tokens = args.batch * args.seq
    h, i = config.hidden_size, config.intermediate_size
    shapes = [(2048, 2048, 2048), (tokens, h, i), (tokens, i, h)]
    matmul = matmul_flops_per_s(shapes)
    ours.train()
    unpadded.train()
    theirs.train()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(args.warmup + args.steps):
        for name, (step, optimizer) in runs.items():
            start = time.perf_counter()
            step(optimizer)
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)

    matmul = max(matmul, matmul_flops_per_s(shapes))
    # the same function (dropout aside: the presets' 0.1 draws other masks on other shapes)
    assert config.hidden_dropout_prob or abs(first_losses[True] - first_losses[False]) <= 1e-4
    ours_s = statistics.median(times["ours"])
    unpadded_s = statistics.median(times["ours-unpadded"])
    theirs_s = statistics.median(times["transformers"])
    achieved = step_flops(config, ours_batch) / ours_s
    b, length = batch["input_ids"].shape
    real = int(batch["attention_mask"].sum())
    print(
        f"preset={args.preset} batch={b} padded_length={length} real_tokens={real}/{b * length} "
        f"vocab={args.vocab_size} threads={torch.get_num_threads()} steps={args.steps}"
    )
    print(f"{'model':<14}{'median step s':>14}{'seq/s':>10}")
    for name, seconds in (("ours", ours_s), ("ours-unpadded", unpadded_s),
                          ("transformers", theirs_s)):
        print(f"{name:<14}{seconds:>14.4f}{b / seconds:>10.1f}")
    print(f"ours achieved {achieved / 1e9:.1f} GFLOP/s; float32 matmul {matmul / 1e9:.1f} GFLOP/s")
    print(f"speedup_vs_transformers={theirs_s / ours_s:.2f} matmul_fraction={achieved / matmul:.2f}"
          f" unpadded_vs_padded={ours_s / unpadded_s:.2f}")


# ------------------------------------------------------- pinned vs native CPU kernels
def cpu_config(variant: str) -> CpuConfig:
    """`avx2:2` -> CpuConfig(isa="avx2", threads=2); no THREADS (or `auto`): torch's own."""
    isa, _, threads = variant.partition(":")
    return CpuConfig(isa=isa, threads=None if threads in ("", "auto") else int(threads))


def ours_training(args: argparse.Namespace):
    """One training step of our model (fused AdamW, as the trainer), on the benchmark's batch."""
    torch.manual_seed(0)
    config = BertConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    model = BertPretrainingModel(config).train()
    optimizer = torch.optim.AdamW(model.param_groups(0.01), lr=1e-4, fused=True)
    batch = ours_inputs(make_batch(args.batch, args.seq, args.vocab_size,
                                   torch.Generator().manual_seed(0)))

    def step() -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def pinning_worker(args: argparse.Namespace, training) -> None:
    """A setting's process: pin, build the step (`training(args)`), warm up, say what it
    computes with; then, for each line N on stdin, take N steps and answer their seconds (one
    JSON line each). Also `finetune_step.py --pinning`'s."""
    pin_cpu(cpu_config(args.worker))
    step = training(args)
    for _ in range(args.warmup):
        step()
    print(json.dumps(cpu_record()), flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        print(json.dumps(times), flush=True)


def compare_pinning(args: argparse.Namespace, script: str, shape: list[str]) -> None:
    """Each of `args.variants` in a worker process of `script` (given `shape`, its options
    beyond these), stepping in turn; medians and ratios."""
    env = {name: value for name, value in os.environ.items() if name not in PINNED_NAMES}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                         env.get("PYTHONPATH", "")])
    shape = ["--preset", args.preset, "--batch", str(args.batch), "--vocab-size",
             str(args.vocab_size), "--warmup", str(args.warmup), *shape]
    workers = {variant: subprocess.Popen(
        [sys.executable, script, "--worker", variant, *shape], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=env) for variant in args.variants}
    records = {variant: json.loads(worker.stdout.readline())
               for variant, worker in workers.items()}
    times: dict[str, list[float]] = {variant: [] for variant in workers}
    for round_ in range(args.rounds):
        order = args.variants if round_ % 2 == 0 else args.variants[::-1]
        for variant in order:
            workers[variant].stdin.write(f"{args.steps}\n")
            workers[variant].stdin.flush()
            times[variant] += json.loads(workers[variant].stdout.readline())
    for worker in workers.values():
        worker.stdin.close()
        worker.wait()
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    reference = medians[args.variants[0]]
    print(f"preset={args.preset} batch={args.batch} seq={args.seq} vocab={args.vocab_size} "
          f"rounds={args.rounds} steps_per_round={args.steps} (settings in turn)")
    print(f"{'setting':<12}{'capability':>12}{'mkl':>12}{'threads':>9}{'median step s':>15}"
          f"{'ratio':>8}")
    for variant, seconds in medians.items():
        record = records[variant]
        print(f"{variant:<12}{record['cpu_capability']:>12}{record['mkl_cbwr']!s:>12}"
              f"{record['threads']:>9}{seconds:>15.4f}{seconds / reference:>8.2f}")
    print(" ".join(f"{variant}={seconds / reference:.2f}" for variant, seconds in
                   medians.items()))


if __name__ == "__main__":
    main()
