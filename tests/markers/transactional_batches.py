"""What a transactional producer of ours does on a Kafka data partition, for the marker
tests: transactional record batches under a producer id and epoch of the test's choosing
(Produce v3 to v7, as aiokafka's ProduceRequest speaks them, with a transactional id), and
what consumers of either isolation level read back."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

# Producer ids far above what a Kafka cluster hands out (its controller counts up from 0).
_PRODUCER_IDS = itertools.count(2**48 + int(time.time() * 1000) % 10**9)
# Answers of a partition that is not ready yet (a topic just created).
_NOT_READY = frozenset((3, 5, 6))


def new_producer_id() -> int:
    return next(_PRODUCER_IDS)


@asynccontextmanager
async def kafka_client(bootstrap: str) -> AsyncIterator[AIOKafkaClient]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        yield client
    finally:
        await client.close()


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


def transactional_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, epoch, sequence, 1 << 20)
    timestamp_ms = int(time.time() * 1000)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp_ms, value, value, [])
    return bytes(builder.build())


async def produce_transactional(
    client: AIOKafkaClient,
    topic: str,
    partition: int,
    producer_id: int,
    epoch: int,
    sequence: int,
    values: list[bytes],
    *,
    timeout_s: float = 30.0,
) -> int:
    """Write one transactional batch to the (single-broker) cluster; returns the error code
    of the answer once it is not one of a partition still being created."""
    batch = transactional_batch(producer_id, epoch, sequence, values)
    request = ProduceRequest(
        f"markers-test-{producer_id}", -1, 10000, [(topic, [(partition, batch)])]
    )
    deadline = time.monotonic() + timeout_s
    while True:
        node_id = next(iter(client.cluster.brokers())).nodeId
        response = await client.send(node_id, request)
        error_code = int(response.topics[0][1][0][1])
        if error_code not in _NOT_READY or time.monotonic() > deadline:
            return error_code
        await asyncio.sleep(0.2)


async def read_values(
    bootstrap: str,
    topic: str,
    partitions: int,
    isolation_level: str,
    *,
    timeout_s: float = 30.0,
) -> list[bytes]:
    """Every value a consumer of `isolation_level` reads from the topic, up to the end it
    sees (the last stable offset for read_committed, the high watermark otherwise)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while [tp for tp in assigned if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "the consumer did not reach the end"
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                values.extend(record.value for record in records if record.value is not None)
        return sorted(values)
    finally:
        await consumer.stop()


async def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()
