"""`analyze bench`: rows per second of the pipeline over a generated log.

The log is written by the server's own writer, so it is the real format: offset commits
of `groups` groups over 8 topics of 16 partitions, with a group metadata record (three
consumer members with assignments) every 50 records. It goes to a SQLite file
(`storage.sqlite.SqliteLog`, read by the `coordinator_log` data source) or to a Kafka topic
(`storage.kafka.KafkaLog`, read through Spark's Kafka source). The topic is made without
compaction, so that the cleaner cannot change the input between runs; a run reuses a topic
that holds as many records. Two figures, each timed after the Spark session is up and its
Python workers have read a slice of the log:

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_server.storage.kafka.security import KafkaSecurity
from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic
from coordinator_server.tools.pipeline.logs import (
    SQLITE_FILE_NAME,
    LogLocation,
    SqliteLogFile,
    TopicNotFoundError,
)
from coordinator_server.tools.pipeline.session import log_end_offsets, read_log
from coordinator_server.tools.pipeline.state import final_offsets

__all__ = [
    "BenchResult",
    "KafkaBenchLog",
    "generate_kafka_log",
    "generate_log",
    "generate_records",
    "run_bench",
]

LOG_PARTITIONS: Final = 8
TOPICS: Final = 8
TOPIC_PARTITIONS: Final = 16
GROUP_RECORD_EVERY: Final = 50
APPEND_BATCH: Final = 5_000
# Records per Kafka append: a batch must stay under the writer's 1 MiB (a group record is
# about 700 bytes, an offset commit about 100).
KAFKA_APPEND_BATCH: Final = 2_000
KAFKA_APPENDS_IN_FLIGHT: Final = 16
# Not compacted and never deleted: the input stays as written.
BENCH_TOPIC_CONFIGS: Final = {"cleanup.policy": "delete", "retention.ms": "-1"}
TOPIC_ALREADY_EXISTS: Final = 36
BASE_TIME_MS: Final = 1_750_000_000_000
WARM_UP_RECORDS: Final = 2_000


@dataclass(frozen=True)
class KafkaBenchLog:
    """A Kafka topic for the generated log, and how to reach its cluster."""

    bootstrap_servers: str
    topic: str
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def location(self) -> KafkaLogTopic:
        return KafkaLogTopic(
            self.bootstrap_servers, self.topic, options=self.security.spark_options()
        )


@dataclass(frozen=True)
class BenchResult:
    records: int
    log_partitions: int
    generate_s: float
    read_decode_s: float
    aggregate_s: float
    final_offsets: int
    stored_in: str = "SQLite"

    @property
    def read_decode_rows_per_s(self) -> float:
        return self.records / self.read_decode_s

    @property
    def aggregate_rows_per_s(self) -> float:
        return self.records / self.aggregate_s

    def lines(self) -> list[str]:
        return [
            f"log: {self.records} records in {self.log_partitions} partitions "
            f"({self.stored_in}), "
            f"written in {self.generate_s:.1f} s",
            f"read + decode: {self.read_decode_s:.2f} s, {self.read_decode_rows_per_s:,.0f} rows/s",
            f"read + decode + aggregate (final state per key, then per group): "
            f"{self.aggregate_s:.2f} s, {self.aggregate_rows_per_s:,.0f} rows/s "
            f"({self.final_offsets} final offsets)",
        ]


def generate_records(count: int, groups: int) -> Iterator[tuple[int, tuple[bytes, bytes | None]]]:
    """The bench's log: (log partition, encoded record) of each of `count` records."""
    from coordinator_protocol.consumer import (
        ConsumerProtocolAssignment,
        ConsumerProtocolSubscription,
        TopicPartitions,
    )
    from coordinator_protocol.hashing import partition_for
    from coordinator_server.records import (
        GroupMemberValue,
        GroupMetadataValue,
        encode_record,
        new_group_metadata_record,
        new_offset_commit_record,
    )

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
        for partition, raw in generate_records(count, groups):
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


async def _create_bench_topic(target: KafkaBenchLog) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(
        bootstrap_servers=target.bootstrap_servers, **target.security.aiokafka_options()
    )
    forbid_auto_topic_creation(admin._client)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(target.topic, LOG_PARTITIONS, 1, topic_configs=BENCH_TOPIC_CONFIGS)]
        )
    finally:
        await admin.close()
    for topic_error in response.topic_errors:
        if topic_error[1] not in (0, TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"cannot create topic {target.topic}: error {topic_error[1:]}")


async def _write_kafka(target: KafkaBenchLog, count: int, groups: int) -> None:
    from coordinator_server.storage.kafka.log import KafkaLog

    await _create_bench_topic(target)
    log = KafkaLog(
        target.bootstrap_servers,
        target.topic,
        LOG_PARTITIONS,
        1,
        request_timeout_ms=30_000,
        security=target.security,
    )
    await log.start()
    try:
        in_flight: set[asyncio.Future[int]] = set()
        pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, raw in generate_records(count, groups):
            batch = pending.setdefault(partition, [])
            batch.append(raw)
            if len(batch) >= KAFKA_APPEND_BATCH:
                in_flight.add(log.append(partition, batch))
                pending[partition] = []
                if len(in_flight) >= KAFKA_APPENDS_IN_FLIGHT:
                    done, in_flight = await asyncio.wait(
                        in_flight, return_when=asyncio.FIRST_COMPLETED
                    )
                    for appended in done:
                        appended.result()
        in_flight.update(log.append(p, batch) for p, batch in pending.items() if batch)
        await asyncio.gather(*in_flight)
    finally:
        await log.close()


def generate_kafka_log(target: KafkaBenchLog, count: int, groups: int = 1_000) -> None:
    """Write a log of `count` records to the topic of `target` (made without compaction
    when it does not exist)."""
    asyncio.run(_write_kafka(target, count, groups))


@contextlib.contextmanager
def _log_file(data_dir: Path | None) -> Iterator[Path]:
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        yield data_dir / SQLITE_FILE_NAME
        return
    with tempfile.TemporaryDirectory(prefix="coordinator-bench-") as tmp:
        yield Path(tmp) / SQLITE_FILE_NAME


@contextlib.contextmanager
def _sqlite_log(data_dir: Path | None, records: int, groups: int) -> Iterator[SqliteLogFile]:
    with _log_file(data_dir) as path:
        location = SqliteLogFile(str(path))
        if not path.exists() or sum(location.end_offsets().values()) != records:
            path.unlink(missing_ok=True)
            generate_log(path, records, groups)
        yield location


def _kafka_log(spark: SparkSession, target: KafkaBenchLog, records: int, groups: int) -> Any:
    location = target.location()
    try:
        ends = location.end_offsets(spark)
    except TopicNotFoundError:
        ends = {}
    held = sum(ends.values())
    if ends and (held not in (0, records) or len(ends) != LOG_PARTITIONS):
        raise ValueError(
            f"topic {target.topic} holds {held} records in {len(ends)} partitions, not "
            f"{records} in {LOG_PARTITIONS}: give another --topic, or delete it"
        )
    if held != records:
        generate_kafka_log(target, records, groups)
    return location


def run_bench(
    spark: SparkSession,
    records: int,
    data_dir: Path | None = None,
    groups: int = 1_000,
    *,
    kafka: KafkaBenchLog | None = None,
) -> BenchResult:
    """Generate the log and time the two figures. The log is a SQLite file (in `data_dir`,
    reusing a log already there with as many records; else in a temporary directory), or
    the topic of `kafka` (reused when it holds as many records)."""
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        location: LogLocation
        if kafka is None:
            location = stack.enter_context(_sqlite_log(data_dir, records, groups))
            stored_in = "SQLite"
        else:
            location = _kafka_log(spark, kafka, records, groups)
            stored_in = f"Kafka topic {kafka.topic}, read through Spark's Kafka source"
        generate_s = time.perf_counter() - started
        ends = log_end_offsets(spark, location)

        # Python workers start and import on first use: warm them on a slice first, so
        # the figures are of the steady state.
        slice_ends = {p: min(end, WARM_UP_RECORDS) for p, end in ends.items()}
        read_log(spark, location, slice_ends).write.format("noop").mode("overwrite").save()

        started = time.perf_counter()
        read_log(spark, location, ends).write.format("noop").mode("overwrite").save()
        read_decode_s = time.perf_counter() - started

        started = time.perf_counter()
        final = (
            final_offsets(read_log(spark, location, ends))
            .groupBy("group")
            .agg(F.count(F.lit(1)).alias("partitions"), F.max("commit_timestamp").alias("last"))
            .agg(F.sum("partitions"))
            .first()
        )
        aggregate_s = time.perf_counter() - started
        final_count = int(final[0]) if final and final[0] is not None else 0
        return BenchResult(
            records=records,
            log_partitions=len(ends),
            generate_s=generate_s,
            read_decode_s=read_decode_s,
            aggregate_s=aggregate_s,
            final_offsets=final_count,
            stored_in=stored_in,
        )
