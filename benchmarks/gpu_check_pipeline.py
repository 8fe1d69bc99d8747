"""The device check's pipeline parts, run in its work folder: the data stages, `bert pretrain` on
the device with a checkpoint and an extension, a stop-and-resume against a straight run, DDP
under torchrun, fp16 with a GradScaler, the host syncs of `Trainer.train()` over the real data
path, and BERT's two phases (a short phase 2 at 512 tokens).

`bert ...` runs in this process, through the CLI's own code; a SIGTERM that the training loop
turned into an interruption comes back as a Stop (see gpu_check_run), and so does one that its
handler took and let the command finish.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import sys
from pathlib import Path

from gpu_check_run import StopSignals, run_subprocess, stop_from

DATA_STAMP = Path("data/.gpu_check-stamp")  # what the data in the work folder was built from


class Pipeline:
    """The parts that run `bert` stages in the work folder (the current directory)."""

    def __init__(self, common: list[str], env: dict[str, str], signals: StopSignals, device):
        self.common = common  # --set options for every stage
        self.env = env  # for subprocesses: mlflow and dvc blocked in a dry run
        self.signals = signals
        self.device = device

    @property
    def kind(self) -> str:
        return self.device.type

    def bert(self, *args: str) -> str:
        """Run `bert ARGS` in this process; returns what it logged."""
        import click

        from bertstages.cli import cli

        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        logging.getLogger().addHandler(handler)
        try:
            cli.main(list(args), prog_name="bert", standalone_mode=False)
        except click.ClickException as exc:
            stop = stop_from(exc)
            if stop is not None:
                raise stop from None
            raise RuntimeError(f"bert {args[0]}: {exc.format_message()}") from None
        finally:
            logging.getLogger().removeHandler(handler)
        self.signals.check()  # a SIGTERM the training loop took, after a whole run
        return stream.getvalue()

    # ------------------------------------------------------------------------ the parts
    def data(self) -> str:
        """corpus, vocab, samples; kept data of an earlier run of the check with the same
        params and samples format is used again (a rerun on a warm machine)."""
        from bertcore.data.samples.store import FORMAT_VERSION

        stamp = hashlib.sha256(json.dumps([Path("params.yaml").read_text(encoding="utf-8"),
                                           self.common, FORMAT_VERSION]).encode()).hexdigest()
        if DATA_STAMP.exists() and DATA_STAMP.read_text(encoding="utf-8") == stamp:
            return "reused"
        DATA_STAMP.unlink(missing_ok=True)
        for stage in ("corpus", "vocab", "samples"):
            self.bert(stage, *self.common)
        DATA_STAMP.write_text(stamp, encoding="utf-8")
        meta = read_json("data/samples/meta.json")
        return f"vocab {meta['vocab_size']}"

    def pretrain(self, steps: int, extend_to: int) -> str:
        """`steps` steps with a checkpoint and an evaluation halfway, then extended to
        `extend_to` (resumed from its last checkpoint)."""
        half = steps // 2
        cadence = ["--set", f"train.checkpoint_every={half}", "--set", f"train.eval_every={half}"]
        self.bert("pretrain", *self.common, "--set", f"train.max_steps={steps}", *cadence)
        done = read_json("metrics/pretrain.json")["pretrain"]
        assert done["steps"] == steps, done
        assert read_json("metrics/pretrain_details.json")["skipped_steps"] == 0
        evaluations = Path("metrics/pretrain_eval.tsv").read_text(encoding="utf-8").splitlines()
        assert math.isfinite(done["train"]["loss"]) and len(evaluations) >= 2, evaluations
        logged = self.bert("pretrain", *self.common, "--set", f"train.max_steps={extend_to}",
                           *cadence)
        assert f"step {steps} of {extend_to}" in logged, logged
        assert read_json("metrics/pretrain.json")["pretrain"]["steps"] == extend_to
        return f"loss {done['train']['loss']:.3f} at {steps}"

    def resume(self, steps: int) -> str:
        """A run stopped at a checkpoint and resumed draws the same losses as a straight run."""
        import torch

        from bertcore.training.checkpoints.checkpoint import CheckpointDir
        from bertcore.training.loop.checkpointer import Checkpointer
        from bertcore.training.loop.trainer import Trainer

        def trainer():
            torch.manual_seed(3)
            return tiny_trainer(self.device, max_steps=2 * steps, log_every=1)

        straight: list[float] = []
        Trainer(trainer(), on_step=lambda r: straight.append(r.loss), progress=False).train()
        resumed: list[float] = []
        checkpoints = CheckpointDir("models/resume_check")
        Trainer(trainer(), checkpointer=Checkpointer(checkpoints), stop_after=steps, progress=False,
                on_step=lambda r: resumed.append(r.loss)).train()
        second = trainer()
        second.resume_from(checkpoints.latest())
        Trainer(second, on_step=lambda r: resumed.append(r.loss), progress=False).train()
        worst = max(abs(a - b) / abs(b) for a, b in zip(resumed, straight, strict=True))
        assert len(resumed) == 2 * steps and worst < 1e-3, (worst, resumed, straight)
        return f"max rel diff {worst:.1e}"

    def ddp(self, backend: str, steps: int) -> str:
        """The same pretraining under torchrun with one process: DDP through `backend`."""
        args = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1",
                "--standalone", "-m", "--", "bertstages", "pretrain", *self.common,
                "--checkpoints", "models/ddp_checkpoints", "--out", "models/ddp_pretrained",
                "--metrics", "metrics/ddp.json", "--log", "metrics/ddp_log.tsv",
                "--eval-log", "metrics/ddp_eval.tsv", "--set", f"train.max_steps={steps}",
                "--set", f"train.checkpoint_every={steps // 2}",
                "--set", f"train.eval_every={steps // 2}"]
        proc = run_subprocess(args, self.env, Path("ddp.log"), self.signals)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert f"joined the {backend} process group" in proc.stdout, proc.stdout[-3000:]
        done = read_json("metrics/ddp.json")["pretrain"]
        assert done["steps"] == steps and math.isfinite(done["train"]["loss"]), done
        return f"loss {done['train']['loss']:.3f} at {steps}"

    def phase2(self, length: int, steps: tuple[int, int], batch: int, extend: int) -> str:
        """BERT's second phase on the device: the samples at `length` too, then phase 1 and
        phase 2 from its end (`steps` each) with a checkpoint in each, then phase 2 extended by
        `extend` steps (resumed from its last checkpoint), in a folder of its own."""
        first, second = steps
        on = ["--set", "phase2.enabled=true", "--set", f"phase2.max_seq_length={length}",
              "--set", f"phase2.batch_size={batch}", "--set", "phase2.warmup_steps=2"]
        run = ["--samples", "data/two_phase_samples", "--checkpoints", "models/phase2_checkpoints",
               "--out", "models/phase2_pretrained", "--metrics", "metrics/phase2.json",
               "--log", "metrics/phase2_log.tsv", "--eval-log", "metrics/phase2_eval.tsv",
               "--set", f"train.max_steps={first}", "--set", f"train.checkpoint_every={first // 2}",
               "--set", f"train.eval_every={first // 2}"]
        self.bert("samples", *self.common, *on, "--out", "data/two_phase_samples",
                  "--metrics", "metrics/two_phase_samples.json")
        logged = self.bert("pretrain", *self.common, *on, *run,
                           "--set", f"phase2.max_steps={second}")
        assert f"phase 2: steps {first + 1}-{first + second}" in logged, logged[-3000:]
        done = read_json("metrics/phase2.json")["pretrain"]
        assert done["steps"] == first + second and math.isfinite(done["train"]["loss"]), done
        assert read_json("metrics/phase2_details.json")["skipped_steps"] == 0
        logged = self.bert("pretrain", *self.common, *on, *run,
                           "--set", f"phase2.max_steps={second + extend}")
        total = first + second + extend
        assert f"step {first + second} of {total}, phase 2" in logged, logged[-3000:]
        assert read_json("metrics/phase2.json")["pretrain"]["steps"] == total
        return f"loss {done['train']['loss']:.3f} at {first + second} (phase 2 at {length})"

    def fp16(self, steps: int) -> str:
        self.bert("pretrain", *self.common, "--checkpoints", "models/fp16_checkpoints",
                  "--out", "models/fp16_pretrained", "--metrics", "metrics/fp16.json",
                  "--log", "metrics/fp16_log.tsv", "--eval-log", "metrics/fp16_eval.tsv",
                  "--set", "train.precision=fp16", "--set", f"train.max_steps={steps}",
                  "--set", "train.eval_every=0", "--set", f"train.checkpoint_every={steps}")
        done = read_json("metrics/fp16.json")["pretrain"]
        assert done["steps"] == steps and math.isfinite(done["train"]["loss"]), done
        skipped = read_json("metrics/fp16_details.json")["skipped_steps"]
        assert skipped < steps // 2, skipped  # the scaler's first overflows
        return f"{skipped} steps skipped by the scaler"


def tiny_trainer(device, **train):
    """A tiny model on the work folder's data, as the pretrain stage builds it."""
    from bertcore.data.samples.store import SampleStore
    from bertcore.data.vocab.files import read_vocab
    from bertcore.model.bert import BertConfig, BertPretrainingModel
    from bertcore.training.config import TrainConfig
    from bertcore.training.data.batches import PretrainingBatches
    from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
    from bertcore.training.loop.step import StepRunner

    tokens = read_vocab("data/vocab")
    config = TrainConfig(batch_size=8, warmup_steps=2, eval_every=0, checkpoint_every=0,
                         seed=3, **{"micro_batches": 1, **train})
    model = BertPretrainingModel(BertConfig.from_preset("tiny", vocab_size=len(tokens)))
    collator = PretrainingCollator(MaskingConfig(), VocabSpec.from_tokens(tokens), seed=3)
    batches = PretrainingBatches(SampleStore("data/samples/train"), collator, 8, 1, seed=3,
                                 pin_memory=device.type == "cuda")
    return StepRunner(model, config, batches, device=device)


def datapath_batches(device, batch_size: int, slots: int):
    """Training batches of the work folder's samples, as the pretrain stage loads them
    (pinned on a GPU), with `slots` MLM slots."""
    from bertcore.data.samples.store import SampleStore
    from bertcore.data.vocab.files import read_vocab
    from bertcore.training.data.batches import PretrainingBatches
    from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec

    tokens = read_vocab("data/vocab")
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=slots),
                                   VocabSpec.from_tokens(tokens), seed=11)
    return PretrainingBatches(SampleStore("data/samples/train"), collator, batch_size, 1,
                              seed=11, pin_memory=device.type == "cuda")


def read_json(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))

