"""Large requests answered in slices, with the event loop free between them.

One event loop serves every client: a request that names a million groups must not hold it
for the seconds its answer takes. Such a request is written as a generator that does its
work a slice at a time and yields between slices, either PAUSE (it has run for a slice's
time: let the loop serve the others) or the futures of the runtime operations it waits for
(the writes of a DeleteGroups). The driver runs it on, from a loop callback, until it
returns its answer.

A request that is over within its first slice (nearly all of them) is answered at once,
without a future; the others get a PendingReply. A slice is measured in time rather than in
items, since an item's cost varies (a group id's hash costs a microsecond per 16
characters): the generator asks `SliceClock.due()` every CHECK_EVERY items. At shutdown the
service cancels what is still under way, so that SIGTERM does not wait for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from time import perf_counter
from typing import Any, Final, TypeAlias

from protocol.messages import Message

SLICE_SECONDS: Final = 0.005
"""How long a slice runs before the loop gets a turn."""

CHECK_EVERY: Final = 64
"""Items between two looks at the clock (a look costs about what an item does)."""


class _Pause:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PAUSE"


PAUSE: Final = _Pause()
"""Yielded by a sliced request whose slice is up."""

Step: TypeAlias = "_Pause | Sequence[asyncio.Future[Any]]"
Steps: TypeAlias = Generator[Step, None, Message]


class SliceClock:
    """When the running slice is up."""

    __slots__ = ("_deadline",)

    def __init__(self) -> None:
        self._deadline = perf_counter() + SLICE_SECONDS

    def restart(self) -> None:
        self._deadline = perf_counter() + SLICE_SECONDS

    def due(self) -> bool:
        return perf_counter() >= self._deadline


def _advance(generator: Steps) -> Message | list[asyncio.Future[Any]] | None:
    """Run `generator` on until it returns its answer, pauses (None) or waits for futures
    that are not done yet (those futures). Futures that are done already do not end the
    slice."""
    while True:
        try:
            step = next(generator)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if isinstance(step, _Pause):
            return None
        pending = [future for future in step if not future.done()]
        if pending:
            return pending


class SlicedRequests:
    """Runs sliced requests; keeps those under way, to cancel them at shutdown."""

    def __init__(self) -> None:
        self._running: set[_SlicedRequest] = set()

    def run(self, steps: Callable[[SliceClock], Steps]) -> Message | asyncio.Future[Message]:
        """The answer of the request `steps(clock)` makes, or the future of it when it does
        not fit in one slice."""
        clock = SliceClock()
        generator = steps(clock)
        outcome = _advance(generator)
        if isinstance(outcome, Message):
            return outcome
        request = _SlicedRequest(generator, clock, self._running)
        request.go_on(outcome)
        return request.result

    def cancel_all(self) -> None:
        """Stop every request under way; their callers get the cancellation."""
        for request in list(self._running):
            request.cancel()

    def __len__(self) -> int:
        return len(self._running)


class _SlicedRequest:
    __slots__ = ("_clock", "_generator", "_loop", "_running", "_waiting", "result")

    def __init__(self, generator: Steps, clock: SliceClock, running: set[_SlicedRequest]) -> None:
        self._generator = generator
        self._clock = clock
        self._running = running
        self._loop = asyncio.get_running_loop()
        self._waiting = 0
        self.result: asyncio.Future[Message] = self._loop.create_future()
        running.add(self)

    def go_on(self, waiting: list[asyncio.Future[Any]] | None) -> None:
        """Run the next slice after a loop turn, or once every future of `waiting` is done."""
        if waiting is None:
            self._loop.call_soon(self._run)
            return
        self._waiting = len(waiting)
        for future in waiting:
            future.add_done_callback(self._one_done)

    def _one_done(self, _: asyncio.Future[Any]) -> None:
        self._waiting -= 1
        if self._waiting == 0:
            self._run()

    def _run(self) -> None:
        if self.result.done():
            return
        self._clock.restart()
        try:
            outcome = _advance(self._generator)
        except Exception as error:
            self._running.discard(self)
            self.result.set_exception(error)
            return
        if isinstance(outcome, Message):
            self._running.discard(self)
            self.result.set_result(outcome)
            return
        self.go_on(outcome)

    def cancel(self) -> None:
        self._running.discard(self)
        self._generator.close()
        self.result.cancel()
