"""Batching and flushing, atomic writes, and log/state divergence."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from runtime_harness import (
    Harness,
    batch_bytes_for,
    put_many,
    put_record,
    record_bytes,
    settle,
)

from coordinator_protocol.errors import (
    CoordinatorLoadInProgressError,
    MessageTooLargeError,
)
from coordinator_server.records import encode_record
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.context import CoordinatorState

# Keys of one length and small values, so that every record counts the same bytes.
ONE_RECORD_BYTES = record_bytes(put_record("k0", 1))


def room_for(records: int) -> int:
    """A max_batch_bytes that holds exactly `records` of the records these tests write."""
    return batch_bytes_for(*(put_record("k0", 1) for _ in range(records)))


async def loaded(make_harness: Callable[..., Harness], **config: int) -> Harness:
    h = make_harness(config=RuntimeConfig(**config))
    await h.load(0)
    return h


# A13: batching and flushing.


async def test_consecutive_writes_share_one_append(harness: Harness) -> None:
    futures = [harness.put(0, f"k{i}", i) for i in range(50)]
    await settle()
    assert harness.writer.batches(0) == [(0, 50)]
    harness.commit(0)
    assert len(await asyncio.gather(*futures)) == 50
    stats = harness.runtime.partition_stats(0)
    assert stats is not None
    assert (stats.batches_appended, stats.records_appended, stats.last_batch_records) == (1, 50, 50)


async def test_adaptive_flush_goes_out_once_the_queued_writes_ran(harness: Harness) -> None:
    for i in range(3):
        harness.put(0, f"a{i}", i)
    await settle()
    for i in range(2):
        harness.put(0, f"b{i}", i)
    await settle()
    assert harness.writer.batches(0) == [(0, 3), (3, 2)]


async def test_writes_arriving_during_an_append_are_committed_as_one_group(
    harness: Harness,
) -> None:
    harness.writer.pause_appends()
    harness.put(0, "a", 1)
    await settle()
    # The first append is in flight: everything after it waits in one open batch, even
    # across several turns of the loop and flush events.
    for i in range(3):
        harness.put(0, f"b{i}", i)
        await settle()
    stats = harness.runtime.partition_stats(0)
    assert stats is not None
    assert (stats.open_batch_records, stats.pending_batches) == (3, 1)
    harness.writer.resume_appends()
    await settle()
    assert harness.writer.batches(0) == [(0, 1), (1, 3)]
    assert harness.writer.append_calls(0) == 2


async def test_fixed_linger_flushes_after_the_linger_time(
    make_harness: Callable[..., Harness],
) -> None:
    h = await loaded(make_harness, append_linger_ms=10)
    h.put(0, "a", 1)
    await settle()
    h.clock.advance(5)
    h.put(0, "b", 2)
    await settle()
    h.clock.advance(4)
    await settle()
    assert h.writer.batches(0) == []
    h.clock.advance(1)
    await settle()
    assert h.writer.batches(0) == [(0, 2)]
    # The next batch has a linger of its own.
    h.put(0, "c", 3)
    await settle()
    h.clock.advance(9)
    await settle()
    assert h.writer.batches(0) == [(0, 2)]
    h.clock.advance(1)
    await settle()
    assert h.writer.batches(0) == [(0, 2), (2, 1)]


async def test_fixed_linger_waits_for_the_append_in_flight(
    make_harness: Callable[..., Harness],
) -> None:
    h = await loaded(make_harness, append_linger_ms=10)
    h.writer.pause_appends()
    h.put(0, "a", 1)
    await settle()
    h.clock.advance(10)
    h.put(0, "b", 2)
    await settle()
    h.clock.advance(10)
    h.put(0, "c", 3)
    await settle()
    h.writer.resume_appends()
    await settle()
    # [b c] lingered past its time while [a] was in flight, and went out right after it.
    assert h.writer.batches(0) == [(0, 1), (1, 2)]


async def test_zero_linger_flushes_after_each_write(
    make_harness: Callable[..., Harness],
) -> None:
    h = await loaded(make_harness, append_linger_ms=0)
    h.put(0, "a", 1)
    await settle()
    h.put(0, "b", 2)
    await settle()
    assert h.writer.batches(0) == [(0, 1), (1, 1)]
    # While an append is in flight the flush waits for it, so writes still group.
    h.put(0, "c", 3)
    h.put(0, "d", 4)
    h.put(0, "e", 5)
    await settle()
    assert h.writer.batches(0) == [(0, 1), (1, 1), (2, 1), (3, 2)]


async def test_a_full_batch_is_sealed_and_queued_behind_the_one_in_flight(
    make_harness: Callable[..., Harness],
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(2))
    h.writer.pause_appends()
    futures = [h.put(0, f"k{i}", i) for i in range(5)]
    await settle()
    stats = h.runtime.partition_stats(0)
    assert stats is not None
    # [k0 k1] in flight, [k2 k3] sealed behind it, [k4] open.
    assert (stats.pending_batches, stats.open_batch_records, stats.last_written_offset) == (2, 1, 4)
    h.writer.resume_appends()
    await settle()
    assert h.writer.batches(0) == [(0, 2), (2, 2), (4, 1)]
    h.commit(0)
    await asyncio.gather(*futures)


@pytest.mark.parametrize("run", [False, True], ids=["records", "run"])
async def test_a_write_whose_records_overflow_the_batch_continues_in_the_next(
    make_harness: Callable[..., Harness],
    run: bool,
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(2))
    future = h.write(0, put_many({"k1": 1, "k2": 2, "k3": 3}, run=run))
    await settle()
    assert h.writer.batches(0) == [(0, 2), (2, 1)]
    if run:
        # One replay per batch, each under its batch's epoch (twice its base offset).
        assert h.shard().run_replays == [(0, 0, 2, 0), (2, 2, 3, 4)]
    h.commit(0, 2)
    await settle()
    # Its response waits for its last record; reads see the first batch only.
    assert not future.done()
    assert h.committed_state() == {"k1": 1, "k2": 2}
    h.commit(0)
    assert await future == "ok"


@pytest.mark.parametrize("run", [False, True], ids=["records", "run"])
async def test_a_record_too_large_for_any_batch_fails_and_replays_nothing(
    make_harness: Callable[..., Harness],
    run: bool,
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(2))
    large = h.write(0, put_many({"k1": 1, "x" * 200: 2}, run=run))
    fine = h.put(0, "k2", 2)
    await settle()
    with pytest.raises(MessageTooLargeError):
        await large
    assert h.shard().latest() == {"k2": 2}
    h.commit(0)
    assert await fine == "put k2=2"


# A14: atomic writes.


@pytest.mark.parametrize("run", [False, True], ids=["records", "run"])
async def test_an_atomic_write_goes_into_one_batch(
    make_harness: Callable[..., Harness], run: bool
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(3))
    h.writer.pause_appends()
    h.put(0, "k0", 0)
    await settle()
    h.put(0, "k1", 1)
    atomic = h.write(0, put_many({"k2": 2, "k3": 3, "k4": 4}, atomic=True, run=run))
    await settle()
    h.writer.resume_appends()
    await settle()
    # [k1] could take two more records, not three: the open batch went out first.
    assert h.writer.batches(0) == [(0, 1), (1, 1), (2, 3)]
    h.commit(0)
    assert await atomic == "ok"


@pytest.mark.parametrize("run", [False, True], ids=["records", "run"])
async def test_a_non_atomic_write_fills_the_open_batch_first(
    make_harness: Callable[..., Harness],
    run: bool,
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(3))
    h.writer.pause_appends()
    h.put(0, "k0", 0)
    await settle()
    h.put(0, "k1", 1)
    h.write(0, put_many({"k2": 2, "k3": 3, "k4": 4}, run=run))
    await settle()
    h.writer.resume_appends()
    await settle()
    assert h.writer.batches(0) == [(0, 1), (1, 3), (4, 1)]


@pytest.mark.parametrize("run", [False, True], ids=["records", "run"])
async def test_an_atomic_write_larger_than_a_batch_fails(
    make_harness: Callable[..., Harness],
    run: bool,
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(2))
    atomic = h.write(0, put_many({"k1": 1, "k2": 2, "k3": 3}, atomic=True, run=run))
    await settle()
    with pytest.raises(MessageTooLargeError):
        await atomic
    assert h.shard().latest() == {}
    assert h.writer.batches(0) == []


# A15: an append that ends elsewhere than expected means the log and the state diverged.


async def test_divergence_fails_the_operations_and_reloads_from_the_log(harness: Harness) -> None:
    first = harness.shard()
    # Someone else wrote to the partition behind the runtime's back.
    await harness.writer.append(0, [encode_record(put_record("stray", 9))])
    harness.loader.pause_loads()
    future = harness.put(0, "k", 1)
    await settle()
    # The append ended at 2 where the runtime expected 1. The partition loads here again:
    # its clients are told so (Kafka's answer while a partition loads), not sent elsewhere.
    with pytest.raises(CoordinatorLoadInProgressError):
        await future
    assert harness.runtime.partition_state(0) is CoordinatorState.LOADING
    assert harness.runtime.loading_partitions() == [0]
    assert first.unloaded == 1
    # COORDINATOR_LOAD_IN_PROGRESS leaves the outcome open: here the log keeps both records.
    harness.commit(0)
    harness.loader.resume_loads()
    await harness.runtime.wait_loaded(0)
    shard = harness.shard()
    assert shard is not first
    assert shard.latest() == {"stray": 9, "k": 1}
    again = harness.put(0, "k", 2)
    await settle()
    harness.commit(0)
    assert await again == "put k=2"
    assert harness.committed_state() == {"stray": 9, "k": 2}


async def test_a_high_watermark_past_what_the_runtime_wrote_triggers_a_reload(
    harness: Harness,
) -> None:
    parked = harness.put(0, "k", 1)
    await settle()
    await harness.writer.append(0, [encode_record(put_record("stray", 9))])
    first = harness.shard()
    # Committing the foreign record too: the log holds more than the state machine wrote.
    harness.commit(0)
    with pytest.raises(CoordinatorLoadInProgressError):
        await parked
    await harness.runtime.wait_loaded(0)
    assert harness.shard() is not first
    assert harness.shard().latest() == {"k": 1, "stray": 9}
    assert harness.committed_state() == {"k": 1, "stray": 9}


async def test_a_log_truncated_under_the_runtime_is_detected(harness: Harness) -> None:
    lost = harness.put(0, "a", 1)
    await settle()
    harness.writer.truncate(0, 0)
    following = harness.put(0, "b", 2)
    await settle()
    for future in (lost, following):
        with pytest.raises(CoordinatorLoadInProgressError):
            await future
    await harness.runtime.wait_loaded(0)
    assert harness.shard().latest() == {}
    assert harness.runtime.last_written_offset(0) == 0


# Group commit across partitions: while the writer is backlogged, due batches stay open.


async def test_a_backlogged_writer_keeps_batches_open_until_it_is_ready(harness: Harness) -> None:
    await harness.load(0)
    await harness.load(1)
    harness.writer.set_backlogged(True)
    first = [harness.put(0, "a", 1), harness.put(1, "b", 1)]
    await settle()
    later = [harness.put(0, "c", 1), harness.put(1, "d", 1)]
    await settle()
    # Nothing handed over while the writer has no room; the batches kept taking records.
    assert harness.writer.append_calls(0) == harness.writer.append_calls(1) == 0
    harness.writer.set_backlogged(False)
    await settle()
    assert harness.writer.batches(0) == [(0, 2)]
    assert harness.writer.batches(1) == [(0, 2)]
    harness.commit(0)
    harness.commit(1)
    assert [await f for f in first + later] == ["put a=1", "put b=1", "put c=1", "put d=1"]


async def test_a_full_batch_goes_even_while_the_writer_is_backlogged(
    make_harness: Callable[..., Harness],
) -> None:
    h = await loaded(make_harness, max_batch_bytes=room_for(2))
    h.writer.set_backlogged(True)
    writes = [h.put(0, f"k{i}", 1) for i in range(3)]
    await settle()
    # The first two filled a batch: it went; the third waits for room.
    assert h.writer.batches(0) == [(0, 2)]
    h.writer.set_backlogged(False)
    await settle()
    assert h.writer.batches(0) == [(0, 2), (2, 1)]
    h.commit(0)
    assert len([await w for w in writes]) == 3
