"""What the training loop keeps between optimizer steps, on the device so that no step waits for
it: the run's counters (`TrainingState`) and the sums of the current logging window
(`LoggingWindow`). The StepRunner (`bertcore.training.loop.step`) adds each step to both; they
are read back only on the loop's sync steps (`StepRunner.read_counters`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from bertcore.training.config import TrainConfig

# The sums of a logging window (finite steps only), in the order of LoggingWindow.sums.
WINDOW = (
    "mlm_loss_sum",
    "mlm_count",
    "mlm_correct",
    "nsp_loss_sum",
    "nsp_count",
    "nsp_correct",
    "grad_norm_sum",
    "good_steps",
    "tokens",
)
# The run's counters, in the order of TrainingState.counters.
TOTALS = ("skipped_steps", "nonfinite_in_a_row", "worst_nonfinite_run", "tokens_seen",
          "stop_votes")


class TrainingState:
    """Where the run stands: the optimizer steps done, and on the device the run's counters
    (TOTALS: skipped steps, the current and the worst run of non-finite steps, tokens seen,
    the processes' stop votes of the last step)."""

    def __init__(self, device: torch.device):
        self.step = 0
        self.counters = torch.zeros(len(TOTALS), dtype=torch.int64, device=device)

    def count(self, skipped: torch.Tensor, sick: torch.Tensor, tokens: torch.Tensor,
              stop_votes: torch.Tensor) -> None:
        """One more step, on the device: `skipped` (its update was not applied), `sick` (a
        non-finite loss, or gradient without a scaler), its tokens and stop votes."""
        skipped_steps, in_a_row, worst, tokens_seen, _ = self.counters.unbind()
        in_a_row = torch.where(sick, in_a_row + 1, torch.where(skipped, in_a_row, 0))
        self.counters = torch.stack([skipped_steps + skipped.long(), in_a_row,
                                     torch.maximum(worst, in_a_row),
                                     tokens_seen + tokens.long(), stop_votes.long()])
        self.step += 1

    def forget_worst_run(self) -> None:
        """After a read: the worst run of non-finite steps counts from the current one on."""
        self.counters[2] = self.counters[1]

    def totals(self) -> dict[str, int]:
        """The run's counters by name (reads the device)."""
        return dict(zip(TOTALS, self.counters.tolist(), strict=True))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        in_a_row = int(state["nonfinite_in_a_row"])
        self.counters = torch.tensor(
            [int(state["skipped_steps"]), in_a_row, in_a_row, int(state["tokens_seen"]), 0],
            dtype=torch.int64, device=self.counters.device,
        )


class LoggingWindow:
    """The steps since the last row of the train log: their sums on the device (WINDOW,
    finite steps only), and the clock and token count the row's speed is measured from."""

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(len(WINDOW), dtype=torch.float64, device=device)
        self.opened = time.perf_counter()
        self.tokens_before = 0.0  # tokens in the sums before `opened` (a resumed window)

    def add(self, good: torch.Tensor, step_sums: torch.Tensor) -> None:
        self.sums += torch.where(good, step_sums, 0.0)  # NaN never reaches the window

    def restart_clock(self, counters: Mapping[str, float]) -> None:
        """Time the window from now, its tokens so far (`counters`, as read) not counted."""
        self.opened, self.tokens_before = time.perf_counter(), counters["tokens"]

    def close(self, counters: Mapping[str, float], config: TrainConfig) -> dict[str, float]:
        """Means over the window's steps (finite steps only) from `counters` (as read by
        StepRunner.read_counters) and its speed (`tokens_per_s`); then a new window opens."""
        now, w = time.perf_counter(), counters
        self.sums.zero_()
        steps = max(w["good_steps"], 1.0)
        mlm_den, nsp_den = max(w["mlm_count"], 1.0), max(w["nsp_count"], 1.0)
        mlm_loss, nsp_loss = w["mlm_loss_sum"] / mlm_den, w["nsp_loss_sum"] / nsp_den
        tokens_per_s = (w["tokens"] - self.tokens_before) / max(now - self.opened, 1e-9)
        self.opened, self.tokens_before = now, 0.0
        return {
            "loss": config.mlm_weight * mlm_loss + config.nsp_weight * nsp_loss,
            "mlm_loss": mlm_loss,
            "mlm_accuracy": w["mlm_correct"] / mlm_den,
            "nsp_loss": nsp_loss,
            "nsp_accuracy": w["nsp_correct"] / nsp_den,
            "grad_norm": w["grad_norm_sum"] / steps,
            "tokens_per_s": tokens_per_s,
        }

    def state_dict(self) -> torch.Tensor:
        return self.sums.cpu().clone()

    def load_state_dict(self, sums: torch.Tensor) -> None:
        self.sums = sums.clone().double().to(self.sums.device)
