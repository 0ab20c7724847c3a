"""Write operations whose records come as one run (a RecordRun): the runtime appends the
run's bytes and replays it through the shard's one `replay`, once per batch it lands in,
with the same guarantees as record objects: parked until committed, reads as of the
committed offset, reverted when the append fails, and a log that reloads into the state the
writes built."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_harness import Harness, KeyValueRun, KeyValueShard, put, put_many, put_record, settle

from coordinator_protocol.errors import UnknownServerError
from coordinator_server.records import encode_record
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.storage.api import AppendError


async def test_a_run_is_appended_as_it_encodes_itself_and_replayed_once(
    harness: Harness,
) -> None:
    shard = harness.shard()
    written = harness.write(0, put_many({"a": 1, "b": 2}, run=True))
    await settle()
    assert harness.writer.entries(0) == [
        encode_record(put_record("a", 1)),
        encode_record(put_record("b", 2)),
    ]
    # One call for the whole write, under the epoch of the batch at offset 0.
    assert shard.run_replays == [(0, 0, 2, 0)]
    assert shard.replayed == [(0, "a"), (1, "b")]
    assert shard.latest() == {"a": 1, "b": 2}
    # Parked, and invisible to reads, until the log commits it.
    assert not written.done()
    assert await harness.read(0, "a") is None
    harness.commit(0)
    assert await written == "ok"
    assert await harness.read(0, "a") == 1
    assert harness.committed_state() == {"a": 1, "b": 2}


async def test_runs_and_record_objects_of_consecutive_writes_share_a_batch(
    harness: Harness,
) -> None:
    shard = harness.shard()
    futures = [
        harness.put(0, "a", 1),
        harness.write(0, put_many({"b": 2, "c": 3}, run=True)),
        harness.put(0, "d", 4),
    ]
    await settle()
    assert harness.writer.batches(0) == [(0, 4)]
    # The run starts at the offset after the record before it.
    assert shard.run_replays == [(1, 0, 2, 0)]
    assert shard.replayed == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    harness.commit(0)
    for future in futures:
        await future
    assert harness.committed_state() == {"a": 1, "b": 2, "c": 3, "d": 4}


async def test_a_failed_append_of_a_run_leaves_nothing_of_it(
    harness: Harness,
) -> None:
    first = harness.write(0, put_many({"a": 1, "b": 2}, run=True))
    await settle()
    harness.commit(0)
    await first
    harness.writer.inject_append_failure(0, 19, "not enough replicas")
    failed = harness.write(0, put_many({"a": 5, "c": 6}, run=True))
    await settle()
    with pytest.raises(AppendError):
        await failed
    assert harness.shard().latest() == {"a": 1, "b": 2}
    assert harness.committed_state() == {"a": 1, "b": 2}
    assert harness.runtime.last_written_offset(0) == 2
    later = harness.write(0, put_many({"c": 7}, run=True))
    await settle()
    harness.commit(0)
    await later
    assert harness.committed_state() == {"a": 1, "b": 2, "c": 7}


async def test_a_failing_replay_of_a_run_fails_the_whole_open_batch(harness: Harness) -> None:
    shard = harness.shard()
    shard.fail_replay_of.add("bad")
    harness.writer.pause_appends()
    in_flight = harness.put(0, "a", 1)
    await settle()
    good = harness.put(0, "b", 2)
    bad = harness.write(0, put_many({"c": 3, "bad": 4}, run=True))
    await settle()
    assert isinstance(bad.exception(), UnknownServerError)
    assert isinstance(good.exception(), UnknownServerError)
    # "c" was replayed before "bad" failed: it went with the batch.
    assert shard.latest() == {"a": 1}
    harness.writer.resume_appends()
    await settle()
    harness.commit(0)
    assert await in_flight == "put a=1"
    assert harness.writer.batches(0) == [(0, 1)]


async def test_updates_are_applied_after_the_run_is_replayed(harness: Harness) -> None:
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(KeyValueRun([put_record("k", 1)]), "ok", updates=[("set", "k", 7)])

    done = harness.write(0, op)
    await settle()
    assert harness.shard().run_replays == [(0, 0, 1, 0)]
    assert harness.shard().latest() == {"k": 7}
    harness.commit(0)
    assert await done == "ok"
    assert harness.writer.entries(0) == [encode_record(put_record("k", 1))]
    assert harness.committed_state() == {"k": 7}


async def test_an_empty_run_is_a_write_without_records(harness: Harness) -> None:
    pending = harness.put(0, "a", 1)
    await settle()

    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(KeyValueRun([]), "nothing")

    # Like any write without records, it answers once every pending write is committed.
    empty = harness.write(0, op)
    await settle()
    assert not empty.done()
    harness.commit(0)
    await pending
    assert await empty == "nothing"
    assert harness.writer.end_offset(0) == 1
    assert harness.shard().run_replays == []


async def test_a_reload_of_runs_rebuilds_the_state_the_writes_built(
    make_harness: Any,
) -> None:
    h: Harness = make_harness()
    await h.load(0)
    futures = [
        h.write(0, put_many({"a": 1, "b": 2}, run=True)),
        h.put(0, "a", 3),
        h.write(0, put_many({"c": 4, "b": 5}, run=True)),
    ]
    await settle()
    h.commit(0)
    for future in futures:
        await future
    latest = h.shard().latest()
    assert latest == {"a": 3, "b": 5, "c": 4}
    h.runtime.schedule_unload(0, 1)
    reloaded = await h.load(0, 2)
    assert reloaded is not h.shards[0][0]
    assert reloaded.latest() == latest
    # A write after the reload carries on from the loaded state.
    after = h.write(0, put("a", 9))
    await settle()
    h.commit(0)
    await after
    assert h.committed_state() == {"a": 9, "b": 5, "c": 4}
