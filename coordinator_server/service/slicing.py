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

A connection builds one such answer at a time (its BuildSlot), and takes no new request
meanwhile; an answer that waits for futures is parked, not built, and leaves the slot to
the others while it waits. What a parked answer has built already is counted as the
connection's answers ready to be written are, so that pipelined requests that each build
part of an answer and park cannot hold hundreds of parts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Generator, Sequence
from time import perf_counter
from typing import Any, Final, TypeAlias

from coordinator_protocol.messages import Message

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
    """When the running slice is up; and `built_bytes`, what the request's answer holds
    already (its items' encoded sizes, as `max_response_bytes` counts them), which it sets
    before it waits for futures: its connection counts them while it waits."""

    __slots__ = ("_deadline", "built_bytes")

    def __init__(self) -> None:
        self._deadline = perf_counter() + SLICE_SECONDS
        self.built_bytes = 0

    def restart(self) -> None:
        self._deadline = perf_counter() + SLICE_SECONDS

    def due(self) -> bool:
        return perf_counter() >= self._deadline


def advance(generator: Steps) -> Message | list[asyncio.Future[Any]] | None:
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
        self._running: set[SlicedAnswer] = set()

    def run(self, steps: Callable[[SliceClock], Steps]) -> Message | SlicedAnswer:
        """The answer of the request `steps(clock)` makes, or the answer under way when it
        does not fit in one slice."""
        clock = SliceClock()
        generator = steps(clock)
        outcome = advance(generator)
        if isinstance(outcome, Message):
            return outcome
        return SlicedAnswer(generator, clock, self._running, outcome)

    def cancel_all(self) -> None:
        """Stop every request under way; their callers get the cancellation."""
        for request in list(self._running):
            request.cancel()

    def __len__(self) -> int:
        return len(self._running)


class BuildSlot:
    """Where one connection builds its answers in slices: one at a time.

    An answer holds the slot while it runs slices (and between two of them, its next one
    due), and gives it up when it waits for futures (a write's acknowledgement, of a
    DeleteGroups or of an OffsetFetch with require_stable): a parked answer holds nothing
    up. Once they are done it asks for the slot again, and those that ask while another
    holds it queue, in the order they asked. The connection takes no new request while the
    slot holds an answer (`building`), so at most one of its answers is being built,
    whatever it pipelines.

    `parked_bytes`: what the parked answers (and those queued to go on) have built already,
    which the connection counts with its answers ready to be written.

    `on_free` is called when an answer that parks leaves the slot free: the connection takes
    the requests that wait, if its answers leave room. An answer that is done leaves it
    without a call, since its reply wakes the connection once the answer is counted."""

    __slots__ = ("_on_free", "_queue", "building", "parked_bytes")

    def __init__(self, on_free: Callable[[], None]) -> None:
        # The answer being built (or, its turn come, to be built after a loop turn): while
        # there is one, the connection takes no new request. An attribute, not a property:
        # the connection reads it for every request.
        self.building: SlicedAnswer | None = None
        self._queue: deque[SlicedAnswer] = deque()
        self._on_free = on_free
        self.parked_bytes = 0

    def _take(self, answer: SlicedAnswer) -> bool:
        """Whether `answer` holds the slot now; if not, it has its place in the queue."""
        if self.building is None:
            self._hold(answer)
            return True
        self._queue.append(answer)
        return False

    def _hold(self, answer: SlicedAnswer) -> None:
        self.building = answer
        self._uncount(answer)

    def _park(self, answer: SlicedAnswer) -> None:
        """Count what `answer`, parked, has built: until it holds the slot again, or ends."""
        answer._counted_bytes = answer.built_bytes
        self.parked_bytes += answer._counted_bytes

    def _uncount(self, answer: SlicedAnswer) -> None:
        self.parked_bytes -= answer._counted_bytes
        answer._counted_bytes = 0

    def _leave(self, answer: SlicedAnswer, *, parked: bool) -> None:
        """`answer` builds no more for now (`parked`: what it has built is counted) or at
        all (it is counted no more): the next in the queue goes on, after a loop turn."""
        if parked:
            self._park(answer)
        else:
            self._uncount(answer)
        if self.building is not answer:
            # Cancelled in the queue, or parked before it held the slot.
            with contextlib.suppress(ValueError):
                self._queue.remove(answer)
            return
        if self._queue:
            following = self._queue.popleft()
            self._hold(following)
            following._run_soon()
            return
        self.building = None
        if parked:
            self._on_free()


class SlicedAnswer:
    """An answer under way: `result` is its future. It runs on by itself; given a
    connection's BuildSlot (`build_in`), it runs its slices only while it holds it."""

    __slots__ = (
        "_clock",
        "_counted_bytes",
        "_loop",
        "_running",
        "_slot",
        "_waiting",
        "result",
        "steps",
    )

    def __init__(
        self,
        generator: Steps,
        clock: SliceClock,
        running: set[SlicedAnswer],
        waiting: list[asyncio.Future[Any]] | None,
    ) -> None:
        # The generator that builds it, slice by slice (`advance`).
        self.steps = generator
        self._clock = clock
        self._running = running
        self._loop = asyncio.get_running_loop()
        self._slot: BuildSlot | None = None
        # What `_slot` counts of it while it is parked.
        self._counted_bytes = 0
        self._waiting = 0
        self.result: asyncio.Future[Message] = self._loop.create_future()
        running.add(self)
        self._go_on(waiting)

    @property
    def parked(self) -> bool:
        """Waiting for futures, not for a slice."""
        return self._waiting > 0

    @property
    def built_bytes(self) -> int:
        return self._clock.built_bytes

    def build_in(self, slot: BuildSlot) -> None:
        """Run the next slices only while holding `slot`. Called right after the first
        slice, before the loop has run the next: an answer that is due takes the slot (the
        connection asks only when it is free), one that is parked asks for it once its
        futures are done."""
        self._slot = slot
        if self.parked:
            slot._leave(self, parked=True)
        else:
            slot._take(self)

    def _go_on(self, waiting: list[asyncio.Future[Any]] | None) -> None:
        """Run the next slice after a loop turn, or once every future of `waiting` is done."""
        if waiting is None:
            self._loop.call_soon(self._run)
            return
        self._waiting = len(waiting)
        for future in waiting:
            future.add_done_callback(self._one_done)

    def _one_done(self, _: asyncio.Future[Any]) -> None:
        self._waiting -= 1
        # Cancelled meanwhile (at shutdown), it must not take the slot it would never leave.
        if self._waiting == 0 and not self.result.done():
            slot = self._slot
            if slot is None or slot._take(self):
                self._run()

    def _run_soon(self) -> None:
        self._loop.call_soon(self._run)

    def _run(self) -> None:
        slot = self._slot
        if self.result.done() or (slot is not None and slot.building is not self):
            return
        self._clock.restart()
        try:
            outcome = advance(self.steps)
        except Exception as error:
            self._done()
            self.result.set_exception(error)
            return
        if isinstance(outcome, Message):
            self._done()
            self.result.set_result(outcome)
            return
        self._go_on(outcome)
        if outcome is not None and slot is not None:
            slot._leave(self, parked=True)

    def _done(self) -> None:
        self._running.discard(self)
        if self._slot is not None:
            self._slot._leave(self, parked=False)

    def cancel(self) -> None:
        self._done()
        self.steps.close()
        self.result.cancel()
