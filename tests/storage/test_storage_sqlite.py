"""What only the SQLite log does: its file, its failures, crash durability, compaction."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_server.storage import (
    AppendError,
    LoadError,
    PartitionCountMismatchError,
    RawRecord,
    SqliteLog,
    SqliteLogError,
)
from coordinator_server.storage.sqlite import LOAD_CHUNK_ROWS

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = Path(__file__).resolve().parents[2]

Loaded = list[tuple[int, bytes, bytes | None]]


@pytest.fixture
async def sqlite_log(tmp_path: Path) -> AsyncIterator[SqliteLog]:
    log = SqliteLog(tmp_path / "coordinator.db", 2)
    await log.start()
    yield log
    await log.close()


async def load(log: SqliteLog, partition: int) -> Loaded:
    loaded: Loaded = []
    await log.load(partition, lambda o, k, v: loaded.append((o, k, v)))
    return loaded


async def test_the_file_and_its_directory_are_created(tmp_path: Path) -> None:
    path = tmp_path / "not" / "there" / "yet.db"
    log = SqliteLog(path, 1)
    await log.start()
    try:
        assert path.is_file()
    finally:
        await log.close()


async def test_a_different_partition_count_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    log = SqliteLog(path, 3)
    await log.start()
    await log.append(0, [(b"k", b"v")])
    await log.close()

    mismatched = SqliteLog(path, 5)
    with pytest.raises(PartitionCountMismatchError, match="created with 3 partitions but 5"):
        await mismatched.start()
    await mismatched.close()

    # The refused open changed nothing.
    again = SqliteLog(path, 3)
    await again.start()
    try:
        assert await load(again, 0) == [(0, b"k", b"v")]
    finally:
        await again.close()


async def test_a_second_log_on_the_same_file_is_refused(sqlite_log: SqliteLog) -> None:
    second = SqliteLog(sqlite_log.path, sqlite_log.num_partitions)
    with pytest.raises(SqliteLogError, match="in use"):
        await second.start()
    await second.close()
    # The first one is unaffected.
    assert await sqlite_log.append(0, [(b"k", b"v")]) == 1


async def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    path.write_bytes(b"this is not a database, " * 100)
    log = SqliteLog(path, 1)
    with pytest.raises(SqliteLogError):
        await log.start()
    await log.close()


def test_an_unknown_synchronous_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteLog(tmp_path / "coordinator.db", 1, synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="num_partitions"):
        SqliteLog(tmp_path / "coordinator.db", 0)


@pytest.mark.parametrize("synchronous", ["OFF", "NORMAL", "FULL", "extra"])
async def test_every_synchronous_mode_works(tmp_path: Path, synchronous: str) -> None:
    log = SqliteLog(tmp_path / "coordinator.db", 1, synchronous=synchronous)
    await log.start()
    try:
        assert await log.append(0, [(b"k", b"v")]) == 1
        assert await load(log, 0) == [(0, b"k", b"v")]
    finally:
        await log.close()


async def test_a_failed_append_leaves_nothing_of_its_batch(sqlite_log: SqliteLog) -> None:
    heard: list[tuple[int, int]] = []
    sqlite_log.register_listener(lambda p, o: heard.append((p, o)))
    await sqlite_log.append(0, [(b"a", b"1"), (b"b", b"2")])
    # A full disk, as SQLite sees it: the database may not grow by more than a page or two.
    await sqlite_log.limit_growth(1)

    with pytest.raises(AppendError) as raised:
        await sqlite_log.append(0, [(b"big-%d" % i, b"x" * 1000) for i in range(200)])

    assert raised.value.error_code == 56
    assert "full" in str(raised.value)
    assert sqlite_log.high_watermark(0) == 2
    assert heard == [(0, 2)]
    assert await load(sqlite_log, 0) == [(0, b"a", b"1"), (1, b"b", b"2")]
    # The next append takes the offsets the failed batch did not.
    assert await sqlite_log.append(0, [(b"c", b"3")]) == 3
    assert await load(sqlite_log, 0) == [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"c", b"3")]


async def test_a_failed_append_is_not_reported_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    log = SqliteLog(path, 1)
    await log.start()
    await log.append(0, [(b"a", b"1")])
    await log.limit_growth(1)
    with pytest.raises(AppendError):
        await log.append(0, [(b"big-%d" % i, b"x" * 1000) for i in range(200)])
    await log.close()

    reopened = SqliteLog(path, 1)
    await reopened.start()
    try:
        assert reopened.high_watermark(0) == 1
        assert await load(reopened, 0) == [(0, b"a", b"1")]
    finally:
        await reopened.close()


async def test_appends_after_close_fail_with_a_storage_error(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "coordinator.db", 1)
    await log.start()
    await log.close()
    with pytest.raises(AppendError) as raised:
        await log.append(0, [(b"k", b"v")])
    assert raised.value.error_code == 56
    with pytest.raises(LoadError):
        await log.load(0, lambda o, k, v: None)


async def test_a_failing_listener_does_not_fail_the_append(
    sqlite_log: SqliteLog, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_listener(partition: int, offset: int) -> None:
        raise RuntimeError("listener bug")

    sqlite_log.register_listener(broken_listener)
    with caplog.at_level(logging.ERROR):
        assert await sqlite_log.append(1, [(b"k", b"v")]) == 1
    assert "listener failed" in caplog.text
    assert sqlite_log.high_watermark(1) == 1


async def test_an_append_whose_caller_is_cancelled_still_commits_and_reports(
    sqlite_log: SqliteLog,
) -> None:
    heard: list[tuple[int, int]] = []
    sqlite_log.register_listener(lambda p, o: heard.append((p, o)))
    task = asyncio.ensure_future(sqlite_log.append(0, [(b"k", b"v")]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The worker took the batch before the cancel; it commits regardless.
    assert await load(sqlite_log, 0) == [(0, b"k", b"v")]
    assert heard == [(0, 1)]
    assert sqlite_log.high_watermark(0) == 1


async def test_a_load_reads_to_the_end_it_saw_when_it_started(sqlite_log: SqliteLog) -> None:
    total = 2 * LOAD_CHUNK_ROWS + 500
    for start in range(0, total, 5000):
        end = min(start + 5000, total)
        await sqlite_log.append(0, [(b"k%d" % i, b"v") for i in range(start, end)])
    appended_meanwhile: list[asyncio.Future[int]] = []

    def sink(offset: int, key: bytes, value: bytes | None) -> None:
        if offset == 0:
            appended_meanwhile.append(
                asyncio.ensure_future(sqlite_log.append(0, [(b"late", b"v")]))
            )

    summary = await sqlite_log.load(0, sink)

    assert await appended_meanwhile[0] == total + 1
    assert (summary.end_offset, summary.records) == (total, total)
    assert (await load(sqlite_log, 0))[-1] == (total, b"late", b"v")


async def test_a_load_reads_in_chunks_without_losing_a_row(sqlite_log: SqliteLog) -> None:
    total = 3 * LOAD_CHUNK_ROWS
    records = [(b"k%d" % i, b"v%d" % i) for i in range(total)]
    await sqlite_log.append(1, records)
    loaded = await load(sqlite_log, 1)
    assert loaded == [(i, key, value) for i, (key, value) in enumerate(records)]


async def test_a_sink_error_propagates(sqlite_log: SqliteLog) -> None:
    await sqlite_log.append(0, [(b"k%d" % i, b"v") for i in range(LOAD_CHUNK_ROWS + 1)])

    def sink(offset: int, key: bytes, value: bytes | None) -> None:
        raise KeyError("bad record")

    with pytest.raises(KeyError):
        await sqlite_log.load(0, sink)
    # The log is still usable.
    assert await sqlite_log.append(0, [(b"k", b"v")]) == LOAD_CHUNK_ROWS + 2


# Durability across a killed process. The child appends batches of ten records, printing
# each end offset once `append` has returned; the parent kills it with SIGKILL mid-stream
# and must find every printed batch, and only whole batches, in the file.

CHILD = """
import asyncio, sys
from coordinator_server.storage.sqlite import SqliteLog

async def main(path):
    log = SqliteLog(path, 2)
    await log.start()
    batch = 0
    while True:
        partition = batch % 2
        records = [(b"batch-%d" % batch, b"record-%d" % i) for i in range(10)]
        end_offset = await log.append(partition, records)
        print(batch, partition, end_offset, flush=True)
        batch += 1

asyncio.run(main(sys.argv[1]))
"""


def expected_batch(batch: int) -> list[RawRecord]:
    return [(b"batch-%d" % batch, b"record-%d" % i) for i in range(10)]


@pytest.mark.slow
def test_every_acknowledged_batch_survives_a_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    acknowledged = run_child_and_kill_it(path, after_batches=300)
    loaded = asyncio.run(load_all(path, 2))

    for partition in (0, 1):
        acked = [a for a in acknowledged if a[1] == partition]
        records = loaded[partition]
        assert len(records) % 10 == 0, "a batch was half written"
        assert len(records) >= acked[-1][2]
        for batch, _, end_offset in acked:
            base_offset = end_offset - 10
            assert records[base_offset:end_offset] == [
                (base_offset + i, key, value)
                for i, (key, value) in enumerate(expected_batch(batch))
            ]


def run_child_and_kill_it(path: Path, after_batches: int) -> list[tuple[int, int, int]]:
    """Run CHILD on `path`, SIGKILL it once it has acknowledged `after_batches` batches, and
    return every (batch, partition, end_offset) it acknowledged."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(child, lines), daemon=True)
    reader.start()
    acknowledged: list[tuple[int, int, int]] = []
    try:
        while len(acknowledged) < after_batches:
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                pytest.fail("the child stopped acknowledging appends")
            if not line:
                assert child.stderr is not None
                pytest.fail(f"the child exited: {child.stderr.read().decode()}")
            acknowledged.append(_parse_ack(line))
    finally:
        child.kill()  # SIGKILL: no clean-up, no checkpoint, no flush.
        child.wait(timeout=30)
        reader.join(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    # Lines the child printed before it died were acknowledged too.
    while not lines.empty():
        line = lines.get()
        if line.endswith(b"\n"):
            acknowledged.append(_parse_ack(line))
    return acknowledged


def _parse_ack(line: bytes) -> tuple[int, int, int]:
    batch, partition, end_offset = map(int, line.split())
    return batch, partition, end_offset


async def load_all(path: Path, num_partitions: int) -> dict[int, Loaded]:
    log = SqliteLog(path, num_partitions)
    await log.start()
    try:
        return {partition: await load(log, partition) for partition in range(num_partitions)}
    finally:
        await log.close()


def _read_lines(child: subprocess.Popen[bytes], lines: queue.Queue[bytes]) -> None:
    assert child.stdout is not None
    for line in iter(child.stdout.readline, b""):
        lines.put(line)
    lines.put(b"")


# Compaction


def state_after(records: Loaded) -> dict[bytes, bytes]:
    """What replaying the records leaves: latest value per key, tombstones delete."""
    state: dict[bytes, bytes] = {}
    for _, key, value in records:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


async def test_compaction_keeps_the_latest_record_of_each_key(sqlite_log: SqliteLog) -> None:
    await sqlite_log.append(0, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    await sqlite_log.append(0, [(b"a", b"2"), (b"b", None)])
    await sqlite_log.append(0, [(b"a", b"3"), (b"d", b"1")])
    await sqlite_log.append(1, [(b"a", b"other partition"), (b"a", b"other partition 2")])
    before = await load(sqlite_log, 0)

    removed = await sqlite_log.compact(0, below_offset=7)

    after = await load(sqlite_log, 0)
    assert removed == 3
    assert after == [(2, b"c", b"1"), (4, b"b", None), (5, b"a", b"3"), (6, b"d", b"1")]
    assert state_after(after) == state_after(before)
    # Offsets do not move: the end stays, and the next append follows it.
    assert sqlite_log.high_watermark(0) == 7
    assert await sqlite_log.append(0, [(b"e", b"1")]) == 8
    # Another partition is untouched.
    assert len(await load(sqlite_log, 1)) == 2


async def test_compaction_leaves_alone_what_is_at_or_above_its_limit(sqlite_log: SqliteLog) -> None:
    await sqlite_log.append(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2")])
    # Below offset 3 only a@0 is superseded (by a@2); b@1 is superseded by b@3, which is
    # not below the limit, so b@1 stays.
    assert await sqlite_log.compact(0, below_offset=3) == 1
    assert await load(sqlite_log, 0) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"b", b"2")]


async def test_compaction_keeps_tombstones(sqlite_log: SqliteLog) -> None:
    await sqlite_log.append(0, [(b"a", b"1"), (b"a", None), (b"b", b"1")])
    assert await sqlite_log.compact(0, below_offset=100) == 1
    assert await load(sqlite_log, 0) == [(1, b"a", None), (2, b"b", b"1")]
    assert await sqlite_log.compact(0, below_offset=100) == 0


async def test_compaction_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    log = SqliteLog(path, 1)
    await log.start()
    await log.append(0, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])
    await log.compact(0, below_offset=3)
    await log.close()

    reopened = SqliteLog(path, 1)
    await reopened.start()
    try:
        assert await load(reopened, 0) == [(2, b"a", b"3")]
        # The end offset is kept apart from the rows: nothing is handed out twice.
        assert await reopened.append(0, [(b"b", b"1")]) == 4
    finally:
        await reopened.close()


record_batches = st.lists(
    st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", b""]), st.none() | st.binary(max_size=3)),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=record_batches, limits=st.lists(st.integers(0, 60), min_size=1, max_size=3))
def test_compaction_matches_the_log_cleaner_rule(
    tmp_path: Path, batches: list[list[RawRecord]], limits: list[int]
) -> None:
    path = tmp_path / f"{uuid.uuid4().hex}.db"

    async def scenario() -> None:
        log = SqliteLog(path, 1, synchronous="OFF")
        await log.start()
        try:
            for batch in batches:
                await log.append(0, batch)
            original = await load(log, 0)
            expected = original
            for below_offset in limits:
                expected = cleaned(expected, below_offset)
                await log.compact(0, below_offset)
                after = await load(log, 0)
                assert after == expected
                assert state_after(after) == state_after(original)
        finally:
            await log.close()

    asyncio.run(scenario())


def cleaned(records: Loaded, below_offset: int) -> Loaded:
    """Kafka's cleaner, written plainly: drop a record below the limit when a later record
    of its key is also below the limit."""
    latest_below = {key: offset for offset, key, _ in records if offset < below_offset}
    return [
        (offset, key, value)
        for offset, key, value in records
        if offset >= below_offset or latest_below[key] == offset
    ]
