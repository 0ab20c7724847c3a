"""The event processor: one serial queue of events per partition, and who runs them.

This is Kafka's `CoordinatorEventProcessor` (with its `EventAccumulator`, the queues keyed by
partition) on one asyncio event loop. Events of one queue run one at a time and in order;
queues run independently. A queue's events are handed to the handler it was opened with;
what an event means is the handler's business (the runtime's dispatch), not the
processor's.

The idle fast path. An event for a queue with nothing queued or running would run next
anyway, so it may run at once, in the caller's own call (`run_now`, `submit`), sparing the
queue, the wake-up and a turn of the loop. The order is the same; whatever is scheduled
while it runs waits its turn in the queue. This is how the server runs (`run_when_idle`);
without it every event goes through the queue. The fast path is the queue's public
protocol, not only the processor's methods: a caller that runs something of its own at once
(the runtime's writes, which need no event when they need nothing but their answer) checks
that nothing is queued or running and marks the queue `running` and `inline` around it, as
`run_now` does. A method call each way would cost every heartbeat about 45 ns.

`EventProcessor` drains each queue with a task on the running event loop, yielding after
`EVENTS_PER_SLICE` events so that one busy partition cannot hold up the others.
`ManualEventProcessor` runs nothing by itself: a test runs the queued events one by one
(`poll`), as Kafka's tests do with their ManualEventProcessor.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final, Generic, TypeVar

E = TypeVar("E")

EVENTS_PER_SLICE: Final = 256
"""A drain task yields to the loop after this many events, so that one busy partition cannot
hold up the others, the connections and the append completions for long."""


class EventQueue(Generic[E]):
    """One partition's events, in order.

    The processor that opened it queues, runs and closes its events. `running` and `inline`
    are the idle fast path's protocol (see the module): set around whatever runs, and read
    by whoever must know (a batch opened by a write run at once flushes at the end of the
    loop's turn).
    """

    __slots__ = ("closed", "events", "handler", "inline", "name", "running", "task", "wakeup")

    def __init__(self, name: str, handler: Callable[[E], None]) -> None:
        self.name = name
        self.handler = handler
        self.events: deque[E] = deque()
        # An event is running: one scheduled meanwhile (a follow-up) must wait its turn.
        self.running = False
        # The running event was not queued: it runs in its scheduler's own call.
        self.inline = False
        self.closed = False
        self.wakeup: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.events)

    def __bool__(self) -> bool:
        # Spelled out: a class compiled by mypyc does not fall back to __len__ for truth.
        return bool(self.events)


class EventProcessor(Generic[E]):
    """Runs each queue's events on the running event loop, one drain task per queue."""

    __slots__ = ("_max_queued_events", "run_when_idle")

    def __init__(self, *, run_when_idle: bool, max_queued_events: int) -> None:
        # Whether an event for an idle queue may run at once (the idle fast path).
        self.run_when_idle = run_when_idle
        self._max_queued_events = max_queued_events

    def open(self, name: str, handler: Callable[[E], None]) -> EventQueue[E]:
        """A new queue whose events go to `handler`, which must not raise."""
        queue = EventQueue(name, handler)
        self._start(queue)
        return queue

    def close(self, queue: EventQueue[E]) -> list[E]:
        """Take no more events; the ones still queued are handed back, in order."""
        queue.closed = True
        events = list(queue.events)
        queue.events.clear()
        self._wake(queue)
        return events

    async def wait_closed(self, queues: Iterable[EventQueue[E]]) -> None:
        """Wait until the closed `queues` are no longer drained."""
        tasks = [queue.task for queue in queues if queue.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def full(self, queue: EventQueue[E]) -> bool:
        """The queue holds `max_queued_events` already: refuse what can be refused."""
        return len(queue.events) >= self._max_queued_events

    # The idle fast path.

    def run_now(self, queue: EventQueue[E], event: E) -> bool:
        """Run `event` at once, in the caller's call, if the queue is idle and running at
        once is on; False if it did not."""
        if queue.events or queue.running or not self.run_when_idle:
            return False
        queue.running = queue.inline = True
        try:
            queue.handler(event)
        finally:
            queue.running = queue.inline = False
        return True

    # The queue.

    def enqueue(self, queue: EventQueue[E], event: E) -> None:
        """Queue `event` behind the others."""
        queue.events.append(event)
        self._wake(queue)

    def submit(self, queue: EventQueue[E], event: E) -> None:
        """Run `event` at once if the queue is idle, else queue it."""
        if not self.run_now(queue, event):
            self.enqueue(queue, event)

    def _run(self, queue: EventQueue[E], event: E) -> None:
        queue.running = True
        try:
            queue.handler(event)
        finally:
            queue.running = False

    def _start(self, queue: EventQueue[E]) -> None:
        queue.task = asyncio.get_running_loop().create_task(self._drain(queue), name=queue.name)

    def _wake(self, queue: EventQueue[E]) -> None:
        wakeup = queue.wakeup
        if wakeup is not None:
            queue.wakeup = None
            if not wakeup.done():
                wakeup.set_result(None)

    async def _drain(self, queue: EventQueue[E]) -> None:
        events = queue.events
        loop = asyncio.get_running_loop()
        while not queue.closed:
            if not events:
                wakeup = loop.create_future()
                queue.wakeup = wakeup
                await wakeup
                continue
            for _ in range(EVENTS_PER_SLICE):
                if not events or queue.closed:
                    break
                self._run(queue, events.popleft())
            else:
                await asyncio.sleep(0)


class ManualEventProcessor(EventProcessor[E]):
    """An event processor that runs queued events only when a test says so.

    Nothing drains the queues: `poll` runs the next queued event (of the queues in the order
    they were opened), `run_all` runs them until none is left. The idle fast path works as
    in the server, so with `run_when_idle` only what could not run at once waits here.
    """

    __slots__ = ("_queues",)

    def __init__(self, *, run_when_idle: bool, max_queued_events: int) -> None:
        super().__init__(run_when_idle=run_when_idle, max_queued_events=max_queued_events)
        self._queues: list[EventQueue[E]] = []

    def queued(self) -> int:
        """Events waiting, in every open queue."""
        return sum(len(queue.events) for queue in self._queues if not queue.closed)

    def poll(self) -> bool:
        """Run the next queued event; False when none is queued."""
        for queue in self._queues:
            if queue.events and not queue.closed:
                self._run(queue, queue.events.popleft())
                return True
        return False

    def run_all(self, limit: int = 100_000) -> int:
        """Run queued events until none is left (events may queue more); how many ran."""
        ran = 0
        while ran < limit and self.poll():
            ran += 1
        return ran

    def _start(self, queue: EventQueue[E]) -> None:
        self._queues = [q for q in self._queues if not q.closed]
        self._queues.append(queue)

    def _wake(self, queue: EventQueue[E]) -> None:
        """Nothing to wake: the test runs the events."""


__all__ = [
    "EVENTS_PER_SLICE",
    "EventProcessor",
    "EventQueue",
    "ManualEventProcessor",
]
