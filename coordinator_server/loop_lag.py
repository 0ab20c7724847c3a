"""Event-loop lag: how late a periodic timer fires.

Everything the server does runs on one event loop: requests, timers, appends, scrapes. A
callback that holds the loop (a large load, a slow scrape, a long garbage collection, a
starved CPU) delays everything behind it by as much; a timer due every `INTERVAL_S` that
fires late says by how much. The lateness is observed into a histogram
(`coordinator_event_loop_lag_seconds`).
"""

from __future__ import annotations

import asyncio
import contextlib

from coordinator_server.metrics import Histogram

__all__ = ["INTERVAL_S", "EventLoopLag"]

INTERVAL_S = 0.5
"""How often the timer is due: often enough to catch a stall of a fraction of a second
within seconds, rarely enough to cost nothing (two wake-ups a second)."""


class EventLoopLag:
    def __init__(self, histogram: Histogram, interval_s: float = INTERVAL_S) -> None:
        self._histogram = histogram
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the event-loop lag probe starts once")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="event-loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._interval_s
        observe = self._histogram.observe
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            observe(max(0.0, loop.time() - due))
