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
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from kafka_broker import KafkaBroker
from pipeline_checks import check_history, final_offsets_of
from pipeline_scenario import (
    DATA_PARTITIONS,
    REWOUND_PARTITION,
    ExpectedHistory,
    produce_known_history,
    self_signed_ca,
    server_group_args,
    simple_commit,
    write_sqlite_log,
)
from server_process import ServerProcess
from wire_client import WireClient

from coordinator_protocol.hashing import partition_for
from coordinator_server.cli import main as coordinator_main
from coordinator_server.records import (
    GroupMetadataValue,
    OffsetCommitKey,
    decode_record,
    encode_record,
    new_group_metadata_record,
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
)
from coordinator_server.storage.kafka.security import KafkaSecurity
from coordinator_server.tools.bench.processes import free_port
from coordinator_server.tools.pipeline.audit import CHANGED, MISMATCH, AuditRun, run_audit
from coordinator_server.tools.pipeline.bench import generate_records
from coordinator_server.tools.pipeline.history import HistoryOptions, compute_history
from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic
from coordinator_server.tools.pipeline.logs import LogUnreadableError, SqliteLogFile
from coordinator_server.tools.pipeline.session import read_log, read_log_stream
from coordinator_server.tools.pipeline.state import final_groups, final_offsets

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


async def test_lag_is_never_negative_and_absent_where_an_end_is_not_known(
    spark: Any, kafka_broker: KafkaBroker, unique_topic: str, tmp_path: Path
) -> None:
    second = 1_000
    t0 = (int(time.time()) - 3_600) * second
    # Two data partitions of 10 records each, written at t0 + 10 s, + 20 s, ... + 100 s.
    await create_topic(kafka_broker, unique_topic, {}, partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    await producer.start()
    try:
        for partition in (0, 1):
            for index in range(10):
                await producer.send_and_wait(
                    unique_topic, b"x", partition=partition, timestamp_ms=t0 + (index + 1) * 10_000
                )
    finally:
        await producer.stop()

    def commit_at(topic: str, partition: int, offset: int, at_ms: int) -> tuple[Any, int]:
        return new_offset_commit_record("g", topic, partition, offset, -1, "", at_ms), at_ms

    db = tmp_path / "coordinator.db"
    absent = f"{unique_topic}-absent"
    await write_sqlite_log(
        db,
        [
            # Before the partition's first record: its end then is not known.
            commit_at(unique_topic, 0, 3, t0 + 5 * second),
            # Ahead of what the records' timestamps say was written by then.
            commit_at(unique_topic, 1, 8, t0 + 40 * second),
            commit_at(unique_topic, 0, 5, t0 + 45 * second),
            # A topic the data cluster does not have.
            commit_at(absent, 0, 4, t0 + 50 * second),
            commit_at(unique_topic, 0, 7, t0 + 95 * second),
        ],
    )
    options = HistoryOptions(
        kafka_bootstrap_servers=kafka_broker.bootstrap, lag_points=3, as_of_ms=t0 + 100 * second
    )

    def lags() -> tuple[dict[tuple[str, int], Any], dict[tuple[int, int], tuple[int, int, int]]]:
        log = read_log(spark, SqliteLogFile(str(db))).cache()
        history = compute_history(spark, log, options)
        now = {(r.topic, r.partition): (r.log_end_offset, r.lag) for r in history["lag"].collect()}
        over_time = {
            (int(r.time.timestamp() * 1000) - t0, r.partition): (
                r.log_end_offset, r.committed_offset, r.lag
            )
            for r in history["lag_over_time"].collect()
        }  # fmt: skip
        log.unpersist()
        return now, over_time

    now, over_time = await asyncio.to_thread(lags)
    assert now == {
        (unique_topic, 0): (10, 3),
        (unique_topic, 1): (10, 2),
        (absent, 0): (None, None),
    }
    # The points: the first commit (t0 + 5 s), halfway, and the as-of time (t0 + 100 s).
    assert over_time == {
        # Partition 0 at 5 s: no record yet, so no known end (not 0 - 3). Partition 1: no
        # commit yet.
        # At 52.5 s: 5 records each; partition 1's commit of 8 is ahead: 0, not -3.
        (52_500, 0): (5, 5, 0),
        (52_500, 1): (5, 8, 0),
        # At 100 s the tenth record (written at 100 s) is not yet in: 9 records.
        (100_000, 0): (9, 7, 2),
        (100_000, 1): (9, 8, 1),
    }


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
            log = read_log(spark, location).cache()
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
            # The node's takeover of each of the log's 4 partitions came first.
            assert await asyncio.to_thread(run_once) == 4 + len(groups)
            for group in groups[:3]:
                await simple_commit(client, group, {("t", 0): 2})
            assert await asyncio.to_thread(run_once) == 3
            assert await asyncio.to_thread(run_once) == 0
        finally:
            await client.close()
    rows = spark.read.parquet(str(sink)).collect()
    assert sorted(r.record_type for r in rows).count("partition_ownership") == 4
    commits = [r for r in rows if r.record_type == "offset_commit"]
    assert sorted((r.group, r.committed_offset) for r in commits) == sorted(
        [(g, 1) for g in groups] + [(g, 2) for g in groups[:3]]
    )


def sasl_ssl_options(
    broker: ApacheKafkaBroker,
    password_file: Path,
    *,
    password: str | None = None,
    ca_file: Path | None = None,
) -> list[str]:
    """The command line's options for the broker's SASL_SSL listener (the password from a
    file: a command line is visible to every user of the machine)."""
    password_file.write_text((password or broker.sasl_password) + "\n")
    return [
        "--kafka-security-protocol", "SASL_SSL",
        "--kafka-sasl-mechanism", "SCRAM-SHA-512",
        "--kafka-sasl-username", broker.sasl_username,
        "--kafka-sasl-password-file", str(password_file),
        "--kafka-ssl-ca-location", str(ca_file or broker.ca_file),
    ]  # fmt: skip


def test_a_batch_read_over_sasl_ssl_reads_the_same_log(
    spark: Any,
    kafka_broker: ApacheKafkaBroker,
    history_served: tuple[ServerProcess, ExpectedHistory, KafkaLogTopic, str],
) -> None:
    _, expected, plaintext, _ = history_served
    security = KafkaSecurity.build(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=kafka_broker.sasl_username,
        sasl_password=kafka_broker.sasl_password,
        ssl_ca_location=kafka_broker.ca_file,
    )
    location = KafkaLogTopic(
        kafka_broker.sasl_ssl_bootstrap, plaintext.topic, options=security.spark_options()
    )
    log = read_log(spark, location).cache()
    assert log.count() == read_log(spark, plaintext).count() > 0
    assert final_offsets_of(final_offsets(log).collect()) == expected.final_offsets
    assert location.end_offsets(spark) == plaintext.end_offsets(spark)
    # The options hold the password; the query's plan does not show it.
    assert kafka_broker.sasl_password not in log._jdf.queryExecution().toString()
    log.unpersist()


async def test_command_line_audit_over_sasl_ssl_finds_no_mismatch(
    spark: Any,
    kafka_broker: ApacheKafkaBroker,
    history_served: tuple[ServerProcess, ExpectedHistory, KafkaLogTopic, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    process, _, plaintext, _ = history_served
    code = await asyncio.to_thread(
        coordinator_main,
        ["analyze", "audit", "--bootstrap-servers", kafka_broker.sasl_ssl_bootstrap,
         "--offsets-topic", plaintext.topic, "--server", f"{process.host}:{process.port}",
         *sasl_ssl_options(kafka_broker, tmp_path / "password")],
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert (
        "audit: 2 groups, 6 offsets, 0 pending offsets and 0 transactional ids in the log; "
        "0 mismatches" in out
    )


async def test_a_refused_password_an_untrusted_broker_or_a_missing_topic_is_one_clear_line(
    spark: Any,
    kafka_broker: ApacheKafkaBroker,
    history_served: tuple[ServerProcess, ExpectedHistory, KafkaLogTopic, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, _, plaintext, _ = history_served
    good = sasl_ssl_options(kafka_broker, tmp_path / "password")
    wrong_password = sasl_ssl_options(kafka_broker, tmp_path / "wrong", password="not-the-password")
    untrusting = sasl_ssl_options(kafka_broker, tmp_path / "p", ca_file=self_signed_ca(tmp_path))

    def audit(bootstrap: str, topic: str, *options: str) -> tuple[int, str]:
        code = coordinator_main(
            ["analyze", "audit", "--bootstrap-servers", bootstrap, "--offsets-topic", topic,
             "--server", "127.0.0.1:1", *options]
        )  # fmt: skip
        out, err = capsys.readouterr()
        assert kafka_broker.sasl_password not in out + err
        assert "not-the-password" not in out + err
        assert "Traceback" not in err
        return code, err

    sasl = kafka_broker.sasl_ssl_bootstrap
    code, err = await asyncio.to_thread(audit, sasl, plaintext.topic, *wrong_password)
    assert code == 3, err
    assert err.startswith(f"coordinator-server analyze: cannot read the log: Kafka at {sasl} ")
    assert "invalid credentials" in err and len(err.splitlines()) == 1

    code, err = await asyncio.to_thread(audit, sasl, plaintext.topic, *untrusting)
    assert code == 3, err
    assert "do not trust each other" in err and "SSL handshake failed" in err

    code, err = await asyncio.to_thread(audit, sasl, "no-such-topic", *good)
    assert code == 3, err
    assert f"topic no-such-topic does not exist at {sasl}" in err


def test_a_cluster_that_does_not_answer_is_a_clear_error_in_bounded_time(spark: Any) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    location = KafkaLogTopic(nobody, "the-log", timeout_ms=2_000)
    started = time.monotonic()
    with pytest.raises(LogUnreadableError, match=rf"Kafka at {nobody} did not answer") as raised:
        read_log(spark, location)
    assert "within 2000 ms" in str(raised.value)
    assert time.monotonic() - started < 30


async def produce_raw(broker: KafkaBroker, topic: str, records: list[Any]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for record in records:
            key, value = encode_record(record)
            await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


def commit(group: str, partition: int, offset: int) -> Any:
    return new_offset_commit_record(group, "t", partition, offset, -1, "", 1_764_000_000_000)


async def test_aborted_transactions_are_not_read_and_their_markers_are_no_data_loss(
    spark: Any, kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    await create_topic(kafka_broker, unique_topic, {})
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"tx-{unique_topic}"
    )
    await producer.start()
    try:
        for offset, outcome in ((1, "commit"), (2, "abort"), (3, "commit"), (4, "abort")):
            await producer.begin_transaction()
            key, value = encode_record(commit("ledger", 0, offset))
            await producer.send_and_wait(unique_topic, value, key=key, partition=0)
            if outcome == "commit":
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()

    location = KafkaLogTopic(kafka_broker.bootstrap, unique_topic)
    # Four records and four markers: offsets 0 to 7, of which the committed records are read
    # (read_committed), and the gaps the others leave fail nothing (failOnDataLoss).
    assert location.end_offsets(spark) == {0: 8}
    rows = await asyncio.to_thread(lambda: read_log(spark, location).collect())
    assert [(row.log_offset, row.committed_offset) for row in rows] == [(0, 1), (4, 3)]


async def create_topic(
    broker: KafkaBroker, topic: str, configs: dict[str, str], partitions: int = 1
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def alter_topic(broker: KafkaBroker, topic: str, configs: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])
    finally:
        await admin.close()


async def records_left(broker: KafkaBroker, topic: str) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        count = 0
        while await consumer.position(tp) < end:
            fetched = await consumer.getmany(tp, timeout_ms=1000)
            count += len(fetched.get(tp, []))
        return count
    finally:
        await consumer.stop()


@pytest.mark.timeout(240)
async def test_a_compacted_log_is_read_with_its_gaps_and_gives_the_same_state(
    spark: Any, kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    group = GroupMetadataValue("consumer", 1, "range", "", 1_764_000_000_000, ())
    history = [
        *(commit("kept", 0, offset) for offset in range(30)),
        commit("deleted", 0, 7),
        new_offset_commit_tombstone_record("deleted", "t", 0),
        new_group_metadata_record("gone", group),
        new_group_metadata_tombstone_record("gone"),
    ]
    # The session broker's cleaner looks for work every second; it cleans any segment but the
    # active one.
    configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    await create_topic(kafka_broker, unique_topic, configs)
    await produce_raw(kafka_broker, unique_topic, history)
    location = KafkaLogTopic(kafka_broker.bootstrap, unique_topic)

    def state() -> tuple[int, dict[tuple[str, str, int], int], list[str]]:
        log = read_log(spark, location).cache()
        found = (
            log.count(),
            final_offsets_of(final_offsets(log).collect()),
            sorted(row.group for row in final_groups(log).collect()),
        )
        log.unpersist()
        return found

    before = await asyncio.to_thread(state)
    assert before == (len(history), {("kept", "t", 0): 29}, ["kept"])

    # The history's segment becomes cleanable once a record goes to a new one: the
    # active segment rolls at the first append 100 ms after it began.
    await alter_topic(kafka_broker, unique_topic, {**configs, "segment.ms": "100"})
    await asyncio.sleep(0.3)
    await produce_raw(kafka_broker, unique_topic, [commit("kept", 1, 0)])
    deadline = asyncio.get_running_loop().time() + 120
    while await records_left(kafka_broker, unique_topic) > len(history) - 20:
        assert asyncio.get_running_loop().time() < deadline, "the cleaner never ran"
        await asyncio.sleep(0.5)

    count, offsets, groups = await asyncio.to_thread(state)
    # Fewer records, offsets with gaps, and exactly the state the whole history gave: the
    # tombstones keep the deleted offset and group deleted.
    assert count < len(history) - 20
    assert offsets == {("kept", "t", 0): 29, ("kept", "t", 1): 0}
    assert groups == ["kept"]
    assert location.end_offsets(spark) == {0: len(history) + 1}


async def test_benchmark_on_kafka_reads_through_sparks_source(
    spark: Any,
    kafka_broker: ApacheKafkaBroker,
    unique_topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def bench(records: int) -> tuple[int, str]:
        code = coordinator_main(
            ["analyze", "bench", "--records", str(records), "--groups", "100",
             "--bootstrap-servers", kafka_broker.bootstrap, "--topic", unique_topic]
        )  # fmt: skip
        out, err = capsys.readouterr()
        return code, out + err

    code, out = await asyncio.to_thread(bench, 20_000)
    assert code == 0, out
    assert (
        f"log: 20000 records in 8 partitions (Kafka topic {unique_topic}, read through "
        "Spark's Kafka source)" in out
    )
    assert re.search(r"read \+ decode: [0-9.]+ s, [0-9,]+ rows/s", out)
    final = {
        decode_record(key, value).key
        for _, (key, value) in generate_records(20_000, 100)
        if isinstance(decode_record(key, value).key, OffsetCommitKey)
    }
    assert re.search(rf"read \+ decode \+ aggregate .* [0-9,]+ rows/s \({len(final)} final", out)
    # A topic that holds another log is not written to.
    code, out = await asyncio.to_thread(bench, 10_000)
    assert code == 2, out
    assert f"topic {unique_topic} holds 20000 records in 8 partitions, not 10000" in out
