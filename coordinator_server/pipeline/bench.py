"""`analyze bench`: rows per second of the pipeline over a generated SQLite log.

The log is written by the server's own SQLite writer (`storage.sqlite.SqliteLog`), so it
is the real format: offset commits of `groups` groups over 8 topics of 16 partitions,
with a group metadata record (three consumer members with assignments) every 50 records.
Two figures, each timed after the Spark session is up and its Python workers have read a
slice of the log:

- read + decode: every record read from the file and decoded into typed rows (the rows
  are produced and dropped, Spark's `noop` sink);
- read + decode + aggregate: the same, then the final state with compaction semantics
  (the latest record of each key, the heart of `audit`) summed up per group.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from coordinator_server.pipeline.logs import SQLITE_FILE_NAME, SqliteLogFile
from coordinator_server.pipeline.session import read_log
from coordinator_server.pipeline.state import final_offsets

__all__ = ["BenchResult", "generate_log", "run_bench"]

LOG_PARTITIONS: Final = 8
TOPICS: Final = 8
TOPIC_PARTITIONS: Final = 16
GROUP_RECORD_EVERY: Final = 50
APPEND_BATCH: Final = 5_000
BASE_TIME_MS: Final = 1_750_000_000_000
WARM_UP_RECORDS: Final = 2_000


@dataclass(frozen=True)
class BenchResult:
    records: int
    log_partitions: int
    generate_s: float
    read_decode_s: float
    aggregate_s: float
    final_offsets: int

    @property
    def read_decode_rows_per_s(self) -> float:
        return self.records / self.read_decode_s

    @property
    def aggregate_rows_per_s(self) -> float:
        return self.records / self.aggregate_s

    def lines(self) -> list[str]:
        return [
            f"log: {self.records} records in {self.log_partitions} partitions (SQLite), "
            f"written in {self.generate_s:.1f} s",
            f"read + decode: {self.read_decode_s:.2f} s, {self.read_decode_rows_per_s:,.0f} rows/s",
            f"read + decode + aggregate (final state per key, then per group): "
            f"{self.aggregate_s:.2f} s, {self.aggregate_rows_per_s:,.0f} rows/s "
            f"({self.final_offsets} final offsets)",
        ]


def _records(count: int, groups: int) -> Iterator[tuple[int, tuple[bytes, bytes | None]]]:
    from coordinator_server.records import (
        GroupMemberValue,
        GroupMetadataValue,
        encode_record,
        new_group_metadata_record,
        new_offset_commit_record,
    )
    from protocol.consumer import (
        ConsumerProtocolAssignment,
        ConsumerProtocolSubscription,
        TopicPartitions,
    )
    from protocol.hashing import partition_for

    subscription = ConsumerProtocolSubscription([f"topic-{t}" for t in range(TOPICS)]).encode()
    for index in range(count):
        group = f"group-{index % groups}"
        timestamp_ms = BASE_TIME_MS + index * 10
        if index % GROUP_RECORD_EVERY == 0:
            members = tuple(
                GroupMemberValue(
                    f"{group}-member-{m}",
                    None,
                    f"client-{m}",
                    f"/10.0.0.{m}",
                    30_000,
                    10_000,
                    subscription,
                    ConsumerProtocolAssignment(
                        [TopicPartitions(f"topic-{t}", [m]) for t in range(TOPICS)]
                    ).encode(),
                )
                for m in range(3)
            )
            value = GroupMetadataValue("consumer", index // groups, "range", members[0].member_id,
                                       timestamp_ms, members)  # fmt: skip
            record = new_group_metadata_record(group, value)
        else:
            topic = index % TOPICS
            record = new_offset_commit_record(
                group, f"topic-{topic}", (index // TOPICS) % TOPIC_PARTITIONS, index, -1, "",
                timestamp_ms,
            )  # fmt: skip
        yield partition_for(group, LOG_PARTITIONS), encode_record(record)


async def _write(path: Path, count: int, groups: int) -> None:
    from coordinator_server.storage.sqlite import SqliteLog

    # No fsync per batch: a benchmark input, not a log anyone depends on.
    log = SqliteLog(path, LOG_PARTITIONS, synchronous="OFF")
    await log.start()
    try:
        pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, raw in _records(count, groups):
            batch = pending.setdefault(partition, [])
            batch.append(raw)
            if len(batch) >= APPEND_BATCH:
                await log.append(partition, batch)
                pending[partition] = []
        for partition, batch in pending.items():
            if batch:
                await log.append(partition, batch)
    finally:
        await log.close()


def generate_log(path: Path, count: int, groups: int = 1_000) -> None:
    """Write a SQLite log of `count` records at `path` (a new file)."""
    asyncio.run(_write(path, count, groups))


@contextlib.contextmanager
def _log_file(data_dir: Path | None) -> Iterator[Path]:
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        yield data_dir / SQLITE_FILE_NAME
        return
    with tempfile.TemporaryDirectory(prefix="coordinator-bench-") as tmp:
        yield Path(tmp) / SQLITE_FILE_NAME


def run_bench(
    spark: SparkSession, records: int, data_dir: Path | None = None, groups: int = 1_000
) -> BenchResult:
    """Generate the log (in `data_dir`, reusing a log already there with as many records;
    else in a temporary directory) and time the two figures."""
    with _log_file(data_dir) as path:
        started = time.perf_counter()
        location = SqliteLogFile(str(path))
        if not path.exists() or sum(location.end_offsets().values()) != records:
            path.unlink(missing_ok=True)
            generate_log(path, records, groups)
        generate_s = time.perf_counter() - started

        # Python workers start and import on first use: warm them on a slice first, so
        # the figures are of the steady state.
        slice_ends = {p: min(end, WARM_UP_RECORDS) for p, end in location.end_offsets().items()}
        read_log(spark, location, slice_ends).write.format("noop").mode("overwrite").save()

        started = time.perf_counter()
        read_log(spark, location).write.format("noop").mode("overwrite").save()
        read_decode_s = time.perf_counter() - started

        started = time.perf_counter()
        final = (
            final_offsets(read_log(spark, location))
            .groupBy("group")
            .agg(F.count(F.lit(1)).alias("partitions"), F.max("commit_timestamp").alias("last"))
            .agg(F.sum("partitions"))
            .first()
        )
        aggregate_s = time.perf_counter() - started
        final_count = int(final[0]) if final and final[0] is not None else 0
        return BenchResult(
            records=records,
            log_partitions=len(location.end_offsets()),
            generate_s=generate_s,
            read_decode_s=read_decode_s,
            aggregate_s=aggregate_s,
            final_offsets=final_count,
        )
