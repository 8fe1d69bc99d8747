"""The training loop: schedule, accumulation, exact resume, non-finite steps, overfitting
(tests/stages/test_train_stage.py: the pretrain stage interrupted by SIGTERM, and its answers
to bad input)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.batches import micro_batches_of
from helpers.tiny_pretrain import build_data
from helpers.trainer import make_trainer

from bertcore.common.errors import ConfigError
from bertcore.common.schedule import StepSchedule, learning_rate, linear_warmup_decay
from bertcore.model.bert import IGNORE_INDEX, BertPretrainingModel
from bertcore.training.checkpoints.checkpoint import CheckpointDir
from bertcore.training.config import TrainConfig
from bertcore.training.evaluation.metrics import EvalMetrics
from bertcore.training.loop.checkpointer import Checkpointer
from bertcore.training.loop.trainer import NonFiniteLossError, Trainer

# One thread: these models are tiny, and two cores are shared with other test processes.


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"))


def test_schedule_warms_up_then_decays_to_zero():
    lrs = [linear_warmup_decay(s, 4, 12) for s in range(13)]
    assert lrs[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert lrs[4:] == pytest.approx([(12 - s) / 8 for s in range(4, 13)])
    assert lrs[-1] == 0.0
    assert linear_warmup_decay(0, 0, 10) == 1.0


def test_wsd_holds_the_peak_then_decays_over_the_last_fraction():
    rates = [learning_rate(2.0, s, 4, 20, "wsd", 0.25) for s in range(21)]
    assert rates[:5] == [0.0, 0.5, 1.0, 1.5, 2.0]  # the same warmup as linear's
    assert rates[4:15] == [2.0] * 11  # the peak until step 15 = 20 - 0.25 * 20
    assert rates[15:] == pytest.approx([2.0 * (20 - s) / 5 for s in range(15, 21)])
    # decaying over all the steps after the warmup is BERT's linear schedule
    assert [learning_rate(1.0, s, 4, 20, "wsd", 1.0) for s in range(21)] == [
        learning_rate(1.0, s, 4, 20) for s in range(21)]
    # a decay longer than what follows the warmup starts at the warmup's end
    assert learning_rate(1.0, 5, 4, 20, "wsd", 0.9) == learning_rate(1.0, 5, 4, 20)


def test_a_phase_schedule_is_the_schedule_over_its_own_steps():
    # phase 2 of a run: steps 7..12 after phase 1's 6, its warmup and decay over its own 6
    schedule = StepSchedule(2.0, 2, start=6, end=12, schedule="wsd", decay_fraction=0.5)
    assert [schedule(s) for s in range(6, 12)] == [
        learning_rate(2.0, s, 2, 6, "wsd", 0.5) for s in range(6)]
    assert schedule.ending_at(16)(10) == learning_rate(2.0, 4, 2, 10, "wsd", 0.5)
    assert TrainConfig(learning_rate=0.1, warmup_steps=3).rate_schedule(6, 12) == StepSchedule(
        0.1, 3, 6, 12, "linear", 0.2)


def test_the_trainer_trains_to_the_planned_end_at_the_rate_the_plan_built(data):
    trainer = make_trainer(data, max_steps=12)
    planned = trainer.config.rate_schedule(0, 6)  # a plan that ends before the params' 12
    results = []
    result = Trainer(trainer, end=6, learning_rate=planned, on_step=results.append,
                     progress=False).train()
    assert result.steps == result.planned_steps == trainer.step == 6
    assert [r.learning_rate for r in results] == [planned(s) for s in range(6)]
    assert results[-1].learning_rate > 0  # decayed towards step 6, not cut short of 12
    with pytest.raises(ValueError, match="schedule ending at step 6 for a run ending at step 8"):
        Trainer(make_trainer(data), end=8, learning_rate=planned)


def test_config_is_checked():
    with pytest.raises(ConfigError, match="batch_size"):
        TrainConfig(batch_size=30, micro_batches=4)
    with pytest.raises(ConfigError, match="max_steps"):
        TrainConfig(max_steps=None, epochs=None)
    assert TrainConfig(max_steps=None, epochs=2).total_steps(steps_per_epoch=7) == 14


def test_accumulation_gives_the_gradient_of_one_big_batch(data):
    """4 micro-batches with different numbers of MLM and NSP labels: the accumulated gradient
    is that of the mean loss over all 16 sequences (not a mean of per-micro-batch means)."""
    trainer = make_trainer(data, dropout=0.0, micro_batches=4, nsp_weight=0.5)
    joined = next(make_trainer(data, dropout=0.0, micro_batches=1).batches.iterate(epoch=0))[0]
    rows = torch.arange(16)
    # micro-batch k (rows 4k..4k+3) keeps k+1 MLM labels per sequence and NSP labels of 4-k
    targets = joined["mlm_targets"].clone()
    targets[torch.arange(5)[None] > (rows // 4)[:, None]] = IGNORE_INDEX
    nsp = torch.where(rows % 4 < 4 - rows // 4, joined["nsp_labels"], IGNORE_INDEX)
    joined = {**joined, "mlm_targets": targets, "nsp_labels": nsp}
    parts = micro_batches_of(joined, 4)
    assert [int((p["mlm_targets"] != IGNORE_INDEX).sum()) for p in parts] == [4, 8, 12, 16]
    assert [int((p["nsp_labels"] != IGNORE_INDEX).sum()) for p in parts] == [4, 3, 2, 1]

    model = trainer.raw_model
    out = model(joined["input_ids"], joined["token_type_ids"], joined["attention_mask"],
                mlm_positions=joined["mlm_positions"])  # logits only: the loss is ours
    expected = F.cross_entropy(out.mlm_logits.flatten(0, 1), targets.flatten(),
                               ignore_index=IGNORE_INDEX) + 0.5 * F.cross_entropy(
        out.nsp_logits, nsp, ignore_index=IGNORE_INDEX)  # the mean over all labels
    expected.backward()
    one_batch = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    trainer.accumulate_gradients(parts)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, one_batch[name], rtol=1e-5, atol=1e-7, msg=name)
    assert one_batch["nsp_head.weight"].abs().sum() > 0


def three_steps(data, max_grad_norm: float, precision: str = "fp32"):
    """(grad norms the steps report, norms of the gradients the optimizer was given)."""
    trainer = make_trainer(data, dropout=0.0, max_grad_norm=max_grad_norm, precision=precision)
    given = []

    def before_step(optimizer, args, kwargs):
        grads = [p.grad.float() for group in optimizer.param_groups for p in group["params"]]
        given.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

    trainer.optimizer.register_step_pre_hook(before_step)
    reported = [trainer.train_step(step).grad_norm
                for step, _ in zip(trainer.batches.iterate(epoch=0), range(3), strict=False)]
    return reported, given


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gradients_are_clipped_to_max_grad_norm(data, precision):
    """The optimizer gets the gradient clipped to max_grad_norm (with fp16: unscaled first);
    the step reports the norm before clipping (as transformers' Trainer logs it)."""
    reference, unclipped = three_steps(data, 1e6)  # float32, never clipped
    assert unclipped == pytest.approx(reference, rel=1e-5)
    reported, given = three_steps(data, 0.05, precision)
    assert all(norm > 0.05 for norm in reference + reported)
    assert given == pytest.approx([0.05] * 3, rel=1e-3)
    # the same first step: the same norm (up to fp16 rounding), whatever the loss scale
    assert reported[0] == pytest.approx(reference[0], rel=1e-5 if precision == "fp32" else 1e-2)


def test_exact_resume_mid_epoch_is_bitwise_identical(data, tmp_path):
    # 16 sequences per step, 581 train samples: 36 steps per epoch; with batch 64: 9.
    kw = dict(max_steps=24, batch_size=64, micro_batches=2, checkpoint_every=5)
    straight = make_trainer(data, **kw)
    assert straight.batches.steps_per_epoch == 9
    losses_straight: list[float] = []
    Trainer(straight, on_step=lambda r: losses_straight.append(r.loss), progress=False).train()

    first = make_trainer(data, **kw)
    losses_resumed: list[float] = []
    checkpoints = CheckpointDir(tmp_path / "ckpt", keep_last=2)
    every5 = Checkpointer(checkpoints, every=5)
    Trainer(first, checkpointer=every5, on_step=lambda r: losses_resumed.append(r.loss),
            stop_after=13, progress=False).train()  # epoch 1, step 4 of 9
    assert [c.step for c in checkpoints.all()] == [10, 13]
    assert checkpoints.latest().meta["step_in_epoch"] == 4
    torch.manual_seed(999)  # whatever happens in between must not matter

    second = make_trainer(data, **kw)
    second.resume_from(checkpoints.latest())
    assert second.step == 13
    Trainer(second, checkpointer=Checkpointer(checkpoints, every=5),
            on_step=lambda r: losses_resumed.append(r.loss), progress=False).train()
    assert len(losses_straight) == 24
    assert losses_resumed == losses_straight  # exactly, step by step
    # the run's counters resume too
    assert second.state.totals()["tokens_seen"] == straight.state.totals()["tokens_seen"] > 0
    for (name, a), b in zip(straight.raw_model.state_dict().items(),
                            second.raw_model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert losses_straight[-1] < losses_straight[0]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_follows_float32(data, precision):
    """Autocast really runs the matmuls in half precision (the output dtype of every Linear,
    inside the training step), and the losses differ from float32's, but by less than 1%."""
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    runs, seen = {}, {}
    for name in ("fp32", precision):
        trainer = make_trainer(data, dropout=0.0, precision=name, max_steps=4)
        assert trainer.autocast_dtype == (None if name == "fp32" else dtypes[name])
        seen[name] = set()
        for module in trainer.raw_model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(
                    lambda module, args, out, name=name: seen[name].add(out.dtype))
        runs[name] = []
        Trainer(trainer, on_step=runs[name].append, progress=False).train()
    assert seen == {"fp32": {torch.float32}, precision: {dtypes[precision]}}
    assert (trainer.scaler is not None) == (precision == "fp16")
    assert not any(r.skipped for r in runs[precision])
    half, full = [r.loss for r in runs[precision]], [r.loss for r in runs["fp32"]]
    assert half == pytest.approx(full, rel=1e-2)
    assert all(h != f for h, f in zip(half, full, strict=True))  # not float32 in disguise


def test_non_finite_steps_are_skipped_then_stop_the_run(data, tmp_path):
    trainer = make_trainer(data, max_steps=30, checkpoint_every=2, max_nonfinite_steps=3)
    checkpoints = CheckpointDir(tmp_path / "ckpt", keep_last=2)
    poisoned = {"on": False}
    # From step 5 on, the NSP logits turn NaN, as after a divergence.
    trainer.raw_model.nsp_head.register_forward_hook(
        lambda module, args, out: out * float("nan") if poisoned["on"] else out
    )
    results = []

    def on_step(result):
        results.append(result)
        poisoned["on"] = result.step >= 4

    with pytest.raises(NonFiniteLossError, match="3 steps in a row") as error:
        Trainer(trainer, checkpointer=Checkpointer(checkpoints, every=2), on_step=on_step,
                progress=False).train()
    assert "step-00000004" in str(error.value)
    assert [r.skipped for r in results] == [False] * 4 + [True] * 3
    assert trainer.state.totals()["skipped_steps"] == 3
    # the good checkpoint of step 4 is still the latest, and its weights are finite
    latest = checkpoints.latest()
    assert latest.step == 4
    model = BertPretrainingModel(trainer.raw_model.config)
    latest.load_model(model)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # skipped steps left the weights as they were after step 4
    for a, b in zip(model.parameters(), trainer.raw_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_an_evaluation_before_the_first_logged_row_shows_no_train_loss(data, caplog):
    # eval at steps 2 and 6, train rows at 4 and 8: the first evaluation has no train loss yet
    trainer = make_trainer(data, max_steps=8, log_every=4, eval_every=2)
    scores = EvalMetrics(mlm_loss=2.5, mlm_accuracy=0.25, perplexity=12.2, nsp_loss=0.7,
                         nsp_accuracy=0.5, mlm_baseline_accuracy=0.1,
                         nsp_baseline_accuracy=0.5, mlm_predictions=10, sequences=4)
    with caplog.at_level("INFO", logger="bertcore.training.loop.trainer"):
        Trainer(trainer, evaluate=lambda model: scores, progress=False).train()
    lines = [r.getMessage() for r in caplog.records if "val MLM loss" in r.getMessage()]
    assert [line.split(":")[0] for line in lines] == ["step 2/8", "step 4/8", "step 6/8",
                                                      "step 8/8"]
    assert lines[0] == "step 2/8: val MLM loss 2.5000 accuracy 0.2500, NSP accuracy 0.5000"
    assert all("nan" not in line for line in lines), lines
    assert all(line.startswith(f"step {n}/8: train loss ") for n, line in
               zip((4, 6, 8), lines[1:], strict=True)), lines


def test_a_tiny_model_overfits_a_tiny_corpus(data):
    # 32 sequences seen 200 times (with new masks each time): memorised.
    trainer = make_trainer(data, dropout=0.0, model={"hidden_size": 64, "num_hidden_layers": 2,
                                                     "intermediate_size": 256},
                           samples=32, max_steps=200, batch_size=32, learning_rate=7e-3,
                           warmup_steps=10)
    results = []
    Trainer(trainer, on_step=results.append, progress=False).train()
    start = sum(r.mlm_loss for r in results[:5]) / 5
    end = sum(r.mlm_loss for r in results[-10:]) / 10
    assert start > 4.0  # about ln(96): nothing known yet
    assert end < 0.6 * start, (start, end)  # measured: 4.52 -> 2.27
    assert sum(r.nsp_accuracy for r in results[-10:]) / 10 > 0.9


# ------------------------------------------------------------------------------- the stage
