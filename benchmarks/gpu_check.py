"""One part of the device check, run in its work folder: `benchmarks/gpu_check.sh` runs them in
order, each in a process of its own under its own time limit. A part raises on what is wrong;
its one-line outcome goes to OUT/PART.detail, its figures for the summary line to
OUT/PART.figures. docs/development.md says what each figure means.

  device              CUDA present (else the check stops at once), bf16 matmul rate, the SDPA
                      kernel
  data                the corpus, vocab and samples stages (the built-in corpus)
  pretrain_cuda       `bert pretrain`: 100 steps with a checkpoint at 50, extended to 150
  resume_cuda         a run stopped at a checkpoint and resumed = a straight run
  ddp_nccl            `bert pretrain` under torchrun (one process, NCCL)
  step_s128_eager     BERT-base train step, ours eager vs transformers eager
  fp16                `bert pretrain` in fp16 with a GradScaler
  step_s128_compiled  ours compiled (fullgraph) vs transformers compiled, and ours with the
                      encoder unpadded (`unpad=True`) compiled
  datapath            host syncs of the loop fed by pinned batches of the real samples, the
                      model compiled as in step_s128_compiled
  phase2_cuda         BERT's two phases: samples at 512 too, phase 1 then a short phase 2 at
                      512 from its end, a checkpoint in each, phase 2 extended (resumed)
  step_s512_eager     step_s128_eager at sequence 512 (BERT's second phase)
  step_s512_compiled  step_s128_compiled at sequence 512

Needs only torch, transformers, tokenizers, numpy, click, pyyaml, safetensors, pydantic:
tracking is off and nothing imports mlflow or dvc. `--dry-run` runs the same on the CPU with
tiny sizes (names end in _cpu, _gloo, s32, s64; samples of 32 tokens, phase 2 at 64), compiling
with aot_eager (the graphs inductor would get, no code generated).
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from gpu_check_step import StepSizes


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
    overrides: list[str] = field(default_factory=list)


GPU = Sizes(short=StepSizes("base", 30522, 128, 256, rounds=4, per_round=4, sync_steps=6),
            long=StepSizes("base", 30522, 512, 64, rounds=4, per_round=4, sync_steps=6),
            matmul=8192, backend="inductor", pretrain=(100, 150), resume_steps=20,
            ddp_steps=20, fp16_steps=20, datapath_steps=30, phase2=(512, 20, 20, 16))
DRY = Sizes(short=StepSizes("tiny", 2000, 32, 8, rounds=2, per_round=1, sync_steps=2),
            long=StepSizes("tiny", 2000, 64, 4, rounds=2, per_round=1, sync_steps=2),
            matmul=256, backend="aot_eager", pretrain=(6, 8), resume_steps=4, ddp_steps=4,
            fp16_steps=4, datapath_steps=4, phase2=(64, 4, 4, 4),
            # the samples as long as the short steps, phase 2 as the long ones (as on a GPU:
            # 128 and 512): the compiled model's shapes fit the real data path, and nothing
            # is evaluated at 512 tokens on a CPU; val one pass (~1/3: each part evaluates)
            overrides=["samples.max_seq_length=32", "samples.dupe_factor=1",
                       "samples.val_pairs=0",
                       "vocab.vocab_size=2000",
                       "model.hidden_size=32", "model.num_hidden_layers=1",
                       "model.intermediate_size=64", "train.batch_size=8"])


class DeviceCheck:
    """The parts; each returns its one-line outcome and leaves its figures in `figures`."""

    def __init__(self, dry_run: bool, peak_tflops: float):
        self.dry_run, self.peak = dry_run, peak_tflops * 1e12
        self.sizes = DRY if dry_run else GPU
        self.kind = "cpu" if dry_run else "cuda"
        self.figures: dict[str, str] = {}

    def bench(self):
        import torch
        from gpu_check_flops import matmul_flops_per_s
        from gpu_check_step import Bench, choose_sdpa_backend

        if not self.dry_run and not torch.cuda.is_available():
            raise RuntimeError(f"no CUDA device (torch {torch.__version__}): this check needs "
                               "a GPU; --dry-run runs it on the CPU")
        device = torch.device(self.kind)
        return Bench(device, self.peak, matmul_flops_per_s(device, self.sizes.matmul),
                     self.sizes.backend, choose_sdpa_backend(device))

    def device(self) -> str:
        import torch
        from gpu_check_step import sdpa_name

        bench = self.bench()
        name = torch.cuda.get_device_name(bench.device) if not self.dry_run else "CPU"
        self.figures.update({"torch": torch.__version__, "sdpa": sdpa_name(bench.sdpa),
                             "matmul_tflops": f"{bench.matmul / 1e12:.0f}",
                             "peak_tflops": f"{self.peak / 1e12:.0f}"})
        return f"{name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads"

    def pipeline(self):
        import torch
        from gpu_check_pipeline import Pipeline

        # the stages run in this process: CPU kernels as they are (what a GPU computes does
        # not depend on them)
        common = ["--set", "tracking.enabled=false", "--set", f"train.device={self.kind}",
                  "--set", "train.log_every=10", "--set", "cpu.isa=native",
                  "--set", "cpu.threads=null"]
        for item in self.sizes.overrides:
            common += ["--set", item]
        return Pipeline(common, torch.device(self.kind))

    def step(self, length: int, compiled: bool) -> str:
        from gpu_check_step import compare_steps

        sizes = self.sizes.short if length == self.sizes.short.length else self.sizes.long
        tag = f"s{length}_{'compiled' if compiled else 'eager'}"
        result = compare_steps(sizes, self.bench(), compiled, tag)
        self.figures.update(result.figures)
        if result.ours_syncs is not None:  # on CUDA: our step never waits for the GPU
            result.ours_syncs.require_none("our step")
        return f"vs transformers {result.figures[f'{tag}_vs_hf']}"

    def datapath(self) -> str:
        from gpu_check_pipeline import datapath_batches
        from gpu_check_step import mlm_slots, new_trainer, step_config
        from gpu_check_syncs import datapath_check
        from torch.nn.attention import sdpa_kernel

        sizes, bench = self.sizes.short, self.bench()
        with sdpa_kernel(bench.sdpa):
            trainer = new_trainer(step_config(sizes), sizes, bench, compiled=True)
            batches = datapath_batches(bench.device, sizes.batch, mlm_slots(sizes.length))
            vocab = batches.collator.vocab.vocab_size
            assert vocab <= sizes.vocab, f"the samples' vocabulary ({vocab}) > the model's"
            found = datapath_check(trainer, batches, self.sizes.datapath_steps, bench.device)
        self.figures["datapath_model"] = "compiled"
        if found is None:
            return "compiled model (syncs are counted on CUDA only)"
        self.figures.update(found.figures("datapath"))
        if found.compiled_steps:
            self.figures["datapath_compiled_steps"] = str(found.compiled_steps)
        found.require_none("the training loop over the real data path (compiled model)")
        return "compiled model"

    def run(self, part: str) -> str:
        """The part named `part`, as gpu_check.sh names them."""
        s = self.sizes
        kind, _, rest = part.partition("_")
        if kind == "step":  # step_s128_eager
            length, mode = rest.split("_")
            return self.step(int(length[1:]), mode == "compiled")
        parts = {"device": self.device, "datapath": self.datapath,
                 "data": lambda: self.pipeline().data(),
                 "pretrain": lambda: self.pipeline().pretrain(*s.pretrain),
                 "resume": lambda: self.pipeline().resume(s.resume_steps),
                 "ddp": lambda: self.pipeline().ddp(rest, s.ddp_steps),
                 "fp16": lambda: self.pipeline().fp16(s.fp16_steps),
                 "phase2": lambda: self.pipeline().phase2(s.phase2[0], s.phase2[1:3],
                                                          s.phase2[3], s.phase2[1] // 2)}
        return parts[kind]()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", help="a part's name, as listed above")
    parser.add_argument("--out", type=Path, required=True, help="folder for PART.detail/.figures")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="the device's dense bf16 peak (H100/H200 SXM: 989)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    check = DeviceCheck(args.dry_run, args.peak_tflops)
    try:
        detail = check.run(args.part) or ""
    except Exception as exc:  # the traceback above, the first line of the error as the detail
        traceback.print_exc()
        detail, code = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}", 1
    else:
        code = 0
    (args.out / f"{args.part}.detail").write_text(detail[:200] + "\n", encoding="utf-8")
    figures = " ".join(f"{key}={value}" for key, value in check.figures.items())
    (args.out / f"{args.part}.figures").write_text(figures, encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
