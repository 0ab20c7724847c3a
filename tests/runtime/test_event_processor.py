"""The event processor on its own: serial queues, the idle fast path, closing, and the manual
processor a test drives one event at a time."""

from __future__ import annotations

import asyncio

import pytest

from coordinator_server.runtime.event_processor import (
    EVENTS_PER_SLICE,
    EventProcessor,
    EventQueue,
    ManualEventProcessor,
)


class Recorder:
    """A queue's handler: records each event, and runs what an event asks for meanwhile."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.during: dict[str, list[tuple[str, str]]] = {}
        self.queue: EventQueue[str] | None = None
        self.processor: EventProcessor[str] | None = None

    def __call__(self, event: str) -> None:
        assert self.queue is not None and self.queue.running
        self.ran.append(event)
        for action, other in self.during.get(event, []):
            assert self.processor is not None
            if action == "submit":
                self.processor.submit(self.queue, other)


def manual(
    *, run_when_idle: bool = True, max_queued_events: int = 100
) -> ManualEventProcessor[str]:
    return ManualEventProcessor(run_when_idle=run_when_idle, max_queued_events=max_queued_events)


def open_queue(processor: EventProcessor[str], name: str = "q") -> tuple[EventQueue[str], Recorder]:
    recorder = Recorder()
    queue = processor.open(name, recorder)
    recorder.queue = queue
    recorder.processor = processor
    return queue, recorder


def test_an_event_for_an_idle_queue_runs_at_once() -> None:
    processor = manual()
    queue, recorder = open_queue(processor)
    processor.submit(queue, "a")
    assert recorder.ran == ["a"]
    assert len(queue) == 0 and not queue.running and not queue.inline


def test_without_run_when_idle_every_event_waits_for_its_turn() -> None:
    processor = manual(run_when_idle=False)
    queue, recorder = open_queue(processor)
    processor.submit(queue, "a")
    processor.submit(queue, "b")
    assert recorder.ran == [] and len(queue) == 2
    assert processor.poll()
    assert recorder.ran == ["a"]
    assert processor.run_all() == 1
    assert recorder.ran == ["a", "b"]
    assert not processor.poll()


def test_an_event_submitted_while_one_runs_waits_its_turn() -> None:
    processor = manual()
    queue, recorder = open_queue(processor)
    recorder.during["a"] = [("submit", "inner")]
    processor.submit(queue, "a")
    # "a" ran at once; what it submitted could not, since "a" was running.
    assert recorder.ran == ["a"] and list(queue.events) == ["inner"]
    # Nor can anything else jump the queue while "inner" waits.
    processor.submit(queue, "b")
    assert recorder.ran == ["a"] and list(queue.events) == ["inner", "b"]
    processor.run_all()
    assert recorder.ran == ["a", "inner", "b"]


def test_while_something_runs_at_once_the_queue_takes_events_in_turn() -> None:
    processor = manual()
    queue, recorder = open_queue(processor)
    # What a caller running something of its own at once does (the idle fast path).
    queue.running = queue.inline = True
    assert not processor.run_now(queue, "a")
    processor.submit(queue, "b")
    assert recorder.ran == [] and list(queue.events) == ["b"]
    queue.running = queue.inline = False
    # Something is queued now: nothing runs at once until the queue drains.
    assert not processor.run_now(queue, "c")
    processor.enqueue(queue, "c")
    processor.run_all()
    assert recorder.ran == ["b", "c"]
    assert processor.run_now(queue, "d")
    assert recorder.ran == ["b", "c", "d"]


def test_full_counts_the_queued_events() -> None:
    processor = manual(run_when_idle=False, max_queued_events=2)
    queue, _ = open_queue(processor)
    processor.enqueue(queue, "a")
    assert not processor.full(queue)
    processor.enqueue(queue, "b")
    assert processor.full(queue)


def test_close_hands_back_what_was_queued_and_takes_nothing_more() -> None:
    processor = manual(run_when_idle=False)
    queue, recorder = open_queue(processor)
    processor.enqueue(queue, "a")
    processor.enqueue(queue, "b")
    assert processor.close(queue) == ["a", "b"]
    assert queue.closed and len(queue) == 0
    assert not processor.poll()
    assert recorder.ran == []


def test_queues_are_polled_in_the_order_they_were_opened() -> None:
    processor = manual(run_when_idle=False)
    first, first_recorder = open_queue(processor, "first")
    second, second_recorder = open_queue(processor, "second")
    processor.enqueue(second, "s1")
    processor.enqueue(first, "f1")
    processor.enqueue(first, "f2")
    assert processor.queued() == 3
    processor.poll()
    assert (first_recorder.ran, second_recorder.ran) == (["f1"], [])
    processor.run_all()
    assert (first_recorder.ran, second_recorder.ran) == (["f1", "f2"], ["s1"])


async def test_the_drain_task_runs_queued_events_in_order() -> None:
    processor: EventProcessor[str] = EventProcessor(run_when_idle=False, max_queued_events=100)
    queue, recorder = open_queue(processor)
    for name in ("a", "b", "c"):
        processor.submit(queue, name)
    assert recorder.ran == []
    for _ in range(10):
        await asyncio.sleep(0)
    assert recorder.ran == ["a", "b", "c"]
    processor.close(queue)
    await asyncio.wait_for(processor.wait_closed([queue]), 5)
    assert queue.task is not None and queue.task.done()


async def test_the_drain_task_yields_between_slices() -> None:
    processor: EventProcessor[str] = EventProcessor(run_when_idle=False, max_queued_events=10_000)
    busy, busy_recorder = open_queue(processor, "busy")
    other, other_recorder = open_queue(processor, "other")
    for i in range(EVENTS_PER_SLICE * 2):
        processor.enqueue(busy, f"b{i}")
    processor.enqueue(other, "o")
    # One turn of the loop: the busy queue ran one slice and yielded, so the other ran too.
    await asyncio.sleep(0)
    assert len(busy_recorder.ran) == EVENTS_PER_SLICE
    assert other_recorder.ran == ["o"]
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(busy_recorder.ran) == EVENTS_PER_SLICE * 2
    for queue in (busy, other):
        processor.close(queue)
    await asyncio.wait_for(processor.wait_closed([busy, other]), 5)


@pytest.mark.parametrize("run_when_idle", [True, False])
def test_run_now_runs_only_on_an_idle_queue(run_when_idle: bool) -> None:
    processor = manual(run_when_idle=run_when_idle)
    queue, recorder = open_queue(processor)
    assert processor.run_now(queue, "a") is run_when_idle
    assert recorder.ran == (["a"] if run_when_idle else [])
