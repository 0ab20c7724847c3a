"""Clocks for the runtime: the pure layers' `Clock` plus delayed callbacks.

The runtime needs one thing more than the shards do: to run a callback after a delay (write
timeouts, linger, coordinator timers). `SystemClock` does it on the running event loop;
`ManualClock` does it when a test moves time, synchronously and in due-time order, so a test
decides exactly when every timer fires.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

from coordinator_server.runtime.api import Clock


class Cancellable(Protocol):
    """A scheduled callback that can still be called off."""

    def cancel(self) -> None: ...


class RuntimeClock(Clock, Protocol):
    """Time in milliseconds and callbacks after a delay."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        """Run `callback` once, `delay_ms` from now (a delay below 0 counts as 0)."""
        ...


class SystemClock:
    """Wall-clock time; callbacks run on the event loop that is running when they are set."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "due_ms")

    def __init__(self, due_ms: int, callback: Callable[[], None]) -> None:
        self.due_ms = due_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time that moves only when a test calls `advance`."""

    __slots__ = ("_heap", "_now_ms", "_sequence")

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms
        # (due_ms, sequence, timer): the sequence keeps callbacks due at the same time in the
        # order they were set.
        self._heap: list[tuple[int, int, _ManualTimer]] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        timer = _ManualTimer(self._now_ms + max(delay_ms, 0), callback)
        heapq.heappush(self._heap, (timer.due_ms, next(self._sequence), timer))
        return timer

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` and run every callback due by then, in due-time order.

        Time steps to each callback's due time before it runs, so a callback that sets
        another one sees the right `now_ms`; callbacks set meanwhile that are due by the end
        also run.
        """
        if ms < 0:
            raise ValueError(f"time cannot go back ({ms} ms)")
        target_ms = self._now_ms + ms
        heap = self._heap
        while heap and heap[0][0] <= target_ms:
            due_ms, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self._now_ms = max(self._now_ms, due_ms)
            timer.callback()
        self._now_ms = target_ms

    @property
    def pending_timers(self) -> int:
        """Callbacks set and neither run nor cancelled."""
        return sum(1 for _, _, timer in self._heap if not timer.cancelled)

    def next_due_ms(self) -> int | None:
        """When the next callback is due, or None when none is."""
        for due_ms, _, timer in sorted(self._heap):
            if not timer.cancelled:
                return due_ms
        return None


__all__ = ["Cancellable", "ManualClock", "RuntimeClock", "SystemClock"]
