"""A partition's timers: Kafka's `CoordinatorTimerImpl`.

A timer fires as a write operation on its partition, scheduled through the callable the
timer was given (Kafka's `CoordinatorShardScheduler`), never through the runtime itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from coordinator_protocol.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from coordinator_server.runtime.api import CoordinatorResult, TimeoutOperation
from coordinator_server.runtime.clock import Cancellable, RuntimeClock

ScheduleWrite = Callable[[str, Callable[[Any], CoordinatorResult[Any]]], asyncio.Future[Any]]
"""`schedule(name, op)`: queue the write operation `op` on the timer's partition; the future
fails as the runtime's writes do."""

_SKIPPED: CoordinatorResult[Any] = CoordinatorResult()


class _TimerTask:
    __slots__ = ("due_ms", "fired", "handle", "key", "operation", "retry", "retry_backoff_ms")

    def __init__(
        self,
        key: str,
        operation: TimeoutOperation,
        retry: bool,
        retry_backoff_ms: int,
        due_ms: int,
    ) -> None:
        self.key = key
        self.operation = operation
        self.retry = retry
        self.retry_backoff_ms = retry_backoff_ms
        self.due_ms = due_ms
        # Its operation was handed to the partition's queue: a new schedule needs a new task.
        self.fired = False
        self.handle: Cancellable | None = None


class PartitionTimer:
    """A partition's `CoordinatorTimer`: keyed timers that fire as write operations.

    A timer stays scheduled until its operation runs on the partition's queue; if the key
    was rescheduled or cancelled while the operation was queued, the stale one does nothing.

    Pushing a timer later (a member's session timer, re-armed by every heartbeat) keeps the
    clock callback already armed and only moves the due time: when the callback comes, it
    arms another for what is left. A heartbeat then costs an assignment instead of a cancel
    and a new clock callback, and a session that keeps heartbeating costs one callback per
    session timeout.
    """

    __slots__ = (
        "_clock",
        "_closed",
        "_default_backoff_ms",
        "_log",
        "_partition",
        "_schedule_write",
        "_tasks",
    )

    def __init__(
        self,
        partition: int,
        clock: RuntimeClock,
        default_backoff_ms: int,
        schedule_write: ScheduleWrite,
        log: logging.Logger,
    ) -> None:
        self._partition = partition
        self._clock = clock
        self._default_backoff_ms = default_backoff_ms
        self._schedule_write = schedule_write
        self._log = log
        self._tasks: dict[str, _TimerTask] = {}
        self._closed = False

    def schedule(
        self,
        key: str,
        delay_ms: int,
        operation: TimeoutOperation,
        *,
        retry: bool = False,
        retry_backoff_ms: int | None = None,
    ) -> None:
        if self._closed:
            return
        backoff_ms = self._default_backoff_ms if retry_backoff_ms is None else retry_backoff_ms
        due_ms = self._clock.now_ms() + max(delay_ms, 0)
        previous = self._tasks.get(key)
        if previous is not None:
            if not previous.fired and previous.handle is not None and previous.due_ms <= due_ms:
                previous.operation = operation
                previous.retry = retry
                previous.retry_backoff_ms = backoff_ms
                previous.due_ms = due_ms
                return
            if previous.handle is not None:
                previous.handle.cancel()
        task = _TimerTask(key, operation, retry, backoff_ms, due_ms)
        self._tasks[key] = task
        task.handle = self._clock.call_later(delay_ms, lambda: self._expire(task))

    def reschedule(self, key: str, delay_ms: int) -> bool:
        task = self._tasks.get(key)
        if task is None or task.fired or task.handle is None or self._closed:
            return False
        due_ms = self._clock.now_ms() + max(delay_ms, 0)
        if task.due_ms > due_ms:
            # Sooner than armed: the callback must be armed again.
            task.handle.cancel()
            task.handle = self._clock.call_later(delay_ms, lambda: self._expire(task))
        # Later: the armed callback arms itself again for the rest when it runs.
        task.due_ms = due_ms
        return True

    def schedule_if_absent(
        self,
        key: str,
        delay_ms: int,
        operation: TimeoutOperation,
        *,
        retry: bool = False,
        retry_backoff_ms: int | None = None,
    ) -> None:
        if key not in self._tasks:
            self.schedule(key, delay_ms, operation, retry=retry, retry_backoff_ms=retry_backoff_ms)

    def cancel(self, key: str) -> None:
        task = self._tasks.pop(key, None)
        if task is not None and task.handle is not None:
            task.handle.cancel()

    def is_scheduled(self, key: str) -> bool:
        return key in self._tasks

    def size(self) -> int:
        return len(self._tasks)

    def cancel_all(self) -> None:
        """Cancel every timer and take no new ones (the partition is going away)."""
        self._closed = True
        for task in self._tasks.values():
            if task.handle is not None:
                task.handle.cancel()
        self._tasks.clear()

    def _expire(self, task: _TimerTask) -> None:
        if self._tasks.get(task.key) is not task:
            return
        remaining_ms = task.due_ms - self._clock.now_ms()
        if remaining_ms > 0:
            # Pushed later since this callback was armed.
            task.handle = self._clock.call_later(remaining_ms, lambda: self._expire(task))
            return
        task.fired = True
        future = self._schedule_write(f"timer:{task.key}", lambda _shard: self._run(task))
        future.add_done_callback(lambda done: self._on_done(task, done))

    def _run(self, task: _TimerTask) -> CoordinatorResult[Any]:
        if self._tasks.get(task.key) is not task:
            # Rescheduled or cancelled while the operation waited in the queue.
            return _SKIPPED
        del self._tasks[task.key]
        return task.operation()

    def _on_done(self, task: _TimerTask, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            return
        if self._tasks.get(task.key) is task:
            # The operation never ran (the write was refused before it was queued).
            del self._tasks[task.key]
        log = self._log
        if self._closed or isinstance(error, NotCoordinatorError | CoordinatorLoadInProgressError):
            log.debug(
                "partition=%d timer %s dropped: the partition is not active (%s)",
                self._partition,
                task.key,
                error,
            )
            return
        if not task.retry:
            log.error("partition=%d timer %s failed: %s", self._partition, task.key, error)
            return
        if task.key in self._tasks:
            # Rescheduled meanwhile: the newer timer wins over the retry.
            return
        log.info(
            "partition=%d timer %s failed (%s); retrying in %dms",
            self._partition,
            task.key,
            error,
            task.retry_backoff_ms,
        )
        self.schedule(
            task.key,
            task.retry_backoff_ms,
            task.operation,
            retry=True,
            retry_backoff_ms=task.retry_backoff_ms,
        )


__all__ = ["PartitionTimer", "ScheduleWrite"]
