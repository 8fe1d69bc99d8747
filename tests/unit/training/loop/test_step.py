"""The training step never waits on the device: no host syncs outside the steps that log,
non-finite steps skipped on the device, forward + loss in one compiled graph
(tests/stages/test_compile_stage.py: the pretrain stage compiled, end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.tiny_pretrain import build_data
from helpers.trainer import make_trainer

from bertcore.common.errors import ConfigError
from bertcore.common.tracking import TrackingConfig
from bertcore.model.bert import pretraining_loss
from bertcore.model.config import ModelConfig
from bertcore.training.checkpoints.identity import optimisation_params, resumable_params
from bertcore.training.config import PretrainConfig, TrainConfig
from bertcore.training.data.masking import MaskingConfig
from bertcore.training.evaluation.metrics import EvalConfig
from bertcore.training.loop.step import compile_model
from bertcore.training.loop.trainer import NonFiniteLossError, Trainer


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"))


# ---------------------------------------------------------------------------- host syncs
# What makes the host wait for a GPU: reading a value (.item(), .tolist(), float(), int(),
# bool(), .numpy()) and shapes that depend on values (nonzero, boolean-mask indexing).
READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__",
         "nonzero", "masked_select")


class SyncCounter:
    """Counts the calls that would wait on the device, while `active`."""

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        self.active = True
        for name in READS:
            self._wrap(monkeypatch, torch.Tensor, name, name)
        for name in ("nonzero", "masked_select", "argwhere"):
            self._wrap(monkeypatch, torch, name, f"torch.{name}")
        getitem = torch.Tensor.__getitem__

        def indexed(tensor, index):
            parts = index if isinstance(index, tuple) else (index,)
            if self.active and any(isinstance(p, torch.Tensor) and p.dtype == torch.bool
                                   for p in parts):
                self.calls.append("x[mask]")
            return getitem(tensor, index)

        monkeypatch.setattr(torch.Tensor, "__getitem__", indexed)

    def _wrap(self, monkeypatch, owner, name, label):
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            if self.active:
                self.calls.append(label)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    def take(self) -> list[str]:
        calls, self.calls = self.calls, []
        return calls


def test_only_steps_that_log_read_the_device(data, monkeypatch):
    trainer = make_trainer(data, max_steps=8, log_every=4, micro_batches=2,
                           max_grad_norm=0.5)
    iterate, train_step = trainer.batches.iterate, trainer.train_step
    counter = SyncCounter(monkeypatch)
    in_step: list[list[str]] = []
    after_step: list[list[str]] = []

    def batches(*args, **kwargs):
        # Loading data happens on the host, on host tensors, before the step: not counted.
        source = iterate(*args, **kwargs)
        while True:
            counter.active = False
            try:
                item = next(source)
            except StopIteration:
                return
            finally:
                counter.active = True
            after_step.append(counter.take())  # the loop's work since the previous step
            yield item

    def step(*args, **kwargs):
        result = train_step(*args, **kwargs)
        in_step.append(counter.take())
        return result

    monkeypatch.setattr(trainer.batches, "iterate", batches)
    monkeypatch.setattr(trainer, "train_step", step)
    Trainer(trainer, progress=False).train()
    counter.active = False
    assert in_step == [[]] * 8  # no step ever reads the device
    # the loop reads it once at the start, then after the logging step 4 (and 8, at the end)
    assert [bool(calls) for calls in after_step] == [True, False, False, False,
                                                     True, False, False, False]
    assert after_step[4] == ["tolist"]  # one transfer
    assert trainer.step == 8 and trainer.state.totals()["skipped_steps"] == 0


def test_a_run_of_nonfinite_steps_between_log_steps_stops_the_run(data):
    # 3 bad steps in a row (2..4) with max_nonfinite_steps=3 stop the run at the next log step
    # (5), even though step 5 was fine again: the worst run since the last read counts.
    trainer = make_trainer(data, max_steps=20, log_every=5, max_nonfinite_steps=3)
    poisoned = {"on": False}
    trainer.raw_model.nsp_head.register_forward_hook(
        lambda module, args, out: out * float("nan") if poisoned["on"] else out
    )
    before = {}
    results = []

    def on_step(result):
        results.append(result)
        if result.step == 1:
            before.update({n: p.detach().clone() for n, p in trainer.raw_model.named_parameters()})
        poisoned["on"] = 1 <= result.step <= 3

    with pytest.raises(NonFiniteLossError, match=r"3 steps in a row \(up to step 5\)"):
        Trainer(trainer, on_step=on_step, progress=False).train()
    assert [r.skipped for r in results] == [False, True, True, True, False]
    assert trainer.state.totals()["skipped_steps"] == 3
    assert trainer.state.totals()["nonfinite_in_a_row"] == 0
    # the skipped steps changed nothing, not even AdamW's step count
    assert all(int(s["step"]) == 2 for s in trainer.optimizer.state.values())
    assert all(torch.isfinite(p).all() for p in trainer.raw_model.parameters())
    assert any(not torch.equal(before[n], p) for n, p in trainer.raw_model.named_parameters())


# ------------------------------------------------------------------------------ compiling
def test_forward_and_loss_compile_as_one_graph(data):
    trainer = make_trainer(data, dropout=0.0)
    model = trainer.raw_model
    batch = next(trainer.batches.iterate(epoch=0))[0]

    def loss_of(model, batch):
        out = model(**batch)
        mlm = (batch["mlm_targets"] != -100).sum()
        return pretraining_loss(out, mlm, batch["nsp_labels"].numel(), 1.0, 0.5)

    # Without fullgraph (as train.compile: true runs) a data-dependent shape is a graph break...
    torch._dynamo.reset()
    explained = torch._dynamo.explain(loss_of)(model, batch)
    assert explained.graph_break_count == 0, explained.break_reasons
    # ... with it, dynamo would trace one silently; any other break raises.
    torch._dynamo.reset()
    compiled = torch.compile(loss_of, fullgraph=True, backend="aot_eager")
    got = compiled(model, batch)
    got.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = loss_of(model, batch)
    expected.backward()
    torch.testing.assert_close(got, expected)
    for grad, p in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(grad, p.grad)


def test_compile_fullgraph_fails_on_a_graph_break_that_true_runs_around(data):
    # a graph break planted in the model: what a torch or model change could bring
    trainer = make_trainer(data, dropout=0.0, compile="fullgraph")
    micro_batches = next(trainer.batches.iterate(epoch=0))
    trainer.raw_model.layers[0].register_forward_hook(
        lambda module, args, out: torch._dynamo.graph_break() or out)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="graph_break"):
        trainer.train_step(micro_batches)
    # train.compile: true splits the graph there and runs the pieces (aot_eager: no codegen)
    torch._dynamo.reset()
    pieces = compile_model(trainer.raw_model, True, backend="aot_eager")
    batch = micro_batches[0]
    torch.testing.assert_close(pieces(**batch).loss, trainer.raw_model(**batch).loss)
    assert compile_model(trainer.raw_model, False) is trainer.raw_model
    # fullgraph compiles what true compiles: a checkpoint of one resumes under the other (the
    # fingerprint holds true), and the recorded params say which it was
    def run_with(mode) -> PretrainConfig:
        return PretrainConfig(ModelConfig(), MaskingConfig(), TrainConfig(compile=mode),
                              EvalConfig(), TrackingConfig())

    fingerprint = {mode: resumable_params(run_with(mode))["train"]
                   for mode in (False, True, "fullgraph")}
    assert fingerprint["fullgraph"] == fingerprint[True] != fingerprint[False]
    assert fingerprint[True]["compile"] is True and fingerprint[False]["compile"] is False
    assert optimisation_params(run_with("fullgraph"))["train"]["compile"] == "fullgraph"
    with pytest.raises(ConfigError, match="compile"):
        TrainConfig(compile="full")
