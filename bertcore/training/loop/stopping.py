"""Stopping a run cleanly: SIGTERM and Ctrl-C become a request the training loop honours
after a step, with a checkpoint, and then an exception that carries the exit code."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from bertcore.common.errors import BertError

log = logging.getLogger(__name__)


class TrainingInterrupted(BertError):
    """SIGTERM or Ctrl-C: the loop stopped after a step (and wrote a checkpoint if it could)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class StopRequest:
    """Turns SIGTERM and SIGINT into a flag the loop checks after each step (main thread only;
    the previous handlers come back on exit). A second Ctrl-C stops at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: stopping after this step, then checkpointing",
                    signal.Signals(signum).name)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
