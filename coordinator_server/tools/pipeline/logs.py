"""Where the coordinator's log is stored, and reading the SQLite file.

A log is a Kafka topic (`kafka_source.KafkaLogTopic`, read through Spark's own Kafka
source) or the embedded SQLite file (`SqliteLogFile`, read by the Python data source of
`source`: the partitions with their start and end offsets, and the records of one
partition between two offsets; the end of a partition is its `log_end_offset`).

A running server holds its SQLite file locked (`locking_mode=EXCLUSIVE`), so nothing else
can open it; `sqlite_snapshot` copies it consistently to read the copy instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from coordinator_server.tools.pipeline.decode import RawLogRecord

__all__ = [
    "DEFAULT_OFFSETS_TOPIC",
    "SQLITE_FILE_NAME",
    "LogInUseError",
    "LogLocation",
    "LogUnreadableError",
    "SqliteLogFile",
    "TopicNotFoundError",
    "log_location_from_options",
    "readable",
    "readable_sqlite_log",
    "sqlite_snapshot",
]

DEFAULT_OFFSETS_TOPIC: Final = "__coordinator_offsets"
SQLITE_FILE_NAME: Final = "coordinator.db"
_SQLITE_FETCH_ROWS: Final = 10_000
_SNAPSHOT_ATTEMPTS: Final = 20


class LogUnreadableError(RuntimeError):
    """The log cannot be read: its cluster does not answer, or Spark lacks the means."""


class TopicNotFoundError(LogUnreadableError, LookupError):
    """The log's Kafka topic does not exist."""


class LogInUseError(RuntimeError):
    """The SQLite log is locked by a running server."""


class LogLocation(ABC):
    """Where a coordinator log is."""

    @abstractmethod
    def describe(self) -> str:
        """Where the log is, for messages."""


@dataclass(frozen=True)
class SqliteLogFile(LogLocation):
    """The embedded SQLite log (picklable: it travels to the executors, which read it)."""

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
                    "coordinator_server.tools.pipeline.sqlite_snapshot)"
                ) from error
            raise
        return connection

    def end_offsets(self) -> dict[int, int]:
        with contextlib.closing(self._connect()) as connection:
            rows = connection.execute('SELECT "partition", log_end_offset FROM partitions')
            return {int(partition): int(end) for partition, end in rows}

    def offsets(self) -> tuple[dict[int, int], dict[int, int]]:
        """(start_offsets, end_offsets) at once."""
        return self.start_offsets(), self.end_offsets()

    def start_offsets(self) -> dict[int, int]:
        # Compaction leaves gaps but never moves a partition's start past offset 0 for
        # good: reading from 0 skips the gaps at no cost.
        return dict.fromkeys(self.end_offsets(), 0)

    def count_records(self, at_most: int) -> int:
        """How many records the log holds now, counted up to `at_most` (a bounded scan:
        compaction leaves far fewer records than its offsets say)."""
        with contextlib.closing(self._connect()) as connection:
            (count,) = connection.execute(
                "SELECT count(*) FROM (SELECT 1 FROM records LIMIT ?)", (at_most,)
            ).fetchone()
            return int(count)

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


@contextlib.contextmanager
def readable(location: LogLocation) -> Iterator[LogLocation]:
    """`location` as it can be read for as long as the block runs (a SQLite log a server
    holds is read through a snapshot)."""
    if isinstance(location, SqliteLogFile):
        with readable_sqlite_log(location.path) as sqlite_location:
            yield sqlite_location
    else:
        yield location


def log_location_from_options(options: Mapping[str, str]) -> SqliteLogFile:
    """The data source's option `path` (the file or the server's data directory): the
    SQLite log. (A Kafka log is read through Spark's own Kafka source.)"""
    path = options.get("path")
    if not path:
        raise ValueError("give the option path: the SQLite log or the server's data directory")
    return SqliteLogFile(str(sqlite_file(path)))
