"""`TransactionalProducer` against a scripted coordinator (the contract's answers, as the
transaction coordinator would give them) and Apache Kafka for the records.

The coordinator here writes no markers, so every transaction's records stay uncommitted in
Kafka: the tests read them with read_uncommitted, and check that Kafka holds them as an open
transaction of our producer id (the last stable offset stays before them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    CommitFailedError,
    IllegalOperation,
    MessageSizeTooLargeError,
    ProducerFenced,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from client_fake_server import FakeCoordinator, Received

from coordinator_client import TransactionalProducer
from coordinator_client.txn_sender import TransactionStepError
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

PRODUCER_ID = 2**48 + 7
EPOCH = 3
TXN_API_KEYS = (
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.END_TXN,
)


@pytest.fixture(scope="module")
def txn_broker(kafka_broker: ApacheKafkaBroker) -> ApacheKafkaBroker:
    """The session's broker: it takes transactional batches without asking its own
    transaction coordinator about them (transaction.partition.verification.enable=false,
    what coordinator-server's transactions need of Kafka)."""
    return kafka_broker


@pytest.fixture
async def topic(txn_broker: ApacheKafkaBroker, unique_topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=txn_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(unique_topic, 2, 1)])
    finally:
        await admin.close()
    return unique_topic


class Script:
    """The coordinator's answers: NONE for everything unless a test scripts a list of
    codes for an API (one per request, the last one repeated). With `fencing`, as the
    transaction coordinator fences: each InitProducerId bumps the epoch, and a request of an
    older epoch is answered PRODUCER_FENCED."""

    def __init__(self, *, fencing: bool = False) -> None:
        self.codes: dict[int, list[int]] = {}
        self.hold: dict[int, asyncio.Event] = {}
        self.producer_id = PRODUCER_ID
        self.epoch = EPOCH
        self.fencing = fencing
        self.inits = 0

    def code(self, api_key: int, body: dict[str, Any]) -> int:
        if self.fencing and api_key == ApiKey.INIT_PRODUCER_ID:
            self.epoch = EPOCH + self.inits
            self.inits += 1
        elif self.fencing and body["producer_epoch"] < self.epoch:
            return ErrorCode.PRODUCER_FENCED
        codes = self.codes.get(api_key)
        if not codes:
            return 0
        return codes.pop(0) if len(codes) > 1 else codes[0]

    async def __call__(self, received: Received) -> dict[str, Any] | None:
        api_key = received.api_key
        if api_key in self.hold:
            await self.hold[api_key].wait()
        body = received.body
        if api_key == ApiKey.INIT_PRODUCER_ID:
            return {
                "error_code": self.code(api_key, body),
                "producer_id": self.producer_id,
                "producer_epoch": self.epoch,
            }
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            code = self.code(api_key, body)
            return {
                "results_by_topic": [
                    {
                        "name": topic["name"],
                        "results_by_partition": [
                            {"partition_index": p, "partition_error_code": code}
                            for p in topic["partitions"]
                        ],
                    }
                    for topic in body["topics"]
                ]
            }
        if api_key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
            return {"error_code": self.code(api_key, body)}
        if api_key == ApiKey.TXN_OFFSET_COMMIT:
            code = self.code(api_key, body)
            return {
                "topics": [
                    {
                        "name": topic["name"],
                        "partitions": [
                            {"partition_index": p["partition_index"], "error_code": code}
                            for p in topic["partitions"]
                        ],
                    }
                    for topic in body["topics"]
                ]
            }
        return None  # FindCoordinator: the fake server answers with itself


@contextlib.asynccontextmanager
async def setup(
    broker: ApacheKafkaBroker, transactional_id: str = "txn-1", **options: Any
) -> AsyncIterator[tuple[Script, FakeCoordinator, TransactionalProducer]]:
    script = Script()
    async with FakeCoordinator(script) as coordinator:
        producer = TransactionalProducer(
            bootstrap_servers=broker.bootstrap,
            coordinator_bootstrap_servers=coordinator.bootstrap,
            transactional_id=transactional_id,
            transaction_timeout_ms=30_000,
            coordinator_options={"request_timeout_ms": 5000, "retry_backoff_ms": 10},
            retry_backoff_ms=20,
            **options,
        )
        try:
            yield script, coordinator, producer
        finally:
            await producer.stop()


def txn_requests(coordinator: FakeCoordinator) -> list[Received]:
    return [r for r in coordinator.received if r.api_key in TXN_API_KEYS]


def sequence(coordinator: FakeCoordinator) -> list[str]:
    return [ApiKey(r.api_key).name for r in txn_requests(coordinator)]


def added(coordinator: FakeCoordinator) -> list[tuple[str, int]]:
    return [
        (topic["name"], p)
        for r in coordinator.requests(ApiKey.ADD_PARTITIONS_TO_TXN)
        for topic in r.body["topics"]
        for p in topic["partitions"]
    ]


async def fetch_batches(
    broker: ApacheKafkaBroker, tp: TopicPartition, isolation_level: int = 0
) -> tuple[int, int, list[Any]]:
    """(high watermark, last stable offset, record batches) of `tp`, read with a raw Fetch
    so that the batches' producer id, epoch and transactional flag can be checked."""
    client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
    await client.bootstrap()
    try:
        await client._wait_on_metadata(tp.topic)
        request = FetchRequest(
            max_wait_time=100,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=isolation_level,
            topics=[(tp.topic, [(tp.partition, 0, 1 << 20)])],
        )
        # A topic just created may not have its leader ready yet (NOT_LEADER_OR_FOLLOWER).
        for _ in range(100):
            leader = client.cluster.leader_for_partition(tp)
            response = await client.send(leader, request)
            [(_, [(partition, error_code, highwater, *data)])] = response.topics
            assert partition == tp.partition
            if error_code == 0:
                records = MemoryRecords(data[-1])
                batches = []
                while (batch := records.next_batch()) is not None:
                    batches.append(batch)
                return highwater, data[0], batches
            await asyncio.sleep(0.1)
        raise AssertionError(f"Fetch of {tp} kept failing: error {error_code}")
    finally:
        await client.close()


# The record path and the request sequence


async def test_records_reach_kafka_as_transactional_batches_of_our_producer_id(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (_, coordinator, producer):
        await producer.start()
        assert (producer.producer_id, producer.producer_epoch) == (PRODUCER_ID, EPOCH)
        async with producer.transaction():
            for i in range(4):
                await producer.send(topic, f"v{i}".encode(), partition=i % 2)
            await producer.send_and_wait(topic, b"v4", partition=0)

        finds = coordinator.requests(ApiKey.FIND_COORDINATOR)
        assert finds and all(r.body["key_type"] == 1 and r.body["keys"] == ["txn-1"] for r in finds)
        names = sequence(coordinator)
        assert names[0] == "INIT_PRODUCER_ID" and names[-1] == "END_TXN"
        assert set(names[1:-1]) == {"ADD_PARTITIONS_TO_TXN"}
        assert sorted(added(coordinator)) == [(topic, 0), (topic, 1)]
        init = coordinator.requests(ApiKey.INIT_PRODUCER_ID)[0].body
        assert init["transactional_id"] == "txn-1"
        assert init["transaction_timeout_ms"] == 30_000
        for r in txn_requests(coordinator)[1:]:
            assert r.body["transactional_id"] == "txn-1"
            assert (r.body["producer_id"], r.body["producer_epoch"]) == (PRODUCER_ID, EPOCH)
        assert coordinator.requests(ApiKey.END_TXN)[0].body["committed"] is True

    values: list[bytes] = []
    for partition in (0, 1):
        highwater, last_stable, batches = await fetch_batches(
            txn_broker, TopicPartition(topic, partition)
        )
        assert batches
        for batch in batches:
            assert batch.is_transactional
            assert (batch.producer_id, batch.producer_epoch) == (PRODUCER_ID, EPOCH)
            values += [record.value for record in batch]
        # No marker (this coordinator writes none): the transaction is open in Kafka.
        assert last_stable == 0 < highwater
        _, _, committed_view = await fetch_batches(
            txn_broker, TopicPartition(topic, partition), isolation_level=1
        )
        assert committed_view == []
    assert sorted(values) == [b"v0", b"v1", b"v2", b"v3", b"v4"]


async def test_no_batch_reaches_kafka_before_its_partition_is_added(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (script, coordinator, producer):
        await producer.start()
        await producer.begin_transaction()
        script.hold[ApiKey.ADD_PARTITIONS_TO_TXN] = release = asyncio.Event()
        delivered = await producer.send(topic, b"held", partition=0)
        await coordinator.wait_for_requests(ApiKey.ADD_PARTITIONS_TO_TXN)
        # A record of another partition meanwhile wakes the sender, which must still hold
        # partition 0's batch back (and this one's, whose partition is not added either).
        other = await producer.send(topic, b"other", partition=1)
        await asyncio.sleep(0.5)
        assert not delivered.done() and not other.done()
        for partition in (0, 1):
            highwater, _, _ = await fetch_batches(txn_broker, TopicPartition(topic, partition))
            assert highwater == 0
        release.set()
        assert (await asyncio.wait_for(delivered, 10)).offset == 0
        assert (await asyncio.wait_for(other, 10)).offset == 0
        # partition 1 was added by a request of its own, after partition 0's was answered.
        assert [
            [(t["name"], p) for t in r.body["topics"] for p in t["partitions"]]
            for r in coordinator.requests(ApiKey.ADD_PARTITIONS_TO_TXN)
        ] == [[(topic, 0)], [(topic, 1)]]
        # A second record of the same partition is not added again.
        await producer.send_and_wait(topic, b"again", partition=0)
        assert added(coordinator) == [(topic, 0), (topic, 1)]
        await producer.commit_transaction()

        # The next transaction adds its partitions again.
        async with producer.transaction():
            await producer.send_and_wait(topic, b"next", partition=0)
        assert added(coordinator) == [(topic, 0), (topic, 1), (topic, 0)]
        assert len(coordinator.requests(ApiKey.END_TXN)) == 2


async def test_send_offsets_to_transaction(txn_broker: ApacheKafkaBroker, topic: str) -> None:
    async with setup(txn_broker) as (_, coordinator, producer):
        await producer.start()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"out", partition=1)
            await producer.send_offsets_to_transaction(
                {TopicPartition("in", 0): 42, TopicPartition("in", 3): (7, "meta")}, "group-a"
            )
        assert sequence(coordinator) == [
            "INIT_PRODUCER_ID",
            "ADD_PARTITIONS_TO_TXN",
            "ADD_OFFSETS_TO_TXN",
            "TXN_OFFSET_COMMIT",
            "END_TXN",
        ]
        add_offsets = coordinator.requests(ApiKey.ADD_OFFSETS_TO_TXN)[0].body
        assert add_offsets["group_id"] == "group-a"
        assert (add_offsets["producer_id"], add_offsets["producer_epoch"]) == (PRODUCER_ID, EPOCH)
        commit = coordinator.requests(ApiKey.TXN_OFFSET_COMMIT)[0].body
        assert commit["group_id"] == "group-a"
        assert commit["transactional_id"] == "txn-1"
        assert (commit["producer_id"], commit["producer_epoch"]) == (PRODUCER_ID, EPOCH)
        assert [
            (t["name"], p["partition_index"], p["committed_offset"], p["committed_metadata"])
            for t in commit["topics"]
            for p in t["partitions"]
        ] == [("in", 0, 42, ""), ("in", 3, 7, "meta")]
        # The group's coordinator was looked up by group id, the transaction's by
        # transactional id.
        lookups = {
            (r.body["key_type"], tuple(r.body["keys"]))
            for r in coordinator.requests(ApiKey.FIND_COORDINATOR)
        }
        assert (1, ("txn-1",)) in lookups
        assert (0, ("group-a",)) in lookups


async def test_exception_in_transaction_block_aborts(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (_, coordinator, producer):
        await producer.start()
        with pytest.raises(ZeroDivisionError):
            async with producer.transaction():
                await producer.send_and_wait(topic, b"doomed", partition=0)
                _ = 1 / 0
        end = coordinator.requests(ApiKey.END_TXN)
        assert [r.body["committed"] for r in end] == [False]
        # The producer goes on with the next transaction.
        async with producer.transaction():
            await producer.send_and_wait(topic, b"fine", partition=0)
        assert [r.body["committed"] for r in coordinator.requests(ApiKey.END_TXN)] == [
            False,
            True,
        ]


async def test_empty_transaction_sends_no_end_txn(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (_, coordinator, producer):
        await producer.start()
        async with producer.transaction():
            pass
        await producer.begin_transaction()
        await producer.abort_transaction()
        assert sequence(coordinator) == ["INIT_PRODUCER_ID"]


async def test_calls_out_of_order_raise_illegal_operation(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (_, _, producer):
        with pytest.raises(IllegalOperation):
            await producer.begin_transaction()
        await producer.start()
        with pytest.raises(IllegalOperation):
            await producer.send(topic, b"outside", partition=0)
        with pytest.raises(IllegalOperation):
            await producer.commit_transaction()
        with pytest.raises(IllegalOperation):
            await producer.abort_transaction()
        await producer.begin_transaction()
        with pytest.raises(IllegalOperation):
            await producer.begin_transaction()


# Retries and errors


async def test_concurrent_transactions_is_retried(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    concurrent = ErrorCode.CONCURRENT_TRANSACTIONS
    async with setup(txn_broker) as (script, coordinator, producer):
        script.codes[ApiKey.INIT_PRODUCER_ID] = [concurrent, concurrent, 0]
        script.codes[ApiKey.ADD_PARTITIONS_TO_TXN] = [concurrent, concurrent, 0]
        script.codes[ApiKey.END_TXN] = [concurrent, 0]
        await producer.start()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"patient", partition=0)
        assert sequence(coordinator) == [
            "INIT_PRODUCER_ID",
            "INIT_PRODUCER_ID",
            "INIT_PRODUCER_ID",
            "ADD_PARTITIONS_TO_TXN",
            "ADD_PARTITIONS_TO_TXN",
            "ADD_PARTITIONS_TO_TXN",
            "END_TXN",
            "END_TXN",
        ]
        _, _, batches = await fetch_batches(txn_broker, TopicPartition(topic, 0))
        assert [r.value for b in batches for r in b] == [b"patient"]


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
async def test_fenced_on_end_txn_makes_the_producer_unusable(
    txn_broker: ApacheKafkaBroker, topic: str, code: ErrorCode
) -> None:
    async with setup(txn_broker) as (script, coordinator, producer):
        script.codes[ApiKey.END_TXN] = [code]
        await producer.start()
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"zombie", partition=0)
        with pytest.raises(ProducerFenced):
            await producer.commit_transaction()
        with pytest.raises(ProducerFenced):
            await producer.begin_transaction()
        with pytest.raises(ProducerFenced):
            await producer.send(topic, b"more", partition=0)
        with pytest.raises(ProducerFenced):
            await producer.abort_transaction()
        assert len(coordinator.requests(ApiKey.END_TXN)) == 1


async def test_fenced_on_add_partitions_fails_the_record(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (script, coordinator, producer):
        script.codes[ApiKey.ADD_PARTITIONS_TO_TXN] = [ErrorCode.PRODUCER_FENCED]
        await producer.start()
        await producer.begin_transaction()
        delivered = await producer.send(topic, b"zombie", partition=0)
        with pytest.raises(ProducerFenced):
            await asyncio.wait_for(delivered, 10)
        with pytest.raises(ProducerFenced):
            await producer.commit_transaction()
        # Nothing reached Kafka: the partition was never added.
        highwater, _, _ = await fetch_batches(txn_broker, TopicPartition(topic, 0))
        assert highwater == 0
        assert ApiKey.END_TXN not in {r.api_key for r in coordinator.received}


async def test_fatal_init_producer_id_fails_start(txn_broker: ApacheKafkaBroker) -> None:
    async with setup(txn_broker) as (script, _, producer):
        script.codes[ApiKey.INIT_PRODUCER_ID] = [ErrorCode.INVALID_TRANSACTION_TIMEOUT]
        with pytest.raises(TransactionStepError, match="INVALID_TRANSACTION_TIMEOUT"):
            await producer.start()


async def test_refused_partition_makes_the_transaction_abortable(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (script, coordinator, producer):
        await producer.start()
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"fine", partition=1)
        script.codes[ApiKey.ADD_PARTITIONS_TO_TXN] = [ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0]
        await producer.send(topic, b"refused", partition=0)
        await coordinator.wait_for_requests(ApiKey.ADD_PARTITIONS_TO_TXN, 2)
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.commit_transaction()
        # The abort still reaches the coordinator (partition 1 was added).
        await producer.abort_transaction()
        assert [r.body["committed"] for r in coordinator.requests(ApiKey.END_TXN)] == [False]
        async with producer.transaction():
            await producer.send_and_wait(topic, b"next", partition=0)
        assert [r.body["committed"] for r in coordinator.requests(ApiKey.END_TXN)] == [
            False,
            True,
        ]


async def test_offsets_of_two_groups_each_added_before_their_commit(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (_, coordinator, producer):
        await producer.start()
        async with producer.transaction():
            await producer.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "group-a")
            await producer.send_offsets_to_transaction(
                {TopicPartition("in", 1): 2},
                "group-b",
                generation_id=5,
                member_id="member-1",
                group_instance_id="instance-1",
            )
        steps = [
            (ApiKey(r.api_key).name, r.body.get("group_id")) for r in txn_requests(coordinator)
        ]
        assert steps == [
            ("INIT_PRODUCER_ID", None),
            ("ADD_OFFSETS_TO_TXN", "group-a"),
            ("TXN_OFFSET_COMMIT", "group-a"),
            ("ADD_OFFSETS_TO_TXN", "group-b"),
            ("TXN_OFFSET_COMMIT", "group-b"),
            ("END_TXN", None),
        ]
        commits = coordinator.requests(ApiKey.TXN_OFFSET_COMMIT)
        members = [
            (
                r.body["generation_id_or_member_epoch"],
                r.body["member_id"],
                r.body["group_instance_id"],
            )
            for r in commits
        ]
        assert members == [(-1, "", None), (5, "member-1", "instance-1")]


async def test_stale_group_member_makes_the_transaction_abortable(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    async with setup(txn_broker) as (script, coordinator, producer):
        script.codes[ApiKey.TXN_OFFSET_COMMIT] = [ErrorCode.ILLEGAL_GENERATION]
        await producer.start()
        await producer.begin_transaction()
        with pytest.raises(CommitFailedError):
            await producer.send_offsets_to_transaction(
                {TopicPartition("in", 0): 1}, "group-a", generation_id=1, member_id="m"
            )
        with pytest.raises(CommitFailedError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert [r.body["committed"] for r in coordinator.requests(ApiKey.END_TXN)] == [False]


async def test_record_kafka_refuses_makes_the_transaction_abortable(
    txn_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=txn_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(unique_topic, 1, 1, topic_configs={"max.message.bytes": "200"})]
        )
    finally:
        await admin.close()
    async with setup(txn_broker) as (_, coordinator, producer):
        await producer.start()
        await producer.begin_transaction()
        await producer.send_and_wait(unique_topic, b"small", partition=0)
        refused = await producer.send(unique_topic, b"x" * 1000, partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            await asyncio.wait_for(refused, 10)
        # The transaction cannot be committed without the record; EndTxn(commit) never
        # goes out, the abort does.
        with pytest.raises(MessageSizeTooLargeError):
            await producer.commit_transaction()
        with pytest.raises(IllegalOperation):
            await producer.send(unique_topic, b"late", partition=0)
        await producer.abort_transaction()
        assert [r.body["committed"] for r in coordinator.requests(ApiKey.END_TXN)] == [False]


async def test_a_new_producer_with_the_same_id_fences_the_zombie(
    txn_broker: ApacheKafkaBroker, topic: str
) -> None:
    script = Script(fencing=True)
    async with FakeCoordinator(script) as coordinator:

        def producer() -> TransactionalProducer:
            return TransactionalProducer(
                bootstrap_servers=txn_broker.bootstrap,
                coordinator_bootstrap_servers=coordinator.bootstrap,
                transactional_id="shared",
                coordinator_options={"request_timeout_ms": 5000},
            )

        zombie, successor = producer(), producer()
        try:
            await zombie.start()
            await zombie.begin_transaction()
            await zombie.send_and_wait(topic, b"zombie-1", partition=0)

            await successor.start()
            assert (successor.producer_id, successor.producer_epoch) == (
                zombie.producer_id,
                zombie.producer_epoch + 1,
            )
            await successor.begin_transaction()
            await successor.send_and_wait(topic, b"successor", partition=0)

            # Kafka refuses the zombie's batch (its epoch is older than the partition's)...
            late = await zombie.send(topic, b"zombie-2", partition=0)
            with pytest.raises(ProducerFenced):
                await asyncio.wait_for(late, 10)
            # ...and the coordinator its transaction's end: the zombie is done for.
            with pytest.raises(ProducerFenced):
                await zombie.commit_transaction()
            with pytest.raises(ProducerFenced):
                await zombie.abort_transaction()
            with pytest.raises(ProducerFenced):
                await zombie.begin_transaction()

            await successor.commit_transaction()
            _, _, batches = await fetch_batches(txn_broker, TopicPartition(topic, 0))
            assert [(b.producer_epoch, [r.value for r in b]) for b in batches] == [
                (EPOCH, [b"zombie-1"]),
                (EPOCH + 1, [b"successor"]),
            ]
            assert [
                (r.body["producer_epoch"], r.body["committed"])
                for r in coordinator.requests(ApiKey.END_TXN)
            ] == [(EPOCH, False), (EPOCH + 1, True)]
        finally:
            await zombie.stop()
            await successor.stop()


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionalIdAuthorizationFailed),
        (ErrorCode.INVALID_TXN_STATE, TransactionStepError),
    ],
)
async def test_other_fatal_answers_make_the_producer_unusable(
    txn_broker: ApacheKafkaBroker, topic: str, code: ErrorCode, error: type[Exception]
) -> None:
    async with setup(txn_broker) as (script, _, producer):
        script.codes[ApiKey.END_TXN] = [code]
        await producer.start()
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"doomed", partition=0)
        with pytest.raises(error) as raised:
            await producer.commit_transaction()
        if error is TransactionStepError:
            assert "EndTxn: INVALID_TXN_STATE" in str(raised.value)
        with pytest.raises(error):
            await producer.begin_transaction()
