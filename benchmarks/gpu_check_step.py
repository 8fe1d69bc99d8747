"""One BERT training step, ours against transformers' BertForPreTraining, at one sequence length,
in one of two named comparisons: eager against eager, or compiled against compiled.

- Same config, weights, batch and masks; fused AdamW, gradient clipping and bf16 autocast on
  both sides. Ours is the trainer's own step (`StepRunner.train_step`). In the compiled
  comparison, beside it, the same step with the encoder unpadded (`ours-unpadded`:
  `unpad=True`, on the real tokens alone; attention re-padded, with the same kernel),
  compiled with fullgraph=True too.
- Compiled: ours with fullgraph=True, so a graph break on this torch fails the check instead of
  running slower; transformers with fullgraph=True too when it traces as one graph, else with
  its graph breaks (said in the figures).
- The same SDPA kernel for both (`torch.nn.attention.sdpa_kernel`, one backend allowed, so
  nothing falls back silently): transformers passes a [B,1,L,L] mask, ours [B,1,1,L], and the
  ratio should compare the models, not two attention kernels.
- The models take turns: rounds of a few steps each, the order flipped every round, so that a
  change in the machine's speed hits both alike; the median round counts.
- Utilisation: `exec_util` = the matmul FLOPs each model really executes (ours: the MLM head
  on its masked slots; transformers: on every token; padding included, since it runs) per
  second / the device's dense bf16 peak; `mfu6n` = the conventional 6 x parameters (+
  attention) per token, the same count for both models, / the same peak.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from gpu_check_flops import executed_flops, model_flops, synchronize
from gpu_check_syncs import StepSyncs, count_step_syncs

SDPA_NAMES = {"EFFICIENT_ATTENTION": "efficient", "CUDNN_ATTENTION": "cudnn", "MATH": "math",
              "FLASH_ATTENTION": "flash"}


@dataclass
class StepSizes:
    preset: str
    vocab: int
    length: int
    batch: int
    warmup: int  # steps before timing (the first one compiles)
    rounds: int  # timed rounds per model, taking turns
    per_round: int  # steps per round
    sync_steps: int  # steps whose host syncs are counted


@dataclass
class Bench:
    """What every comparison shares: the device, its rates, the compile backend, the kernel."""

    device: object  # torch.device
    peak: float  # dense bf16 FLOP/s of the device (its data sheet)
    matmul: float  # bf16 matmul FLOP/s measured here
    backend: str  # torch.compile backend: inductor (GPU), aot_eager (dry run)
    sdpa: object  # torch.nn.attention.SDPBackend, pinned for both models


@dataclass
class Contender:
    name: str
    step: Callable[[], None]
    executed: float  # matmul FLOPs per step
    compile_s: float | None = None
    seconds: float = math.nan  # median per step
    syncs: StepSyncs | None = None
    fullgraph: bool = True


@dataclass
class Comparison:
    figures: dict[str, str]  # for the summary line
    trainer: object  # ours (compiled or not), for a later part to feed real batches to
    ours_syncs: StepSyncs | None  # None off CUDA


# ---------------------------------------------------------------------------- the device
def choose_sdpa_backend(device, heads: int = 12, length: int = 128, head_dim: int = 64):
    """The first SDPA backend that runs, forward and backward with dropout, both models' mask
    forms: ours (bool [B,1,1,L]) and transformers' (bool or additive float [B,1,L,L]). On a GPU:
    memory-efficient attention, else cuDNN, else math (flash takes no mask); math on the CPU."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if device.type != "cuda":
        return SDPBackend.MATH
    shape = (2, heads, length, head_dim)
    keep = torch.ones(2, 1, 1, length, dtype=torch.bool, device=device)
    keep[1, ..., length // 2:] = False
    masks = [keep, keep.expand(2, 1, length, length).contiguous(),
             torch.zeros(2, 1, length, length, device=device, dtype=torch.bfloat16)
             .masked_fill(~keep, float("-inf"))]
    for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel(backend):
                for mask in masks:
                    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16,
                                           requires_grad=True) for _ in range(3))
                    out = torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, dropout_p=0.1)
                    out.float().sum().backward()
            synchronize(device)
            return backend
        except Exception:  # "no available kernel" and its kin: try the next one
            continue
    raise RuntimeError("no SDPA backend runs both models' attention masks on this device")


def sdpa_name(backend) -> str:
    return SDPA_NAMES.get(backend.name, backend.name.lower())


# ---------------------------------------------------------------------------- the models
def new_unpadded_trainer(config, sizes: StepSizes, bench: Bench):
    """`new_trainer`'s (the same weights), its model called with `unpad=True`, compiled as
    `train.compile: fullgraph` does (the packing's nonzero traced with a data-dependent size)."""
    import torch

    from bertcore.training.loop.step import compile_model

    class Unpadded(torch.nn.Module):  # the step calls model(**batch) and model.train()
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, **batch):
            return self.model(**batch, unpad=True)

    trainer = new_trainer(config, sizes, bench, compiled=False)
    trainer.model = compile_model(Unpadded(trainer.raw_model), "fullgraph", bench.backend)
    return trainer


def new_trainer(config, sizes: StepSizes, bench: Bench, compiled: bool):
    """Our trainer (its own step: global counts, clipping, fused AdamW, device counters),
    compiled as `train.compile: fullgraph` does, with this run's backend."""
    import torch

    from bertcore.model.bert import BertPretrainingModel
    from bertcore.training.config import TrainConfig
    from bertcore.training.loop.step import StepRunner, compile_model

    torch.manual_seed(0)
    train = TrainConfig(max_steps=10**6, batch_size=sizes.batch, warmup_steps=0,
                        precision="bf16", learning_rate=1e-4, log_every=10**6, eval_every=0,
                        checkpoint_every=0, device=bench.device.type, micro_batches=1)
    batches = SimpleNamespace(steps_per_epoch=10**6, first_micro_batch=0)  # one batch a step
    trainer = StepRunner(BertPretrainingModel(config), train, batches, device=bench.device)
    if compiled:
        trainer.model = compile_model(trainer.raw_model, "fullgraph", bench.backend)
    return trainer


def step_config(sizes: StepSizes):
    from bertcore.model.bert import BertConfig

    return BertConfig.from_preset(sizes.preset, vocab_size=sizes.vocab,
                                  max_position_embeddings=max(512, sizes.length))


def mlm_slots(length: int) -> int:
    from model_step import MAX_PREDICTIONS

    return MAX_PREDICTIONS if length <= 128 else 80  # Google's: 20 at 128, 80 at 512


def build_transformers(config, weights: dict, batch: dict, sizes: StepSizes, bench: Bench):
    """transformers' BertForPreTraining with our weights, fused AdamW, clipping, bf16 autocast;
    returns (model, optimizer-backed step for a given callable model)."""
    import torch
    from transformers import BertConfig as HFBertConfig
    from transformers import BertForPreTraining

    from bertcore.saved.hf_names import to_hf_state_dict

    model = BertForPreTraining._from_config(HFBertConfig(**config.to_dict()),
                                            attn_implementation="sdpa")
    model.load_state_dict(to_hf_state_dict(weights, config.num_hidden_layers), strict=False)
    model.to(bench.device).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": rest, "weight_decay": 0.0}], lr=1e-4, fused=True)

    def step_of(forward) -> Callable[[], None]:
        def step() -> None:
            with torch.autocast(bench.device.type, dtype=torch.bfloat16):
                loss = forward(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    executed = executed_flops(config, sizes.batch, batch["input_ids"].shape[1],
                              sizes.batch * batch["input_ids"].shape[1])
    return model, step_of, executed


def warm_up(contender: Contender, device, steps: int) -> None:
    """`steps` untimed steps; the first one's excess over the others is the compile time."""
    times = []
    for _ in range(max(steps, 1)):
        synchronize(device)
        start = time.perf_counter()
        contender.step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    if contender.compile_s is not None:
        rest = statistics.median(times[1:]) if len(times) > 1 else 0.0
        contender.compile_s = max(times[0] - rest, 0.0)


def time_alternating(contenders: list[Contender], device, rounds: int, per_round: int) -> None:
    """Median seconds per step of each contender, over rounds taken in turn (A B, B A, ...)."""
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    for number in range(rounds):
        for contender in contenders if number % 2 == 0 else contenders[::-1]:
            synchronize(device)
            start = time.perf_counter()
            for _ in range(per_round):
                contender.step()
            synchronize(device)
            times[contender.name].append((time.perf_counter() - start) / per_round)
    for contender in contenders:
        contender.seconds = statistics.median(times[contender.name])


# ---------------------------------------------------------------------------- comparing
def compare_steps(sizes: StepSizes, bench: Bench, compiled: bool, tag: str,
                  time_left: Callable[[], float],
                  say: Callable[[str], None] = print) -> Comparison:
    """One named comparison. With `compiled`, transformers is compiled only if the time left
    covers it (estimated from our compile)."""
    import torch
    from model_step import hf_inputs, make_batch, ours_inputs
    from torch.nn.attention import sdpa_kernel

    device = bench.device
    config = step_config(sizes)
    slots = mlm_slots(sizes.length)
    cpu_batch = make_batch(sizes.batch, sizes.length, sizes.vocab,
                           torch.Generator().manual_seed(0), max_predictions=slots)
    ours_batch = {k: v.to(device) for k, v in ours_inputs(cpu_batch, slots).items()}
    hf_batch = {k: v.to(device) for k, v in hf_inputs(cpu_batch).items()}
    padded = cpu_batch["input_ids"].shape[1]
    if compiled:
        torch._dynamo.reset()  # static shapes for this length, as a run of its own
    figures: dict[str, str] = {}
    hf_failed = False
    with sdpa_kernel(bench.sdpa):
        trainer = new_trainer(config, sizes, bench, compiled)
        unpadded_trainer = new_unpadded_trainer(config, sizes, bench) if compiled else None
        ours = Contender("ours", lambda: trainer.train_step([ours_batch]),
                         executed_flops(config, sizes.batch, padded, sizes.batch * slots),
                         compile_s=0.0 if compiled else None)
        warm_up(ours, device, sizes.warmup)
        contenders = [ours]
        unpadded = None
        if unpadded_trainer is not None:
            real = int(cpu_batch["attention_mask"].sum())
            unpadded = Contender("ours-unpadded",
                                 lambda: unpadded_trainer.train_step([ours_batch]),
                                 executed_flops(config, sizes.batch, padded,
                                                sizes.batch * slots, tokens=real), compile_s=0.0)
            warm_up(unpadded, device, sizes.warmup)
            contenders.append(unpadded)
        model, step_of, executed = build_transformers(
            config, trainer.raw_model.state_dict(), hf_batch, sizes, bench)
        theirs = Contender("transformers", step_of(model), executed)
        if compiled:
            needed = 1.3 * ours.compile_s + 10.0
            if time_left() < needed:
                say(f"transformers compiled: skipped (needs ~{needed:.0f} s, "
                    f"{time_left():.0f} s left)")
                theirs = None
            else:
                try:
                    theirs = compile_transformers(model, step_of, executed, bench, sizes, say)
                except Exception as exc:  # their failure: ours still has its figures
                    reason = (str(exc).strip().splitlines() or [""])[0][:200]
                    say(f"transformers compiled: FAILED ({type(exc).__name__}: {reason})")
                    theirs, hf_failed = None, True
        else:
            warm_up(theirs, device, sizes.warmup)
        if theirs is not None:
            contenders.append(theirs)
        time_alternating(contenders, device, sizes.rounds, sizes.per_round)
        for contender in contenders:
            contender.syncs = count_step_syncs(contender.step, device, sizes.sync_steps)
    nominal = model_flops(config, sizes.batch, padded)
    print_table(contenders, bench, nominal, sizes.batch,
                f"{tag}: preset={sizes.preset} batch={sizes.batch} padded={padded} "
                f"MLM slots={slots} bf16, sdpa={sdpa_name(bench.sdpa)}")
    figures[f"{tag}_seq_s"] = f"{sizes.batch / ours.seconds:.0f}"
    # 3 significant digits: 0.412 on a GPU; on a CPU (the dry run) the same code, tiny numbers
    figures[f"{tag}_exec_util"] = f"{ours.executed / ours.seconds / bench.peak:.3g}"
    figures[f"{tag}_mfu6n"] = f"{nominal / ours.seconds / bench.peak:.3g}"
    figures[f"{tag}_vs_hf"] = (f"{theirs.seconds / ours.seconds:.2f}x" if theirs is not None
                               else "hf_failed" if hf_failed else "skipped")
    if unpadded is not None:
        figures[f"{tag}_unpadded_seq_s"] = f"{sizes.batch / unpadded.seconds:.0f}"
        figures[f"{tag}_unpadded_mfu6n"] = f"{nominal / unpadded.seconds / bench.peak:.3g}"
        figures[f"{tag}_unpadded_vs_padded"] = f"{ours.seconds / unpadded.seconds:.2f}x"
        if unpadded.syncs is not None:  # the packing's nonzero waits for the GPU
            figures[f"{tag}_unpadded_syncs"] = f"{unpadded.syncs.syncs}/{unpadded.syncs.steps}"
    if ours.syncs is not None:
        figures.update(ours.syncs.figures(tag))
        if theirs is not None and theirs.syncs is not None:
            figures[f"{tag}_hf_syncs"] = f"{theirs.syncs.syncs}/{theirs.syncs.steps}"
    if compiled:
        figures[f"{tag}_compile_s"] = f"{ours.compile_s:.0f}"
        if theirs is not None:
            figures[f"{tag}_hf_fullgraph"] = "yes" if theirs.fullgraph else "no"
    del model, theirs, unpadded, contenders
    release(device)
    return Comparison(figures, trainer, ours.syncs)


def compile_transformers(model, step_of, executed: float, bench: Bench, sizes: StepSizes,
                         say: Callable[[str], None]) -> Contender:
    """transformers compiled with fullgraph=True, or with its graph breaks if it has some."""
    import torch

    forward = torch.compile(model, backend=bench.backend, fullgraph=True)
    theirs = Contender("transformers", step_of(forward), executed, compile_s=0.0)
    try:
        warm_up(theirs, bench.device, sizes.warmup)
    except Exception as exc:  # a graph break: compare what a user of transformers would get
        reason = (str(exc).strip().splitlines() or [""])[0][:160]
        say(f"transformers does not compile as one graph here ({type(exc).__name__}: {reason});"
            " compiled with its graph breaks instead")
        forward = torch.compile(model, backend=bench.backend)
        theirs = Contender("transformers", step_of(forward), executed, compile_s=0.0,
                           fullgraph=False)
        warm_up(theirs, bench.device, sizes.warmup)
    return theirs


def release(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def print_table(contenders: list[Contender], bench: Bench, nominal: float, batch: int,
                title: str) -> None:
    print(f"\n### {title}; matmul {bench.matmul / 1e12:.1f} TFLOP/s, peak "
          f"{bench.peak / 1e12:.0f}")
    print("| model | ms/step | sequences/s | executed TFLOP/step | exec util (of peak) "
          "| of measured matmul | MFU 6N (of peak) | host syncs | busy | compile s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in contenders:
        rate = c.executed / c.seconds
        syncs = f"{c.syncs.syncs}/{c.syncs.steps}" if c.syncs else "n/a"
        busy = f"{c.syncs.busy}/{c.syncs.steps}" if c.syncs else "n/a"
        compile_s = "-" if c.compile_s is None else f"{c.compile_s:.0f}"
        name = c.name if c.fullgraph else f"{c.name} (graph breaks)"
        print(f"| {name} | {c.seconds * 1e3:.1f} | {batch / c.seconds:,.0f} | "
              f"{c.executed / 1e12:.2f} | {rate / bench.peak:.1%} | {rate / bench.matmul:.1%} | "
              f"{nominal / c.seconds / bench.peak:.1%} | {syncs} | {busy} | {compile_s} |",
              flush=True)
