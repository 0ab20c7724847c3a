"""The Spark data source `coordinator_log`: the embedded SQLite log as a DataFrame.

    spark.dataSource.register(CoordinatorLogDataSource)
    spark.read.format("coordinator_log").load("/var/lib/coordinator")

Options: `path` (the server's data directory or the file); `batchRows` (rows per Arrow
batch, default 10000). The schema is `decode.SCHEMA`. (A log in Kafka is read through
Spark's own Kafka source: `kafka_source`.)

A batch read plans one Spark partition per log partition, from its start to the end it
has when the read is planned, and executors read and decode their partition. A streaming
read (`spark.readStream`) has the same partitions; its offsets are `{"<log partition>":
<next log offset>}`, so a query with a checkpoint reads, on each run, only what was
appended since the last one (`startingOffsets`: `earliest`, the default, or `latest` for
a query's first run).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from coordinator_server.tools.pipeline.decode import ARROW_SCHEMA, SCHEMA, decode_batches
from coordinator_server.tools.pipeline.logs import SqliteLogFile, log_location_from_options

__all__ = ["FORMAT", "CoordinatorLogDataSource", "LogRange", "decode_log"]

FORMAT: Final = "coordinator_log"
DEFAULT_BATCH_ROWS: Final = 10_000


class LogRange(InputPartition):
    """The records of one log partition at offsets in [start, end)."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"LogRange({self.partition}, {self.start}, {self.end})"


def _read_range(location: SqliteLogFile, batch_rows: int, log_range: LogRange) -> Iterator[Any]:
    records = location.read(log_range.partition, log_range.start, log_range.end)
    yield from decode_batches(log_range.partition, records, batch_rows)


def decode_log(location: SqliteLogFile, end_offsets: Mapping[int, int]) -> pa.Table:
    """The whole log up to `end_offsets`, decoded here into one Arrow table of
    `decode.ARROW_SCHEMA` (what the data source's partitions hold, read in the caller's
    process instead of Spark's Python workers)."""
    batches = [
        batch
        for partition, end in sorted(end_offsets.items())
        for batch in _read_range(location, DEFAULT_BATCH_ROWS, LogRange(partition, 0, end))
    ]
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def _end_offsets_option(options: Mapping[str, str]) -> dict[int, int] | None:
    given = options.get("endOffsets")
    if not given:
        return None
    return {int(partition): int(offset) for partition, offset in json.loads(given).items()}


class CoordinatorLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def _location(self) -> SqliteLogFile:
        return log_location_from_options(self.options)

    def _batch_rows(self) -> int:
        return int(self.options.get("batchRows") or DEFAULT_BATCH_ROWS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return CoordinatorLogReader(
            self._location(), self._batch_rows(), _end_offsets_option(self.options)
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        starting = (self.options.get("startingOffsets") or "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"startingOffsets is earliest or latest, not {starting!r}")
        return CoordinatorLogStreamReader(self._location(), self._batch_rows(), starting)


class CoordinatorLogReader(DataSourceReader):
    def __init__(
        self, location: SqliteLogFile, batch_rows: int, end_offsets: dict[int, int] | None
    ) -> None:
        self.location = location
        self.batch_rows = batch_rows
        self.end_offsets = end_offsets

    def partitions(self) -> Sequence[InputPartition]:
        starts, ends = self.location.offsets()
        if self.end_offsets is not None:
            ends = self.end_offsets
        return [
            LogRange(partition, starts.get(partition, 0), end)
            for partition, end in sorted(ends.items())
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        return _read_range(self.location, self.batch_rows, partition)


def _offsets_json(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(partition): offset for partition, offset in sorted(offsets.items())}


class CoordinatorLogStreamReader(DataSourceStreamReader):
    def __init__(self, location: SqliteLogFile, batch_rows: int, starting: str) -> None:
        self.location = location
        self.batch_rows = batch_rows
        self.starting = starting

    def initialOffset(self) -> dict[str, int]:
        if self.starting == "latest":
            return _offsets_json(self.location.end_offsets())
        return _offsets_json(self.location.start_offsets())

    # Spark before 4.2 calls latestOffset() with no arguments; later versions pass the
    # start and a read limit, which this source does not need (it reads all there is).
    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        return _offsets_json(self.location.end_offsets())

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        ranges = []
        for partition, end_offset in sorted(end.items(), key=lambda item: int(item[0])):
            # A partition the start does not know (the topic grew) is read from its start.
            start_offset = int(start.get(partition, 0))
            if end_offset > start_offset:
                ranges.append(LogRange(int(partition), start_offset, int(end_offset)))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        return _read_range(self.location, self.batch_rows, partition)

    def commit(self, end: dict[str, int]) -> None:
        # Nothing to release: the log is not consumed, only read.
        pass
