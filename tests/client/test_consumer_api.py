"""CoordinatedConsumer's API against a real broker and server: where partitions start
(committed, earliest, latest, none), getmany, manual commits, a listener that commits
before its partitions are revoked, seek and position, and the group protocol it takes when
none is given: the consumer protocol where the coordinator serves it, the classic one where
it does not or where client-side assignors are given."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import NoOffsetForPartitionError
from aiokafka.structs import TopicPartition
from kafka_broker import KafkaBroker
from server_process import ServerProcess

from coordinator_client import CoordinatedConsumer, CoordinatorClient

pytestmark = pytest.mark.timeout(90)


def server_args(broker: KafkaBroker) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", f"consumer-api-{uuid.uuid4().hex[:8]}",
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        "--group-min-session-timeout-ms", "500",
        "--group-initial-rebalance-delay-ms", "0",
        *broker.coordinator_args,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def server(kafka_broker: KafkaBroker) -> Iterator[ServerProcess]:
    with ServerProcess(server_args(kafka_broker)) as process:
        yield process


async def create_topic(broker: KafkaBroker, topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    return topic


@pytest.fixture
async def topic(kafka_broker: KafkaBroker, unique_topic: str) -> AsyncIterator[str]:
    yield await create_topic(kafka_broker, unique_topic)


async def produce(broker: KafkaBroker, topic: str, per_partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for partition in (0, 1):
            for i in range(per_partition):
                await producer.send(topic, f"{partition}-{i}".encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def consumer_for(
    broker: KafkaBroker, server: ServerProcess, topic: str, group: str, **options: Any
) -> CoordinatedConsumer:
    options.setdefault("auto_offset_reset", "earliest")
    return CoordinatedConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        coordinator_bootstrap_servers=f"{server.host}:{server.port}",
        group_id=group,
        # Nothing here waits for a session to expire: a long one keeps a member that a
        # loaded machine delays from being expired mid-test.
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=5000,
        **options,
    )


async def take(consumer: CoordinatedConsumer, count: int) -> list[tuple[int, int]]:
    records = []
    async with asyncio.timeout(20):
        while len(records) < count:
            record = await consumer.getone()
            records.append((record.partition, record.offset))
    return records


async def committed(server: ServerProcess, group: str) -> dict[int, int]:
    async with CoordinatorClient(f"{server.host}:{server.port}") as client:
        offsets = await client.fetch_offsets(group)
    return {tp.partition: value.offset for tp, value in offsets.items()}


async def test_latest_starts_at_the_high_watermark(
    kafka_broker: KafkaBroker, server: ServerProcess, topic: str
) -> None:
    await produce(kafka_broker, topic, 10)
    group = f"{topic}-latest"
    consumer = consumer_for(kafka_broker, server, topic, group, auto_offset_reset="latest")
    async with consumer:
        assert len(await consumer.wait_for_assignment(20)) == 2
        await produce(kafka_broker, topic, 3)
        records = await take(consumer, 6)
        assert sorted(records) == [(p, o) for p in (0, 1) for o in (10, 11, 12)]
    assert await committed(server, group) == {0: 13, 1: 13}


async def test_committed_offsets_first_then_earliest(
    kafka_broker: KafkaBroker, server: ServerProcess, topic: str
) -> None:
    await produce(kafka_broker, topic, 6)
    group = f"{topic}-earliest"
    async with CoordinatorClient(f"{server.host}:{server.port}") as client:
        await client.commit_offsets(group, {TopicPartition(topic, 0): 4})
    async with consumer_for(kafka_broker, server, topic, group) as consumer:
        await consumer.wait_for_assignment(20)
        records = await take(consumer, 2 + 6)
    assert sorted(records) == [(0, 4), (0, 5)] + [(1, o) for o in range(6)]


async def test_no_offset_and_reset_none_is_an_error(
    kafka_broker: KafkaBroker, server: ServerProcess, topic: str
) -> None:
    await produce(kafka_broker, topic, 1)
    consumer = consumer_for(kafka_broker, server, topic, f"{topic}-none", auto_offset_reset="none")
    async with consumer:
        with pytest.raises(NoOffsetForPartitionError):
            async with asyncio.timeout(20):
                await consumer.getone()


async def test_getmany_and_manual_commits(
    kafka_broker: KafkaBroker, server: ServerProcess, topic: str
) -> None:
    await produce(kafka_broker, topic, 20)
    group = f"{topic}-manual"
    consumer = consumer_for(kafka_broker, server, topic, group, enable_auto_commit=False)
    async with consumer:
        await consumer.wait_for_assignment(20)
        batches: dict[TopicPartition, list[int]] = {}
        async with asyncio.timeout(20):
            while sum(map(len, batches.values())) < 40:
                fetched = await consumer.getmany(timeout_ms=500, max_records=7)
                assert all(len(records) <= 7 for records in fetched.values())
                for tp, records in fetched.items():
                    batches.setdefault(tp, []).extend(r.offset for r in records)
        assert {tp.partition: offsets for tp, offsets in batches.items()} == {
            0: list(range(20)), 1: list(range(20))
        }  # fmt: skip
        tp0 = TopicPartition(topic, 0)
        assert await consumer.position(tp0) == 20
        assert await consumer.committed(tp0) is None
        await consumer.commit()
        assert await consumer.committed(tp0) == 20
        await consumer.commit({tp0: 15})
        assert await consumer.committed(tp0) == 15
        consumer.seek(tp0, 3)
        assert await consumer.position(tp0) == 3
        assert (await consumer.getone(tp0)).offset == 3
    # Without auto-commit, stopping commits nothing more.
    assert await committed(server, group) == {0: 15, 1: 20}


async def test_a_listener_commits_before_its_partitions_are_revoked(
    kafka_broker: KafkaBroker, server: ServerProcess, topic: str
) -> None:
    await produce(kafka_broker, topic, 10)
    group = f"{topic}-listener"
    # The classic protocol's eager rebalance: everything revoked, then assigned again (the
    # consumer protocol's reconciliation is tests/client/test_consumer_protocol_e2e.py's).
    first = consumer_for(
        kafka_broker, server, topic, group, enable_auto_commit=False, group_protocol="classic"
    )
    calls: list[tuple[str, set[int]]] = []

    class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            calls.append(("revoked", {tp.partition for tp in revoked}))
            await first.commit()

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            calls.append(("assigned", {tp.partition for tp in assigned}))

    first.subscribe([topic], listener=CommitOnRevoke())
    second = consumer_for(
        kafka_broker, server, topic, group, enable_auto_commit=False, group_protocol="classic"
    )
    async with first:
        await first.wait_for_assignment(20)
        consumed = await take(first, 5)
        async with second:
            await second.wait_for_assignment(20)
            await first.wait_for_assignment(20)
            assert calls[:2] == [("assigned", {0, 1}), ("revoked", {0, 1})]
            assert len(first.assignment()) == len(second.assignment()) == 1
            # The first consumer's positions were committed on revocation: the second
            # starts where it stopped, nothing read twice.
            progress = {p: max(o for q, o in consumed if q == p) + 1 for p, _ in consumed}
            assert await committed(server, group) == {p: progress.get(p, 0) for p in (0, 1)}
            (owned,) = second.assignment()
            start = progress.get(owned.partition, 0)
            assert (await second.getone()).offset == start


async def test_the_protocol_taken_is_the_consumer_one_where_the_coordinator_serves_it(
    kafka_broker: KafkaBroker, server: ServerProcess, topic: str
) -> None:
    await produce(kafka_broker, topic, 3)
    group = f"{topic}-protocol"
    served = consumer_for(kafka_broker, server, topic, group)
    assert served.group_protocol is None, "decided at start"
    async with served:
        assert served.group_protocol == "consumer"
        assert len(await served.wait_for_assignment(20)) == 2
        assert sorted(await take(served, 6)) == [(p, o) for p in (0, 1) for o in range(3)]
    # Client-side assignors ask for the classic protocol, served or not.
    assigned_here = consumer_for(
        kafka_broker, server, topic, f"{group}-classic", partition_assignment_strategy=[]
    )
    assert assigned_here.group_protocol == "classic"
    await assigned_here.stop()

    # A coordinator without the data cluster's topics (the embedded quick start's) does not
    # serve the consumer protocol: the classic one is taken, and the records read all the
    # same.
    with ServerProcess(["--port", "0", "--group-initial-rebalance-delay-ms", "0"]) as alone:
        unserved = consumer_for(kafka_broker, alone, topic, group)
        async with unserved:
            assert unserved.group_protocol == "classic"
            assert len(await unserved.wait_for_assignment(20)) == 2
            assert len(await take(unserved, 6)) == 6
        # A subscription by pattern asks for the consumer protocol, whatever is served.
        pattern = consumer_for(kafka_broker, alone, topic, group, subscribed_topic_regex=".*")
        assert pattern.group_protocol == "consumer"
        await pattern.stop()


async def test_a_group_reads_commits_and_resumes_on_each_broker(
    each_broker: KafkaBroker, unique_topic: str
) -> None:
    """Records fetched from the broker, offsets committed to a log on the same broker: the
    client end to end on Apache Kafka and on a Kafka-protocol broker that is not."""
    topic = await create_topic(each_broker, unique_topic)
    await produce(each_broker, topic, 8)
    group = f"{topic}-resume"
    with ServerProcess(server_args(each_broker)) as server:
        consumer = consumer_for(each_broker, server, topic, group, enable_auto_commit=False)
        async with consumer:
            await consumer.wait_for_assignment(20)
            assert sorted(await take(consumer, 16)) == [(p, o) for p in (0, 1) for o in range(8)]
            await consumer.commit({TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 8})
        assert await committed(server, group) == {0: 5, 1: 8}
        await produce(each_broker, topic, 1)
        async with consumer_for(each_broker, server, topic, group) as resumed:
            await resumed.wait_for_assignment(20)
            records = await take(resumed, 4 + 1)
        assert sorted(records) == [(0, 5), (0, 6), (0, 7), (0, 8), (1, 8)]
