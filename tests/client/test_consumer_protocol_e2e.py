"""Kafka's consumer group protocol (KIP-848) end to end: two CoordinatedConsumers with
`group_protocol="consumer"` on a real server and a real Apache Kafka broker. The second
joins while the first reads: the first gives up only the partitions the coordinator moves,
reads the others throughout, and together they read every record exactly once."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from kafka_broker import KafkaBroker
from server_process import ServerProcess

from coordinator_client import CoordinatedConsumer

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 6
PER_PARTITION = 200


def server_args(broker: KafkaBroker) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", f"consumer-protocol-{uuid.uuid4().hex[:8]}",
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        # Heartbeats every 500 ms: a reconciliation takes a few of them.
        "--group-consumer-min-heartbeat-interval-ms", "500",
        "--group-consumer-heartbeat-interval-ms", "500",
        *broker.coordinator_args,
    ]  # fmt: skip


class Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))


class Reader:
    """A consumer reading in the background, each record with when it was handed out."""

    def __init__(self, consumer: CoordinatedConsumer) -> None:
        self.consumer = consumer
        self.records: list[tuple[int, int, float]] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for record in self.consumer:
            self.records.append((record.partition, record.offset, time.monotonic()))

    async def stop(self) -> None:
        await self.consumer.stop()
        if self.task is not None:
            await self.task


async def produce(
    broker: KafkaBroker, topic: str, start: int, count: int, *, pause_s: float = 0.0
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    await producer.start()
    try:
        for i in range(start, start + count):
            await producer.send(topic, str(i).encode(), partition=i % PARTITIONS)
            if pause_s and i % PARTITIONS == PARTITIONS - 1:
                await producer.flush()
                await asyncio.sleep(pause_s)
        await producer.flush()
    finally:
        await producer.stop()


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_a_second_member_takes_partitions_while_the_first_reads_on(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(unique_topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    everything = frozenset(TopicPartition(unique_topic, p) for p in range(PARTITIONS))
    total = PARTITIONS * PER_PARTITION
    await produce(kafka_broker, unique_topic, 0, total // 4)

    with ServerProcess(server_args(kafka_broker)) as server:

        def consumer(listener: Recorder) -> CoordinatedConsumer:
            made = CoordinatedConsumer(
                bootstrap_servers=kafka_broker.bootstrap,
                coordinator_bootstrap_servers=f"{server.host}:{server.port}",
                group_id=f"{unique_topic}-group",
                group_protocol="consumer",
                auto_offset_reset="earliest",
                auto_commit_interval_ms=200,
                max_poll_interval_ms=20_000,
            )
            made.subscribe([unique_topic], listener)
            return made

        first_events, second_events = Recorder(), Recorder()
        first = Reader(consumer(first_events))
        await first.start()
        assert await first.consumer.wait_for_assignment(60) == everything
        await wait_until(lambda: len(first.records) == total // 4, 30, "the first member reading")

        # Records keep coming while the second member joins.
        producing = asyncio.create_task(
            produce(kafka_broker, unique_topic, total // 4, total // 2, pause_s=0.01)
        )
        second = Reader(consumer(second_events))
        await second.start()
        joined_at = time.monotonic()
        held: list[frozenset[TopicPartition]] = []
        while not (
            second.consumer.assignment()
            and first.consumer.assignment() | second.consumer.assignment() == everything
        ):
            held.append(frozenset(first.consumer.assignment()))
            assert time.monotonic() - joined_at < 60, "the group did not settle"
            await asyncio.sleep(0.01)
        settled_at = time.monotonic()
        kept = frozenset(first.consumer.assignment())
        moved = everything - kept
        assert kept.isdisjoint(second.consumer.assignment())
        assert len(kept) == len(moved) == PARTITIONS // 2
        # No stop-the-world: the first member held the partitions it kept all along, gave
        # up only the moved ones, and handed out records of the kept ones meanwhile.
        assert all(kept <= partitions for partitions in held)
        assert first_events.events == [
            ("assigned", everything),
            ("revoked", moved),
            ("assigned", frozenset()),
        ]
        assert second_events.events == [("assigned", frozenset()), ("assigned", moved)]
        read_meanwhile = {
            TopicPartition(unique_topic, partition)
            for partition, _, at in first.records
            if joined_at <= at <= settled_at
        }
        assert read_meanwhile and read_meanwhile <= kept | moved
        assert read_meanwhile & kept
        assert first.consumer.member.member_id != second.consumer.member.member_id

        await producing
        await produce(kafka_broker, unique_topic, total // 4 + total // 2, total // 4)
        await wait_until(
            lambda: len(first.records) + len(second.records) >= total, 60, "every record read"
        )
        await first.stop()
        await second.stop()

    # Every record read once: the moved partitions were committed on revocation, and the
    # second member started exactly there.
    read = Counter((partition, offset) for partition, offset, _ in first.records + second.records)
    assert len(read) == total and set(read.values()) == {1}
