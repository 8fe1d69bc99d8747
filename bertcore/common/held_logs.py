"""What other libraries log during a block, held back until it is known how the block ended:
passed on as it came when it succeeds, sent to debug level (`bert -v` shows it) when it
raises, so that the caller can say what failed in one line.

The hold is `logging.handlers.BufferingHandler` (MemoryHandler's base): MemoryHandler flushes
to one handler, where a held record must go back through its own logger's handlers.
`logs_quiet`: a block where such loggers say only their errors (the warnings a library gives
on every call, which tell the user nothing)."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import sys
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def logs_held(names: tuple[str, ...]) -> Iterator[None]:
    """Around a block: what the loggers `names` (and their children) log meanwhile is held
    back, then passed on if the block succeeds, or logged at debug level if it raises."""
    held = logging.handlers.BufferingHandler(capacity=sys.maxsize)
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger.handlers, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [held], False
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        for logger, (handlers, propagate) in zip(loggers, saved, strict=True):
            logger.handlers, logger.propagate = handlers, propagate
        for record in held.buffer:
            if succeeded:
                logging.getLogger(record.name).handle(record)
            else:
                log.debug("%s: %s", record.name, record.getMessage(), exc_info=record.exc_info)


@contextlib.contextmanager
def logs_quiet(names: tuple[str, ...]) -> Iterator[None]:
    """Around a block: only errors from the loggers `names` (and their children)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
