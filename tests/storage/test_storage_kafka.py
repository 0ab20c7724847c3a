"""What only the Kafka log does: its topic, its errors, and a broker that goes away."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError
from kafka_broker import KafkaBroker, free_port

from coordinator_server.storage import AppendError, RawRecord
from coordinator_server.storage.kafka.log import (
    DELIVERY_TIMEOUT_FACTOR,
    KafkaLog,
    offsets_topic_configs,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

Loaded = list[tuple[int, bytes, bytes | None]]


@pytest.fixture
async def admin(kafka_broker: KafkaBroker) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await client.start()
    yield client
    await client.close()


async def load(log: KafkaLog, partition: int) -> Loaded:
    loaded: Loaded = []
    await log.load(partition, lambda o, k, v: loaded.append((o, k, v)))
    return loaded


async def partition_count(admin: AIOKafkaAdminClient, topic: str) -> int:
    (description,) = await admin.describe_topics([topic])
    return len(description["partitions"])


async def test_the_topic_is_created_compacted_with_the_configured_partitions(
    kafka_broker: KafkaBroker, admin: AIOKafkaAdminClient, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 7, 1)
    await log.start()
    try:
        assert log.num_partitions == 7
        assert await partition_count(admin, unique_topic) == 7
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, unique_topic)]
        )
        ((error_code, _, _, _, entries),) = response.resources
        assert error_code == 0
        configs = {entry[0]: entry[1] for entry in entries}
        assert {name: configs.get(name) for name in offsets_topic_configs()} == {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": "104857600",
        }
    finally:
        await log.close()


async def test_an_existing_topic_keeps_its_partition_count(
    kafka_broker: KafkaBroker,
    admin: AIOKafkaAdminClient,
    unique_topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await admin.create_topics([NewTopic(unique_topic, 5, 1)])
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 3, 1)
    with caplog.at_level(logging.WARNING, logger="coordinator_server.storage.kafka.log"):
        await log.start()
    try:
        assert log.num_partitions == 5
        assert "has 5 partitions, not the 3 configured" in caplog.text
        # The real count decides what can be written.
        assert await log.append(4, [(b"k", b"v")]) == 1
        assert await load(log, 4) == [(0, b"k", b"v")]
    finally:
        await log.close()


async def test_servers_starting_together_create_the_topic_once(
    kafka_broker: KafkaBroker, admin: AIOKafkaAdminClient, unique_topic: str
) -> None:
    logs = [KafkaLog(kafka_broker.bootstrap, unique_topic, 4, 1) for _ in range(3)]
    try:
        await asyncio.gather(*(log.start() for log in logs))
        assert [log.num_partitions for log in logs] == [4, 4, 4]
        assert await partition_count(admin, unique_topic) == 4
    finally:
        for log in logs:
            await log.close()


async def test_an_append_to_a_stopped_broker_times_out_in_bounded_time(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    request_timeout_ms = 2000
    log = KafkaLog(
        fresh_kafka_broker.bootstrap, unique_topic, 2, 1, request_timeout_ms=request_timeout_ms
    )
    await log.start()
    try:
        assert await log.append(0, [(b"k", b"v")]) == 1
        fresh_kafka_broker.stop()

        started = time.monotonic()
        with pytest.raises(AppendError) as raised:
            await log.append(0, [(b"k", b"v2")])
        elapsed = time.monotonic() - started

        assert raised.value.error_code == 7
        # An idempotent append is sent again until its delivery timeout, then fails.
        delivery_timeout_s = request_timeout_ms * DELIVERY_TIMEOUT_FACTOR / 1000
        assert elapsed < delivery_timeout_s + 3
        assert log.high_watermark(0) == 1

        # A load waits for the broker instead of failing (it never starts over), and ends
        # at once when cancelled.
        loading = asyncio.ensure_future(log.load(1, lambda o, k, v: None))
        done, _ = await asyncio.wait({loading}, timeout=3 * request_timeout_ms / 1000)
        assert not done
        loading.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await loading
        assert time.monotonic() - started < 1
    finally:
        started = time.monotonic()
        await log.close()
        assert time.monotonic() - started < request_timeout_ms / 1000 + 3


async def test_start_without_a_broker_fails_in_bounded_time() -> None:
    log = KafkaLog(f"127.0.0.1:{free_port()}", "nowhere", 1, 1, request_timeout_ms=2000)
    started = time.monotonic()
    with pytest.raises(KafkaError):
        await log.start()
    assert time.monotonic() - started < 10
    await log.close()


async def test_a_batch_over_max_batch_bytes_is_refused_as_message_too_large(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 1, 1, max_batch_bytes=10_000)
    await log.start()
    try:
        await log.append(0, [(b"small", b"v")])
        with pytest.raises(AppendError) as many:
            await log.append(0, [(b"k%d" % i, b"x" * 100) for i in range(200)])
        with pytest.raises(AppendError) as one:
            await log.append(0, [(b"huge", b"x" * 20_000)])
        assert (many.value.error_code, one.value.error_code) == (10, 10)
        # What fits still goes through, right after the refused batches.
        assert await log.append(0, [(b"k%d" % i, b"x" * 100) for i in range(50)]) == 51
        loaded = await load(log, 0)
        assert len(loaded) == 51
        assert loaded[0] == (0, b"small", b"v")
    finally:
        await log.close()


async def test_a_load_stops_at_the_high_watermark_it_started_with(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 1, 1)
    await log.start()
    try:
        for start in range(0, 20_000, 2000):
            await log.append(0, [(b"k%d" % i, b"v") for i in range(start, start + 2000)])
        late: list[asyncio.Future[int]] = []

        def sink(offset: int, key: bytes, value: bytes | None) -> None:
            if offset == 0:
                late.append(asyncio.ensure_future(log.append(0, [(b"late", b"v")])))

        summary = await log.load(0, sink)
        assert await late[0] == 20_001
        assert (summary.end_offset, summary.records) == (20_000, 20_000)
        assert (await load(log, 0))[-1] == (20_000, b"late", b"v")
    finally:
        await log.close()


async def set_topic_configs(
    admin: AIOKafkaAdminClient, topic: str, configs: dict[str, str]
) -> None:
    # AlterConfigs replaces every setting the topic has with these.
    (response,) = await admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs)]
    )
    ((error_code, *_),) = response.resources
    assert error_code == 0


async def test_records_without_a_key_are_not_ours_and_are_skipped(
    kafka_broker: KafkaBroker, admin: AIOKafkaAdminClient, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 1, 1)
    await log.start()
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap, enable_idempotence=False, acks="all"
    )
    await producer.start()
    try:
        await log.append(0, [(b"a", b"1")])
        # A compacted topic refuses a record without a key: one gets in only while someone
        # has turned compaction off (and the broker has applied that, a moment later).
        await set_topic_configs(admin, unique_topic, {"cleanup.policy": "delete"})
        deadline = time.monotonic() + 30
        while True:
            try:
                await producer.send_and_wait(unique_topic, value=b"stray", partition=0)
                break
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        await set_topic_configs(admin, unique_topic, offsets_topic_configs())
        await log.append(0, [(b"b", b"2")])
        loaded = []
        summary = await log.load(0, lambda o, k, v: loaded.append((o, k, v)))
        assert loaded == [(0, b"a", b"1"), (2, b"b", b"2")]
        assert (summary.end_offset, summary.records) == (3, 2)
    finally:
        await producer.stop()
        await log.close()


async def test_a_load_learns_the_high_watermark(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    records: list[RawRecord] = [(b"k%d" % i, b"v") for i in range(12)]
    writer = KafkaLog(kafka_broker.bootstrap, unique_topic, 2, 1)
    await writer.start()
    await writer.append(1, records)
    await writer.close()

    reader = KafkaLog(kafka_broker.bootstrap, unique_topic, 2, 1)
    await reader.start()
    try:
        heard: list[tuple[int, int]] = []
        reader.register_listener(lambda p, o: heard.append((p, o)))
        assert reader.high_watermark(1) == 0
        await load(reader, 1)
        assert reader.high_watermark(1) == 12
        # The listener hears of commits by this writer's appends, not of what loads learn.
        assert heard == []
    finally:
        await reader.close()


async def test_many_partitions_load_in_parallel(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 50, 1, max_concurrent_loads=8)
    await log.start()
    try:
        await asyncio.gather(
            *(log.append(p, [(b"p%d" % p, b"v%d" % i) for i in range(p)]) for p in range(1, 50))
        )
        results = await asyncio.gather(*(load(log, p) for p in range(50)))
        assert [len(loaded) for loaded in results] == list(range(50))
        assert 1 < log.most_loads_running <= 8
        assert log.loads_running == 0
    finally:
        await log.close()
