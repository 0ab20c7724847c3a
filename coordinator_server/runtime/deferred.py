"""A partition's parked writes: Kafka's `DeferredEventCollection`.

A write whose records (or, with none, the writes before it) are not committed yet waits
here, keyed by the offset the high watermark must reach, until the log commits it, an
append below it fails, or its write timeout passes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from coordinator_server.runtime.clock import Cancellable, RuntimeClock
from coordinator_server.runtime.events import WriteEvent


class DeferredEventCollection:
    """Parked writes in offset order, and the clock callbacks that time them out.

    Offsets never decrease along the collection: operations run one at a time, and a
    revert drops everything above its offset before anything new is parked.
    """

    __slots__ = ("_clock", "_events", "_expiries", "_expiry_handle", "_write_timeout_ms")

    def __init__(self, clock: RuntimeClock, write_timeout_ms: int) -> None:
        self._clock = clock
        self._write_timeout_ms = write_timeout_ms
        self._events: deque[WriteEvent] = deque()
        # Parked writes with the default timeout, oldest deadline first.
        self._expiries: deque[WriteEvent] = deque()
        self._expiry_handle: Cancellable | None = None

    def __len__(self) -> int:
        """Writes waiting for the high watermark (ones that timed out meanwhile included)."""
        return len(self._events)

    def __bool__(self) -> bool:
        # Spelled out: a class compiled by mypyc does not fall back to __len__ for truth.
        return bool(self._events)

    def __iter__(self) -> Iterator[WriteEvent]:
        return iter(self._events)

    def add(self, event: WriteEvent, offset: int) -> None:
        """Park `event` until the high watermark reaches `offset`."""
        event.offset = offset
        self._events.append(event)
        timeout_ms = event.timeout_ms
        if timeout_ms != self._write_timeout_ms:
            event.timeout_handle = self._clock.call_later(timeout_ms, event.expire)
            return
        # Writes with the default timeout are parked in time order, so their deadlines come
        # in order too: one clock callback per partition, armed for the oldest, serves them
        # all (a callback per write would cost more than the rest of the write path).
        event.deadline_ms = self._clock.now_ms() + timeout_ms
        self._expiries.append(event)
        if self._expiry_handle is None:
            self._expiry_handle = self._clock.call_later(timeout_ms, self._expire)

    def complete_up_to(self, offset: int) -> None:
        """The log committed everything below `offset`: complete the writes it covers."""
        events = self._events
        while events and events[0].offset <= offset:
            events.popleft().complete()
        if self._expiries:
            self._forget_expiries()

    def fail_above(self, offset: int, error: BaseException) -> list[WriteEvent]:
        """Fail the writes parked above `offset` (their records are reverted) with `error`;
        they are returned, oldest first."""
        events = self._events
        failed: list[WriteEvent] = []
        while events and events[-1].offset > offset:
            failed.append(events.pop())
        failed.reverse()
        for event in failed:
            event.fail(error)
        if self._expiries:
            self._forget_expiries()
        return failed

    def fail_all(self, error: BaseException) -> None:
        """The partition goes away: fail every parked write, and disarm the timeouts."""
        events = self._events
        while events:
            events.popleft().fail(error)
        self._forget_expiries(disarm=True)

    def _expire(self) -> None:
        self._expiry_handle = None
        now_ms = self._clock.now_ms()
        expiries = self._expiries
        while expiries:
            event = expiries[0]
            if not event.finished:
                if event.deadline_ms > now_ms:
                    self._expiry_handle = self._clock.call_later(
                        event.deadline_ms - now_ms, self._expire
                    )
                    return
                event.expire()
            expiries.popleft()

    def _forget_expiries(self, *, disarm: bool = False) -> None:
        """Drop finished writes from both ends of the expiry queue.

        An emptied queue keeps its clock callback armed (unless `disarm`, for an unload):
        the next write parked within the timeout needs none of its own, and a callback that
        finds the queue empty does nothing. Cancelling and arming one per batch cost as much
        as the rest of the batch's bookkeeping.
        """
        expiries = self._expiries
        while expiries and expiries[0].finished:
            expiries.popleft()
        while expiries and expiries[-1].finished:
            expiries.pop()
        if disarm and not expiries and self._expiry_handle is not None:
            self._expiry_handle.cancel()
            self._expiry_handle = None


__all__ = ["DeferredEventCollection"]
