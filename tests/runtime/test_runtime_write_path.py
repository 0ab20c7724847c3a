"""One write path, one answer shape: whichever way a write runs (at once on an idle
partition, or later from its queue), its caller gets a WriteOutcome, and the same write
gives the same answer. The partition's queue is run by hand (ManualEventProcessor), so each
step is the test's, not the event loop's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from runtime_harness import Harness, KeyValueShard, get_latest, put, put_many, settle

from coordinator_protocol.errors import InvalidGroupIdError, NotCoordinatorError
from coordinator_server.runtime.api import CoordinatorResult, ResponseHandle
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.events import WriteOutcome


def answer(outcome: WriteOutcome[Any]) -> Any:
    """The answer of an outcome that is over, or whose future is done."""
    if outcome.future is None:
        if outcome.error is not None:
            return type(outcome.error)
        return outcome.response
    assert outcome.future.done()
    error = outcome.future.exception()
    return type(error) if error is not None else outcome.future.result()


def failing(shard: KeyValueShard) -> CoordinatorResult[None]:
    raise InvalidGroupIdError("bad")


def holding(h: Harness) -> Callable[[KeyValueShard], CoordinatorResult[str]]:
    """An operation that schedules another write while it runs: that one must queue, and
    keeps the partition busy until the test runs it."""

    def op(shard: KeyValueShard) -> CoordinatorResult[str]:
        h.runtime.write("held", 0, put("held", 1))
        return CoordinatorResult((), "holding")

    return op


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (get_latest("missing"), None),
        (failing, InvalidGroupIdError),
        (put("k", 1), "put k=1"),
        (put_many({"a": 1, "b": 2}, run=True, response="ok"), "ok"),
    ],
    ids=["no-records", "raises", "records", "record-run"],
)
async def test_a_write_answers_the_same_run_at_once_or_from_the_queue(
    make_harness: Callable[..., Harness],
    op: Callable[[KeyValueShard], CoordinatorResult[Any]],
    expected: Any,
) -> None:
    answers = []
    for run_when_idle in (True, False):
        h = make_harness(config=RuntimeConfig(run_when_idle=run_when_idle), manual=True)
        await h.load(0)
        outcome = h.runtime.write("w", 0, op)
        assert isinstance(outcome, WriteOutcome)
        # Run at once, or queued until the test runs it.
        assert h.runtime.queue_depth(0) == (0 if run_when_idle else 1)
        h.processor.run_all()
        await settle()
        h.processor.run_all()
        h.commit(0)
        await settle()
        answers.append(answer(outcome))
    assert answers == [expected, expected]


async def test_a_write_behind_a_queued_one_waits_for_the_test_to_run_the_queue(
    make_harness: Callable[..., Harness],
) -> None:
    h = make_harness(config=RuntimeConfig(run_when_idle=True), manual=True)
    await h.load(0)
    first = h.runtime.write("hold", 0, holding(h))
    # Run at once; the write it scheduled is queued behind it.
    assert first.future is None and first.response == "holding"
    assert h.runtime.queue_depth(0) == 1
    second = h.runtime.write("w", 0, put("k", 2))
    # The partition is not idle: the write is queued too, and its caller waits.
    assert second.future is not None and not second.future.done()
    assert h.runtime.queue_depth(0) == 2
    assert h.shard().latest() == {}
    assert h.processor.poll()
    assert h.shard().latest() == {"held": 1}
    assert h.processor.poll()
    assert h.shard().latest() == {"held": 1, "k": 2}
    # The flush of the batch both joined.
    assert h.processor.run_all() == 1
    await settle()
    h.commit(0)
    await settle()
    assert second.future.result() == "put k=2"


async def test_a_refused_write_is_over_at_once(harness: Harness) -> None:
    refused = harness.runtime.write("w", 2, put("k", 1))
    assert refused.future is None and isinstance(refused.error, NotCoordinatorError)
    parkable = harness.runtime.parkable_write("w", 2, lambda shard, handle: put("k", 1)(shard))
    assert parkable.future is None and isinstance(parkable.error, NotCoordinatorError)


async def test_a_parkable_write_answers_through_its_future_either_way(
    make_harness: Callable[..., Harness],
) -> None:
    def parked(shard: KeyValueShard, handle: ResponseHandle) -> CoordinatorResult[str]:
        return CoordinatorResult((), completions=[(handle, "answered")], park=True)

    for run_when_idle in (True, False):
        h = make_harness(config=RuntimeConfig(run_when_idle=run_when_idle), manual=True)
        await h.load(0)
        outcome = h.runtime.parkable_write("w", 0, parked)
        assert outcome.future is not None
        h.processor.run_all()
        await settle()
        assert outcome.future.result() == "answered"
