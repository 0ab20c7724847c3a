"""The pipeline over a real Kafka log (Apache Kafka) of a real server process, read through
Spark's own Kafka source: the history with consumer lag from the data topics, the audit
against the live server (no mismatch; a commit during the audit is not one; a record
written behind the server's back is exactly one), the streaming reader's incremental runs,
and the benchmark. The security settings reach Spark's source (a read over SASL_SSL; a
refused password, an untrusted broker and a missing topic are one clear line); aborted
transactions are not read and compaction's gaps are no data loss."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kafka_broker import KafkaBroker
from pipeline_checks import check_history
from pipeline_scenario import (
    DATA_PARTITIONS,
    REWOUND_PARTITION,
    ExpectedHistory,
    produce_known_history,
    server_group_args,
    simple_commit,
)
from server_process import ServerProcess
from wire_client import WireClient

from coordinator_server.cli import main as coordinator_main
from coordinator_server.pipeline.audit import CHANGED, MISMATCH, AuditRun, run_audit
from coordinator_server.pipeline.history import HistoryOptions, compute_history
from coordinator_server.pipeline.kafka_source import KafkaLogTopic
from coordinator_server.pipeline.session import read_log, read_log_stream
from coordinator_server.records import encode_record, new_offset_commit_record
from protocol.hashing import partition_for

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

LOG_PARTITIONS = 4
RECORDS_PER_DATA_PARTITION = 50
RECORDS_PER_SIMPLE_PARTITION = 300


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def kafka_server(broker: KafkaBroker, log_topic: str) -> ServerProcess:
    return ServerProcess(
        server_group_args(
            "--bootstrap-servers", broker.bootstrap,
            "--offsets-topic", log_topic,
            "--offsets-topic-replication-factor", "1",
        )
    )  # fmt: skip


async def fill_topic(broker: KafkaBroker, topic: str, partitions: int, per_partition: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for partition in range(partitions):
            for index in range(per_partition):
                await producer.send(topic, f"record-{index}".encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def history_served(
    kafka_broker: KafkaBroker,
) -> Iterator[tuple[ServerProcess, ExpectedHistory, KafkaLogTopic, str]]:
    log_topic, data_topic, simple_topic = name("log"), name("orders"), name("payments")
    asyncio.run(fill_topic(kafka_broker, data_topic, DATA_PARTITIONS, RECORDS_PER_DATA_PARTITION))
    asyncio.run(fill_topic(kafka_broker, simple_topic, 2, RECORDS_PER_SIMPLE_PARTITION))
    with kafka_server(kafka_broker, log_topic) as process:
        expected = asyncio.run(produce_known_history(process, data_topic, simple_topic))
        yield process, expected, KafkaLogTopic(kafka_broker.bootstrap, log_topic), simple_topic


def test_history_and_consumer_lag_from_a_kafka_log(
    spark: Any,
    kafka_broker: KafkaBroker,
    history_served: tuple[ServerProcess, ExpectedHistory, KafkaLogTopic, str],
) -> None:
    _, expected, location, simple_topic = history_served
    log = read_log(spark, location).cache()
    # One Spark partition per partition of the log topic.
    assert log.rdd.getNumPartitions() == LOG_PARTITIONS
    history = compute_history(
        spark, log, HistoryOptions(kafka_bootstrap_servers=kafka_broker.bootstrap, lag_points=4)
    )
    check_history(history, expected)

    lag = {
        (r.group, r.topic, r.partition): (r.log_end_offset, r.lag) for r in history["lag"].collect()
    }
    expected_lag = {}
    for key, committed in expected.final_offsets.items():
        end = RECORDS_PER_SIMPLE_PARTITION if key[1] == simple_topic else RECORDS_PER_DATA_PARTITION
        expected_lag[key] = (end, end - committed)
    assert lag == expected_lag
    assert lag[("orders-app", expected.topic, REWOUND_PARTITION)][1] == 45

    # The last point of the lag history is now: the same as the current lag.
    over_time = history["lag_over_time"].collect()
    last = max(row.time for row in over_time)
    assert {(r.group, r.topic, r.partition): r.lag for r in over_time if r.time == last} == {
        key: value[1] for key, value in expected_lag.items()
    }
    log.unpersist()


async def test_audit_of_the_live_server_finds_no_mismatch(
    spark: Any, history_served: tuple[ServerProcess, ExpectedHistory, KafkaLogTopic, str]
) -> None:
    process, _, location, _ = history_served
    result = await asyncio.to_thread(run_audit, spark, location, f"{process.host}:{process.port}")
    assert (result.mismatches, result.changed_during_audit, result.unreachable) == (0, 0, 0)
    assert (result.groups_in_log, result.offsets_in_log) == (2, 6)


async def plant(broker: KafkaBroker, log_topic: str, group: str, topic: str, offset: int) -> None:
    """Write a commit into the log behind the server's back: the server never applies it,
    but a restart would load it."""
    record = new_offset_commit_record(group, topic, 0, offset, -1, "", 1_764_000_000_000)
    key, value = encode_record(record)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(
            log_topic, value, key=key, partition=partition_for(group, LOG_PARTITIONS)
        )
    finally:
        await producer.stop()


async def test_audit_tells_a_commit_during_the_audit_from_a_record_planted_in_the_log(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_topic = name("log")
    location = KafkaLogTopic(kafka_broker.bootstrap, log_topic)
    with kafka_server(kafka_broker, log_topic) as process:
        servers = f"{process.host}:{process.port}"
        client = await WireClient.connect(process.host, process.port)
        try:
            await simple_commit(client, "ledger", {("entries", 0): 10, ("entries", 1): 10})

            # A commit after the audit asked the server, before it read the log: the two
            # sides differ, and the audit knows why.
            run = AuditRun(spark, location, servers)
            watermarks = await asyncio.to_thread(run.log_watermarks)
            live = await run.live_state()
            await simple_commit(client, "ledger", {("entries", 0): 11})
            log = read_log(spark, location)
            rows = await asyncio.to_thread(
                lambda: [r.asDict() for r in run.differences(log, watermarks, live).collect()]
            )
            assert [(r["status"], r["group"], r["topic"], r["partition"], r["log_value"],
                     r["live_value"]) for r in rows] == [
                (CHANGED, "ledger", "entries", 0, "11", "10")
            ]  # fmt: skip

            # A record written into the log behind the server's back is exactly one mismatch:
            # the command prints it, saves it, and exits 1.
            await plant(kafka_broker, log_topic, "ledger", "entries", 999)
            code = await asyncio.to_thread(
                coordinator_main,
                ["analyze", "audit", "--bootstrap-servers", kafka_broker.bootstrap,
                 "--offsets-topic", log_topic, "--server", servers, "--output", str(tmp_path)],
            )  # fmt: skip
            out = capsys.readouterr().out
            assert code == 1, out
            assert "1 mismatches" in out
            assert (
                "MISMATCH offset_differs ledger entries-0: committed_offset log=999 live=11" in out
            )
            saved = json.loads((tmp_path / "audit.json").read_text())
            assert saved["mismatches"] == 1
            assert saved["differences"] == [
                {
                    "status": MISMATCH,
                    "group": "ledger",
                    "kind": "offset_differs",
                    "topic": "entries",
                    "partition": 0,
                    "member_id": None,
                    "field": "committed_offset",
                    "log_value": "999",
                    "live_value": "11",
                }
            ]
            assert spark.read.parquet(str(tmp_path / "audit_differences")).count() == 1
        finally:
            await client.close()


async def test_streaming_reads_only_the_records_appended_since_the_last_run(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    log_topic = name("log")
    location = KafkaLogTopic(kafka_broker.bootstrap, log_topic)
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"

    def run_once() -> int:
        query = (
            read_log_stream(spark, location)
            .writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .option("path", str(sink))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return sum(progress["numInputRows"] for progress in query.recentProgress)

    with kafka_server(kafka_broker, log_topic) as process:
        client = await WireClient.connect(process.host, process.port)
        try:
            groups = [f"streamed-{i}" for i in range(6)]
            for group in groups:
                await simple_commit(client, group, {("t", 0): 1})
            assert await asyncio.to_thread(run_once) == len(groups)
            for group in groups[:3]:
                await simple_commit(client, group, {("t", 0): 2})
            assert await asyncio.to_thread(run_once) == 3
            assert await asyncio.to_thread(run_once) == 0
        finally:
            await client.close()
    rows = spark.read.parquet(str(sink)).collect()
    assert sorted((r.group, r.committed_offset) for r in rows) == sorted(
        [(g, 1) for g in groups] + [(g, 2) for g in groups[:3]]
    )
