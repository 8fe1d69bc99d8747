"""The device check: everything that needs a GPU to be checked, in one run that ends with one
summary line. Run it through `benchmarks/gpu_check.sh` (under 8 minutes on an H200).

  1. BERT-base train step, sequence 128, bf16: ours eager (the trainer's own step), ours
     compiled, transformers' BertForPreTraining; sequences/s and two utilisation figures:
       util = the FLOPs each model really executes (ours runs the MLM head on its masked
              slots only, transformers on every token) / the bf16 matmul rate measured here;
       mfu  = the conventional model FLOPs (6 x parameters + attention, the same count for
              both models) / the device's dense bf16 peak (--peak-tflops, H200: 989);
     and the host syncs in one of our steps (CUDA's sync debug mode; 0 expected).
  2. the same at sequence 512 (the second phase of BERT's recipe);
  3. `bert pretrain` on the device (bf16, fused AdamW): the built-in corpus, vocab and samples,
     100 steps with a checkpoint at 50, then extended to 150 (resumed from its checkpoint);
     and a run stopped at a checkpoint and resumed against a straight one (same losses);
  4. the same pretraining under `torchrun --nproc-per-node 1` (NCCL on a GPU);
  5. fp16 with a GradScaler for a few steps.

Needs only torch, transformers, tokenizers, numpy, click, pyyaml, safetensors: tracking is off,
and nothing imports mlflow or dvc. `--dry-run` does the same on the CPU with tiny sizes, with
mlflow and dvc made unimportable (the test suite runs it; compiling uses aot_eager there, which
traces the same graphs without generating code).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("mlflow", "dvc")  # absent on the GPU machine


def block_imports(folder: Path) -> str:
    """Packages named like BLOCKED that fail on import, in `folder`; returns the folder for
    PYTHONPATH (so subprocesses are blocked too)."""
    for name in BLOCKED:
        (folder / name).mkdir(parents=True, exist_ok=True)
        message = f"{name} is not installed on the GPU machine (gpu_check --dry-run)"
        (folder / name / "__init__.py").write_text(f"raise ImportError({message!r})\n")
    return str(folder)


# ------------------------------------------------------------------------------- sizes
GPU = SimpleNamespace(preset="base", vocab=30522, runs=[(128, 256, 20, 5), (512, 64, 10, 3)],
                      matmul=8192, backend="inductor", steps=100, extend_to=150,
                      resume_steps=20, fp16_steps=20, overrides=[])
DRY = SimpleNamespace(preset="tiny", vocab=1000, runs=[(32, 8, 2, 1), (64, 4, 2, 1)],
                      matmul=256, backend="aot_eager", steps=6, extend_to=8, resume_steps=4,
                      fp16_steps=4,
                      overrides=["samples.dupe_factor=1", "vocab.vocab_size=2000",
                                 "model.hidden_size=32", "model.num_hidden_layers=1",
                                 "model.intermediate_size=64", "train.batch_size=8"])


# ----------------------------------------------------------------------- 1-2: the step
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


def executed_flops(config, batch: int, length: int, head_rows: int) -> float:
    """Matmul FLOPs one training step executes (3 x forward): the encoder on every padded
    token, attention on L x L, the MLM head on `head_rows` rows, pooler and NSP."""
    h, i, layers, v = (config.hidden_size, config.intermediate_size,
                       config.num_hidden_layers, config.vocab_size)
    encoder = batch * length * 2 * layers * (4 * h * h + 2 * h * i)
    attention = layers * 4 * batch * length * length * h
    heads = head_rows * 2 * (h * h + h * v) + batch * 2 * (h * h + 2 * h)
    return 3.0 * (encoder + attention + heads)


def model_flops(config, batch: int, length: int) -> float:
    """The conventional count: 6 x parameters (word embeddings once, as the tied decoder;
    position and segment tables are lookups) + 12 x layers x length x hidden, per token."""
    import torch

    from bertcore.model.bert import BertForPretraining

    with torch.device("meta"):
        params = BertForPretraining(config).num_parameters()
    lookups = (config.max_position_embeddings + config.type_vocab_size) * config.hidden_size
    per_token = 6 * (params - lookups) + 12 * config.num_hidden_layers * length * config.hidden_size
    return per_token * batch * length


def time_steps(step, device, warmup: int, steps: int) -> float:
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


def count_host_syncs(step, device) -> int | None:
    """Synchronising CUDA calls made by `step` (CUDA's sync debug mode); None on the CPU."""
    import torch

    if device.type != "cuda":
        return None
    synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(3):
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    synchronize(device)
    return sum("synchroniz" in str(w.message).lower() for w in caught) // 3


def benchmark_step(sizes, length: int, batch: int, steps: int, warmup: int, device,
                   peak: float, matmul: float, compile_too: bool = True) -> dict:
    """Ours eager, ours compiled, transformers at one sequence length; a row per model."""
    import torch
    from transformers import BertConfig as HFBertConfig
    from transformers import BertForPreTraining

    sys.path.insert(0, str(REPO / "benchmarks"))
    from model_step import MAX_PREDICTIONS, hf_inputs, make_batch, ours_inputs

    from bertcore.model.bert import BertConfig, BertForPretraining
    from bertcore.model.hf import to_hf_state_dict
    from bertcore.training.config import TrainConfig
    from bertcore.training.step import Trainer

    config = BertConfig.from_preset(sizes.preset, vocab_size=sizes.vocab,
                                    max_position_embeddings=max(512, length))
    slots = MAX_PREDICTIONS if length <= 128 else 80  # Google: 20 at 128, 80 at 512
    cpu_batch = make_batch(batch, length, sizes.vocab, torch.Generator().manual_seed(0),
                           max_predictions=slots)
    ours_batch = {k: v.to(device) for k, v in ours_inputs(cpu_batch, slots).items()}
    hf_batch = {k: v.to(device) for k, v in hf_inputs(cpu_batch).items()}
    padded = cpu_batch["input_ids"].shape[1]
    train = TrainConfig(max_steps=10**6, batch_size=batch, warmup_steps=0, precision="bf16",
                        learning_rate=1e-4)
    rows = {}

    def ours(compiled: bool):
        torch.manual_seed(0)
        trainer = Trainer(BertForPretraining(config), train,
                          SimpleNamespace(steps_per_epoch=10**6), device=device)
        if compiled:  # as train.compile does, with this run's backend
            torch._dynamo.reset()  # static shapes for this length, as a run of its own
            trainer.model = torch.compile(trainer.raw_model, backend=sizes.backend)
        return trainer, lambda: trainer.train_step([ours_batch])

    def transformers_step():
        torch.manual_seed(0)
        reference = BertForPretraining(config)
        model = BertForPreTraining._from_config(HFBertConfig(**config.to_dict()),
                                                attn_implementation="sdpa")
        model.load_state_dict(to_hf_state_dict(reference.state_dict(),
                                               config.num_hidden_layers), strict=False)
        model.to(device).train()
        decay = [p for p in model.parameters() if p.ndim >= 2]
        rest = [p for p in model.parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                       {"params": rest, "weight_decay": 0.0}], lr=1e-4,
                                      fused=True)

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(**hf_batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return model, step

    nominal = model_flops(config, batch, padded)
    for name, build, head_rows in (
        ("ours", lambda: ours(False), batch * slots),
        ("ours+compile", lambda: ours(True), batch * slots),
        ("transformers", transformers_step, batch * padded),
    ):
        if name == "ours+compile" and not compile_too:
            print("ours+compile skipped: not enough time left", flush=True)
            continue
        started = time.perf_counter()
        try:
            owner, step = build()
            seconds = time_steps(step, device, warmup, steps)
        except Exception as exc:
            if name != "ours+compile":
                raise
            # e.g. no C compiler for Triton's launcher: the eager figures still count
            print(f"ours+compile FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            rows["compile_failed"] = True
            continue
        syncs = count_host_syncs(step, device) if name == "ours" else None
        executed = executed_flops(config, batch, padded, head_rows)
        rows[name] = {"seconds": seconds, "seq_per_s": batch / seconds,
                      "util": executed / seconds / matmul, "mfu": nominal / seconds / peak,
                      "executed_tflop": executed / 1e12, "syncs": syncs,
                      "wall_s": time.perf_counter() - started}
        del owner, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    failed = rows.pop("compile_failed", False)
    for row in rows.values():
        row["vs_transformers"] = rows["transformers"]["seconds"] / row["seconds"]
    print(f"\n### seq {length}: preset={sizes.preset} batch={batch} padded={padded} "
          f"MLM slots={slots} bf16; matmul {matmul / 1e12:.1f} TFLOP/s, peak {peak / 1e12:.0f}")
    print("| model | ms/step | sequences/s | executed TFLOP/step | util (executed/matmul) "
          "| MFU (6N/peak) | vs transformers | compile+run s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['seconds'] * 1e3:.1f} | {r['seq_per_s']:,.0f} | "
              f"{r['executed_tflop']:.2f} | {r['util']:.1%} | {r['mfu']:.1%} | "
              f"{r['vs_transformers']:.2f}x | {r['wall_s']:.0f} |")
    if failed:
        rows["compile_failed"] = True
    return rows


# ------------------------------------------------------------------- 3-5: the pipeline
def bert(*args: str) -> str:
    """Run `bert ARGS` in this process (the CLI's code path); returns what it logged."""
    from stages.cli import cli

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    try:
        cli.main(list(args), prog_name="bert", standalone_mode=False)
    finally:
        logging.getLogger().removeHandler(handler)
    return stream.getvalue()


def read_json(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def check_pretrain(sizes, common: list[str]) -> str:
    """100 steps with a checkpoint at 50, then extended to 150 (a resume from step 100)."""
    half = sizes.steps // 2
    bert("pretrain", *common, "--set", f"train.max_steps={sizes.steps}",
         "--set", f"train.checkpoint_every={half}", "--set", f"train.eval_every={half}")
    done = read_json("metrics/pretrain.json")
    assert done["steps"] == sizes.steps, done
    assert read_json("metrics/pretrain_details.json")["skipped_steps"] == 0
    evaluations = Path("metrics/pretrain_eval.tsv").read_text(encoding="utf-8").splitlines()
    assert math.isfinite(done["train"]["loss"]) and len(evaluations) >= 2, evaluations
    logged = bert("pretrain", *common, "--set", f"train.max_steps={sizes.extend_to}",
                  "--set", f"train.checkpoint_every={half}", "--set", f"train.eval_every={half}")
    assert f"step {sizes.steps} of {sizes.extend_to}" in logged, logged
    assert read_json("metrics/pretrain.json")["steps"] == sizes.extend_to
    return f"ok (loss {done['train']['loss']:.3f} at {sizes.steps})"


def check_resume(sizes, device) -> str:
    """A run stopped at a checkpoint and resumed draws the same losses as a straight run."""
    import torch

    from bertcore.data.samples.store import SampleStore
    from bertcore.data.vocab.files import read_vocab
    from bertcore.model.bert import BertConfig, BertForPretraining
    from bertcore.training.batches import PretrainingBatches
    from bertcore.training.checkpoint import CheckpointDir
    from bertcore.training.config import TrainConfig
    from bertcore.training.loop import fit
    from bertcore.training.masking import MaskingConfig, PretrainingCollator, VocabSpec
    from bertcore.training.step import Trainer

    tokens = read_vocab("data/vocab")
    store = SampleStore("data/samples/train")
    n = sizes.resume_steps
    config = TrainConfig(max_steps=2 * n, batch_size=8, warmup_steps=2, log_every=1,
                         eval_every=0, checkpoint_every=0, seed=3)

    def trainer() -> Trainer:
        torch.manual_seed(3)
        model = BertForPretraining(BertConfig.from_preset("tiny", vocab_size=len(tokens)))
        collator = PretrainingCollator(MaskingConfig(), VocabSpec.from_tokens(tokens), seed=3)
        batches = PretrainingBatches(store, collator, 8, 1, seed=3,
                                     pin_memory=device.type == "cuda")
        return Trainer(model, config, batches, device=device)

    straight: list[float] = []
    fit(trainer(), on_step=lambda r: straight.append(r.loss), progress=False)
    resumed: list[float] = []
    checkpoints = CheckpointDir("models/resume_check")
    fit(trainer(), checkpoints=checkpoints, stop_after=n, progress=False,
        on_step=lambda r: resumed.append(r.loss))
    second = trainer()
    second.resume_from(checkpoints.latest())
    fit(second, on_step=lambda r: resumed.append(r.loss), progress=False)
    worst = max(abs(a - b) / abs(b) for a, b in zip(resumed, straight, strict=True))
    assert len(resumed) == 2 * n and worst < 1e-3, (worst, resumed, straight)
    return f"ok (max rel diff {worst:.1e})"


def check_ddp(common: list[str], env: dict, backend: str) -> str:
    """The same pretraining under torchrun with one process: DDP through `backend`."""
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--standalone",
            "-m", "--", "stages", "pretrain", *common,
            "--checkpoints", "models/ddp_checkpoints", "--out", "models/ddp_pretrained",
            "--metrics", "metrics/ddp.json", "--log", "metrics/ddp_log.tsv",
            "--eval-log", "metrics/ddp_eval.tsv", "--set", "train.max_steps=20",
            "--set", "train.checkpoint_every=10", "--set", "train.eval_every=10"]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"joined the {backend} process group" in proc.stderr, proc.stderr[-3000:]
    done = read_json("metrics/ddp.json")
    assert done["steps"] == 20 and math.isfinite(done["train"]["loss"]), done
    return "ok"


def check_fp16(sizes, common: list[str]) -> str:
    bert("pretrain", *common, "--checkpoints", "models/fp16_checkpoints",
         "--out", "models/fp16_pretrained", "--metrics", "metrics/fp16.json",
         "--log", "metrics/fp16_log.tsv", "--eval-log", "metrics/fp16_eval.tsv",
         "--set", "train.precision=fp16", "--set", f"train.max_steps={sizes.fp16_steps}",
         "--set", "train.eval_every=0", "--set", f"train.checkpoint_every={sizes.fp16_steps}")
    done = read_json("metrics/fp16.json")
    assert done["steps"] == sizes.fp16_steps and math.isfinite(done["train"]["loss"]), done
    skipped = read_json("metrics/fp16_details.json")["skipped_steps"]
    assert skipped < sizes.fp16_steps // 2, skipped  # the scaler's first overflows
    return f"ok ({skipped} steps skipped by the scaler)"


# ------------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the device's dense bf16 peak (H100/H200 SXM: 989)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    front = [block_imports(scratch / "blocked")] if args.dry_run else []
    front.append(str(REPO))
    sys.path[:0] = front
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*front, env.get("PYTHONPATH", "")])
    import torch

    sizes = DRY if args.dry_run else GPU
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    if device.type == "cuda":
        print(f"device: {torch.cuda.get_device_name(device)}; torch {torch.__version__}")
    else:
        print(f"device: CPU ({torch.get_num_threads()} threads); torch {torch.__version__}")
    results: dict[str, str] = {}
    figures: dict[str, str] = {}

    def attempt(key: str, check) -> None:
        began = time.perf_counter()
        try:
            results[key] = check()
        except Exception as exc:  # one failed check must not hide the others
            traceback.print_exc()
            results[key] = f"FAIL({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        print(f"[{time.perf_counter() - started:5.0f} s] {key}: {results[key]} "
              f"({time.perf_counter() - began:.0f} s)", flush=True)

    peak = args.peak_tflops * 1e12
    matmul = matmul_flops_per_s(device, sizes.matmul)
    for number, (length, batch, steps, warmup) in enumerate(sizes.runs):
        def run(length=length, batch=batch, steps=steps, warmup=warmup,
                tag="" if number == 0 else f"s{length}_"):
            # compiling BERT-base takes a minute or two: not at 512 if time is short
            compile_too = args.dry_run or time.perf_counter() - started < 240
            rows = benchmark_step(sizes, length, batch, steps, warmup, device, peak, matmul,
                                  compile_too)
            failed = rows.pop("compile_failed", False)
            best = min(set(rows) - {"transformers"}, key=lambda n: rows[n]["seconds"])
            compiled = rows.get("ours+compile")
            figures.update({
                f"{tag}seq_per_s": f"{rows['ours']['seq_per_s']:.0f}",
                f"{tag}compiled_seq_per_s": f"{compiled['seq_per_s']:.0f}" if compiled
                else ("FAIL" if failed else "skipped"),
                f"{tag}vs_transformers": f"{rows[best]['vs_transformers']:.2f}x",
                f"{tag}util": f"{rows[best]['util']:.3f}",
                f"{tag}mfu": f"{rows[best]['mfu']:.3f}",
            })
            if rows["ours"]["syncs"] is not None:
                figures[f"{tag}host_syncs_per_step"] = str(rows["ours"]["syncs"])
            return "FAIL (torch.compile)" if failed else "ok"

        attempt(f"step_s{length}", run)

    os.chdir(scratch)
    shutil.copy(REPO / "params.yaml", scratch / "params.yaml")
    common = ["--set", "tracking.enabled=false", "--set", f"train.device={device.type}",
              "--set", "train.log_every=10"]
    for item in sizes.overrides:
        common += ["--set", item]
    kind = device.type
    backend = "nccl" if kind == "cuda" else "gloo"

    def data() -> str:
        for stage in ("corpus", "vocab", "samples"):
            bert(stage, *common)
        return "ok"

    attempt("data", data)
    attempt(f"pretrain_{kind}", lambda: check_pretrain(sizes, common))
    attempt(f"resume_{kind}", lambda: check_resume(sizes, device))
    attempt(f"ddp_{backend}", lambda: check_ddp(common, env, backend))
    attempt("fp16", lambda: check_fp16(sizes, common))

    os.chdir(REPO)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    statuses = {k: ("ok" if v.startswith("ok") else "FAIL") for k, v in results.items()}
    shown = {k: v for k, v in statuses.items() if not k.startswith("step_") or v != "ok"}
    summary = " ".join([*(f"{k}={v}" for k, v in figures.items()),
                        *(f"{k}={v}" for k, v in shown.items()),
                        f"seconds={time.perf_counter() - started:.0f}"])
    print(f"gpu_check{' (dry run)' if args.dry_run else ''}: {summary}")
    return 0 if all(v == "ok" for v in statuses.values()) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
