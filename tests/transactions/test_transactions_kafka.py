"""The transaction coordinator end to end: coordinator-server on Apache Kafka, the client
library's TransactionalProducer, and stock aiokafka consumers reading what it wrote.

What Kafka's own transaction tests check of a coordinator (TransactionsTest): committed
records become visible to read_committed consumers, aborted ones never do; the offsets sent
in a transaction are committed with it; a second producer with the same transactional id
fences the first; the state survives a restart of the coordinator, and a transaction whose
commit was accepted ends even when the coordinator is killed right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess

from coordinator_client import CoordinatedConsumer, TransactionalProducer
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_protocol.messages import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchResponsePartition,
)
from coordinator_protocol.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def server_args(broker: ApacheKafkaBroker, log_topic: str, *extra: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", log_topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--transactions", "on",
        *broker.coordinator_args,
        *extra,
    ]  # fmt: skip


@contextlib.contextmanager
def coordinator(broker: ApacheKafkaBroker, log_topic: str, *extra: str) -> Iterator[ServerProcess]:
    with ServerProcess(server_args(broker, log_topic, *extra)) as server:
        yield server


async def create_topic(broker: ApacheKafkaBroker, name: str, partitions: int = 2) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def read_all(
    broker: ApacheKafkaBroker, topic: str, isolation_level: str, *, expect: int, timeout: float = 10
) -> list[bytes]:
    """Every value of `topic` a consumer of that isolation level reads, once it has read
    `expect` of them or `timeout` passed (then what it has)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        isolation_level=isolation_level,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(values) < expect and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                values.extend(record.value for record in records if record.value is not None)
    finally:
        await consumer.stop()
    return values


@contextlib.asynccontextmanager
async def producer(
    broker: ApacheKafkaBroker, server: ServerProcess, transactional_id: str, **options: Any
) -> AsyncIterator[TransactionalProducer]:
    made = TransactionalProducer(
        bootstrap_servers=broker.bootstrap,
        coordinator_bootstrap_servers=f"{server.host}:{server.port}",
        transactional_id=transactional_id,
        transaction_timeout_ms=options.pop("transaction_timeout_ms", 30_000),
        coordinator_options={"request_timeout_ms": 10_000, "retry_backoff_ms": 20},
        **options,
    )
    await made.start()
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            await made.stop()


@pytest.fixture
def names() -> tuple[str, str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"__txn_log_{suffix}", f"txn-out-{suffix}", f"txn-{suffix}"


async def test_committed_records_are_read_and_aborted_ones_never(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    log_topic, out, transactional_id = names
    await create_topic(kafka_broker, out)
    with coordinator(kafka_broker, log_topic) as server:
        async with producer(kafka_broker, server, transactional_id) as txn:
            async with txn.transaction():
                for index in range(5):
                    await txn.send(out, f"committed-{index}".encode(), partition=index % 2)
            await txn.begin_transaction()
            for index in range(3):
                await txn.send(out, f"aborted-{index}".encode(), partition=index % 2)
            await txn.abort_transaction()
            async with txn.transaction():
                await txn.send(out, b"committed-last", partition=0)
        committed = await read_all(kafka_broker, out, "read_committed", expect=6)
        assert sorted(committed) == sorted(
            [f"committed-{i}".encode() for i in range(5)] + [b"committed-last"]
        )
        everything = await read_all(kafka_broker, out, "read_uncommitted", expect=9)
        assert len(everything) == 9, "the aborted records are in the log, marked aborted"


async def test_offsets_sent_in_a_transaction_commit_with_it(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    log_topic, out, transactional_id = names
    await create_topic(kafka_broker, out)
    group = f"group-{transactional_id}"
    source = TopicPartition("txn-input", 0)
    with coordinator(kafka_broker, log_topic) as server:
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:
            async with producer(kafka_broker, server, transactional_id) as txn:
                await txn.begin_transaction()
                await txn.send(out, b"a", partition=0)
                await txn.send_offsets_to_transaction({source: OffsetAndMetadata(42, "")}, group)
                # Pending: a stable read refuses, a plain one does not see it.
                stable = await fetch(client, group, source, require_stable=True)
                assert stable.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
                assert (await fetch(client, group, source)).committed_offset == -1
                await txn.commit_transaction()

                committed = await _eventually_committed(client, group, source, 42)
                assert committed == 42

                await txn.begin_transaction()
                await txn.send(out, b"b", partition=0)
                await txn.send_offsets_to_transaction({source: OffsetAndMetadata(50, "")}, group)
                await txn.abort_transaction()
            # The abort's markers drop the pending offset: the committed one stays.
            assert await _eventually_committed(client, group, source, 42) == 42
        finally:
            await client.close()


async def test_a_consumer_starts_from_the_offsets_a_transaction_is_committing(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    """KIP-447: a consumer that takes over partitions while the previous owner's transaction
    is committing their offsets must start after them, not at the offsets before (it would
    hand out that transaction's input again): its fetch of the committed offsets is a
    stable one, refused until the transaction is complete."""
    log_topic, out, transactional_id = names
    source = f"{out}-in"
    await create_topic(kafka_broker, out)
    await create_topic(kafka_broker, source, partitions=1)
    group = f"group-{transactional_id}"
    tp = TopicPartition(source, 0)
    with coordinator(kafka_broker, log_topic, "--group-initial-rebalance-delay-ms", "0") as server:
        async with producer(kafka_broker, server, transactional_id) as txn:
            await txn.begin_transaction()
            await txn.send(out, b"a", partition=0)
            await txn.send_offsets_to_transaction({tp: OffsetAndMetadata(42, "")}, group)
            consumer = CoordinatedConsumer(
                source,
                bootstrap_servers=kafka_broker.bootstrap,
                coordinator_bootstrap_servers=f"{server.host}:{server.port}",
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while consumer.member.generation_id < 0:
                    assert loop.time() < deadline, "never joined the group"
                    await asyncio.sleep(0.05)
                # Joined: the assignment and the offset fetch take a few round trips.
                await asyncio.sleep(1)
                assert consumer.assignment() == set(), "started before the offset was stable"
                await txn.commit_transaction()
                deadline = loop.time() + 10
                while not consumer.assignment():
                    assert loop.time() < deadline, "never started after the commit"
                    await asyncio.sleep(0.05)
                assert await consumer.position(tp) == 42
            finally:
                await consumer.stop()


async def test_a_second_producer_with_the_same_id_fences_the_first(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    log_topic, out, transactional_id = names
    await create_topic(kafka_broker, out)
    with coordinator(kafka_broker, log_topic) as server:
        async with producer(kafka_broker, server, transactional_id) as zombie:
            await zombie.begin_transaction()
            await zombie.send(out, b"zombie", partition=0)
            async with producer(kafka_broker, server, transactional_id) as successor:
                # The successor's InitProducerId aborted the zombie's open transaction.
                async with successor.transaction():
                    await successor.send(out, b"successor", partition=0)
                with pytest.raises(ProducerFenced):
                    await zombie.commit_transaction()
        committed = await read_all(kafka_broker, out, "read_committed", expect=1)
        assert committed == [b"successor"]


async def test_transactions_survive_a_restart_and_are_described(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    log_topic, out, transactional_id = names
    await create_topic(kafka_broker, out)
    with coordinator(kafka_broker, log_topic) as server:
        async with producer(kafka_broker, server, transactional_id) as txn:
            async with txn.transaction():
                await txn.send(out, b"before", partition=1)
            first_id, first_epoch = txn.producer_id, txn.producer_epoch
        server.kill()
    with coordinator(kafka_broker, log_topic) as server:
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:
            # Killed at once after the commit was accepted, it may have left the transaction
            # PrepareCommit: the restarted coordinator ends it.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while True:
                described = await client.describe_transactions(
                    DescribeTransactionsRequest(transactional_ids=[transactional_id])
                )
                (state,) = described.transaction_states
                assert state.error_code == ErrorCode.NONE
                assert state.producer_id == first_id
                if state.transaction_state == "CompleteCommit":
                    break
                assert state.transaction_state == "PrepareCommit"
                assert loop.time() < deadline, "the prepared commit never completed"
                await asyncio.sleep(0.05)
            listed = await client.list_transactions(ListTransactionsRequest())
            assert transactional_id in {t.transactional_id for t in listed.transaction_states}
        finally:
            await client.close()
        async with producer(kafka_broker, server, transactional_id) as txn:
            # The same producer id at the next epoch: the log kept the id's state.
            assert txn.producer_id == first_id
            assert txn.producer_epoch == first_epoch + 1
            async with txn.transaction():
                await txn.send(out, b"after", partition=1)
        committed = await read_all(kafka_broker, out, "read_committed", expect=2)
        assert sorted(committed) == [b"after", b"before"]


async def fetch(
    client: CoordinatorClient, group: str, source: TopicPartition, *, require_stable: bool = False
) -> OffsetFetchResponsePartition:
    answer = await client.offset_fetch(
        OffsetFetchRequest(
            groups=[
                OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        OffsetFetchRequestTopic(
                            name=source.topic, partition_indexes=[source.partition]
                        )
                    ],
                )
            ],
            require_stable=require_stable,
        )
    )
    (group_answer,) = answer.groups
    (topic,) = group_answer.topics
    (partition,) = topic.partitions
    return partition


async def _eventually_committed(
    client: CoordinatorClient, group: str, source: TopicPartition, offset: int
) -> int:
    """The markers land after EndTxn's answer: the offset becomes readable soon after."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        partition = await fetch(client, group, source, require_stable=True)
        if partition.error_code == ErrorCode.NONE and partition.committed_offset == offset:
            return offset
        assert loop.time() < deadline, f"never committed: {partition}"
        await asyncio.sleep(0.05)


async def test_add_partitions_to_txn_refuses_what_the_cluster_lacks_as_kafka_does(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    """A topic the data cluster does not have, or a partition past a topic's count:
    UNKNOWN_TOPIC_OR_PARTITION for it and OPERATION_NOT_ATTEMPTED for the rest of the request
    (Kafka's answer), nothing added; the transaction then commits at once, not stuck
    prepared on a marker no broker takes; and the missing topic is not created."""
    log_topic, out, transactional_id = names
    missing = f"{out}-missing"
    await create_topic(kafka_broker, out, partitions=2)
    with coordinator(kafka_broker, log_topic) as server:
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:
            init = await client.init_producer_id(
                InitProducerIdRequest(
                    transactional_id=transactional_id, transaction_timeout_ms=30_000
                )
            )
            ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}

            async def add(*topics: tuple[str, list[int]]) -> dict[tuple[str, int], int]:
                answer = await client.add_partitions_to_txn(
                    AddPartitionsToTxnRequest(
                        transactional_id=transactional_id,
                        topics=[
                            AddPartitionsToTxnRequestTopic(name=name, partitions=partitions)
                            for name, partitions in topics
                        ],
                        **ids,
                    ),
                    raise_on_error=False,
                )
                return {
                    (topic.name, result.partition_index): result.partition_error_code
                    for topic in answer.results_by_topic
                    for result in topic.results_by_partition
                }

            not_attempted = ErrorCode.OPERATION_NOT_ATTEMPTED
            unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert await add((out, [0]), (missing, [0])) == {
                (out, 0): not_attempted,
                (missing, 0): unknown,
            }
            assert await add((out, [1, 2])) == {(out, 1): not_attempted, (out, 2): unknown}
            described = await client.describe_transactions(
                DescribeTransactionsRequest(transactional_ids=[transactional_id])
            )
            (state,) = described.transaction_states
            assert (state.transaction_state, state.topics) == ("Empty", [])
            assert await add((out, [1])) == {(out, 1): ErrorCode.NONE}
            # The topic grows: its new partition is taken at once, not once the metadata
            # cached for the markers ages out.
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
            await admin.start()
            try:
                await admin.create_partitions({out: NewPartitions(total_count=3)})
            finally:
                await admin.close()
            assert await add((out, [2])) == {(out, 2): ErrorCode.NONE}
            started = asyncio.get_running_loop().time()
            ended = await client.end_txn(
                EndTxnRequest(transactional_id=transactional_id, committed=True, **ids)
            )
            assert ended.error_code == ErrorCode.NONE
            while True:
                described = await client.describe_transactions(
                    DescribeTransactionsRequest(transactional_ids=[transactional_id])
                )
                if described.transaction_states[0].transaction_state == "CompleteCommit":
                    break
                assert asyncio.get_running_loop().time() - started < 5, described
                await asyncio.sleep(0.05)
        finally:
            await client.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        assert missing not in await admin.list_topics()
    finally:
        await admin.close()


async def test_max_transactional_ids_bounds_the_node_not_each_log_partition(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str]
) -> None:
    """Three ids allowed: a fourth is refused (POLICY_VIOLATION) even on a log partition that
    holds none yet; an id already there is still served."""
    log_topic, _, transactional_id = names
    ids = [f"{transactional_id}-{n}" for n in range(60)]
    by_partition: dict[int, list[str]] = {}
    for tid in ids:
        by_partition.setdefault(partition_for(tid, 4), []).append(tid)
    # Three ids on as many log partitions, and one more on the fourth.
    first, second, third, fourth = (tids[0] for _, tids in sorted(by_partition.items())[:4])
    with coordinator(kafka_broker, log_topic, "--max-transactional-ids", "3") as server:
        client = CoordinatorClient(f"{server.host}:{server.port}")
        try:

            async def init(tid: str) -> int:
                answer = await client.init_producer_id(
                    InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=30_000),
                    raise_on_error=False,
                )
                return answer.error_code

            assert [await init(tid) for tid in (first, second, third)] == [0, 0, 0]
            assert await init(fourth) == ErrorCode.POLICY_VIOLATION
            assert await init(first) == 0
        finally:
            await client.close()
