"""The CoordinatorLog contract, run against every implementation.

Each test gets `open_log`, which starts a new log over the implementation's storage (the
same SQLite file, the same Kafka topic, or a fresh in-memory log) and closes it at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator_server.storage import (
    AppendError,
    CoordinatorLog,
    FollowResult,
    InMemoryLog,
    LatestRecords,
    LoadError,
    LoadSummary,
    RawRecord,
    SqliteLog,
)
from coordinator_server.storage.kafka.log import KafkaLog

pytestmark = pytest.mark.timeout(120)

Loaded = list[tuple[int, bytes, bytes | None]]
OpenLog = Callable[..., Awaitable[CoordinatorLog]]


@dataclass(frozen=True)
class Implementation:
    name: str
    new_log: Callable[[int], CoordinatorLog]


def _build(request: pytest.FixtureRequest, tmp_path: Path) -> Implementation:
    if request.param == "memory":
        return Implementation("memory", lambda n: InMemoryLog(n))
    if request.param == "sqlite":
        path = tmp_path / "log" / "coordinator.db"
        return Implementation("sqlite", lambda n: SqliteLog(path, n))
    # The Kafka log over Apache Kafka, and over tansu: a Kafka-protocol broker that is not
    # Apache Kafka must keep the same contract.
    broker = request.getfixturevalue("kafka_broker" if request.param == "kafka" else "tansu_broker")
    topic = request.getfixturevalue("unique_topic")
    return Implementation(
        request.param,
        lambda n: KafkaLog(broker.bootstrap, topic, n, 1, request_timeout_ms=5000),
    )


KAFKA = pytest.param("kafka", marks=pytest.mark.kafka)
TANSU = pytest.param("tansu", marks=pytest.mark.tansu)


@pytest.fixture(params=["memory", "sqlite", KAFKA, TANSU])
def implementation(request: pytest.FixtureRequest, tmp_path: Path) -> Implementation:
    return _build(request, tmp_path)


@pytest.fixture(params=["sqlite", KAFKA, TANSU])
def durable_implementation(request: pytest.FixtureRequest, tmp_path: Path) -> Implementation:
    """The implementations whose log outlives the object that wrote it."""
    return _build(request, tmp_path)


@pytest.fixture
async def open_durable_log(durable_implementation: Implementation) -> AsyncIterator[OpenLog]:
    async with _opener(durable_implementation) as open_log:
        yield open_log


@contextlib.asynccontextmanager
async def _opener(implementation: Implementation) -> AsyncIterator[OpenLog]:
    logs: list[CoordinatorLog] = []

    async def open_log(num_partitions: int = 3) -> CoordinatorLog:
        log = implementation.new_log(num_partitions)
        logs.append(log)
        await log.start()
        return log

    try:
        yield open_log
    finally:
        for log in reversed(logs):
            await log.close()


@pytest.fixture
async def open_log(implementation: Implementation) -> AsyncIterator[OpenLog]:
    async with _opener(implementation) as open_log:
        yield open_log


async def load(log: CoordinatorLog, partition: int) -> tuple[Loaded, LoadSummary]:
    loaded: Loaded = []
    summary = await log.loader.load(partition, lambda o, k, v: loaded.append((o, k, v)))
    return loaded, summary


def numbered(records: Sequence[RawRecord], base_offset: int = 0) -> Loaded:
    return [(base_offset + i, key, value) for i, (key, value) in enumerate(records)]


def payload_bytes(records: Sequence[RawRecord]) -> int:
    return sum(len(key) + (len(value) if value is not None else 0) for key, value in records)


async def test_appends_return_consecutive_end_offsets(open_log: OpenLog) -> None:
    log = await open_log()
    assert await log.writer.append(0, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]) == 3
    assert await log.writer.append(0, [(b"d", b"4"), (b"e", None)]) == 5
    assert await log.writer.append(0, [(b"f", b"6")]) == 6
    assert log.writer.high_watermark(0) == 6


async def test_a_fresh_log_is_empty(open_log: OpenLog) -> None:
    log = await open_log(num_partitions=4)
    assert log.num_partitions == 4
    assert [log.writer.high_watermark(p) for p in range(4)] == [0, 0, 0, 0]


async def test_partitions_are_independent(open_log: OpenLog) -> None:
    log = await open_log()
    zero = [(b"zero-%d" % i, b"value") for i in range(4)]
    two = [(b"two-%d" % i, b"value") for i in range(2)]
    assert await log.writer.append(0, zero) == 4
    assert await log.writer.append(2, two) == 2
    assert await log.writer.append(0, zero[:1]) == 5

    assert (await load(log, 0))[0] == numbered([*zero, *zero[:1]])
    assert (await load(log, 1))[0] == []
    assert (await load(log, 2))[0] == numbered(two)
    assert [log.writer.high_watermark(p) for p in range(3)] == [5, 0, 2]


async def test_the_listener_hears_of_each_commit_before_append_returns(open_log: OpenLog) -> None:
    log = await open_log()
    heard: list[tuple[int, int]] = []
    log.writer.register_listener(lambda partition, offset: heard.append((partition, offset)))

    await log.writer.append(1, [(b"a", b"1"), (b"b", b"2")])
    assert heard == [(1, 2)]
    await log.writer.append(0, [(b"c", b"3")])
    await log.writer.append(1, [(b"d", None)])
    assert heard == [(1, 2), (0, 1), (1, 3)]


async def test_a_new_listener_replaces_the_earlier_one(open_log: OpenLog) -> None:
    log = await open_log()
    first: list[tuple[int, int]] = []
    second: list[tuple[int, int]] = []
    log.writer.register_listener(lambda p, o: first.append((p, o)))
    await log.writer.append(0, [(b"a", b"1")])
    log.writer.register_listener(lambda p, o: second.append((p, o)))
    await log.writer.append(0, [(b"b", b"2")])
    assert first == [(0, 1)]
    assert second == [(0, 2)]


async def test_load_returns_the_records_in_order_with_tombstones(open_log: OpenLog) -> None:
    log = await open_log()
    first: list[RawRecord] = [(b"group-a", b"meta-1"), (b"offset-a-t-0", b"10")]
    second: list[RawRecord] = [(b"offset-a-t-0", None), (b"group-a", b"meta-2")]
    third: list[RawRecord] = [(b"group-a", None)]
    for batch in (first, second, third):
        await log.writer.append(1, batch)

    loaded, summary = await load(log, 1)

    everything = [*first, *second, *third]
    assert loaded == numbered(everything)
    assert summary == LoadSummary(
        start_offset=0, end_offset=5, records=5, bytes=payload_bytes(everything)
    )


async def test_an_empty_partition_loads_as_nothing_quickly(open_log: OpenLog) -> None:
    log = await open_log()
    await log.writer.append(0, [(b"elsewhere", b"1")])
    started = time.monotonic()
    loaded, summary = await load(log, 2)
    elapsed = time.monotonic() - started
    assert loaded == []
    assert (summary.start_offset, summary.end_offset, summary.records) == (0, 0, 0)
    assert elapsed < 2.0


async def test_a_partition_loads_again_with_the_same_result(open_log: OpenLog) -> None:
    log = await open_log()
    records = [(b"k%d" % i, b"v%d" % i) for i in range(20)]
    await log.writer.append(0, records)
    first = await load(log, 0)
    second = await load(log, 0)
    assert first == second
    assert first[0] == numbered(records)


async def test_concurrent_loads_of_different_partitions(open_log: OpenLog) -> None:
    log = await open_log(num_partitions=6)
    expected: dict[int, list[RawRecord]] = {}
    for partition in range(6):
        expected[partition] = [(b"p%d-k%d" % (partition, i), b"v") for i in range(partition * 7)]
        if expected[partition]:
            await log.writer.append(partition, expected[partition])

    results = await asyncio.gather(*(load(log, p) for p in range(6)))

    for partition, (loaded, summary) in enumerate(results):
        assert loaded == numbered(expected[partition])
        assert summary.end_offset == len(expected[partition])


async def test_a_reopened_log_loads_what_was_appended_before(open_durable_log: OpenLog) -> None:
    open_log = open_durable_log
    log = await open_log()
    zero = [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    two: list[RawRecord] = [(b"x", b"1"), (b"x", None)]
    await log.writer.append(0, zero[:4])
    await log.writer.append(0, zero[4:])
    await log.writer.append(2, two)
    await log.close()

    reopened = await open_log()

    assert (await load(reopened, 0))[0] == numbered(zero)
    assert (await load(reopened, 1))[0] == []
    assert (await load(reopened, 2))[0] == numbered(two)
    assert reopened.writer.high_watermark(0) == 10
    # Appends carry on from the end of what is there.
    assert await reopened.writer.append(2, [(b"y", b"2")]) == 3
    assert (await load(reopened, 2))[0] == numbered([*two, (b"y", b"2")])


async def test_a_batch_of_thousands_of_records(open_log: OpenLog) -> None:
    log = await open_log()
    await log.writer.append(1, [(b"before", b"0")])
    records = [(b"group-%05d" % i, b"value-%05d-" % i + b"x" * 80) for i in range(5000)]
    assert await log.writer.append(1, records) == 5001
    loaded, summary = await load(log, 1)
    assert loaded == numbered([(b"before", b"0"), *records])
    assert summary.records == 5001


async def test_keys_and_values_are_arbitrary_bytes(open_log: OpenLog) -> None:
    log = await open_log()
    every_byte = bytes(range(256))
    records: list[RawRecord] = [
        (b"", b"an empty key"),
        (b"an empty value", b""),
        (b"a tombstone", None),
        (every_byte, every_byte[::-1]),
        (b"\x00", b"\x00\x00"),
        ("non-ascii \u00e9\u4e2d".encode(), "\U0001f600".encode()),
        (b"large", bytes(range(256)) * 400),
    ]
    await log.writer.append(0, records)
    loaded, summary = await load(log, 0)
    assert loaded == numbered(records)
    # b"" and None stay apart: an empty value is not a tombstone.
    assert loaded[1][2] == b""
    assert loaded[2][2] is None
    assert summary.bytes == payload_bytes(records)


async def test_an_unknown_partition_is_refused(open_log: OpenLog) -> None:
    log = await open_log(num_partitions=2)
    with pytest.raises(AppendError) as raised:
        await log.writer.append(2, [(b"k", b"v")])
    assert raised.value.error_code == 3
    with pytest.raises(LoadError):
        await log.loader.load(5, lambda o, k, v: None)
    with pytest.raises(AppendError):
        await log.writer.append(-1, [(b"k", b"v")])


async def test_close_twice(open_log: OpenLog) -> None:
    log = await open_log()
    await log.writer.append(0, [(b"k", b"v")])
    await log.close()
    await log.close()


async def test_a_load_from_an_offset_reads_the_rest(open_log: OpenLog) -> None:
    log = await open_log()
    records = [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    await log.writer.append(1, records[:6])
    await log.writer.append(1, records[6:])
    loaded: Loaded = []
    summary = await log.loader.load(1, lambda o, k, v: loaded.append((o, k, v)), start_offset=4)
    assert loaded == numbered(records[4:], base_offset=4)
    assert (summary.start_offset, summary.end_offset, summary.records) == (4, 10, 6)


# The follower: what standbys and the security image read (the SQLite log's own server
# reads its security partition so). Tansu is left out: standbys belong to a cluster, which
# needs Kafka's transactions (tansu has none), and tansu holds a Fetch for its whole wait
# whatever commits meanwhile.

FOLLOWING = ["memory", "sqlite", KAFKA]


@pytest.fixture(params=FOLLOWING)
async def open_followed_log(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[OpenLog]:
    async with _opener(_build(request, tmp_path)) as open_log:
        yield open_log


Followed = list[tuple[int, int, bytes, bytes | None]]


async def follow(
    log: CoordinatorLog,
    positions: dict[int, int | None],
    *,
    max_wait_ms: int = 50,
    max_bytes: int = 1 << 20,
) -> tuple[Followed, FollowResult]:
    """One round; again while some partition is to be retried (a new topic's leaders may
    not be known yet), which the contract allows at any time."""
    assert log.follower is not None
    for _ in range(50):
        followed: Followed = []
        ends: dict[int, int] = {}

        def sink(
            partition: int,
            latest: LatestRecords,
            after: int,
            followed: Followed = followed,
            ends: dict[int, int] = ends,
        ) -> None:
            assert partition not in ends, "one call a partition a round"
            ends[partition] = after
            followed.extend((partition, o, k, v) for k, (o, v) in latest.items())

        result = await log.follower.follow(
            positions, sink, max_wait_ms=max_wait_ms, max_bytes=max_bytes
        )
        if not result.retry:
            # The sink was told where each partition read to, as the result says.
            assert ends == {p: at for p, at in result.positions.items() if p in ends}
            followed.sort(key=lambda record: (record[0], record[1]))
            return followed, result
        await asyncio.sleep(0.1)
    raise AssertionError(f"partitions still to be retried: {result.retry}")


async def test_a_follower_reads_every_partition_from_its_position(
    open_followed_log: OpenLog,
) -> None:
    log = await open_followed_log()
    for partition in range(3):
        await log.writer.append(partition, [(b"p%d-%d" % (partition, i), b"v") for i in range(4)])

    followed, result = await follow(log, {0: None, 1: 2, 2: 4})

    # In offset order within a partition; the partitions in any order.
    assert sorted(followed) == [
        *((0, i, b"p0-%d" % i, b"v") for i in range(4)),
        *((1, i, b"p1-%d" % i, b"v") for i in range(2, 4)),
    ]
    assert result.positions == {0: 4, 1: 4, 2: 4}
    assert result.high_watermarks == {0: 4, 1: 4, 2: 4}
    assert not result.retry and not result.lost


async def test_a_follower_with_nothing_new_waits_and_wakes_at_a_commit(
    open_followed_log: OpenLog,
) -> None:
    log = await open_followed_log()
    await log.writer.append(0, [(b"a", b"1")])
    started = time.monotonic()
    followed, result = await follow(log, {0: 1, 1: None}, max_wait_ms=300)
    assert followed == [] and result.positions == {0: 1, 1: 0}
    assert time.monotonic() - started >= 0.2, "an idle round must hold, not spin"

    async def append_later() -> None:
        await asyncio.sleep(0.2)
        await log.writer.append(0, [(b"b", b"2")])

    appending = asyncio.ensure_future(append_later())
    started = time.monotonic()
    followed, result = await follow(log, {0: 1}, max_wait_ms=60_000)
    await appending
    assert followed == [(0, 1, b"b", b"2")]
    assert result.positions == {0: 2}
    assert time.monotonic() - started < 30, "a commit ends the wait"


async def test_a_follower_reads_a_round_of_at_most_about_max_bytes(
    open_followed_log: OpenLog,
) -> None:
    log = await open_followed_log()
    value = b"x" * 1000
    for batch in range(10):
        await log.writer.append(0, [(b"k%d-%d" % (batch, i), value) for i in range(20)])
    positions: dict[int, int | None] = {0: None}
    rounds = 0
    offsets: list[int] = []
    while positions[0] != 200:
        followed, result = await follow(log, positions, max_bytes=30_000)
        offsets.extend(offset for _, offset, _, _ in followed)
        positions = dict(result.positions)
        rounds += 1
        assert rounds < 50
    assert rounds > 1
    assert offsets == list(range(200))


async def test_a_follower_hands_over_the_latest_record_of_each_key(
    open_followed_log: OpenLog,
) -> None:
    log = await open_followed_log()
    await log.writer.append(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
    await log.writer.append(0, [(b"b", None), (b"c", b"1")])

    followed, result = await follow(log, {0: None})
    assert followed == [(0, 2, b"a", b"2"), (0, 3, b"b", None), (0, 4, b"c", b"1")]
    assert result.positions == {0: 5}

    followed, result = await follow(log, {0: 1})
    assert followed == [(0, 2, b"a", b"2"), (0, 3, b"b", None), (0, 4, b"c", b"1")]


async def test_a_follower_reports_a_position_past_the_end_as_lost(
    open_followed_log: OpenLog,
) -> None:
    log = await open_followed_log()
    await log.writer.append(0, [(b"a", b"1"), (b"b", b"2")])
    followed, result = await follow(log, {0: 7, 1: None})
    assert followed == []
    assert set(result.lost) == {0}
    assert result.positions == {1: 0}


async def test_the_sqlite_log_follows_what_is_left_after_compaction(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "coordinator.db", 1)
    await log.start()
    try:
        await log.writer.append(0, [(b"a", b"1"), (b"b", b"1")])
        await log.writer.append(0, [(b"a", b"2"), (b"c", b"1")])
        await log.writer.append(0, [(b"a", b"3")])
        assert await log.compact(0, 5) == 2
        followed, result = await follow(log, {0: None})
        # The gaps compaction left are skipped; the round reads to the high watermark.
        assert followed == [(0, 1, b"b", b"1"), (0, 3, b"c", b"1"), (0, 4, b"a", b"3")]
        assert result.positions == {0: 5} and result.high_watermarks == {0: 5}
    finally:
        await log.close()


async def test_a_stopped_sqlite_log_is_not_followed(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "coordinator.db", 1)
    with pytest.raises(LoadError):
        await log.follower.follow({0: None}, lambda *_: None, max_wait_ms=10, max_bytes=1024)
