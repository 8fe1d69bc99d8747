"""train.max_minutes: the plan as numbers, a budget that binds (on a fake clock: no timed
assertion anywhere), the rerun with the recorded steps that is the same run bit for bit, a
resumed run that keeps its plan (tests/stages/test_budget_stage.py: the stage's records of
it)."""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers.tiny_pretrain import build_data, tiny_config
from helpers.trainer import spawn_ranks

from bertcore.common.errors import ConfigError
from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.training.checkpoints.checkpoint import CheckpointDir
from bertcore.training.config import TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.loop.budget import (
    BudgetPlanner,
    StepTiming,
    TimeBudget,
    planned_steps,
    recorded_timing,
)
from bertcore.training.loop.checkpointer import Checkpointer
from bertcore.training.loop.step import StepRunner
from bertcore.training.loop.trainer import Trainer


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"))


# ------------------------------------------------------------------------------ the plan
def test_the_plan_in_numbers():
    timing = StepTiming(plan_step=20, elapsed_s=5.0, step_s=0.25, timed_from=2)
    # 100 s: 95 after the 5% reserve, 90 after the first 20 steps, 360 steps of 0.25 s
    assert planned_steps(1500, 100.0, timing) == 380
    assert planned_steps(300, 100.0, timing) == 300  # max_steps binds first
    # an evaluation of 2 s every 40 steps, and one at the end: 88 s at 0.25 + 2/40 = 0.3 s/step
    assert planned_steps(1500, 100.0, timing, eval_s=2.0, eval_every=40) == 20 + 293
    # no step fits after the plan: the steps already run are the run
    assert planned_steps(1500, 5.0, timing) == 20
    assert planned_steps(1500, 1e-9, timing) == 20


def test_the_plan_step_stays_in_the_warmup():
    budget = TimeBudget(6, warmup_steps=150, batch_size=32)
    assert budget.seconds == 360
    assert budget.plan_step(0) == 20
    assert TimeBudget(6, warmup_steps=5, batch_size=32).plan_step(0) == 5
    assert TimeBudget(6, warmup_steps=0, batch_size=32).plan_step(0) == 1
    assert budget.plan_step(19) == 20  # resumed before its plan: plans at the same step
    assert budget.plan_step(20) == 40  # a budget set on a run past it: 20 more timed steps
    # an evaluation of 96 sequences: forward passes, a third of a step of 32 sequences each
    with_eval = TimeBudget(6, warmup_steps=150, batch_size=32, eval_sequences=96)
    assert with_eval.eval_seconds(0.5) == pytest.approx(0.5)


def test_max_minutes_is_checked():
    with pytest.raises(ConfigError, match="max_minutes"):
        TrainConfig(max_minutes=0)
    with pytest.raises(ConfigError, match="max_minutes"):
        TrainConfig(max_minutes=-1.5)
    assert TrainConfig(max_minutes=None).max_minutes is None


# --------------------------------------------------------------------- training to a budget
class FakeClock:
    """Time that passes only when the test says: `seconds_per_step` after each step."""

    def __init__(self, seconds_per_step: float):
        self.now, self.seconds_per_step = 0.0, seconds_per_step

    def __call__(self) -> float:
        return self.now

    def tick(self, _result=None) -> None:
        self.now += self.seconds_per_step


def test_the_planner_plans_once_from_rank_0s_timing():
    clock, syncs = FakeClock(1.0), []
    budget = TimeBudget(0.5, warmup_steps=4, batch_size=16, clock=clock)

    def planner(configured: int) -> BudgetPlanner:
        # rank 0 measured 2 s a step where this process measured 1
        return BudgetPlanner(budget, configured, 0, synchronize=lambda: syncs.append(1),
                             broadcast=lambda timing: {**timing, "step_s": 2.0})

    plan = planner(40)
    answers = []
    for step in range(1, 8):
        clock.tick()
        answers.append(plan.after_step(step))
    # 28.5 s after the reserve, 4 spent, 2 s a step: 12 more steps after the plan step 4
    assert answers == [None, None, None, 16, None, None, None]
    assert syncs == [1, 1]  # the clock read after step 1 (the start of timing) and step 4
    assert plan.end == 16 and plan.timing == StepTiming(4, 4.0, 2.0, 2)
    assert plan.announcement() == (
        logging.INFO, "time budget 0.5 min: 2 s/step over steps 2-4 -> 16 of 40 steps planned")
    # a run that ends by the plan step is never timed; a resumed one's plan is made from its
    # timing, before it starts (`plan_pretraining`)
    assert not planner(4).timing_steps and planner(4).after_step(4) is None
    assert budget.planned_end(40, StepTiming(4, 4.0, 1.0, 2)) == 28
    clock = FakeClock(1.0)
    tiny = BudgetPlanner(TimeBudget(0.0001, 4, 16, clock=clock), 40, 0,
                         synchronize=lambda: None, broadcast=lambda timing: timing)
    answers = []
    for step in range(1, 5):
        clock.tick()
        answers.append(tiny.after_step(step))
    assert answers == [None, None, None, 4]
    assert tiny.end == 4 and tiny.announcement()[0] == logging.WARNING


def make_trainer(data: Path, world: tuple[int, int] = (0, 1), **train) -> StepRunner:
    """The tiny model with dropout on (the plan must not disturb its random stream);
    `world`: (rank, world_size) in an initialised process group."""
    config = TrainConfig(**{"max_steps": 40, "batch_size": 16, "learning_rate": 3e-3,
                            "warmup_steps": 4, "log_every": 5, "eval_every": 0,
                            "checkpoint_every": 0, "device": "cpu", "seed": 5,
                            "max_minutes": None, **train})
    tokens = read_vocab(data / "vocab")
    torch.manual_seed(config.seed)
    net = BertPretrainingModel(tiny_config(len(tokens), dropout=0.1))
    torch.manual_seed(config.seed + 1)
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5),
                                   VocabSpec.from_tokens(tokens), seed=config.seed)
    rank, world_size = world
    batches = PretrainingBatches(SampleStore(data / "samples" / "train"), collator,
                                 config.batch_size, config.micro_batches,
                                 seed=config.seed, rank=rank, world_size=world_size)
    return StepRunner(net, config, batches, device="cpu", dist=Distributed(rank, world_size))


def budget_of(trainer: StepRunner, minutes: float, clock: FakeClock) -> TimeBudget:
    cfg = trainer.config
    return TimeBudget(minutes, cfg.warmup_steps, cfg.batch_size, clock=clock)


def run(trainer: StepRunner, clock: FakeClock | None = None, **kw):
    rates: list[float] = []

    def on_step(result):
        rates.append(result.learning_rate)
        if clock is not None:
            clock.tick()

    result = Trainer(trainer, on_step=on_step, progress=False, **kw).train()
    return result, rates


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def test_a_budget_that_binds_is_a_run_of_its_planned_steps_bit_for_bit(data):
    # 1 s a step; the plan after step 4 (= warmup) times steps 2-4 and has 0.5 min: 28.5 s
    # after the reserve, 4 spent: 24 more steps, 28 of the 40 configured.
    clock = FakeClock(1.0)
    timed = make_trainer(data)
    result, rates = run(timed, clock, budget=budget_of(timed, 0.5, clock))
    # --set train.max_steps=<steps> --set train.max_minutes=null
    rerun = make_trainer(data, max_steps=result.steps)
    rerun_result, rerun_rates = run(rerun)
    assert rerun_result.step_timing is None
    assert rates == rerun_rates
    same_weights(timed.raw_model, rerun.raw_model)

    assert result.step_timing == StepTiming(plan_step=4, elapsed_s=4.0, step_s=1.0,
                                            timed_from=2)
    assert result.steps == result.planned_steps == 28 < 40
    assert rates[-1] > 0  # the schedule was planned to end at 28, not cut at 28 of 40


def test_a_budget_that_does_not_bind_changes_nothing(data):
    clock = FakeClock(0.01)
    timed = make_trainer(data, max_steps=12)
    result, rates = run(timed, clock, budget=budget_of(timed, 5, clock))
    assert result.steps == result.planned_steps == 12
    plain = make_trainer(data, max_steps=12)
    _, plain_rates = run(plain)
    assert rates == plain_rates
    same_weights(timed.raw_model, plain.raw_model)


def test_a_resumed_budget_run_keeps_its_plan_without_timing_again(data, tmp_path):
    clock = FakeClock(1.0)
    straight = make_trainer(data)
    run(straight, clock, budget=budget_of(straight, 0.5, clock))
    assert straight.step == 28

    clock = FakeClock(1.0)
    first = make_trainer(data, checkpoint_every=5)
    checkpoints = CheckpointDir(tmp_path / "ckpt", keep_last=2)
    run(first, clock, budget=budget_of(first, 0.5, clock),
        checkpointer=Checkpointer(checkpoints, every=5), stop_after=10)
    assert checkpoints.latest().meta["step_timing"]["step_s"] == 1.0

    # the resumed process is 5 times slower: timing it again would plan another end
    slow = FakeClock(5.0)
    second = make_trainer(data, checkpoint_every=5)
    latest = checkpoints.latest()
    second.resume_from(latest)
    # as the run's plan makes it: its end from the recorded timing (`plan_pretraining`)
    budget, timing = budget_of(second, 0.5, slow), recorded_timing(latest)
    result, _ = run(second, slow, budget=budget, timing=timing,
                    end=budget.planned_end(40, timing),
                    checkpointer=Checkpointer(checkpoints, every=5))
    assert result.steps == result.planned_steps == 28
    assert result.step_timing == StepTiming(plan_step=4, elapsed_s=4.0, step_s=1.0,
                                            timed_from=2)
    same_weights(straight.raw_model, second.raw_model)


def _budget_worker(rank: int, world_size: int, data: Path, out: Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=60))
    try:
        clock = FakeClock(1.0 if rank == 0 else 3.0)  # alone: 9 steps, not 28
        trainer = make_trainer(data, world=(rank, world_size))
        result, _ = run(trainer, clock, budget=budget_of(trainer, 0.5, clock))
        (out / f"rank{rank}.json").write_text(json.dumps(
            {"steps": result.steps, "timing": result.step_timing.to_dict()}))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_all_processes_follow_the_plan_of_rank_0(data, tmp_path):
    spawn_ranks(_budget_worker, (2, data, tmp_path), 2)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0 == rank1
    assert rank0["steps"] == 28 and rank0["timing"]["step_s"] == 1.0


# ------------------------------------------------------------------------------- the stage
