"""Write operations whose records come encoded (CoordinatorResult.encoded): the runtime
appends the bytes as given and replays them through the result's own replay, with the same
guarantees as record objects: parked until committed, reads as of the committed offset,
reverted when the append fails, and a log that reloads into the state the writes built."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_harness import Harness, KeyValueShard, put, put_many, put_record, settle

from coordinator_server.records import encode_record
from coordinator_server.runtime.api import CoordinatorResult, EncodedRecords
from coordinator_server.storage.api import AppendError
from protocol.errors import UnknownServerError


async def test_encoded_records_are_appended_as_given_and_replayed_once(
    harness: Harness,
) -> None:
    shard = harness.shard()
    written = harness.write(0, put_many({"a": 1, "b": 2}, encoded=True))
    await settle()
    assert harness.writer.entries(0) == [
        encode_record(put_record("a", 1)),
        encode_record(put_record("b", 2)),
    ]
    # One call for the whole write, under the epoch of the batch at offset 0.
    assert shard.encoded_replays == [(0, 0, 2, 0)]
    assert shard.replayed == [(0, "a"), (1, "b")]
    assert shard.latest() == {"a": 1, "b": 2}
    # Parked, and invisible to reads, until the log commits it.
    assert not written.done()
    assert await harness.read(0, "a") is None
    harness.commit(0)
    assert await written == "ok"
    assert await harness.read(0, "a") == 1
    assert harness.committed_state() == {"a": 1, "b": 2}


async def test_encoded_and_object_records_of_consecutive_writes_share_a_batch(
    harness: Harness,
) -> None:
    shard = harness.shard()
    futures = [
        harness.put(0, "a", 1),
        harness.write(0, put_many({"b": 2, "c": 3}, encoded=True)),
        harness.put(0, "d", 4),
    ]
    await settle()
    assert harness.writer.batches(0) == [(0, 4)]
    # The encoded run starts at the offset after the record before it.
    assert shard.encoded_replays == [(1, 0, 2, 0)]
    assert shard.replayed == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    harness.commit(0)
    for future in futures:
        await future
    assert harness.committed_state() == {"a": 1, "b": 2, "c": 3, "d": 4}


async def test_a_failed_append_of_encoded_records_leaves_nothing_of_them(
    harness: Harness,
) -> None:
    first = harness.write(0, put_many({"a": 1, "b": 2}, encoded=True))
    await settle()
    harness.commit(0)
    await first
    harness.writer.inject_append_failure(0, 19, "not enough replicas")
    failed = harness.write(0, put_many({"a": 5, "c": 6}, encoded=True))
    await settle()
    with pytest.raises(AppendError):
        await failed
    assert harness.shard().latest() == {"a": 1, "b": 2}
    assert harness.committed_state() == {"a": 1, "b": 2}
    assert harness.runtime.last_written_offset(0) == 2
    later = harness.write(0, put_many({"c": 7}, encoded=True))
    await settle()
    harness.commit(0)
    await later
    assert harness.committed_state() == {"a": 1, "b": 2, "c": 7}


async def test_a_failing_encoded_replay_fails_the_whole_open_batch(harness: Harness) -> None:
    shard = harness.shard()
    shard.fail_replay_of.add("bad")
    harness.writer.pause_appends()
    in_flight = harness.put(0, "a", 1)
    await settle()
    good = harness.put(0, "b", 2)
    bad = harness.write(0, put_many({"c": 3, "bad": 4}, encoded=True))
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


async def test_encoded_records_not_replayed_are_still_appended(harness: Harness) -> None:
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(
            response="ok",
            encoded=shard.encode([put_record("k", 1)]),
            updates=[("set", "k", 1)],
            replay_records=False,
        )

    done = harness.write(0, op)
    await settle()
    harness.commit(0)
    assert await done == "ok"
    assert harness.shard().encoded_replays == []
    assert harness.writer.entries(0) == [encode_record(put_record("k", 1))]
    assert harness.committed_state() == {"k": 1}


async def test_a_result_with_both_kinds_of_records_fails_and_writes_nothing(
    harness: Harness,
) -> None:
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(
            [put_record("a", 1)], "ok", encoded=shard.encode([put_record("b", 2)])
        )

    both = harness.write(0, op)
    fine = harness.put(0, "c", 3)
    await settle()
    assert isinstance(both.exception(), UnknownServerError)
    assert harness.shard().latest() == {"c": 3}
    assert harness.writer.end_offset(0) == 1
    harness.commit(0)
    assert await fine == "put c=3"


async def test_no_encoded_records_is_a_write_without_records(harness: Harness) -> None:
    pending = harness.put(0, "a", 1)
    await settle()

    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(response="nothing", encoded=EncodedRecords([], _no_replay))

    # Like any write without records, it answers once every pending write is committed.
    empty = harness.write(0, op)
    await settle()
    assert not empty.done()
    harness.commit(0)
    await pending
    assert await empty == "nothing"
    assert harness.writer.end_offset(0) == 1


def _no_replay(offset: int, start: int, stop: int) -> None:
    raise AssertionError("nothing to replay")


async def test_a_reload_of_encoded_records_rebuilds_the_state_the_writes_built(
    make_harness: Any,
) -> None:
    h: Harness = make_harness()
    await h.load(0)
    futures = [
        h.write(0, put_many({"a": 1, "b": 2}, encoded=True)),
        h.put(0, "a", 3),
        h.write(0, put_many({"c": 4, "b": 5}, encoded=True)),
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
