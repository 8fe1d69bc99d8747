"""What a finished pretraining reports: metrics/pretrain.json (what runs are compared on) and
metrics/pretrain_details.json beside it (what those numbers are read against), built in one
place from the loop's result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.run_reports import MODEL_KEY
from bertcore.training.evaluation.plateau import plateau_notice
from bertcore.training.loop.records import as_logged
from bertcore.training.loop.trainer import TrainResult
from bertcore.training.run.phases import Phase


@dataclass(frozen=True)
class PretrainReport:
    """What a finished pretraining reports."""

    metrics: dict[str, Any]  # written to paths.metrics
    details: dict[str, Any]  # written to paths.details
    val: dict[str, float]  # the last periodic evaluation (`bert evaluate` scores the model)
    val_length: int  # the length of the samples it scored: the last phase's


# Of the last logged train row: the numbers compared across runs. The rest of the row
# (learning rate, gradient norm) is in the log and its curves.
TRAIN_REPORTED = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")


def pretrain_report(result: TrainResult, model: BertPretrainingModel, max_seq_length: int,
                    computed_with: dict[str, Any], weights: str,
                    second: Phase | None = None) -> PretrainReport:
    """The pretrain stage's metrics and details: the one place both are built. The val
    numbers are not in them: they are `bert evaluate`'s (metrics/eval.json), shown once.
    `max_seq_length`: of the samples the last phase trained and was evaluated on;
    `computed_with`: what the bytes depend on beyond the params (`cpu.cpu_record`); `weights`:
    the sha256 of the weights the run wrote (a model card reads the report only with them);
    `second`: BERT's second phase, when it ran (the result is then the end of it)."""
    metrics = {
        "steps": result.steps,
        # as the log holds them: a rerun of the finished run reads them back from it
        "train": {k: as_logged(result.last_train[k]) for k in TRAIN_REPORTED
                  if k in result.last_train},
    }
    timing = result.step_timing
    details = {
        "tokens_seen": result.tokens_seen,
        "skipped_steps": result.skipped_steps,
        "parameters": model.num_parameters(),
        # train.max_minutes: where the run was planned to end, from which timing
        "planned_steps": result.planned_steps,
        "seconds_per_step": round(timing.step_s, 6) if timing else None,
        "timed_steps": f"{timing.timed_from}-{timing.plan_step}" if timing else None,
    }
    if second is not None:  # only then: with phase 2 off the file is what it always was
        details["phase2"] = {"first_step": second.start + 1,
                             "steps": second.end - second.start,
                             "max_seq_length": second.max_seq_length,
                             "batch_size": second.train.batch_size}
    details["computed_with"] = computed_with
    details[MODEL_KEY] = weights
    notice = plateau_notice(result.last_eval.probes, result.steps) if result.last_eval else None
    if notice is not None:  # only then: a run off the plateau has the file it always had
        details["plateau"] = notice
    val = result.last_eval.to_dict() if result.last_eval else {}
    return PretrainReport(metrics, details, val, max_seq_length)
