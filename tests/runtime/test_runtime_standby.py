"""Warm standbys: a runtime follows a partition another runtime writes, serves none of it,
and, loaded, reads only what its standby had not read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
from runtime_harness import Harness, KeyValueShard, SharedLog, get_latest, put, put_record, settle

from coordinator_protocol.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from coordinator_server.records import encode_record
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.runtime.standby import RETRY_BACKOFF_S
from coordinator_server.storage.memory import InMemoryLog

State = CoordinatorState

# Long enough that a test sees a round hold, short enough not to slow the tests down.
MAX_WAIT_MS = 100


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Harness, Harness]]:
    """Two runtimes on one log (auto commit): the owner has partition 0 loaded, the other
    hosts nothing yet."""
    shared = SharedLog(InMemoryLog(3, auto_commit=True))
    config = RuntimeConfig(standby_fetch_max_wait_ms=MAX_WAIT_MS)
    owner = Harness(shared=shared, config=config)
    standby = Harness(shared=shared, config=config)
    await owner.load(0)
    yield owner, standby
    await standby.close()
    await owner.close()


async def write(harness: Harness, count: int, start: int = 0, partition: int = 0) -> None:
    for index in range(start, start + count):
        await harness.put(partition, f"key-{index % 7}", index)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def followed_to(harness: Harness, partition: int = 0) -> int | None:
    return harness.runtime.last_committed_offset(partition)


async def test_a_standby_follows_what_another_runtime_writes(
    pair: tuple[Harness, Harness],
) -> None:
    owner, standby = pair
    await write(owner, 20)
    standby.runtime.schedule_standby(0)
    assert standby.runtime.partition_state(0) is State.STANDBY
    high_watermark = owner.writer.high_watermark(0)
    await until(lambda: followed_to(standby) == high_watermark)
    # What it read is replayed once a round brings nothing new.
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())

    # New writes arrive within a round trip, not a poll interval.
    await write(owner, 5, start=20)
    started = time.monotonic()
    await until(lambda: followed_to(standby) == owner.writer.high_watermark(0))
    assert time.monotonic() - started < MAX_WAIT_MS / 1000
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())
    assert len(standby.shards[0]) == 1, "the standby built one shard and kept it"
    assert standby.shard(0).loaded == 0, "a standby is never made ACTIVE"


async def test_a_standby_replays_the_latest_record_of_each_key(
    pair: tuple[Harness, Harness],
) -> None:
    """Records read are held, the latest per key, and replayed in one go: 40 puts on 7 keys
    cost the standby's shard 7 replays, and leave it as the owner's."""
    owner, standby = pair
    await write(owner, 40)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == 40)
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())
    replayed = standby.shard(0).replayed
    assert sorted(key for _, key in replayed) == sorted(f"key-{k}" for k in range(7))
    # In the order of their offsets, as compaction leaves them.
    assert [offset for offset, _ in replayed] == sorted(offset for offset, _ in replayed)
    assert {offset for offset, _ in replayed} == set(range(33, 40))


async def test_a_standby_holding_its_most_records_replays_them_at_once() -> None:
    shared = SharedLog(InMemoryLog(3, auto_commit=True))
    # A long poll the test would notice: replays must not wait for a quiet round.
    config = RuntimeConfig(standby_fetch_max_wait_ms=5000, standby_max_pending_records=3)
    owner = Harness(shared=shared, config=config)
    standby = Harness(shared=shared, config=config)
    try:
        await owner.load(0)
        standby.runtime.schedule_standby(0)
        await until(lambda: followed_to(standby) == 0 and standby.shards.get(0) is not None)
        for index in range(6):
            await owner.put(0, f"key-{index}", index)
        await until(lambda: len(standby.shard(0).replayed) == 6, timeout_s=2.0)
        await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())
    finally:
        await standby.close()
        await owner.close()


async def test_an_idle_standby_long_polls_instead_of_spinning(
    pair: tuple[Harness, Harness],
) -> None:
    owner, standby = pair
    await write(owner, 3)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == owner.writer.high_watermark(0))
    rounds = len(standby.follower.rounds)
    await asyncio.sleep(5 * MAX_WAIT_MS / 1000)
    assert len(standby.follower.rounds) - rounds <= 6


async def test_a_standby_answers_nothing(pair: tuple[Harness, Harness]) -> None:
    owner, standby = pair
    await write(owner, 4)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == owner.writer.high_watermark(0))
    runtime = standby.runtime
    with pytest.raises(NotCoordinatorError):
        await standby.put(0, "key-0", 99)
    with pytest.raises(NotCoordinatorError):
        await standby.write(0, get_latest("key-0"))
    with pytest.raises(NotCoordinatorError):
        await standby.read(0, "key-0")
    outcome = runtime.write("probe", 0, put("key-0", 1))
    assert isinstance(outcome.error, NotCoordinatorError)
    assert runtime.shard(0) is None, "gauges see no standby shard"
    # Nothing it refused reached the log.
    assert owner.writer.end_offset(0) == owner.writer.high_watermark(0) == 4


async def test_a_standby_announced_answers_load_in_progress_and_follows_on(
    pair: tuple[Harness, Harness],
) -> None:
    """A standby being taken over (its load announced, the partition still being fenced to
    this node) follows the log on, so its load still reads only the tail."""
    owner, standby = pair
    await write(owner, 4)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == 4)
    standby.runtime.announce_load(0)
    assert standby.runtime.partition_state(0) is State.STANDBY
    with pytest.raises(CoordinatorLoadInProgressError):
        await standby.put(0, "key-0", 99)
    with pytest.raises(CoordinatorLoadInProgressError):
        await standby.read(0, "key-0")
    await write(owner, 3, start=4)
    await until(lambda: followed_to(standby) == 7)
    loads_before = len(standby.loader.loads)
    owner.runtime.schedule_unload(0, None)
    standby.runtime.schedule_load(0, 1)
    await standby.runtime.wait_loaded(0)
    (load,) = list(standby.loader.loads)[loads_before:]
    assert load == (0, 7, 7)
    assert await standby.put(0, "key-new", 7) == "put key-new=7"


async def test_a_load_of_a_standby_reads_only_what_it_had_not_read(
    pair: tuple[Harness, Harness],
) -> None:
    owner, standby = pair
    await write(owner, 50)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == owner.writer.high_watermark(0))
    followed = followed_to(standby)
    assert followed == 50
    loads_before = len(standby.loader.loads)
    # The owner writes on and goes while the standby cannot read the log.
    standby.follower.inject_follow_failure(0, "broker down", count=100)
    await write(owner, 6, start=50)
    assert followed_to(standby) == 50
    owner.runtime.schedule_unload(0, None)
    standby.runtime.schedule_load(0, 1)
    assert standby.runtime.partition_state(0) is State.LOADING
    await standby.runtime.wait_loaded(0)

    (load,) = list(standby.loader.loads)[loads_before:]
    assert load == (0, 50, 56), "only the records past the standby's position were read"
    assert len(standby.shards[0]) == 1, "the standby's shard was loaded on, not rebuilt"
    assert standby.shard(0).loaded == 1
    assert standby.committed_state(0) == owner.shard(0).latest()
    # It serves from the log's end: a write lands after the owner's last record.
    assert await standby.put(0, "key-new", 7) == "put key-new=7"
    assert owner.writer.end_offset(0) == 57
    fresh = Harness(shared=SharedLog(owner.log))
    try:
        assert (await fresh.load(0)).latest() == standby.shard(0).latest()
    finally:
        await fresh.close()


async def test_the_round_under_way_when_a_standby_is_loaded_is_dropped(
    pair: tuple[Harness, Harness],
) -> None:
    _, standby = pair
    writer = standby.writer
    await writer.append(0, [encode_record(put_record(f"key-{i}", i)) for i in range(10)])
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == 10)
    # The follower waits in a round; these records commit and wake it, but the load below
    # starts first and reads them: the round's copy must not reach the shard too.
    await writer.append(0, [encode_record(put_record(f"key-{i}", i)) for i in range(10, 13)])
    standby.runtime.schedule_load(0, 1)
    await standby.runtime.wait_loaded(0)
    await until(lambda: {0: 10} in standby.follower.rounds)
    await settle()
    assert standby.loader.loads[-1] == (0, 10, 13)
    offsets = [offset for offset, _ in standby.shard(0).replayed]
    assert offsets == list(range(13)), offsets


async def test_an_unloaded_standby_is_followed_no_more(pair: tuple[Harness, Harness]) -> None:
    owner, standby = pair
    await write(owner, 5)
    await owner.load(1)
    await write(owner, 5, partition=1)
    standby.runtime.schedule_standby(0)
    standby.runtime.schedule_standby(1)
    await until(lambda: followed_to(standby, 0) == 5 and followed_to(standby, 1) == 5)
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())
    shard = standby.shard(0)
    standby.runtime.schedule_unload(0, None)
    assert standby.runtime.partition_state(0) is None
    assert shard.unloaded == 1
    await write(owner, 2, start=5)
    await write(owner, 2, start=5, partition=1)
    await until(lambda: followed_to(standby, 1) == 7)
    assert 0 not in standby.follower.rounds[-1]
    assert shard.latest() == {f"key-{i}": i for i in range(5)}
    # And it can stand by again, from the log's start.
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby, 0) == 7)
    assert len(standby.shards[0]) == 2
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())


async def test_a_standby_that_cannot_read_the_log_backs_off_and_catches_up(
    pair: tuple[Harness, Harness],
) -> None:
    owner, standby = pair
    await write(owner, 5)
    standby.follower.inject_follow_failure(0, "leader moving", count=2)
    standby.runtime.schedule_standby(0)
    started = time.monotonic()
    await until(lambda: followed_to(standby) == 5)
    # Two failures in a row: the back-offs after the first and the second.
    assert time.monotonic() - started >= RETRY_BACKOFF_S[0] + RETRY_BACKOFF_S[1]
    assert standby.runtime.partition_state(0) is State.STANDBY
    assert len(standby.shards[0]) == 1
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())


async def test_a_standby_whose_position_is_lost_starts_over(
    pair: tuple[Harness, Harness], caplog: pytest.LogCaptureFixture
) -> None:
    owner, standby = pair
    await write(owner, 5)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == 5)
    standby.follower.inject_follow_failure(0, "offset out of range", lost=True)
    await write(owner, 2, start=5)
    await until(lambda: len(standby.shards[0]) == 2 and followed_to(standby) == 7)
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())
    assert standby.shards[0][0].unloaded == 1
    assert any("starting over" in r.getMessage() for r in caplog.records)
    assert standby.runtime.partition_state(0) is State.STANDBY


async def test_a_standby_whose_shard_refuses_a_record_starts_over(
    pair: tuple[Harness, Harness],
) -> None:
    owner, standby = pair
    await write(owner, 3)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == 3)
    standby.shard(0).fail_replay_of.add("key-3")
    await write(owner, 2, start=3)
    await until(lambda: len(standby.shards[0]) == 2 and followed_to(standby) == 5)
    await until(lambda: standby.shard(0).latest() == owner.shard(0).latest())


async def test_a_standby_that_never_read_is_loaded_whole(pair: tuple[Harness, Harness]) -> None:
    owner, standby = pair
    await write(owner, 4)
    standby.follower.inject_follow_failure(0, "broker down", count=100)
    standby.runtime.schedule_standby(0)
    standby.runtime.schedule_load(0, 1)
    await standby.runtime.wait_loaded(0)
    assert standby.loader.loads[-1] == (0, 0, 4)
    assert standby.committed_state(0) == owner.shard(0).latest()


async def test_a_hosted_partition_is_not_made_a_standby(pair: tuple[Harness, Harness]) -> None:
    owner, _ = pair
    owner.runtime.schedule_standby(0)
    assert owner.runtime.partition_state(0) is State.ACTIVE
    assert not owner.follower.rounds


async def test_a_log_without_a_follower_has_no_standbys() -> None:
    log = InMemoryLog(1)
    runtime: CoordinatorRuntime[KeyValueShard] = CoordinatorRuntime(
        shard_builder=KeyValueShard,
        writer=log.writer,
        loader=log.loader,
        clock=ManualClock(),
    )
    with pytest.raises(NotImplementedError):
        runtime.schedule_standby(0)
    assert runtime.partition_state(0) is None
    runtime.close()


async def test_close_ends_every_standby(pair: tuple[Harness, Harness]) -> None:
    owner, standby = pair
    await write(owner, 2)
    standby.runtime.schedule_standby(0)
    await until(lambda: followed_to(standby) == 2)
    standby.runtime.close()
    assert standby.runtime.partitions() == {}
    rounds = len(standby.follower.rounds)
    await write(owner, 2, start=2)
    await asyncio.sleep(2 * MAX_WAIT_MS / 1000)
    assert len(standby.follower.rounds) == rounds
