"""Graceful and immediate shutdown, and the counters the runtime exposes."""

from __future__ import annotations

import asyncio

import pytest
from runtime_harness import Harness, get_latest, settle

from coordinator_protocol.errors import (
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    RequestTimedOutError,
)
from coordinator_server.runtime.context import CoordinatorState


async def test_flush_and_close_lets_queued_and_parked_writes_finish(harness: Harness) -> None:
    await harness.load(1)
    parked = harness.put(0, "a", 1)
    await settle()
    queued = [harness.put(0, "b", 2), harness.put(1, "c", 3)]
    closing = asyncio.ensure_future(harness.runtime.flush_and_close())
    await settle()
    # New writes are refused while the runtime shuts down; the accepted ones go on.
    refused = harness.put(0, "late", 9)
    assert isinstance(refused.exception(), CoordinatorNotAvailableError)
    assert not closing.done()
    assert harness.writer.end_offset(0) == 2 and harness.writer.end_offset(1) == 1
    harness.commit(0)
    harness.commit(1)
    await closing
    assert await asyncio.gather(parked, *queued) == ["put a=1", "put b=2", "put c=3"]
    assert harness.runtime.partitions() == {}
    assert harness.shard(0).unloaded == 1 and harness.shard(1).unloaded == 1
    with pytest.raises(NotCoordinatorError):
        await harness.put(0, "after", 1)
    with pytest.raises(NotCoordinatorError):
        harness.runtime.schedule_load(0, 5)


async def test_flush_and_close_waits_no_longer_than_the_write_timeout(harness: Harness) -> None:
    parked = harness.put(0, "a", 1)
    waiting = harness.write(0, get_latest("a"))
    closing = asyncio.ensure_future(harness.runtime.flush_and_close())
    await settle()
    assert not closing.done()
    harness.clock.advance(harness.config.write_timeout_ms)
    await closing
    for future in (parked, waiting):
        with pytest.raises(RequestTimedOutError):
            await future
    assert harness.runtime.partitions() == {}


async def test_close_fails_everything_at_once_with_not_coordinator(harness: Harness) -> None:
    harness.loader.pause_loads()
    harness.runtime.schedule_load(1, 0)
    parked = harness.put(0, "a", 1)
    await settle()
    queued = harness.put(0, "b", 2)
    harness.runtime.close()
    for future in (parked, queued):
        with pytest.raises(NotCoordinatorError):
            await future
    assert harness.runtime.partitions() == {}
    assert harness.shard(0).unloaded == 1
    harness.runtime.close()
    await harness.runtime.flush_and_close()


async def test_partition_stats_follow_the_writes(queued_harness: Harness) -> None:
    harness = queued_harness
    assert harness.runtime.partition_stats(2) is None
    assert harness.runtime.last_written_offset(2) is None
    assert harness.runtime.queue_depth(2) == 0
    harness.writer.pause_appends()
    harness.put(0, "a", 1)
    harness.put(0, "b", 2)
    assert harness.runtime.queue_depth(0) == 2
    await settle()
    harness.put(0, "c", 3)
    await settle()
    stats = harness.runtime.partition_stats(0)
    assert stats is not None
    assert stats.state is CoordinatorState.ACTIVE
    assert stats.queued_events == 0
    assert stats.last_written_offset == 2
    assert stats.last_committed_offset == 0
    assert stats.parked_operations == 3
    assert stats.open_batch_records == 1
    assert stats.pending_batches == 1
    assert stats.batches_appended == 0
    harness.writer.resume_appends()
    await settle()
    harness.commit(0)
    await settle()
    stats = harness.runtime.partition_stats(0)
    assert stats is not None
    assert (stats.last_written_offset, stats.last_committed_offset) == (3, 3)
    assert (stats.batches_appended, stats.records_appended) == (2, 3)
    assert stats.parked_operations == 0
    assert stats.bytes_appended > 0
