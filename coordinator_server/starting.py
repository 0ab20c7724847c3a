"""Starting the server: a component started beside the log (the marker writer, the
transactions check) is started again until it starts, as the log's load waits for a slow
broker, instead of ending the server on its first timeout; and the failures that waiting
cannot mend (StartError), which end the start with one line saying what to fix."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = [
    "START_RETRY_BACKOFF_MAX_S",
    "START_RETRY_BACKOFF_S",
    "StartAbandoned",
    "StartError",
    "start_with_retries",
]

# Between two attempts to start a component that waits for a slow broker at start: the
# pause doubles from the first to the second.
START_RETRY_BACKOFF_S = 0.5
START_RETRY_BACKOFF_MAX_S = 10.0

T = TypeVar("T")

# A WARNING at the first failure, then at most one per this interval, which doubles up to
# the maximum: a broker slow for minutes writes a few lines, not one per attempt.
_FIRST_WARNING_INTERVAL_S = 5.0
_MAX_WARNING_INTERVAL_S = 300.0


class StartError(Exception):
    """The server cannot start, and what to fix (a port in use, a data directory another
    server holds, a Kafka cluster that cannot be reached): said in one line, no trace."""


class StartAbandoned(Exception):
    """The server was asked to stop while a component was still waiting to start."""


async def start_with_retries(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    retriable: tuple[type[BaseException], ...],
    stop: asyncio.Event,
    logger: logging.Logger,
    backoff_s: float,
    backoff_max_s: float,
) -> T:
    """`attempt()` again, after a back-off that doubles up to `backoff_max_s`, for as long
    as it fails with one of `retriable`; any other exception ends the start. Raises
    StartAbandoned once `stop` is set."""
    failures = 0
    first_failure = 0.0
    next_warning = 0.0
    interval = _FIRST_WARNING_INTERVAL_S
    backoff = backoff_s
    while True:
        if stop.is_set():
            raise StartAbandoned(f"asked to stop while {what} was waiting for the broker")
        try:
            result = await attempt()
        except retriable as error:
            now = time.monotonic()
            failures += 1
            if failures == 1:
                first_failure = now
            if now >= next_warning:
                logger.warning(
                    "%s could not start (%d attempts in %.0f s, retrying every %.1f s at most): %s",
                    what,
                    failures,
                    now - first_failure,
                    backoff_max_s,
                    error or type(error).__name__,
                )
                next_warning = now + interval
                interval = min(interval * 2, _MAX_WARNING_INTERVAL_S)
        else:
            if failures:
                logger.warning(
                    "%s started after %d failed attempts in %.1f s",
                    what,
                    failures,
                    time.monotonic() - first_failure,
                )
            return result
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff)
        backoff = min(backoff * 2, backoff_max_s)
