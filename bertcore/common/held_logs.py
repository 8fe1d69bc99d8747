"""What other libraries log during a block, held back until it is known how the block ended:
passed on as it came when it succeeds, sent to debug level (`bert -v` shows it) when it
raises, so that the caller can say what failed in one line."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)


class _HeldRecords(logging.Handler):
    """Log records kept, not shown."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def logs_held(names: tuple[str, ...]) -> Iterator[None]:
    """Around a block: what the loggers `names` (and their children) log meanwhile is held
    back, then passed on if the block succeeds, or logged at debug level if it raises."""
    held = _HeldRecords()
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger.handlers, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [held], False
    try:
        yield
    except BaseException:
        _restore(loggers, saved)
        for record in held.records:
            log.debug("%s: %s", record.name, record.getMessage(), exc_info=record.exc_info)
        raise
    _restore(loggers, saved)
    for record in held.records:
        logging.getLogger(record.name).handle(record)


def _restore(loggers: list[logging.Logger], saved: list[tuple[list, bool]]) -> None:
    for logger, (handlers, propagate) in zip(loggers, saved, strict=True):
        logger.handlers, logger.propagate = handlers, propagate
