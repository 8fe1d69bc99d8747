"""The device check: everything that needs a GPU to be checked, in one run within a deadline
(default 300 s), ending with one summary line whatever happens. Run it through
`benchmarks/gpu_check.sh`; docs/development.md says what each figure means.

The parts, the essential ones first; a part starts only if its estimate fits the time left
(compile estimates come from the compiles measured before it), and `--parts` runs a few again:

  device              CUDA present (else it stops at once), bf16 matmul rate, the SDPA kernel
  data                the corpus, vocab and samples stages (the built-in corpus)
  pretrain_cuda       `bert pretrain`: 100 steps with a checkpoint at 50, extended to 150
  resume_cuda         a run stopped at a checkpoint and resumed = a straight run
  ddp_nccl            `bert pretrain` under torchrun (one process, NCCL)
  step_s128_eager     BERT-base train step, ours eager vs transformers eager
  fp16                `bert pretrain` in fp16 with a GradScaler
  step_s128_compiled  ours compiled (fullgraph) vs transformers compiled, and ours with the
                      encoder unpadded (`unpad=True`) compiled
  datapath            host syncs of the loop fed by pinned batches of the real samples, with the
                      compiled model of step_s128_compiled (eager if it did not run)
  phase2_cuda         BERT's two phases: samples at 512 too, phase 1 then a short phase 2 at
                      512 from its end, a checkpoint in each, phase 2 extended (resumed)
  step_s512_eager     step_s128_eager at sequence 512 (BERT's second phase)
  step_s512_compiled  step_s128_compiled at sequence 512

Needs only torch, transformers, tokenizers, numpy, click, pyyaml, safetensors: tracking is off
and nothing imports mlflow or dvc. `--dry-run` runs the same on the CPU with tiny sizes (names
end in _cpu, _gloo, s32, s64; samples of 32 tokens, phase 2 at 64), mlflow and dvc made
unimportable, compiling with aot_eager (the graphs inductor would get, no code generated).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gpu_check_run import CheckRecord, Deadline, Part, Stop, StopSignals, run_parts
from gpu_check_step import StepSizes

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("mlflow", "dvc")  # absent on the GPU machine


@dataclass
class Sizes:
    short: StepSizes
    long: StepSizes
    matmul: int  # square bf16 matmul measured for the device's rate
    backend: str  # torch.compile backend
    pretrain: tuple[int, int]  # steps, then extended to
    resume_steps: int
    ddp_steps: int
    fp16_steps: int
    datapath_steps: int
    phase2: tuple[int, int, int, int]  # length, steps of each phase, phase 2's batch
    estimate: dict[str, float]  # seconds per part before anything was measured
    overrides: list[str] = field(default_factory=list)


GPU = Sizes(short=StepSizes("base", 30522, 128, 256, warmup=3, rounds=6, per_round=3,
                            sync_steps=6),
            long=StepSizes("base", 30522, 512, 64, warmup=3, rounds=6, per_round=3,
                           sync_steps=6),
            matmul=8192, backend="inductor", pretrain=(100, 150), resume_steps=20,
            ddp_steps=20, fp16_steps=20, datapath_steps=30, phase2=(512, 20, 20, 16),
            estimate=dict(device=10, data=30, pretrain=45, resume=15, ddp=45, step=30,
                          fp16=20, compile=75, datapath=25, phase2=50))
DRY = Sizes(short=StepSizes("tiny", 2000, 32, 8, warmup=2, rounds=2, per_round=1,
                            sync_steps=2),
            long=StepSizes("tiny", 2000, 64, 4, warmup=2, rounds=2, per_round=1, sync_steps=2),
            matmul=256, backend="aot_eager", pretrain=(6, 8), resume_steps=4, ddp_steps=4,
            fp16_steps=4, datapath_steps=4, phase2=(64, 4, 4, 4),
            estimate=dict(device=5, data=15, pretrain=15, resume=10, ddp=20, step=10, fp16=10,
                          compile=5, datapath=10, phase2=20),
            # the samples as long as the short steps, phase 2 as the long ones (as on a GPU:
            # 128 and 512): the compiled model's shapes fit the real data path, and nothing
            # is evaluated at 512 tokens on a CPU; val one pass (~1/3: each part evaluates),
            # each evaluation on 2 of its batches, with probes of 10 sentences (the code they
            # run is the same; the figures are not what a dry run checks)
            overrides=["samples.max_seq_length=32", "samples.dupe_factor=1",
                       "samples.val_pairs=0", "eval.max_batches=2", "eval.probe_sentences=10",
                       "vocab.vocab_size=2000",
                       "model.hidden_size=32", "model.num_hidden_layers=1",
                       "model.intermediate_size=64", "train.batch_size=8"])


def block_imports(folder: Path) -> str:
    """Packages named like BLOCKED that fail on import, in `folder`; returns the folder for
    PYTHONPATH (so subprocesses are blocked too)."""
    for name in BLOCKED:
        (folder / name).mkdir(parents=True, exist_ok=True)
        message = f"{name} is not installed on the GPU machine (gpu_check --dry-run)"
        (folder / name / "__init__.py").write_text(f"raise ImportError({message!r})\n")
    return str(folder)


class DeviceCheck:
    """The parts of one run, sharing the device, its rates and what earlier parts measured."""

    def __init__(self, args, sizes: Sizes, record: CheckRecord, signals: StopSignals,
                 env: dict[str, str]):
        self.args, self.sizes, self.record, self.signals = args, sizes, record, signals
        self.env = env
        self.bench = None  # gpu_check_step.Bench, once the device part ran
        self.compile_s: float | None = None  # ours, measured at the short length
        self.compiled_trainer = None  # step_s128_compiled's, for the datapath part
        self.kind = "cpu" if args.dry_run else "cuda"
        self.backend = "gloo" if args.dry_run else "nccl"

    def device(self) -> str:
        import torch
        from gpu_check_flops import matmul_flops_per_s
        from gpu_check_step import Bench, choose_sdpa_backend, sdpa_name

        if not self.args.dry_run and not torch.cuda.is_available():
            raise RuntimeError(f"no CUDA device (torch {torch.__version__}): this check needs "
                               "a GPU; --dry-run runs it on the CPU")
        device = torch.device(self.kind)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        matmul = matmul_flops_per_s(device, self.sizes.matmul)
        sdpa = choose_sdpa_backend(device)
        self.bench = Bench(device, self.args.peak_tflops * 1e12, matmul, self.sizes.backend, sdpa)
        self.record.context.update({"torch": torch.__version__, "sdpa": sdpa_name(sdpa),
                                    "matmul_tflops": f"{matmul / 1e12:.0f}",
                                    "peak_tflops": f"{self.args.peak_tflops:.0f}"})
        return f"{name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads"

    def pipeline(self):
        from gpu_check_pipeline import Pipeline

        # the stages run in this process, after it computed: CPU kernels as they are (what a
        # GPU computes does not depend on them)
        common = ["--set", "tracking.enabled=false", "--set", f"train.device={self.kind}",
                  "--set", "train.log_every=10", "--set", "cpu.isa=native",
                  "--set", "cpu.threads=null",
                  # one process, as the ddp part's torchrun: auto would start one per core on
                  # the CPU of a dry run
                  "--set", "train.nproc_per_node=1"]
        for item in self.sizes.overrides:
            common += ["--set", item]
        return Pipeline(common, self.env, self.signals, self.bench.device)

    def step(self, sizes: StepSizes, compiled: bool) -> str:
        from gpu_check_step import compare_steps

        tag = f"s{sizes.length}_{'compiled' if compiled else 'eager'}"
        result = compare_steps(sizes, self.bench, compiled, tag, self.record.deadline.left)
        figures = result.figures
        self.record.figures.update(figures)
        if compiled and sizes is self.sizes.short:
            self.compile_s = float(figures[f"{tag}_compile_s"])
            self.compiled_trainer = result.trainer
        if result.ours_syncs is not None:  # on CUDA: our step never waits for the GPU
            result.ours_syncs.require_none("our step")
        return f"vs transformers {figures[f'{tag}_vs_hf']}"

    def datapath(self) -> str:
        from gpu_check_pipeline import datapath_batches
        from gpu_check_step import mlm_slots, new_trainer, step_config
        from gpu_check_syncs import datapath_check
        from torch.nn.attention import sdpa_kernel

        sizes, trainer = self.sizes.short, self.compiled_trainer
        self.compiled_trainer = None
        model = "compiled" if trainer is not None else "eager"
        with sdpa_kernel(self.bench.sdpa):
            if trainer is None:
                trainer = new_trainer(step_config(sizes), sizes, self.bench, compiled=False)
            batches = datapath_batches(self.bench.device, sizes.batch, mlm_slots(sizes.length))
            vocab = batches.collator.vocab.vocab_size
            assert vocab <= sizes.vocab, f"the samples' vocabulary ({vocab}) > the model's"
            found = datapath_check(trainer, batches, self.sizes.datapath_steps, self.bench.device)
        self.record.figures["datapath_model"] = model
        if found is not None:
            self.record.figures.update(found.figures("datapath"))
            if found.compiled_steps:
                self.record.figures["datapath_compiled_steps"] = str(found.compiled_steps)
            found.require_none(f"the training loop over the real data path ({model} model)")
        return f"{model} model" + ("" if found else " (syncs are counted on CUDA only)")

    def compile_estimate(self, longer: bool) -> float:
        known = self.compile_s if self.compile_s is not None else self.sizes.estimate["compile"]
        return known * (1.3 if longer else 1.0)

    def parts(self) -> list[Part]:
        s, e = self.sizes, self.sizes.estimate
        short, long = f"step_s{s.short.length}", f"step_s{s.long.length}"
        pipeline = None

        def pipe():
            nonlocal pipeline
            pipeline = pipeline or self.pipeline()
            return pipeline

        def fixed(seconds):
            return lambda: seconds

        return [
            Part("data", lambda: pipe().data(), fixed(e["data"])),
            Part(f"pretrain_{self.kind}", lambda: pipe().pretrain(*s.pretrain),
                 fixed(e["pretrain"])),
            Part(f"resume_{self.kind}", lambda: pipe().resume(s.resume_steps), fixed(e["resume"])),
            Part(f"ddp_{self.backend}", lambda: pipe().ddp(self.backend, s.ddp_steps),
                 fixed(e["ddp"])),
            Part(f"{short}_eager", lambda: self.step(s.short, False), fixed(e["step"])),
            Part("fp16", lambda: pipe().fp16(s.fp16_steps), fixed(e["fp16"])),
            Part(f"{short}_compiled", lambda: self.step(s.short, True),
                 lambda: 3 * self.compile_estimate(False) + e["step"]),
            Part("datapath", self.datapath, fixed(e["datapath"])),
            Part(f"phase2_{self.kind}", lambda: pipe().phase2(s.phase2[0], s.phase2[1:3],
                                                             s.phase2[3], s.phase2[1] // 2),
                 fixed(e["phase2"])),
            Part(f"{long}_eager", lambda: self.step(s.long, False), fixed(e["step"])),
            Part(f"{long}_compiled", lambda: self.step(s.long, True),
                 lambda: 3 * self.compile_estimate(True) + e["step"]),
        ]


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--deadline", type=float, default=300.0,
                        help="seconds for the whole check; the summary comes by then")
    parser.add_argument("--parts", default="", help="comma-separated part names (default: all)")
    parser.add_argument("--results", default="gpu_check.json",
                        help="JSON file rewritten as each part ends")
    parser.add_argument("--workdir", default=None,
                        help="work folder (kept; its data is used again by a rerun)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the device's dense bf16 peak (H100/H200 SXM: 989)")
    return parser


def main() -> int:
    parser = arguments()
    args = parser.parse_args()
    deadline = Deadline(args.deadline)
    title = "gpu_check (dry run)" if args.dry_run else "gpu_check"
    record = CheckRecord(title, deadline, Path(args.results).resolve())
    signals = StopSignals(deadline)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpu_check-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    front = [block_imports(workdir / "blocked")] if args.dry_run else []
    sys.path[:0] = [*front, str(REPO)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*front, str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    check = DeviceCheck(args, DRY if args.dry_run else GPU, record, signals, env)
    parts = check.parts()
    chosen = [name for name in args.parts.split(",") if name]
    unknown = sorted(set(chosen) - {p.name for p in parts})
    if unknown:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        parser.error(f"unknown parts {unknown}; the parts are {[p.name for p in parts]}")
    parts = [p for p in parts if not chosen or p.name in chosen]
    with signals:  # the summary is printed while our handlers still only note signals
        try:
            record.plan(["device", *(p.name for p in parts)])
            os.chdir(workdir)
            shutil.copy(REPO / "params.yaml", workdir / "params.yaml")
            # the recipe params.yaml names
            shutil.copytree(REPO / "params", workdir / "params", dirs_exist_ok=True)
            run_parts([Part("device", check.device, lambda: check.sizes.estimate["device"])],
                      record, signals)
            if record.parts["device"].status == "ok":
                run_parts(parts, record, signals)
        except Stop as stop:
            record.stopped(stop)
        finally:
            signals.quiet()
            print(record.summary(), flush=True)
            record.write()
            os.chdir(REPO)
            if args.workdir is None and not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
    if record.stop is not None:  # a part's threads or workers may hold on: the summary is out
        sys.stderr.flush()
        os._exit(record.exit_code())
    return record.exit_code()


if __name__ == "__main__":
    sys.exit(main())
