"""Reading the coordinator's log where it is stored: a Kafka topic or the SQLite file.

Both give the same things: the partitions with their start and end offsets, and the
records of one partition between two offsets. The end of a Kafka partition is the high
watermark a Fetch response reports (what a consumer can read up to; ListOffsets(LATEST)
is not answered exactly by every Kafka-protocol broker); the end of a SQLite partition is
its `log_end_offset`.

A running server holds its SQLite file locked (`locking_mode=EXCLUSIVE`), so nothing else
can open it; `sqlite_snapshot` copies it consistently to read the copy instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from coordinator_server.pipeline.decode import RawLogRecord

__all__ = [
    "DEFAULT_OFFSETS_TOPIC",
    "SQLITE_FILE_NAME",
    "KafkaLog",
    "LogInUseError",
    "LogLocation",
    "SqliteLogFile",
    "log_location_from_options",
    "readable",
    "readable_sqlite_log",
    "sqlite_snapshot",
]

DEFAULT_OFFSETS_TOPIC: Final = "__coordinator_offsets"
SQLITE_FILE_NAME: Final = "coordinator.db"
KAFKA_OPTION_PREFIX: Final = "kafka."
_FETCH_BYTES: Final = 4 * 1024 * 1024
_FETCH_WAIT_MS: Final = 100
_POLL_MS: Final = 500
_SQLITE_FETCH_ROWS: Final = 10_000
_SNAPSHOT_ATTEMPTS: Final = 20


class LogInUseError(RuntimeError):
    """The SQLite log is locked by a running server."""


class LogLocation(ABC):
    """Where a coordinator log is, and how to read it (picklable: it travels to executors)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the log is, for messages."""

    @abstractmethod
    def end_offsets(self) -> dict[int, int]:
        """Every partition's end offset (the offset the next record will get)."""

    @abstractmethod
    def start_offsets(self) -> dict[int, int]:
        """Every partition's first readable offset."""

    def offsets(self) -> tuple[dict[int, int], dict[int, int]]:
        """(start_offsets, end_offsets) at once."""
        return self.start_offsets(), self.end_offsets()

    @abstractmethod
    def read(self, partition: int, start: int, end: int) -> Iterator[RawLogRecord]:
        """The records of `partition` at offsets in [start, end), in offset order."""


@dataclass(frozen=True)
class KafkaLog(LogLocation):
    bootstrap_servers: str
    topic: str = DEFAULT_OFFSETS_TOPIC
    timeout_ms: int = 30_000
    # Kafka's security settings under librdkafka's names (security.protocol, sasl.mechanism,
    # sasl.username, sasl.password, ssl.ca.location, ...: strings, which travel to the
    # executors), and other aiokafka arguments, passed as they are. Out of the repr: they
    # may hold a password.
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        return f"kafka topic {self.topic} at {self.bootstrap_servers}"

    def _reader(self) -> Any:
        from coordinator_server.client.kafka_log import KafkaLogReader

        return KafkaLogReader(
            self.bootstrap_servers,
            timeout_ms=self.timeout_ms,
            **aiokafka_options(self.kafka_options),
        )

    def offsets(self) -> tuple[dict[int, int], dict[int, int]]:
        async def run() -> tuple[dict[int, int], dict[int, int]]:
            async with self._reader() as reader:
                partitions = await reader.partitions_of([self.topic])
                if not partitions:
                    raise LookupError(f"topic {self.topic} does not exist")
                starts = await reader.beginning_offsets(partitions)
                # Fetching from the start is valid whatever the retention did.
                ends = await reader.end_offsets(partitions, starting_offsets=starts)
            return (
                {tp.partition: offset for tp, offset in starts.items()},
                {tp.partition: offset for tp, offset in ends.items()},
            )

        return asyncio.run(run())

    def end_offsets(self) -> dict[int, int]:
        return self.offsets()[1]

    def start_offsets(self) -> dict[int, int]:
        return self.offsets()[0]

    def read(self, partition: int, start: int, end: int) -> Iterator[RawLogRecord]:
        if start >= end:
            return
        # aiokafka wants a running loop for everything it creates (assignments included);
        # a generator cannot be a coroutine, so it drives a loop of its own, one step at a
        # time.
        loop = asyncio.new_event_loop()
        try:
            consumer = loop.run_until_complete(self._start_consumer(partition, start))
            try:
                yield from self._read_with(loop, consumer, partition, start, end)
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(consumer.stop())
        finally:
            loop.close()

    async def _start_consumer(self, partition: int, start: int) -> Any:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            # A read never starts over silently: an offset out of range fails it.
            auto_offset_reset="none",
            fetch_max_bytes=_FETCH_BYTES,
            max_partition_fetch_bytes=_FETCH_BYTES,
            fetch_max_wait_ms=_FETCH_WAIT_MS,
            request_timeout_ms=self.timeout_ms,
            **aiokafka_options(self.kafka_options),
        )
        try:
            await asyncio.wait_for(consumer.start(), self.timeout_ms / 1000)
            tp = TopicPartition(self.topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    async def _fetch(self, consumer: Any, partition: int) -> tuple[list[Any], int]:
        from aiokafka.structs import TopicPartition

        tp = TopicPartition(self.topic, partition)
        fetched = await consumer.getmany(tp, timeout_ms=_POLL_MS)
        position: int = await consumer.position(tp)
        return list(fetched.get(tp, ())), position

    def _read_with(
        self,
        loop: asyncio.AbstractEventLoop,
        consumer: Any,
        partition: int,
        start: int,
        end: int,
    ) -> Iterator[RawLogRecord]:
        position = start
        deadline = time.monotonic() + self.timeout_ms / 1000
        while position < end:
            messages, position = loop.run_until_complete(self._fetch(consumer, partition))
            for message in messages:
                if message.offset >= end:
                    return
                # Records without a key are not the coordinator's (its loader skips them).
                if message.key is not None:
                    yield (message.offset, message.timestamp, message.key, message.value)
            if messages:
                deadline = time.monotonic() + self.timeout_ms / 1000
            elif time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.topic}-{partition} made no progress for {self.timeout_ms} ms "
                    f"(at offset {position}, reading up to {end})"
                )


@dataclass(frozen=True)
class SqliteLogFile(LogLocation):
    path: str

    def describe(self) -> str:
        return f"sqlite log {self.path}"

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=0.1)
        try:
            connection.execute("SELECT 1 FROM partitions LIMIT 1").fetchall()
        except sqlite3.OperationalError as error:
            connection.close()
            if "locked" in str(error):
                raise LogInUseError(
                    f"{self.path} is locked by a running coordinator-server; read a copy "
                    "(coordinator-server analyze copies it for you; in code, "
                    "coordinator_server.pipeline.sqlite_snapshot)"
                ) from error
            raise
        return connection

    def end_offsets(self) -> dict[int, int]:
        with contextlib.closing(self._connect()) as connection:
            rows = connection.execute('SELECT "partition", log_end_offset FROM partitions')
            return {int(partition): int(end) for partition, end in rows}

    def start_offsets(self) -> dict[int, int]:
        # Compaction leaves gaps but never moves a partition's start past offset 0 for
        # good: reading from 0 skips the gaps at no cost.
        return dict.fromkeys(self.end_offsets(), 0)

    def read(self, partition: int, start: int, end: int) -> Iterator[RawLogRecord]:
        if start >= end:
            return
        with contextlib.closing(self._connect()) as connection:
            cursor = connection.execute(
                'SELECT "offset", timestamp_ms, key, value FROM records '
                'WHERE "partition" = ? AND "offset" >= ? AND "offset" < ? ORDER BY "offset"',
                (partition, start, end),
            )
            while rows := cursor.fetchmany(_SQLITE_FETCH_ROWS):
                yield from rows


def sqlite_file(path: str | os.PathLike[str]) -> Path:
    """The log file itself, given it or the server's `--data-dir`."""
    given = Path(path)
    return given / SQLITE_FILE_NAME if given.is_dir() else given


def _file_state(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _wal_header(path: Path) -> bytes:
    try:
        with path.open("rb") as wal:
            return wal.read(32)
    except FileNotFoundError:
        return b""


@contextlib.contextmanager
def sqlite_snapshot(
    path: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None
) -> Iterator[Path]:
    """A consistent copy of a SQLite log, even one a running server has locked; removed
    on exit. Yields the copy's file.

    While the server runs, its commits append to the write-ahead log (`-wal`) and leave the
    main file alone until a checkpoint copies them into it and the WAL starts over with a
    new header. So a copy of the main file and then of the WAL is consistent when the main
    file did not change and the WAL kept its header meanwhile; otherwise it is taken again.
    A transaction half-written at the end of the copied WAL fails its checksum and SQLite
    ignores it, as it would after a crash.
    """
    source = sqlite_file(path)
    wal = source.with_name(source.name + "-wal")
    if not source.exists():
        raise FileNotFoundError(f"no SQLite log at {source}")
    with tempfile.TemporaryDirectory(prefix="coordinator-log-", dir=directory) as tmp:
        copy = Path(tmp) / SQLITE_FILE_NAME
        copy_wal = copy.with_name(copy.name + "-wal")
        for _ in range(_SNAPSHOT_ATTEMPTS):
            before = (_file_state(source), _wal_header(wal))
            shutil.copyfile(source, copy)
            try:
                shutil.copyfile(wal, copy_wal)
            except FileNotFoundError:
                copy_wal.unlink(missing_ok=True)
            if (_file_state(source), _wal_header(wal)) == before:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"{source} kept changing under checkpoints; no consistent copy")
        # Opening the copy once replays its WAL (recovery needs write access) and folds it
        # into the copy, which executors then open read-only.
        with contextlib.closing(sqlite3.connect(copy)) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            connection.execute("PRAGMA journal_mode = DELETE").fetchall()
        yield copy


@contextlib.contextmanager
def readable_sqlite_log(
    path: str | os.PathLike[str], snapshot_dir: str | os.PathLike[str] | None = None
) -> Iterator[SqliteLogFile]:
    """The SQLite log as it can be read now: the file itself when no server holds it,
    else a snapshot for as long as the block runs."""
    location = SqliteLogFile(str(sqlite_file(path)))
    if not Path(location.path).exists():
        raise FileNotFoundError(f"no SQLite log at {location.path}")
    try:
        location.end_offsets()
    except (LogInUseError, sqlite3.OperationalError):
        # Locked by a running server, or left with a write-ahead log a read-only open
        # cannot recover (a server that was killed): read a recovered copy.
        with sqlite_snapshot(location.path, snapshot_dir) as copy:
            yield SqliteLogFile(str(copy))
        return
    yield location


def aiokafka_options(kafka_options: Mapping[str, str]) -> dict[str, Any]:
    """aiokafka's arguments from a Kafka log's options: the security settings (librdkafka's
    names) become an SSL context and SASL credentials, made where the reading runs; the
    rest pass as they are."""
    from coordinator_server.storage.kafka_security import KafkaSecurity, is_security_property

    security = {k: v for k, v in kafka_options.items() if is_security_property(k)}
    rest: dict[str, Any] = {k: v for k, v in kafka_options.items() if not is_security_property(k)}
    if security:
        rest.update(KafkaSecurity.from_properties(security).aiokafka_options())
    return rest


@contextlib.contextmanager
def readable(location: LogLocation) -> Iterator[LogLocation]:
    """`location` as it can be read for as long as the block runs (a SQLite log a server
    holds is read through a snapshot)."""
    if isinstance(location, SqliteLogFile):
        with readable_sqlite_log(location.path) as sqlite_location:
            yield sqlite_location
    else:
        yield location


def log_location_from_options(options: Mapping[str, str]) -> LogLocation:
    """The data source's options: `bootstrapServers` (and `topic`, and `kafka.*` passed to
    aiokafka) for a Kafka log, or `path` (the file or the server's data directory) for a
    SQLite one."""
    bootstrap = options.get("bootstrapServers") or options.get("bootstrapservers")
    path = options.get("path")
    if bool(bootstrap) == bool(path):
        raise ValueError("give exactly one of the options bootstrapServers (Kafka) or path")
    if bootstrap:
        kafka_options = {
            name[len(KAFKA_OPTION_PREFIX) :]: value
            for name, value in options.items()
            if name.lower().startswith(KAFKA_OPTION_PREFIX)
        }
        return KafkaLog(
            bootstrap,
            options.get("topic") or DEFAULT_OFFSETS_TOPIC,
            int(options.get("timeoutMs") or options.get("timeoutms") or 30_000),
            kafka_options,
        )
    assert path is not None
    return SqliteLogFile(str(sqlite_file(path)))
