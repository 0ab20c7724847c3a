"""Write and read operations: serial queues, parking until commit, timeouts, revert."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest
from runtime_harness import (
    Harness,
    KeyValueShard,
    get_committed,
    get_latest,
    put,
    put_many,
    put_record,
    settle,
)

from coordinator_protocol.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    NotCoordinatorError,
    RequestTimedOutError,
    UnknownServerError,
)
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.storage.api import AppendError

# A1: one serial queue per partition; partitions independent.


async def test_operations_of_a_partition_run_one_at_a_time_in_order(harness: Harness) -> None:
    ran: list[int] = []
    running = False

    def op(i: int) -> Callable[[KeyValueShard], CoordinatorResult[int]]:
        def run(shard: KeyValueShard) -> CoordinatorResult[int]:
            nonlocal running
            assert not running
            running = True
            ran.append(i)
            # Each operation sees the records of the ones before it, uncommitted as they are.
            assert shard.store.get("counter") == (i - 1 if i else None)
            running = False
            return CoordinatorResult([put_record("counter", i)], i)

        return run

    futures = [harness.write(0, op(i)) for i in range(20)]
    await settle()
    assert ran == list(range(20))
    harness.commit(0)
    assert await asyncio.gather(*futures) == list(range(20))


async def test_partitions_keep_separate_state_and_progress(harness: Harness) -> None:
    await harness.load(1)
    zero = harness.put(0, "k", 1)
    one = harness.put(1, "k", 2)
    await settle()
    harness.commit(1)
    await settle()
    # Partition 1 committed and answered while partition 0 still waits.
    assert one.done() and await one == "put k=2"
    assert not zero.done()
    assert await harness.read(1, "k") == 2
    assert await harness.read(0, "k") is None
    harness.commit(0)
    assert await zero == "put k=1"


async def test_a_failing_partition_leaves_the_others_alone(harness: Harness) -> None:
    await harness.load(1)
    harness.writer.inject_append_failure(0, 19, "not enough replicas")
    failing = harness.put(0, "k", 1)
    fine = harness.put(1, "k", 2)
    await settle()
    harness.commit(1)
    with pytest.raises(AppendError):
        await failing
    assert await fine == "put k=2"


# A7: the response is parked until the high watermark passes the records.


async def test_response_is_parked_until_the_high_watermark_passes(harness: Harness) -> None:
    future = harness.put(0, "k", 7)
    await settle()
    # Replayed and appended, but not committed: no answer yet.
    assert harness.shard().latest() == {"k": 7}
    assert len(harness.writer.entries(0)) == 1
    assert not future.done()
    harness.commit(0)
    await settle()
    assert future.done()
    assert future.result() == "put k=7"


async def test_a_partial_commit_answers_only_the_writes_it_covers(harness: Harness) -> None:
    first = harness.put(0, "a", 1)
    await settle()
    second = harness.put(0, "b", 2)
    await settle()
    assert harness.writer.batches(0) == [(0, 1), (1, 1)]
    harness.commit(0, 1)
    await settle()
    assert first.done() and not second.done()
    harness.commit(0, 2)
    await settle()
    assert second.result() == "put b=2"


async def test_parked_writes_complete_in_offset_order(harness: Harness) -> None:
    order: list[int] = []
    futures = [harness.put(0, f"k{i}", i) for i in range(5)]
    for i, future in enumerate(futures):
        future.add_done_callback(functools.partial(lambda i, _future: order.append(i), i))
    await settle()
    harness.commit(0)
    await settle()
    assert order == [0, 1, 2, 3, 4]


# A8: a write with no records waits for pending writes.


async def test_write_without_records_completes_at_once_when_nothing_is_pending(
    harness: Harness,
) -> None:
    future = harness.write(0, get_latest("k"))
    await settle()
    assert future.done()
    assert future.result() is None


async def test_write_without_records_waits_for_every_pending_write(harness: Harness) -> None:
    written = harness.put(0, "k", 1)
    await settle()
    reading = harness.write(0, get_latest("k"))
    await settle()
    # It read the latest state, but may answer only once that state can no longer be undone.
    assert not reading.done()
    harness.commit(0)
    await settle()
    assert written.done()
    assert reading.result() == 1


async def test_write_without_records_waits_for_the_open_batch(harness: Harness) -> None:
    harness.writer.pause_appends()
    first = harness.put(0, "a", 1)
    await settle()
    second = harness.put(0, "b", 2)
    reading = harness.write(0, get_latest("b"))
    await settle()
    harness.writer.resume_appends()
    await settle()
    harness.commit(0, 1)
    await settle()
    assert first.done() and not second.done() and not reading.done()
    harness.commit(0)
    await settle()
    assert reading.result() == 2


async def test_write_without_records_fails_with_the_batch_it_waited_on(harness: Harness) -> None:
    harness.writer.inject_append_failure(0, 19, "not enough replicas")
    written = harness.put(0, "k", 1)
    reading = harness.write(0, get_latest("k"))
    await settle()
    for future in (written, reading):
        with pytest.raises(AppendError):
            await future


# A9: write timeout.


async def test_parked_write_times_out_with_request_timed_out(harness: Harness) -> None:
    future = harness.put(0, "k", 1)
    await settle()
    harness.clock.advance(harness.config.write_timeout_ms - 1)
    await settle()
    assert not future.done()
    harness.clock.advance(1)
    with pytest.raises(RequestTimedOutError):
        await future
    # Only the caller stopped waiting: the records stay, and commit later as usual.
    assert harness.shard().latest() == {"k": 1}
    harness.commit(0)
    assert await harness.read(0, "k") == 1


async def test_parked_writes_time_out_each_at_its_own_deadline(harness: Harness) -> None:
    first = harness.put(0, "a", 1)
    await settle()
    harness.clock.advance(1000)
    second = harness.put(0, "b", 2)
    await settle()
    harness.clock.advance(harness.config.write_timeout_ms - 1000)
    assert isinstance(first.exception(), RequestTimedOutError)
    assert not second.done()
    harness.clock.advance(999)
    assert not second.done()
    harness.clock.advance(1)
    assert isinstance(second.exception(), RequestTimedOutError)
    assert harness.clock.pending_timers == 0


async def test_write_timeout_can_be_set_per_operation(harness: Harness) -> None:
    short = harness.put(0, "a", 1, timeout_ms=10)
    default = harness.put(0, "b", 2)
    await settle()
    harness.clock.advance(10)
    await settle()
    assert isinstance(short.exception(), RequestTimedOutError)
    assert not default.done()
    harness.commit(0)
    assert await default == "put b=2"


async def test_committed_write_does_not_time_out_later(harness: Harness) -> None:
    future = harness.put(0, "k", 1)
    await settle()
    harness.commit(0)
    await settle()
    harness.clock.advance(10 * harness.config.write_timeout_ms)
    assert future.result() == "put k=1"
    assert harness.clock.pending_timers == 0


async def test_write_without_records_times_out_too(harness: Harness) -> None:
    harness.put(0, "k", 1)
    await settle()
    reading = harness.write(0, get_latest("k"), timeout_ms=5)
    await settle()
    harness.clock.advance(5)
    with pytest.raises(RequestTimedOutError):
        await reading


# A10: a failed append reverts the state and fails the batch and everything after it.


async def test_failed_append_reverts_state_and_fails_every_operation_of_the_batch(
    harness: Harness,
) -> None:
    before = harness.put(0, "a", 1)
    await settle()
    harness.commit(0)
    await before
    harness.writer.inject_append_failure(0, 19, "not enough replicas")
    futures = [harness.put(0, "a", 2), harness.put(0, "b", 3), harness.put(0, "c", 4)]
    await settle()
    errors = [future.exception() for future in futures]
    assert all(isinstance(error, AppendError) for error in errors)
    # The append's own exception: the service maps its code for the client.
    assert {error.error_code for error in errors if isinstance(error, AppendError)} == {19}
    assert harness.shard().latest() == {"a": 1}
    assert harness.committed_state() == {"a": 1}
    assert harness.runtime.last_written_offset(0) == 1
    assert harness.writer.end_offset(0) == 1
    # Writes after the failure start from the reverted state and commit as usual.
    later = harness.write(0, get_latest("b"))
    after = harness.put(0, "d", 5)
    await settle()
    assert later.result() is None
    harness.commit(0)
    assert await after == "put d=5"
    assert harness.committed_state() == {"a": 1, "d": 5}


async def test_failed_append_fails_the_batches_written_on_top_of_it(harness: Harness) -> None:
    harness.writer.pause_appends()
    in_flight = harness.put(0, "a", 1)
    await settle()
    # While the first append is in flight, later writes pile up in the open batch.
    piled = [harness.put(0, "b", 2), harness.put(0, "c", 3)]
    waiting = harness.write(0, get_latest("c"))
    await settle()
    assert harness.shard().latest() == {"a": 1, "b": 2, "c": 3}
    harness.writer.inject_append_failure(0, 7, "request timed out")
    harness.writer.resume_appends()
    await settle()
    for future in (in_flight, *piled, waiting):
        with pytest.raises(AppendError):
            await future
    assert harness.shard().latest() == {}
    assert harness.writer.entries(0) == []
    assert harness.runtime.last_written_offset(0) == 0


async def test_batches_appended_before_a_failure_stay_parked(harness: Harness) -> None:
    appended = harness.put(0, "a", 1)
    await settle()
    assert harness.writer.end_offset(0) == 1
    harness.writer.inject_append_failure(0, 19)
    failed = harness.put(0, "b", 2)
    await settle()
    assert isinstance(failed.exception(), AppendError)
    # "a" is in the log: the state keeps it, and its caller still waits for the commit.
    assert not appended.done()
    assert harness.shard().latest() == {"a": 1}
    harness.commit(0)
    assert await appended == "put a=1"
    assert harness.committed_state() == {"a": 1}


async def test_an_append_cancelled_inside_the_writer_fails_like_a_failed_append(
    harness: Harness,
) -> None:
    stuck: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    real_append = harness.writer.append

    def append(partition: int, records: Any) -> asyncio.Future[int]:
        if not stuck.done():
            return stuck
        return real_append(partition, records)

    harness.writer.append = append  # type: ignore[method-assign]
    lost = harness.put(0, "a", 1)
    await settle()
    # Something inside the writer gives up; the runtime itself did not ask for it.
    stuck.cancel()
    with pytest.raises(AppendError) as raised:
        await lost
    assert raised.value.error_code == -1
    assert harness.shard().latest() == {}
    again = harness.put(0, "a", 2)
    await settle()
    harness.commit(0)
    assert await again == "put a=2"


async def test_replay_failure_fails_the_whole_open_batch(harness: Harness) -> None:
    shard = harness.shard()
    shard.fail_replay_of.add("bad")
    harness.writer.pause_appends()
    in_flight = harness.put(0, "a", 1)
    await settle()
    good = harness.put(0, "b", 2)
    bad = harness.put(0, "bad", 3)
    await settle()
    assert isinstance(bad.exception(), UnknownServerError)
    assert isinstance(good.exception(), UnknownServerError)
    # The batch already sealed and in flight is not touched.
    assert not in_flight.done()
    assert shard.latest() == {"a": 1}
    harness.writer.resume_appends()
    await settle()
    harness.commit(0)
    assert await in_flight == "put a=1"
    assert harness.writer.batches(0) == [(0, 1)]


async def test_an_operation_that_raises_fails_alone(harness: Harness) -> None:
    def api_error(shard: KeyValueShard) -> CoordinatorResult[Any]:
        raise GroupIdNotFoundError("no such group")

    def bug(shard: KeyValueShard) -> CoordinatorResult[Any]:
        raise ValueError("oops")

    ok = harness.put(0, "a", 1)
    refused = harness.write(0, api_error)
    crashed = harness.write(0, bug)
    ok2 = harness.put(0, "b", 2)
    await settle()
    assert isinstance(refused.exception(), GroupIdNotFoundError)
    assert isinstance(crashed.exception(), UnknownServerError)
    harness.commit(0)
    assert [await ok, await ok2] == ["put a=1", "put b=2"]
    assert harness.writer.batches(0) == [(0, 2)]


# A11: reads see committed state only.


async def test_reads_see_committed_state_only_while_a_write_is_parked(harness: Harness) -> None:
    first = harness.put(0, "k", 1)
    await settle()
    harness.commit(0)
    await first
    second = harness.write(0, put_many({"k": 2, "new": 9}))
    await settle()
    assert not second.done()
    assert await harness.read(0, "k") == 1
    assert await harness.read(0, "new") is None
    harness.commit(0)
    await second
    assert await harness.read(0, "k") == 2
    assert await harness.read(0, "new") == 9


async def test_read_gets_the_last_committed_offset(harness: Harness) -> None:
    seen: list[int] = []

    def op(shard: KeyValueShard, offset: int) -> None:
        seen.append(offset)

    harness.put(0, "k", 1)
    await settle()
    harness.put(0, "k", 2)
    await settle()
    await harness.runtime.schedule_read("offsets", 0, op)
    harness.commit(0, 1)
    await harness.runtime.schedule_read("offsets", 0, op)
    assert seen == [0, 1]


async def test_a_high_watermark_inside_a_batch_commits_up_to_the_batch_before(
    harness: Harness,
) -> None:
    first = harness.put(0, "a", 1)
    await settle()
    second = harness.write(0, put_many({"a": 2, "b": 3}))
    await settle()
    assert harness.writer.batches(0) == [(0, 1), (1, 2)]
    # State is readable as of batch boundaries only, so half a batch commits nothing of it.
    harness.commit(0, 2)
    await settle()
    assert harness.runtime.last_committed_offset(0) == 1
    assert first.done() and not second.done()
    assert await harness.read(0, "a") == 1
    harness.commit(0, 3)
    assert await second == "ok"
    assert await harness.read(0, "a") == 2


async def test_read_errors_are_mapped(harness: Harness) -> None:
    def api_error(shard: KeyValueShard, offset: int) -> None:
        raise GroupIdNotFoundError("no such group")

    def bug(shard: KeyValueShard, offset: int) -> None:
        raise KeyError("oops")

    with pytest.raises(GroupIdNotFoundError):
        await harness.runtime.schedule_read("r", 0, api_error)
    with pytest.raises(UnknownServerError):
        await harness.runtime.schedule_read("r", 0, bug)
    with pytest.raises(NotCoordinatorError):
        await harness.runtime.schedule_read("r", 2, get_committed("k"))


# Back-pressure.


async def test_a_full_queue_refuses_writes_with_coordinator_not_available(
    make_harness: Callable[..., Harness],
) -> None:
    h = make_harness(config=RuntimeConfig(max_queued_events=3, run_when_idle=False))
    await h.load(0)
    await h.load(1)
    accepted = [h.put(0, f"k{i}", i) for i in range(3)]
    refused = h.put(0, "k", 9)
    other_partition = h.put(1, "k", 9)
    assert isinstance(refused.exception(), CoordinatorNotAvailableError)
    await settle()
    h.commit(0)
    h.commit(1)
    await asyncio.gather(*accepted, other_partition)
    # Room again once the queue drained.
    assert not h.put(0, "k", 10).done()


async def test_a_caller_that_cancels_before_its_turn_writes_nothing(
    queued_harness: Harness,
) -> None:
    harness = queued_harness
    cancelled = harness.write(0, put("k", 1))
    cancelled.cancel()
    kept = harness.put(0, "j", 2)
    await settle()
    harness.commit(0)
    assert await kept == "put j=2"
    assert harness.shard().latest() == {"j": 2}
