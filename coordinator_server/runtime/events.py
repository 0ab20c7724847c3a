"""What a write's caller gets back, and the events a partition's queue holds.

`WriteOutcome` is the one shape of a write's answer, whichever way the write ran: at once on
an idle partition or later from its queue, answered before `write` returned or parked until
the log commits its records.

The events are plain data: the runtime dispatches on their type
(`CoordinatorRuntime._run_event`) and the event processor only queues them and hands them
over. What an event does by itself is limited to answering its own caller: a write
completes, fails or times out its caller's future, and a barrier releases its waiter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from coordinator_protocol.errors import RequestTimedOutError
from coordinator_server.runtime.api import CoordinatorResult, ResponseHandle, TimeoutOperation
from coordinator_server.runtime.clock import Cancellable

T = TypeVar("T")


class WriteOutcome(Generic[T]):
    """A write's answer: over, or still to come.

    While `future` is None the write is over: `error` is why it failed, or else `response`
    is its answer. Otherwise the answer comes through `future` (done already, perhaps).

    A write run at once that needs no append (a heartbeat) is answered in an outcome with
    no future: the busiest operations spare one on every call. A write that waits for the
    log is its own outcome (a WriteEvent), with the future its caller waits on.
    """

    __slots__ = ("error", "future", "response")

    def __init__(
        self,
        response: T | None = None,
        error: BaseException | None = None,
        future: asyncio.Future[T] | None = None,
    ) -> None:
        self.response = response
        self.error = error
        self.future = future

    def __repr__(self) -> str:
        if self.future is not None:
            return f"{type(self).__name__}(future={self.future!r})"
        if self.error is not None:
            return f"{type(self).__name__}(error={self.error!r})"
        return f"{type(self).__name__}(response={self.response!r})"


class WriteEvent(WriteOutcome[Any]):
    """A write operation on its way: queued, running, then parked until the log commits
    its records; and its caller's outcome all along.

    A queued write gets its caller's future when it is queued. One run at once gets none
    unless it must wait: until then its answer is kept in the outcome's own fields
    (`answered`), and the runtime attaches a future only when the write parks.
    """

    __slots__ = (
        "answered",
        "completions",
        "deadline_ms",
        "name",
        "offset",
        "on_failure",
        "op",
        "park",
        "queued_at",
        "settled",
        "timeout_handle",
        "timeout_ms",
    )

    def __init__(
        self,
        name: str,
        op: Callable[[Any], CoordinatorResult[Any]],
        timeout_ms: int,
        future: asyncio.Future[Any] | None = None,
    ) -> None:
        self.response = None
        self.error = None
        self.future = future
        # Answered while it had no future yet: `response` or `error` is the answer.
        self.answered = False
        self.name = name
        self.op = op
        self.timeout_ms = timeout_ms
        # Set when the event waits in the queue; one run at once waited for nothing.
        self.queued_at = 0.0
        # The offset the log's high watermark must reach for the write to be committed.
        self.offset = 0
        self.deadline_ms = 0
        # Set only for a timeout other than the default (see DeferredEventCollection).
        self.timeout_handle: Cancellable | None = None
        # From the operation's result: whether its caller waits for a later completion,
        # the parked callers it answers, and what to run if its append fails.
        self.park = False
        self.completions: Sequence[tuple[ResponseHandle, object]] = ()
        self.on_failure: TimeoutOperation | None = None
        # Committed (or failed): nothing more to wait for, even if the caller stays parked.
        self.settled = False

    def done(self) -> bool:
        """The caller has its answer."""
        future = self.future
        return self.answered if future is None else future.done()

    @property
    def finished(self) -> bool:
        """Nothing more to do for this write: settled, or its caller answered."""
        return self.settled or self.done()

    def resolve(self, response: Any) -> None:
        """Answer the caller with `response`, unless it has its answer already."""
        future = self.future
        if future is None:
            if not self.answered:
                self.answered = True
                self.response = response
        elif not future.done():
            future.set_result(response)

    def reject(self, error: BaseException) -> None:
        """Answer the caller with `error`, unless it has its answer already."""
        future = self.future
        if future is None:
            if not self.answered:
                self.answered = True
                self.error = error
        elif not future.done():
            future.set_exception(error)

    def wait_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """A write run at once that was not answered waits for the log: from here on its
        caller waits on a future."""
        if self.future is None and not self.answered:
            self.future = loop.create_future()

    def complete(self) -> None:
        """The write's records are committed (or it had none to wait for)."""
        self.settled = True
        handle = self.timeout_handle
        if handle is not None:
            self.timeout_handle = None
            handle.cancel()
        if not self.park:
            self.resolve(self.response)
        if self.completions:
            deliver_completions(self.completions)

    def fail(self, error: BaseException) -> None:
        """The write failed: its caller and the parked callers it would have answered get
        `error`."""
        self.settled = True
        handle = self.timeout_handle
        if handle is not None:
            self.timeout_handle = None
            handle.cancel()
        self.reject(error)
        for parked, _ in self.completions:
            ParkedCaller.of(parked).fail(error)

    def expire(self) -> None:
        """The write timeout passed while the write was parked.

        The records stay where they are: the append may still land or fail later, and only
        the caller stops waiting. A parked caller's own wait is not bounded by the write
        timeout (a JoinGroup may wait a whole rebalance timeout), only its commit.
        """
        self.timeout_handle = None
        if not self.settled and not self.done():
            self.reject(RequestTimedOutError(f"{self.name} timed out after {self.timeout_ms}ms"))


class ParkedCaller:
    """The caller behind a ResponseHandle: a future and the partition's set of parked
    callers, which it leaves once answered."""

    __slots__ = ("future", "parked")

    def __init__(self, future: asyncio.Future[Any], parked: set[ParkedCaller]) -> None:
        self.future = future
        self.parked = parked
        parked.add(self)

    @staticmethod
    def of(handle: ResponseHandle) -> ParkedCaller:
        sink = handle.sink
        assert isinstance(sink, ParkedCaller), f"not a runtime handle: {handle!r}"
        return sink

    def complete(self, response: object) -> None:
        self.parked.discard(self)
        if self.future.done():
            return
        if isinstance(response, BaseException):
            self.future.set_exception(response)
        else:
            self.future.set_result(response)

    def fail(self, error: BaseException) -> None:
        self.complete(error)


def deliver_completions(completions: Sequence[tuple[ResponseHandle, object]]) -> None:
    for handle, response in completions:
        ParkedCaller.of(handle).complete(response)


class FlushEvent:
    """Flush the batch that was open when this was queued (adaptive linger)."""

    __slots__ = ("batch_epoch",)

    def __init__(self, batch_epoch: int) -> None:
        self.batch_epoch = batch_epoch

    def fail(self, error: BaseException) -> None:
        """Nothing waits on a flush."""


class BarrierEvent:
    """Releases its waiter once every event queued before it has run."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future

    def release(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def fail(self, error: BaseException) -> None:
        # A partition that goes away has nothing left to wait for.
        self.release()


CoordinatorEvent = WriteEvent | FlushEvent | BarrierEvent
"""What a partition's queue holds."""


__all__ = [
    "BarrierEvent",
    "CoordinatorEvent",
    "FlushEvent",
    "ParkedCaller",
    "WriteEvent",
    "WriteOutcome",
    "deliver_completions",
]
