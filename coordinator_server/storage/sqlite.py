"""The coordinator log in one SQLite file: the embedded deployment.

The file is the log. Each partition is a run of rows at consecutive offsets; an appended
batch is one transaction, so a batch is either wholly in the file or not at all, and with
`synchronous=FULL` (the default) a batch whose append returned survives a crash of the
process or of the machine.

All SQLite work runs on one dedicated worker thread: the connection is created, used and
closed there (sqlite3 objects must stay on one thread), and the event loop never waits on
an fsync. Work items run in submission order, which is what keeps a partition's appends,
and a load's view of the partition, consistent without any further locking.

The connection holds the file's lock from start to close (`locking_mode=EXCLUSIVE`): a
second server pointed at the same file fails at start instead of forking the log.

Its follower (`follow`) reads a partition's committed rows past a position, waiting on the
high watermark when there are none: nobody stands by for a file one server holds, but the
server's own reader of the security partition keeps its image of the ACLs and SCRAM
credentials this way, as every node of a cluster does from the Kafka log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from coordinator_server.storage.api import (
    AppendError,
    FollowResult,
    FollowSink,
    HighWatermarkListener,
    LatestRecords,
    LoadError,
    LoadSummary,
    LogFailureListener,
    RawRecord,
    ReadyListener,
    RecordSink,
)
from coordinator_server.storage.error_codes import KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION

__all__ = ["PartitionCountMismatchError", "SqliteLog", "SqliteLogError"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SYNCHRONOUS_MODES = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
LOAD_CHUNK_ROWS = 10_000
SCHEMA_VERSION = 1

# "partition" and "offset" are SQL keywords, hence the quotes. WITHOUT ROWID makes the
# primary key the table's own order, so a load is one range scan.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS partitions (
    "partition" INTEGER PRIMARY KEY,
    log_end_offset INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    "partition" INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    key BLOB NOT NULL,
    value BLOB,
    timestamp_ms INTEGER NOT NULL,
    PRIMARY KEY ("partition", "offset")
) WITHOUT ROWID;
"""

_INSERT_RECORD = (
    'INSERT INTO records ("partition", "offset", key, value, timestamp_ms) VALUES (?, ?, ?, ?, ?)'
)
_UPDATE_END_OFFSET = 'UPDATE partitions SET log_end_offset = ? WHERE "partition" = ?'
_SELECT_CHUNK = (
    'SELECT "offset", key, value FROM records WHERE "partition" = ? AND "offset" >= ? '
    'AND "offset" < ? ORDER BY "offset" LIMIT ?'
)
# Kafka's log cleaner rule: a record is removed when a later record of the same key,
# itself below the cleaning point, supersedes it. The latest record of each key stays,
# tombstones included.
_DELETE_SUPERSEDED = """
DELETE FROM records WHERE "partition" = :partition AND "offset" IN (
    SELECT "offset" FROM (
        SELECT "offset", ROW_NUMBER() OVER (PARTITION BY key ORDER BY "offset" DESC) AS rank
        FROM records WHERE "partition" = :partition AND "offset" < :below_offset
    ) WHERE rank > 1
)
"""


class SqliteLogError(Exception):
    """The file cannot be used as this coordinator log."""


class PartitionCountMismatchError(SqliteLogError, ValueError):
    """The file was created with a different number of partitions than configured.

    Group placement hashes group ids over the partition count, so opening a log with
    another count would put existing groups on partitions that do not hold them.
    """


class SqliteLog:
    """A CoordinatorLog (and its PartitionWriter, CoordinatorLoader and LogFollower) in a
    SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        num_partitions: int,
        *,
        synchronous: str = "FULL",
    ) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ValueError(
                f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}, got {synchronous!r}"
            )
        self._path = Path(path)
        self._num_partitions = num_partitions
        self._synchronous = mode
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._listener: HighWatermarkListener | None = None
        # Event-loop side: what has been committed and reported.
        self._high_watermarks = [0] * num_partitions
        # Worker-thread side: the connection and the offset the next record will get.
        self._connection: sqlite3.Connection | None = None
        self._log_end_offsets = [0] * num_partitions
        # Set, and replaced by a new one, whenever a high watermark moves: what a follower
        # with nothing to read waits on.
        self._grown = asyncio.Event()

    # CoordinatorLog

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @property
    def writer(self) -> SqliteLog:
        return self

    @property
    def loader(self) -> SqliteLog:
        return self

    @property
    def follower(self) -> SqliteLog:
        """The file's own server follows it (its lock keeps any other out): what it keeps
        of the security partition is read this way."""
        return self

    @property
    def path(self) -> Path:
        return self._path

    @property
    def failure(self) -> str | None:
        """Never set: the file's partition count is checked at start, and nothing else
        changes it under a running server (the file is locked)."""
        return None

    def register_failure_listener(self, listener: LogFailureListener) -> None:
        # Never stops for good, so never told.
        pass

    async def start(self) -> None:
        if self._executor is not None or self._closed:
            raise RuntimeError("a SqliteLog starts once")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coordinator-sqlite")
        try:
            end_offsets = await self._run_in_worker(self._open_in_worker)
        except BaseException:
            await self.close()
            raise
        self._high_watermarks = list(end_offsets)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            # Queued behind every append already submitted, so those finish first.
            await asyncio.get_running_loop().run_in_executor(executor, self._close_in_worker)
        finally:
            executor.shutdown(wait=False)

    # PartitionWriter

    def register_listener(self, listener: HighWatermarkListener) -> None:
        self._listener = listener

    def high_watermark(self, partition: int) -> int:
        self._check_partition(partition)
        return self._high_watermarks[partition]

    def append(self, partition: int, records: Sequence[RawRecord]) -> asyncio.Future[int]:
        return asyncio.ensure_future(self._append(partition, records))

    def backlogged(self, partition: int) -> bool:
        return False

    def register_ready_listener(self, listener: ReadyListener) -> None:
        # Never backlogged, so never told.
        pass

    async def _append(self, partition: int, records: Sequence[RawRecord]) -> int:
        if not 0 <= partition < self._num_partitions:
            raise AppendError(UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition}")
        if not records:
            raise ValueError("cannot append an empty batch")
        executor = self._executor
        if executor is None:
            raise AppendError(KAFKA_STORAGE_ERROR, "the SQLite log is not running")
        timestamp_ms = time.time_ns() // 1_000_000
        done = asyncio.get_running_loop().run_in_executor(
            executor, self._append_in_worker, partition, tuple(records), timestamp_ms
        )
        # Reported from a callback, not after the await, so that a caller cancelled while
        # the transaction commits still has the committed batch reported; it runs before
        # the awaiting caller resumes.
        done.add_done_callback(functools.partial(self._on_append_done, partition))
        return await asyncio.shield(done)

    # CoordinatorLoader

    async def load(
        self, partition: int, sink: RecordSink, *, start_offset: int | None = None
    ) -> LoadSummary:
        """Replay the partition (from `start_offset` on, when given) into `sink` on the event
        loop thread, reading `LOAD_CHUNK_ROWS` rows per query, the next chunk while the sink
        takes the last one.

        Exceptions raised by `sink` propagate unchanged.
        """
        if not 0 <= partition < self._num_partitions:
            raise LoadError(f"no partition {partition}")
        if self._executor is None:
            raise LoadError("the SQLite log is not running")
        records = 0
        payload_bytes = 0
        start = start_offset or 0
        pending: asyncio.Future[list[tuple[int, bytes, bytes | None]]] | None = None
        try:
            # Taken in the worker, so it includes every append submitted before the load.
            end_offset = await self._run_in_worker(lambda: self._log_end_offsets[partition])
            if start > end_offset:
                raise LoadError(
                    f"partition {partition} ends at {end_offset}, below the offset {start} "
                    "to load from"
                )
            pending = self._submit(self._read_chunk_in_worker, partition, start, end_offset)
            while pending is not None:
                rows = await pending
                pending = None
                if len(rows) == LOAD_CHUNK_ROWS:
                    next_offset = rows[-1][0] + 1
                    pending = self._submit(
                        self._read_chunk_in_worker, partition, next_offset, end_offset
                    )
                for offset, key, value in rows:
                    sink(offset, key, value)
                    payload_bytes += len(key) + (len(value) if value is not None else 0)
                records += len(rows)
        except (sqlite3.Error, SqliteLogError) as error:
            raise LoadError(f"cannot read partition {partition}: {error}") from error
        finally:
            if pending is not None:
                pending.add_done_callback(_retrieve_result)
        return LoadSummary(
            start_offset=start, end_offset=end_offset, records=records, bytes=payload_bytes
        )

    # LogFollower

    async def follow(
        self,
        positions: Mapping[int, int | None],
        sink: FollowSink,
        *,
        max_wait_ms: int,
        max_bytes: int,
        min_bytes: int = 1,
    ) -> FollowResult:
        """One round over the committed rows past each position (None: from offset 0), the
        latest of each key, at most about `max_bytes` in all; when none is there, a wait of
        up to `max_wait_ms` for the high watermark to move. A round answers as soon as it
        has any row (`min_bytes` is a Kafka Fetch's; one file has no round trip to save)."""
        if self._executor is None:
            raise LoadError("the SQLite log is not running")
        if not self._has_rows_past(positions):
            grown = self._grown
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(grown.wait(), max_wait_ms / 1000)
        read: dict[int, int] = {}
        high_watermarks: dict[int, int] = {}
        retry: dict[int, str] = {}
        lost: dict[int, str] = {}
        budget = max_bytes
        for partition, position in positions.items():
            if not 0 <= partition < self._num_partitions:
                lost[partition] = f"no partition {partition}"
                continue
            start = position or 0
            high_watermark = self._high_watermarks[partition]
            if start > high_watermark:
                lost[partition] = f"the partition ends at {high_watermark}, below {start}"
                continue
            after = start
            if start < high_watermark:
                try:
                    rows, after = await self._run_in_worker(
                        self._read_followed_in_worker, partition, start, high_watermark, budget
                    )
                except (sqlite3.Error, SqliteLogError, LoadError) as error:
                    retry[partition] = f"cannot read partition {partition}: {error}"
                    continue
                latest: LatestRecords = {}
                for offset, key, value in rows:
                    latest[key] = (offset, value)
                    budget -= len(key) + (0 if value is None else len(value))
                if after > start:
                    sink(partition, latest, after)
            read[partition] = after
            high_watermarks[partition] = high_watermark
        return FollowResult(read, high_watermarks, retry, lost)

    def _has_rows_past(self, positions: Mapping[int, int | None]) -> bool:
        """Whether a round would read or report something now."""
        for partition, position in positions.items():
            if not 0 <= partition < self._num_partitions:
                return True
            if (position or 0) != self._high_watermarks[partition]:
                return True
        return False

    # Compaction

    async def compact(self, partition: int, below_offset: int) -> int:
        """Remove the records of `partition` below `below_offset` that a later record of the
        same key, also below `below_offset`, supersedes; return how many were removed.

        This is Kafka's log cleaner rule, so a load after compaction yields the same state
        as before it, and offsets never change (a compacted partition has gaps).

        Tombstones are kept. Kafka drops a tombstone only once `delete.retention.ms` has
        passed since the cleaner first reached it, because a reader that already took the
        deleted key's older value must still come across the delete; our loads read in
        chunks and a compaction can run between two chunks, so the same holds here. Dropping
        old tombstones can come later, with a retention; they cost a key each.

        Holds the worker (and so every append) for the length of one DELETE statement.
        """
        self._check_partition(partition)
        if self._executor is None:
            raise SqliteLogError("the SQLite log is not running")
        return await self._run_in_worker(self._compact_in_worker, partition, below_offset)

    # Worker-thread side

    def _open_in_worker(self) -> list[int]:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self._path, isolation_level=None, timeout=1.0, check_same_thread=True
            )
        except (OSError, sqlite3.Error) as error:
            raise SqliteLogError(f"cannot open the SQLite log {self._path}: {error}") from error
        try:
            return self._prepare_in_worker(connection)
        except BaseException:
            connection.close()
            raise

    def _prepare_in_worker(self, connection: sqlite3.Connection) -> list[int]:
        try:
            # Exclusive locking mode must come before the first WAL access; it also spares
            # the shared-memory index, which only matters with several connections.
            connection.execute("PRAGMA locking_mode = EXCLUSIVE")
            (journal_mode,) = connection.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(journal_mode).lower() != "wal":
                raise SqliteLogError(
                    f"{self._path}: the file system does not support SQLite's WAL journal"
                )
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
            # A write transaction, so that the exclusive lock is taken now and kept.
            connection.execute("BEGIN IMMEDIATE")
            end_offsets = self._create_or_check_schema(connection)
            connection.execute("COMMIT")
        except sqlite3.OperationalError as error:
            if "locked" in str(error):
                raise SqliteLogError(
                    f"{self._path} is in use by another process (or another SqliteLog)"
                ) from error
            raise SqliteLogError(f"cannot open the SQLite log {self._path}: {error}") from error
        except sqlite3.DatabaseError as error:
            raise SqliteLogError(f"{self._path} is not a usable SQLite log: {error}") from error
        self._connection = connection
        self._log_end_offsets = end_offsets
        return list(end_offsets)

    def _create_or_check_schema(self, connection: sqlite3.Connection) -> list[int]:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        meta = dict(connection.execute("SELECT name, value FROM meta").fetchall())
        if not meta:
            connection.executemany(
                "INSERT INTO meta (name, value) VALUES (?, ?)",
                [("schema_version", SCHEMA_VERSION), ("num_partitions", self._num_partitions)],
            )
            connection.executemany(
                'INSERT INTO partitions ("partition", log_end_offset) VALUES (?, 0)',
                [(partition,) for partition in range(self._num_partitions)],
            )
        else:
            if meta.get("schema_version") != SCHEMA_VERSION:
                raise SqliteLogError(
                    f"{self._path} has schema version {meta.get('schema_version')}, "
                    f"this server reads version {SCHEMA_VERSION}"
                )
            if meta.get("num_partitions") != self._num_partitions:
                raise PartitionCountMismatchError(
                    f"{self._path} was created with {meta.get('num_partitions')} partitions "
                    f"but {self._num_partitions} are configured; group placement depends on "
                    "the count, so it cannot change"
                )
        end_offsets = [0] * self._num_partitions
        for partition, log_end_offset in connection.execute(
            'SELECT "partition", log_end_offset FROM partitions'
        ):
            end_offsets[partition] = log_end_offset
        return end_offsets

    def _close_in_worker(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _append_in_worker(
        self, partition: int, records: tuple[RawRecord, ...], timestamp_ms: int
    ) -> int:
        connection = self._connection
        if connection is None:
            raise AppendError(KAFKA_STORAGE_ERROR, "the SQLite log is closed")
        base_offset = self._log_end_offsets[partition]
        end_offset = base_offset + len(records)
        rows = [
            (partition, base_offset + index, key, value, timestamp_ms)
            for index, (key, value) in enumerate(records)
        ]
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(_INSERT_RECORD, rows)
                # The end offset is kept apart from the rows so that removing records (a
                # later tombstone clean-up) can never hand out an offset twice.
                connection.execute(_UPDATE_END_OFFSET, (end_offset, partition))
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise AppendError(
                KAFKA_STORAGE_ERROR,
                f"SQLite append to partition {partition} failed: {error}",
            ) from error
        self._log_end_offsets[partition] = end_offset
        return end_offset

    def _read_chunk_in_worker(
        self, partition: int, from_offset: int, end_offset: int
    ) -> list[tuple[int, bytes, bytes | None]]:
        connection = self._connection
        if connection is None:
            raise LoadError("the SQLite log is closed")
        return connection.execute(
            _SELECT_CHUNK, (partition, from_offset, end_offset, LOAD_CHUNK_ROWS)
        ).fetchall()

    def _read_followed_in_worker(
        self, partition: int, from_offset: int, high_watermark: int, budget: int
    ) -> tuple[list[tuple[int, bytes, bytes | None]], int]:
        """The rows from `from_offset` below the high watermark, up to about `budget` bytes
        (one row at least), and the offset to read on from: the high watermark when every
        row below it came (a compacted partition has gaps), else the row after the last."""
        connection = self._connection
        if connection is None:
            raise LoadError("the SQLite log is closed")
        rows: list[tuple[int, bytes, bytes | None]] = connection.execute(
            _SELECT_CHUNK, (partition, from_offset, high_watermark, LOAD_CHUNK_ROWS)
        ).fetchall()
        for index, (_, key, value) in enumerate(rows):
            budget -= len(key) + (0 if value is None else len(value))
            if budget <= 0 and index + 1 < len(rows):
                kept = rows[: index + 1]
                return kept, kept[-1][0] + 1
        if len(rows) == LOAD_CHUNK_ROWS:
            return rows, rows[-1][0] + 1
        return rows, high_watermark

    def _compact_in_worker(self, partition: int, below_offset: int) -> int:
        connection = self._connection
        if connection is None:
            raise SqliteLogError("the SQLite log is closed")
        connection.execute("BEGIN IMMEDIATE")
        try:
            cursor = connection.execute(
                _DELETE_SUPERSEDED, {"partition": partition, "below_offset": below_offset}
            )
            removed = cursor.rowcount
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
            raise
        return removed

    # Event-loop side helpers

    def _on_append_done(self, partition: int, done: asyncio.Future[int]) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        end_offset = done.result()
        if end_offset <= self._high_watermarks[partition]:
            return
        self._high_watermarks[partition] = end_offset
        grown, self._grown = self._grown, asyncio.Event()
        grown.set()
        listener = self._listener
        if listener is not None:
            try:
                listener(partition, end_offset)
            except Exception:
                # The batch is committed whatever the listener does; failing the append
                # would tell the caller the opposite.
                log.exception("high-watermark listener failed for partition %d", partition)

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        executor = self._executor
        if executor is None:
            raise SqliteLogError("the SQLite log is not running")
        return asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    async def _run_in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the worker thread."""
        return await self._submit(fn, *args)

    async def limit_growth(self, pages: int) -> None:
        """Let the database grow by at most `pages` more pages (SQLite's max_page_count on
        the open connection): what a full disk looks like to SQLite. A test hook."""
        await self._run_in_worker(self._limit_growth_in_worker, pages)

    def _limit_growth_in_worker(self, pages: int) -> None:
        connection = self._connection
        assert connection is not None, "the log is not open"
        (page_count,) = connection.execute("PRAGMA page_count").fetchone()
        connection.execute(f"PRAGMA max_page_count = {page_count + pages}")

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._num_partitions:
            raise ValueError(
                f"partition {partition} is outside the log's {self._num_partitions} partitions"
            )


def _retrieve_result(future: asyncio.Future[Any]) -> None:
    """Mark an abandoned future's exception as seen, so asyncio does not log it."""
    if not future.cancelled():
        future.exception()
