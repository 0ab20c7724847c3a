"""The Kafka log's watch over its topic: a topic gone, resized or created again stops the log
for good, and no path of the log ever lets the broker create the topic."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from kafka_broker import KafkaBroker

from coordinator_server.storage import AppendError, LoadError
from coordinator_server.storage.kafka.log import KafkaLog
from coordinator_server.storage.kafka.metadata import fetch_topic_metadata

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

UNKNOWN_TOPIC_OR_PARTITION = 3


async def topics_on(broker: KafkaBroker) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        names = await admin.list_topics()
        if not names:
            return {}
        return {d["topic"]: len(d["partitions"]) for d in await admin.describe_topics(names)}
    finally:
        await admin.close()


async def create_topic(broker: KafkaBroker, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def test_an_append_after_the_topic_is_lost_stops_the_log_and_creates_nothing(
    fresh_kafka_broker: KafkaBroker, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A long metadata interval: the append's own leader lookup must notice.
    log = KafkaLog(
        fresh_kafka_broker.bootstrap,
        unique_topic,
        4,
        1,
        request_timeout_ms=2000,
        metadata_max_age_ms=600_000,
    )
    heard: list[str] = []
    log.register_failure_listener(heard.append)
    await log.start()
    try:
        assert await log.append(0, [(b"k", b"v")]) == 1
        fresh_kafka_broker.restart_empty()

        with caplog.at_level(logging.ERROR, logger="coordinator_server.storage.kafka.log"):
            # The broker refuses the append (the topic is gone) or its connection broke with
            # the restart; the lookup of leaders either causes finds the topic gone.
            with contextlib.suppress(AppendError):
                await asyncio.wait_for(log.append(0, [(b"k", b"v2")]), 30)
            for _ in range(300):
                if log.failure is not None:
                    break
                await asyncio.sleep(0.1)
        assert log.failure == f"topic {unique_topic} no longer exists"
        assert heard == [log.failure]
        assert f"the log stopped: topic {unique_topic} no longer exists" in caplog.text
        with pytest.raises(AppendError) as refused:
            await log.append(1, [(b"k", b"v")])
        assert refused.value.error_code == UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(LoadError):
            await log.load(0, lambda o, k, v: None)
        assert unique_topic not in await topics_on(fresh_kafka_broker)
    finally:
        await log.close()


async def test_the_watch_notices_a_resized_topic_with_nothing_written(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(fresh_kafka_broker.bootstrap, unique_topic, 8, 1, metadata_max_age_ms=200)
    heard: list[str] = []
    log.register_failure_listener(heard.append)
    await log.start()
    try:
        fresh_kafka_broker.restart_empty()
        await create_topic(fresh_kafka_broker, unique_topic, 4)
        for _ in range(300):
            if heard:
                break
            await asyncio.sleep(0.05)
        assert heard in (
            [f"topic {unique_topic} has 4 partitions, not the 8 it had when the server started"],
            # The watch may have looked between the restart and the creation.
            [f"topic {unique_topic} no longer exists"],
        )
        assert (await topics_on(fresh_kafka_broker))[unique_topic] == 4
    finally:
        await log.close()


async def test_a_topic_created_again_with_the_same_count_is_found_by_its_high_watermark(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    """Metadata before v10 has no topic id, so only the records tell the new topic apart: a
    partition that ends below what the log saw it reach lost records."""
    writer = KafkaLog(fresh_kafka_broker.bootstrap, unique_topic, 2, 1)
    await writer.start()
    assert await writer.append(1, [(b"k%d" % i, b"v") for i in range(5)]) == 5
    await writer.close()
    # A log that has only loaded (no produce connection to notice the restart by) and looks
    # at the topic's metadata only when it needs leaders.
    log = KafkaLog(fresh_kafka_broker.bootstrap, unique_topic, 2, 1, metadata_max_age_ms=600_000)
    heard: list[str] = []
    log.register_failure_listener(heard.append)
    await log.start()
    try:
        assert (await log.load(1, lambda o, k, v: None)).end_offset == 5
        fresh_kafka_broker.restart_empty()
        await create_topic(fresh_kafka_broker, unique_topic, 2)

        with pytest.raises(LoadError, match="ends at offset 0, below the 5 this server saw"):
            await asyncio.wait_for(log.load(1, lambda o, k, v: None), 60)
        assert heard and log.failure == heard[0]
        with pytest.raises(AppendError):
            await log.append(0, [(b"k", b"v")])
    finally:
        await log.close()


async def test_the_log_reads_a_missing_topic_s_metadata_without_creating_it(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    client = AIOKafkaClient(bootstrap_servers=kafka_broker.bootstrap)
    await client.bootstrap()
    try:
        metadata = await fetch_topic_metadata(client, unique_topic, 10)
        assert not metadata.exists and metadata.partition_count == 0
        # The control: aiokafka's own MetadataRequest lets this broker create the topic it
        # names, with the broker's defaults.
        # Apache Kafka creates it after answering, through its controller.
        other = f"{unique_topic}-other"
        node_id = client.get_random_node()
        await client.send(node_id, MetadataRequest([other]))
        for _ in range(300):
            topics = await topics_on(kafka_broker)
            if other in topics:
                break
            await asyncio.sleep(0.1)
        assert unique_topic not in topics
        assert topics.get(other, 0) > 0
    finally:
        await client.close()


async def test_a_topic_the_log_creates_is_loaded_without_a_retry_and_empty_partitions_at_once(
    kafka_broker: KafkaBroker, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Metadata names a new partition's leader a moment before that broker serves it: the
    start waits until every partition can be read, so no load meets NOT_LEADER. And a load
    never holds its fetch on the loads' shared connection (a broker answers a connection's
    requests one at a time): 50 empty partitions load in well under the 50 x 20 ms that
    fetches held for 20 ms each took."""
    partitions = 50
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, partitions, 1)
    with caplog.at_level(logging.INFO, logger="coordinator_server.storage"):
        await log.start()
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            summaries = await asyncio.gather(
                *(log.load(p, lambda o, k, v: None) for p in range(partitions))
            )
            took_s = loop.time() - started
        finally:
            await log.close()
    assert [s.records for s in summaries] == [0] * partitions
    assert f"created topic {unique_topic}" in caplog.text
    assert "cannot read the log" not in caplog.text
    assert "not every partition could be read" not in caplog.text
    assert took_s < 0.5, took_s
