"""Coordinator timers (A16): keyed, replaced, fired as write operations, retried, cancelled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from runtime_harness import Harness, KeyValueShard, put_record, settle

from coordinator_protocol.errors import UnknownMemberIdError
from coordinator_server.runtime.api import CoordinatorResult, CoordinatorTimer
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.timer import PartitionTimer


def writes(key: str, value: int, fired: list[str] | None = None) -> Callable[[], Any]:
    def operation() -> CoordinatorResult[Any]:
        if fired is not None:
            fired.append(f"{key}={value}")
        return CoordinatorResult([put_record(key, value)])

    return operation


def timer(harness: Harness, partition: int = 0) -> CoordinatorTimer:
    return harness.shard(partition).context.timer


async def test_a_timer_fires_as_a_write_operation(harness: Harness) -> None:
    fired: list[str] = []
    timer(harness).schedule("expire", 100, writes("expired", 1, fired))
    assert timer(harness).is_scheduled("expire")
    harness.clock.advance(99)
    await settle()
    assert fired == []
    harness.clock.advance(1)
    await settle()
    assert fired == ["expired=1"]
    # Its records went through the runtime like any write: replayed, appended, parked.
    assert harness.shard().latest() == {"expired": 1}
    assert harness.writer.end_offset(0) == 1
    assert not timer(harness).is_scheduled("expire")
    assert timer(harness).size() == 0


async def test_a_timer_runs_in_the_partition_queue_after_earlier_writes(
    harness: Harness,
) -> None:
    seen: list[int | None] = []

    def operation() -> CoordinatorResult[Any]:
        seen.append(harness.shard().store.get("k"))
        return CoordinatorResult()

    timer(harness).schedule("t", 0, operation)
    harness.put(0, "k", 1)
    harness.clock.advance(0)
    await settle()
    assert seen == [1]


async def test_scheduling_a_key_again_replaces_the_timer(harness: Harness) -> None:
    fired: list[str] = []
    timer(harness).schedule("k", 100, writes("first", 1, fired))
    timer(harness).schedule("k", 200, writes("second", 2, fired))
    assert timer(harness).size() == 1
    harness.clock.advance(150)
    await settle()
    assert fired == []
    harness.clock.advance(50)
    await settle()
    assert fired == ["second=2"]


async def test_schedule_if_absent_leaves_an_armed_timer_alone(harness: Harness) -> None:
    fired: list[str] = []
    timer(harness).schedule_if_absent("k", 100, writes("first", 1, fired))
    timer(harness).schedule_if_absent("k", 10, writes("second", 2, fired))
    harness.clock.advance(100)
    await settle()
    assert fired == ["first=1"]
    timer(harness).schedule_if_absent("k", 10, writes("third", 3, fired))
    harness.clock.advance(10)
    await settle()
    assert fired == ["first=1", "third=3"]


async def test_reschedule_moves_an_armed_timer_and_keeps_its_operation(
    harness: Harness,
) -> None:
    fired: list[str] = []
    timer(harness).schedule("k", 100, writes("k", 1, fired))
    harness.clock.advance(60)
    # Later than armed: it does not fire at its first deadline.
    assert timer(harness).reschedule("k", 100)
    harness.clock.advance(99)
    await settle()
    assert fired == []
    # Sooner than armed: it fires at the new deadline, not the old one.
    assert timer(harness).reschedule("k", 10)
    harness.clock.advance(10)
    await settle()
    assert fired == ["k=1"]
    assert timer(harness).size() == 0


async def test_reschedule_of_a_timer_that_is_not_armed_changes_nothing(
    harness: Harness,
) -> None:
    fired: list[str] = []
    assert not timer(harness).reschedule("absent", 10)
    assert not timer(harness).is_scheduled("absent")
    timer(harness).schedule("k", 100, writes("k", 1, fired))
    harness.clock.advance(100)
    # Fired, its operation queued: moving it would be too late, so it takes a schedule.
    assert not timer(harness).reschedule("k", 100)
    await settle()
    assert fired == ["k=1"]


async def test_a_cancelled_timer_never_fires(harness: Harness) -> None:
    fired: list[str] = []
    timer(harness).schedule("k", 100, writes("k", 1, fired))
    timer(harness).cancel("k")
    timer(harness).cancel("never-scheduled")
    assert not timer(harness).is_scheduled("k")
    harness.clock.advance(1000)
    await settle()
    assert fired == []


async def test_a_timer_replaced_while_its_operation_is_queued_does_nothing(
    queued_harness: Harness,
) -> None:
    harness = queued_harness
    fired: list[str] = []
    timer(harness).schedule("k", 100, writes("old", 1, fired))
    harness.clock.advance(100)
    # Fired and queued, not run yet: it still counts as scheduled until it runs.
    assert timer(harness).is_scheduled("k")
    timer(harness).schedule("k", 50, writes("new", 2, fired))
    await settle()
    assert fired == []
    harness.clock.advance(50)
    await settle()
    assert fired == ["new=2"]


async def test_a_retrying_timer_runs_again_after_its_backoff(harness: Harness) -> None:
    attempts: list[int] = []

    def flaky() -> CoordinatorResult[Any]:
        attempts.append(harness.clock.now_ms())
        if len(attempts) == 1:
            raise RuntimeError("not yet")
        return CoordinatorResult([put_record("done", len(attempts))])

    timer(harness).schedule("flaky", 100, flaky, retry=True, retry_backoff_ms=30)
    harness.clock.advance(100)
    await settle()
    assert len(attempts) == 1
    assert timer(harness).is_scheduled("flaky")
    harness.clock.advance(29)
    await settle()
    assert len(attempts) == 1
    harness.clock.advance(1)
    await settle()
    assert attempts == [attempts[0], attempts[0] + 30]
    assert harness.shard().latest() == {"done": 2}
    assert not timer(harness).is_scheduled("flaky")


async def test_retry_backoff_defaults_to_the_config(make_harness: Callable[..., Harness]) -> None:
    h = make_harness(config=RuntimeConfig(timer_retry_backoff_ms=70))
    await h.load(0)
    attempts: list[int] = []

    def fails() -> CoordinatorResult[Any]:
        attempts.append(h.clock.now_ms())
        raise UnknownMemberIdError("gone")

    timer(h).schedule("k", 10, fails, retry=True)
    h.clock.advance(10)
    await settle()
    h.clock.advance(70)
    await settle()
    h.clock.advance(70)
    await settle()
    assert [t - attempts[0] for t in attempts] == [0, 70, 140]


async def test_a_retrying_timer_is_retried_when_its_append_fails(harness: Harness) -> None:
    fired: list[str] = []
    harness.writer.inject_append_failure(0, 19)
    timer(harness).schedule("k", 10, writes("k", 1, fired), retry=True, retry_backoff_ms=5)
    harness.clock.advance(10)
    await settle()
    assert fired == ["k=1"]
    assert harness.shard().latest() == {}
    harness.clock.advance(5)
    await settle()
    assert fired == ["k=1", "k=1"]
    assert harness.shard().latest() == {"k": 1}


async def test_a_timer_without_retry_is_dropped_when_it_fails(harness: Harness) -> None:
    attempts: list[int] = []

    def fails() -> CoordinatorResult[Any]:
        attempts.append(1)
        raise RuntimeError("broken")

    timer(harness).schedule("k", 10, fails)
    harness.clock.advance(10)
    await settle()
    harness.clock.advance(10_000)
    await settle()
    assert attempts == [1]
    assert not timer(harness).is_scheduled("k")


async def test_a_retry_yields_to_a_timer_scheduled_meanwhile(harness: Harness) -> None:
    fired: list[str] = []

    def fails_and_reschedules() -> CoordinatorResult[Any]:
        timer(harness).schedule("k", 500, writes("newer", 2, fired))
        raise RuntimeError("broken")

    timer(harness).schedule("k", 10, fails_and_reschedules, retry=True, retry_backoff_ms=5)
    harness.clock.advance(10)
    await settle()
    harness.clock.advance(5)
    await settle()
    assert fired == []
    harness.clock.advance(495)
    await settle()
    assert fired == ["newer=2"]


async def test_unload_cancels_every_timer(harness: Harness) -> None:
    fired: list[str] = []
    shard_timer = timer(harness)
    shard_timer.schedule("a", 10, writes("a", 1, fired))
    shard_timer.schedule("b", 20, writes("b", 2, fired), retry=True)
    harness.runtime.schedule_unload(0, None)
    assert shard_timer.size() == 0
    assert harness.clock.pending_timers == 0
    harness.clock.advance(1000)
    await settle()
    assert fired == []
    # The timer of a shard thrown away takes no new timers either.
    shard_timer.schedule("c", 1, writes("c", 3, fired))
    assert shard_timer.size() == 0


async def test_a_reloaded_shard_gets_fresh_timers(harness: Harness) -> None:
    old = timer(harness)
    old.schedule("k", 10, writes("k", 1))
    harness.runtime.schedule_unload(0, 1)
    await harness.load(0, epoch=2)
    new = timer(harness)
    assert new is not old
    assert new.size() == 0
    shard: KeyValueShard = harness.shard()
    new.schedule("k", 10, writes("k", 2))
    harness.clock.advance(10)
    await settle()
    assert shard.latest() == {"k": 2}


# The timer stands on its own: it needs a clock and a way to schedule writes, not a runtime.


async def test_a_timer_fires_through_the_scheduling_callable_it_was_given() -> None:
    clock = ManualClock()
    scheduled: list[tuple[str, Callable[[Any], CoordinatorResult[Any]]]] = []
    answers: list[asyncio.Future[Any]] = []

    def schedule_write(name: str, op: Callable[[Any], CoordinatorResult[Any]]) -> Any:
        scheduled.append((name, op))
        answers.append(asyncio.get_running_loop().create_future())
        return answers[-1]

    partition_timer = PartitionTimer(0, clock, 10, schedule_write, logging.getLogger("test"))
    fired: list[str] = []
    partition_timer.schedule("session", 100, writes("expired", 1, fired))
    clock.advance(100)
    # Handed to the scheduler; it stays scheduled until its operation runs.
    assert [name for name, _ in scheduled] == ["timer:session"]
    assert partition_timer.is_scheduled("session") and fired == []
    result = scheduled[0][1](None)
    assert fired == ["expired=1"] and len(result.records) == 1
    assert not partition_timer.is_scheduled("session")
    answers[0].set_result(None)

    # A retrying timer whose write fails is scheduled again after its back-off.
    partition_timer.schedule("retry", 0, writes("r", 1), retry=True)
    clock.advance(0)
    assert scheduled[-1][0] == "timer:retry"
    answers[-1].set_exception(UnknownMemberIdError("lost"))
    await asyncio.sleep(0)
    assert partition_timer.is_scheduled("retry")
    clock.advance(10)
    assert [name for name, _ in scheduled].count("timer:retry") == 2
