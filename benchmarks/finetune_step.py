"""One fine-tuning step of our classifier vs transformers' BertForSequenceClassification.

Our step is `bertcore.downstream.finetune.train_classifier`'s: the classifier's logits, cross
entropy, backward, gradient clipping, fused AdamW (its param groups, eps 1e-6) and
the warmup/decay schedule. Transformers' model gets the same weights (`export_hf_classifier`,
then `from_pretrained` with SDPA attention), the same optimizer, clipping and schedule, the same
batches (padded to their longest: token ids, attention mask, token types of single sentences
and pairs) and the same CPU threads. First both models' losses and every gradient (through
the name mapping) are checked to agree, so the comparison is fair; then they step in turn
A B A B after a warm-up, so that load from other processes hits both alike, on batches
collated beforehand (their first-step losses checked again). `ours` is the loop's step, its
encoder unpadded (on the real tokens alone, `encode(..., unpad=True)`); beside it the same
step padded (`ours-padded`: every layer on the batch padded to its longest, as before),
with AdamW unfused (`ours-unfused`, torch's single-tensor AdamW on the CPU, what the loop took
before: 0.85-0.89x the fused step at BERT-tiny, measured), the batch collation
(`EncodedExamples.batch`) timed on its own, and `train_classifier` itself over the same
batches (its loop: collation, the bar, the logging window), for the overhead of the loop.

Shapes: `full`, 32 pairs of 128 tokens; `glue`, a GLUE-like mix: half single sentences (about
20 tokens, as SST-2 or CoLA), half pairs (about 45, as MNLI, QNLI or MRPC); `sst2`, single
sentences as SST-2's (median 16 tokens, a long tail up to `--seq`); drawn at random into
batches as `train_classifier` draws them, so each batch is padded to its longest. For each
preset and shape one row per step kind; the last lines are machine-readable:

    speedup_vs_transformers=tiny/full:X.XX,tiny/glue:X.XX,mini/full:X.XX,mini/glue:X.XX
    unpadded_vs_padded=tiny/full:X.XX,tiny/glue:X.XX,mini/full:X.XX,mini/glue:X.XX

    python benchmarks/finetune_step.py                 # BERT-tiny and -mini, both shapes
    python benchmarks/finetune_step.py --quick         # a smoke run (batch 8, few steps)
    python benchmarks/finetune_step.py --cpu avx2:1    # pinned as the finetune stage pins
    python benchmarks/finetune_step.py --profile       # where our loop's time goes (cProfile)
    python benchmarks/finetune_step.py --shapes sst2 --seq 64 --clock cpu

`--pinning` measures what pinning the CPU kernels costs our fine-tuning step, as
`model_step.py --pinning` does for the pretraining step (one process per setting, in turn).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import itertools
import math
import pstats
import statistics
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from model_step import add_pinning_options, compare_pinning, cpu_config, pinning_worker

from bertcore.common.cpu import pin_cpu
from bertcore.common.devices import autocast, resolve_precision
from bertcore.common.schedule import linear_warmup_decay
from bertcore.downstream.config import FinetuneConfig, Recipe, recipe_for
from bertcore.downstream.finetune import pads, train_classifier
from bertcore.downstream.tasks import EncodedExamples
from bertcore.model.bert import BertConfig
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.saved.hf import export_hf_classifier
from bertcore.saved.hf_names import to_hf_state_dict

CLS, SEP, PAD, FIRST_WORD = 2, 3, 0, 5  # a trained vocabulary's special ids
LABELS = ["0", "1"]
LOSS_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-4  # relative; measured: at most 3e-6 (float32, sums in other orders)
SEED = 42  # finetune.seed's default
# wall: steps/s as a user sees them; cpu: this process's CPU seconds, steadier on a machine
# that other processes load (with one thread, the step's cost on one core)
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}


# ----------------------------------------------------------------------------- the data
def glue_like_lengths(n: int, seq: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """(first text, second text) token counts without specials; 0 = a single sentence. Half
    single sentences around 20 tokens, half pairs around 45 in all (log-normal, cut to fit)."""
    lengths = []
    for _ in range(n):
        if rng.random() < 0.5:
            lengths.append((int(np.clip(rng.lognormal(math.log(18), 0.5), 3, seq - 2)), 0))
        else:
            total = int(np.clip(rng.lognormal(math.log(42), 0.45), 6, seq - 3))
            first = int(rng.integers(2, total - 1))
            lengths.append((first, total - first))
    return lengths


def sst2_like_lengths(n: int, seq: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Single sentences as SST-2's: log-normal around 16 tokens, cut to fit `seq`."""
    return [(int(np.clip(rng.lognormal(math.log(16), 0.55), 3, seq - 2)), 0) for _ in range(n)]


def make_examples(shape: str, n: int, seq: int, vocab: int, seed: int = 0) -> EncodedExamples:
    """Encoded examples as `encode_examples` makes them: [CLS] A [SEP] (B [SEP]), token types
    0 on [CLS] A [SEP] and 1 on B [SEP]; balanced random labels."""
    rng = np.random.default_rng(seed)
    if shape == "full":
        lengths = [((seq - 3) // 2, seq - 3 - (seq - 3) // 2)] * n
    elif shape == "sst2":
        lengths = sst2_like_lengths(n, seq, rng)
    else:
        lengths = glue_like_lengths(n, seq, rng)
    input_ids, token_type_ids = [], []
    for a, b in lengths:
        words = rng.integers(FIRST_WORD, vocab, a + b).tolist()
        ids = [CLS, *words[:a], SEP] + ([*words[a:], SEP] if b else [])
        input_ids.append(ids)
        token_type_ids.append([0] * (a + 2) + [1] * (len(ids) - a - 2))
    labels = rng.integers(0, len(LABELS), n).tolist()
    return EncodedExamples(input_ids, token_type_ids, labels, truncated=0)


def loop_batches(data: EncodedExamples, config: Recipe, count: int) -> list[list[int]]:
    """The example indices of `train_classifier`'s first `count` batches (its order)."""
    order = np.random.default_rng(config.seed).permutation(len(data))
    starts = range(0, len(order), config.batch_size)
    assert len(starts) >= count, "make the data set at least `count` batches long"
    return [order[s : s + config.batch_size].tolist() for s in starts[:count]]


# --------------------------------------------------------------------------- the models
def models(config: BertConfig, workdir: str):
    """Our classifier (seeded) and transformers' with the same weights, through the export."""
    from transformers import BertForSequenceClassification as HFClassifier
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()  # its "Loading weights" bar

    torch.manual_seed(0)
    ours = BertForSequenceClassification(config, LABELS)
    export_hf_classifier(ours, workdir)
    theirs, info = HFClassifier.from_pretrained(
        workdir, attn_implementation="sdpa", output_loading_info=True
    )
    assert not any(info.values()), info  # every weight mapped, none left over
    return ours, theirs.float()


class Stepper:
    """One optimizer step as `train_classifier` takes it, for either model: `logits(batch)`
    gives [B, labels]; the loss, clipping, AdamW and schedule are shared."""

    def __init__(self, model, logits, finetune: Recipe, total_steps: int, lr: float,
                 fused: bool | None = True):
        self.model, self.logits = model.train(), logits
        self.max_grad_norm = finetune.max_grad_norm
        decay = [p for p in model.parameters() if p.ndim >= 2]
        no_decay = [p for p in model.parameters() if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": finetune.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}], lr=lr, eps=1e-6, fused=fused)
        warmup = round(finetune.warmup_fraction * total_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: linear_warmup_decay(step, warmup, total_steps))
        self.window_loss = torch.zeros(())

    def __call__(self, batch: dict) -> tuple[float, float]:
        """(loss, gradient norm before clipping)."""
        labels = batch["labels"]
        loss = F.cross_entropy(self.logits(batch).float(), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.window_loss += loss.detach()
        return loss.detach(), norm


def our_logits(model, unpad: bool = True):
    dtype = resolve_precision("auto", torch.device("cpu"))

    def logits(batch: dict) -> torch.Tensor:
        with autocast(torch.device("cpu"), dtype):
            return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                         unpad=unpad and pads(batch))  # as train_classifier

    return logits


def their_logits(model):
    def logits(batch: dict) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                     attention_mask=batch["attention_mask"]).logits

    return logits


# ------------------------------------------------------------------------- the measures
@dataclass
class Case:
    preset: str
    shape: str
    padded: list[int]  # each measured batch's padded length
    real: float  # fraction of the padded tokens that are real
    seconds: dict[str, list[float]]  # step kind -> step times


def finetune_config(args: argparse.Namespace, steps: int, hidden_size: int) -> Recipe:
    return recipe_for(FinetuneConfig(batch_size=args.batch, epochs=1.0, max_steps=steps,
                                     seed=SEED, device="cpu"), hidden_size)


def measure(args: argparse.Namespace, preset: str, shape: str) -> Case:
    config = BertConfig.from_preset(preset, vocab_size=args.vocab_size,
                                    hidden_dropout_prob=args.dropout,
                                    attention_probs_dropout_prob=args.dropout)
    steps = args.warmup + args.steps
    data = make_examples(shape, args.batch * steps, args.seq, args.vocab_size)
    finetune = finetune_config(args, steps, config.hidden_size)
    batches = [data.batch(indices, PAD) for indices in loop_batches(data, finetune, steps)]
    with tempfile.TemporaryDirectory() as workdir:
        ours, theirs = models(config, workdir)
    check_same_gradients(ours, theirs, batches[0])
    initial = copy.deepcopy(ours)  # train_classifier's rounds start from the same weights
    lr = finetune.learning_rate
    unfused, padded = copy.deepcopy(initial), copy.deepcopy(initial)
    runs = {"ours": Stepper(ours, our_logits(ours), finetune, steps, lr),
            "ours-padded": Stepper(padded, our_logits(padded, unpad=False), finetune, steps,
                                   lr),
            "transformers": Stepper(theirs, their_logits(theirs), finetune, steps, lr),
            # the loop before it took fused AdamW on the CPU too: torch's single-tensor AdamW
            "ours-unfused": Stepper(unfused, our_logits(unfused), finetune, steps, lr,
                                   fused=None)}
    seconds: dict[str, list[float]] = {name: [] for name in (*runs, "collate",
                                                              "train_classifier")}
    first = {}
    for round_ in range(args.rounds):
        for i, batch in enumerate(batches):
            for name, step in runs.items():
                torch.manual_seed(SEED + 1 + i)  # the same dropout masks' seed for both
                start = CLOCK[args.clock]()
                result = step(batch)
                if i >= args.warmup:
                    seconds[name].append(CLOCK[args.clock]() - start)
                if round_ == 0 and i == 0:
                    first[name] = result
        if round_ == 0:
            check_same_step(first, args.dropout)
        seconds["collate"] += time_collation(data, finetune, steps, args.clock)[args.warmup:]
        seconds["train_classifier"] += time_loop(initial, data, finetune, first["ours"][0],
                                                 args)[args.warmup:]
    real = sum(int(b["attention_mask"].sum()) for b in batches) / sum(
        b["attention_mask"].numel() for b in batches)
    return Case(preset, shape, [b["input_ids"].shape[1] for b in batches[args.warmup:]], real,
                seconds)


def check_same_gradients(ours, theirs, batch: dict) -> float:
    """Both models' loss on `batch` within LOSS_TOLERANCE and every gradient, through the name
    mapping, within GRADIENT_TOLERANCE (its relative norm): the same function of the same
    weights (a random init's near-uniform attention hides a wrong weight from the loss alone).
    Dropout off for the check; the gradients are dropped after. Returns the worst error."""
    grads = {}
    for name, model, logits in (("ours", ours, our_logits(ours)),
                                ("transformers", theirs, their_logits(theirs))):
        model.eval().zero_grad(set_to_none=True)
        loss = F.cross_entropy(logits(batch).float(), batch["labels"])
        loss.backward()
        grads[name] = loss.item(), {n: p.grad for n, p in model.named_parameters()}
        model.train().zero_grad(set_to_none=True)
    (our_loss, our_grads), (their_loss, their_grads) = grads["ours"], grads["transformers"]
    assert abs(our_loss - their_loss) <= LOSS_TOLERANCE, (our_loss, their_loss)
    mapped = to_hf_state_dict(our_grads, ours.config.num_hidden_layers)
    mapped.update({n: g for n, g in our_grads.items() if n.startswith("classifier.")})
    assert mapped.keys() == their_grads.keys(), set(mapped) ^ set(their_grads)
    # relative to the tensor's norm, or to a thousandth of the whole gradient's where a tensor's
    # is nought but round-off (the key bias's: softmax ignores a constant added to the scores)
    floor = 1e-3 * float(torch.stack([g.norm() for g in their_grads.values()]).norm())
    errors = {name: float((grad - their_grads[name]).norm()) / max(
        float(their_grads[name].norm()), floor) for name, grad in mapped.items()}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= GRADIENT_TOLERANCE, (worst, errors[worst])
    return errors[worst]


def check_same_step(first: dict, dropout: float) -> None:
    """The comparison is fair only if all compute the same thing: the first step's loss within
    LOSS_TOLERANCE of ours and its gradient norm within 1e-4 (relative)."""
    if dropout:  # the two models draw their dropout masks differently
        return
    our_loss, our_norm = first["ours"]
    for name, (loss, norm) in first.items():
        assert abs(float(loss) - float(our_loss)) <= LOSS_TOLERANCE, (name, loss, our_loss)
        assert math.isclose(float(norm), float(our_norm), rel_tol=1e-4), (name, norm, our_norm)


def time_collation(data: EncodedExamples, finetune: Recipe, steps: int,
                   clock: str) -> list[float]:
    times = []
    for indices in loop_batches(data, finetune, steps):
        start = CLOCK[clock]()
        data.batch(indices, PAD)
        times.append(CLOCK[clock]() - start)
    return times


def time_loop(initial, data: EncodedExamples, finetune: Recipe, first_loss,
              args: argparse.Namespace) -> list[float]:
    """Step times of `train_classifier` itself over the same batches (its loss logged at every
    step: on the CPU reading it costs nothing); its first loss must be the mirror's."""
    clock = CLOCK[args.clock]
    stamps, losses = [clock()], []

    def on_log(step: int, loss: float) -> None:
        stamps.append(clock())
        losses.append(loss)

    train_classifier(copy.deepcopy(initial), data, finetune, torch.device("cpu"), PAD,
                     on_log=on_log, log_every=1)
    assert args.dropout or abs(losses[0] - float(first_loss)) <= LOSS_TOLERANCE, (
        losses[0], first_loss)
    return [b - a for a, b in itertools.pairwise(stamps)]


def report(cases: list[Case], args: argparse.Namespace) -> None:
    print(f"batch={args.batch} seq<={args.seq} vocab={args.vocab_size} dropout={args.dropout} "
          f"threads={torch.get_num_threads()} steps={args.steps}x{args.rounds} rounds "
          f"clock={args.clock}")
    print(f"{'preset/shape':<12}{'padded':>8}{'real':>6}{'step':>18}{'median ms':>11}"
          f"{'steps/s':>9}{'vs transformers':>17}")
    ratios, unpadded = [], []
    for case in cases:
        medians = {name: statistics.median(times) for name, times in case.seconds.items()}
        theirs = medians["transformers"]
        for name, seconds in medians.items():
            label = f"{case.preset}/{case.shape}" if name == "ours" else ""
            padded = f"{statistics.mean(case.padded):.0f}" if name == "ours" else ""
            real = f"{case.real:.2f}" if name == "ours" else ""
            ratio = "" if name in ("transformers", "collate") else f"{theirs / seconds:.2f}"
            print(f"{label:<12}{padded:>8}{real:>6}{name:>18}{seconds * 1e3:>11.2f}"
                  f"{1 / seconds:>9.1f}{ratio:>17}")
        ratios.append(f"{case.preset}/{case.shape}:{theirs / medians['ours']:.2f}")
        unpadded.append(f"{case.preset}/{case.shape}:"
                        f"{medians['ours-padded'] / medians['ours']:.2f}")
    print("speedup_vs_transformers=" + ",".join(ratios))
    print("unpadded_vs_padded=" + ",".join(unpadded))


# ---------------------------------------------------------------------- the loop's profile
def profile_loop(args: argparse.Namespace, preset: str, shape: str) -> None:
    """cProfile of `train_classifier` over the benchmark's batches: where the loop's time goes
    beyond the model (collation, the schedule, the bar)."""
    config = BertConfig.from_preset(preset, vocab_size=args.vocab_size,
                                    hidden_dropout_prob=args.dropout,
                                    attention_probs_dropout_prob=args.dropout)
    steps = args.warmup + args.steps
    data = make_examples(shape, args.batch * steps, args.seq, args.vocab_size)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config, LABELS)
    # once before, for what a process does once: the first optimizer imports torch._dynamo
    train_classifier(copy.deepcopy(model), data, finetune_config(args, args.warmup),
                     torch.device("cpu"), PAD)
    profiler = cProfile.Profile()
    profiler.enable()
    train_classifier(model, data, finetune_config(args, steps), torch.device("cpu"), PAD)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
    print(f"--- train_classifier, {preset}/{shape}, {steps} steps (by own time)")
    print(out.getvalue())


# ------------------------------------------------------------------------------- the edge
def ours_training(args: argparse.Namespace):
    """`--pinning`'s step: our fine-tuning step on the first batch of the benchmark's shape."""
    config = BertConfig.from_preset(args.preset, vocab_size=args.vocab_size,
                                    hidden_dropout_prob=args.dropout,
                                    attention_probs_dropout_prob=args.dropout)
    data = make_examples(args.shape, args.batch, args.seq, args.vocab_size)
    finetune = finetune_config(args, 1)
    batch = data.batch(loop_batches(data, finetune, 1)[0], PAD)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config, LABELS)
    step = Stepper(model, our_logits(model), finetune, 10**9, finetune.learning_rate_for(config))
    return lambda: step(batch)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini"])
    parser.add_argument("--shapes", nargs="+", default=["full", "glue"],
                        choices=["full", "glue", "sst2"])
    parser.add_argument("--seq", type=int, default=128, help="the longest example's tokens")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=30522, help="BERT's uncased vocab")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="the model section's default (0.0); 0.1: BERT's")
    parser.add_argument("--steps", type=int, default=10, help="measured steps per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="batch 8, few steps: a smoke run")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own choice)")
    parser.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                        help="cpu: this process's CPU time (steadier on a loaded machine)")
    parser.add_argument("--cpu", default=None, metavar="ISA[:THREADS]",
                        help="pin both models' kernels first, e.g. avx2:1 (the cpu section's)")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile train_classifier instead of comparing")
    add_pinning_options(parser)
    # a --pinning worker's one preset and shape (--presets' and --shapes' first)
    parser.add_argument("--preset", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--shape", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.batch, args.steps, args.warmup, args.rounds = 8, 3, 1, 1
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        pinning_worker(args, ours_training)
        return
    if args.pinning:
        args.preset, args.shape = args.presets[0], args.shapes[0]
        compare_pinning(args, __file__, ["--seq", str(args.seq), "--shape", args.shape,
                                         "--dropout", str(args.dropout)])
        return
    if args.cpu:
        pin_cpu(cpu_config(args.cpu))
    elif args.threads:
        torch.set_num_threads(args.threads)
    for preset in args.presets if args.profile else ():
        for shape in args.shapes:
            profile_loop(args, preset, shape)
    if not args.profile:
        report([measure(args, p, s) for p in args.presets for s in args.shapes], args)


if __name__ == "__main__":
    main()
