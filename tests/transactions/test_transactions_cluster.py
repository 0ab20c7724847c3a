"""The transaction coordinator in a coordinator cluster: real `coordinator-server serve` nodes
sharing a log on Apache Kafka, the client library's TransactionalProducer, and stock aiokafka
consumers reading what it wrote.

What moves between the nodes: a transaction's offsets live on its group's log partition,
often another node's, and are ended there with WriteTxnMarkers from the transaction's node;
a transactional id's partition moves at a crash (kill -9), a planned stop (SIGTERM) or a
pause, and its new owner ends what was prepared, with markers the brokers accept while they
refuse the old owner's (coordinator epochs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import node_args
from server_process import ServerProcess
from test_transactions_kafka import create_topic, fetch, read_all

from coordinator_client import TransactionalProducer
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_client.rpc.errors import ConnectionClosedError
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_protocol.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from coordinator_server.markers.writer import KafkaTxnMarkerWriter
from coordinator_server.records import (
    PartitionOwnershipKey,
    PartitionOwnershipValue,
    TransactionKey,
    TransactionValue,
    decode_key,
    decode_value,
)
from coordinator_server.storage.kafka.log import KafkaLog

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 4
# Kafka's TransactionState ids (records/transactions.py).
PREPARE_COMMIT = 2
COMPLETE_COMMIT = 4


def txn_node(broker: ApacheKafkaBroker, log_topic: str, node_id: int) -> ServerProcess:
    return ServerProcess(node_args(broker, log_topic, node_id, PARTITIONS, "--transactions", "on"))


def status(process: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{process.metrics_port}/status", timeout=5
    ) as reply:
        body: dict[str, Any] = json.loads(reply.read())
    return body


def owned_active(process: ServerProcess) -> set[int]:
    """The log partitions the node owns and serves now."""
    body = status(process)
    states = body.get("partitions", {})
    return {
        partition
        for partition in body["cluster"]["owned"]
        if states.get(str(partition)) == "ACTIVE"
    }


async def eventually(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        with contextlib.suppress(OSError):
            result = predicate()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return result
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def two_nodes(
    broker: ApacheKafkaBroker, log_topic: str, nodes: list[ServerProcess]
) -> tuple[ServerProcess, ServerProcess]:
    """Two nodes, each owning and serving half of the log's partitions."""
    started = []
    for node_id in (1, 2):
        node = txn_node(broker, log_topic, node_id)
        nodes.append(node)
        node.start(timeout=120)
        started.append(node)
    first, second = started

    def split() -> bool:
        mine, theirs = owned_active(first), owned_active(second)
        return len(mine) == len(theirs) == PARTITIONS // 2 and not mine & theirs

    await eventually(split, 60, "each node serving half of the partitions")
    return first, second


def key_on(prefix: str, partitions: set[int]) -> str:
    """A key (transactional id or group id) that hashes to one of `partitions`."""
    index = 0
    while partition_for(f"{prefix}-{index}", PARTITIONS) not in partitions:
        index += 1
    return f"{prefix}-{index}"


def bootstrap(*processes: ServerProcess) -> str:
    return ",".join(f"{p.host}:{p.port}" for p in processes)


@contextlib.asynccontextmanager
async def producer(
    broker: ApacheKafkaBroker, coordinators: str, transactional_id: str
) -> AsyncIterator[TransactionalProducer]:
    made = TransactionalProducer(
        bootstrap_servers=broker.bootstrap,
        coordinator_bootstrap_servers=coordinators,
        transactional_id=transactional_id,
        transaction_timeout_ms=60_000,
        # Long enough to outlast a failover (the session timeout and a load).
        coordinator_options={"request_timeout_ms": 30_000, "retry_backoff_ms": 20},
    )
    await made.start()
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            await made.stop()


async def committed_offset(
    client: CoordinatorClient, group: str, source: TopicPartition
) -> int | None:
    """The stable committed offset, None while one is pending or the node is not ready."""
    with contextlib.suppress(Exception):
        partition = await fetch(client, group, source, require_stable=True)
        if partition.error_code == ErrorCode.NONE:
            return partition.committed_offset
    return None


async def transaction_state(client: CoordinatorClient, transactional_id: str) -> str | None:
    with contextlib.suppress(Exception):
        described = await client.describe_transactions(
            DescribeTransactionsRequest(transactional_ids=[transactional_id])
        )
        (state,) = described.transaction_states
        if state.error_code == ErrorCode.NONE:
            return state.transaction_state
    return None


@pytest.fixture
def names() -> tuple[str, str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"__txn_cluster_log_{suffix}", f"txn-cluster-out-{suffix}", suffix


async def test_offsets_on_another_nodes_partition_commit_and_abort_with_the_transaction(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str], nodes: list[ServerProcess]
) -> None:
    log_topic, out, suffix = names
    await create_topic(kafka_broker, out)
    first, second = await two_nodes(kafka_broker, log_topic, nodes)
    transactional_id = key_on(f"txn-{suffix}", owned_active(first))
    group = key_on(f"group-{suffix}", owned_active(second))
    source = TopicPartition("txn-input", 0)
    at_group = CoordinatorClient(bootstrap(second), request_timeout_ms=10_000)
    try:
        async with producer(kafka_broker, bootstrap(first, second), transactional_id) as txn:
            await txn.begin_transaction()
            await txn.send(out, b"committed", partition=0)
            await txn.send_offsets_to_transaction({source: OffsetAndMetadata(42, "")}, group)
            # Pending on the group's node: a stable read refuses.
            pending = await fetch(at_group, group, source, require_stable=True)
            assert pending.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
            await txn.commit_transaction()
            # Only the transaction's node's WriteTxnMarkers to the group's node commits it.
            assert await eventually(
                lambda: _is(committed_offset(at_group, group, source), 42), 15, "the commit"
            )

            await txn.begin_transaction()
            await txn.send(out, b"aborted", partition=1)
            await txn.send_offsets_to_transaction({source: OffsetAndMetadata(50, "")}, group)
            await txn.abort_transaction()
            # The abort's markers drop the pending offset there: the committed one stays.
            assert await eventually(
                lambda: _is(committed_offset(at_group, group, source), 42), 15, "the abort"
            )

            # The group's node checks a TxnOffsetCommit with the transaction's node
            # (DescribeTransactions): a zombie's stale epoch is fenced, offsets outside the
            # transaction refused, and neither stays pending.
            await txn.begin_transaction()
            await txn.send(out, b"open", partition=0)
            stale = await txn_offset_commit(
                at_group, transactional_id, group, txn.producer_id, txn.producer_epoch - 1
            )
            assert stale == ErrorCode.PRODUCER_FENCED
            outside = await txn_offset_commit(
                at_group, transactional_id, group, txn.producer_id, txn.producer_epoch
            )
            assert outside == ErrorCode.INVALID_TXN_STATE
            assert (await fetch(at_group, group, source, require_stable=True)).error_code == (
                ErrorCode.NONE
            )
            await txn.abort_transaction()
    finally:
        await at_group.close()
    assert await read_all(kafka_broker, out, "read_committed", expect=1) == [b"committed"]
    assert first.proc is not None and first.proc.poll() is None


async def txn_offset_commit(
    client: CoordinatorClient, transactional_id: str, group: str, producer_id: int, epoch: int
) -> int:
    """A bare TxnOffsetCommit of txn-input/0 to the group's node: its partition's error."""
    answer = await client.txn_offset_commit(
        TxnOffsetCommitRequest(
            transactional_id=transactional_id,
            group_id=group,
            producer_id=producer_id,
            producer_epoch=epoch,
            topics=[
                TxnOffsetCommitRequestTopic(
                    name="txn-input",
                    partitions=[
                        TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=99)
                    ],
                )
            ],
        )
    )
    (topic,) = answer.topics
    (partition,) = topic.partitions
    return partition.error_code


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_a_killed_nodes_prepared_commit_is_completed_by_the_node_taking_its_partition(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str], nodes: list[ServerProcess]
) -> None:
    log_topic, out, suffix = names
    await create_topic(kafka_broker, out)
    victim, survivor = await two_nodes(kafka_broker, log_topic, nodes)
    transactional_id = key_on(f"txn-{suffix}", owned_active(victim))
    txn_partition = partition_for(transactional_id, PARTITIONS)
    group = key_on(f"group-{suffix}", owned_active(survivor))
    source = TopicPartition("txn-input", 0)
    async with producer(kafka_broker, bootstrap(victim, survivor), transactional_id) as txn:
        await txn.begin_transaction()
        for index in range(4):
            await txn.send(out, f"record-{index}".encode(), partition=index % 2)
        await txn.send_offsets_to_transaction({source: OffsetAndMetadata(7, "")}, group)
        await txn.commit_transaction()
        # EndTxn(commit) answered: the transaction is at least PrepareCommit in the log.
        victim.kill()
        first_id, first_epoch = txn.producer_id, txn.producer_epoch

    at_survivor = CoordinatorClient(bootstrap(survivor), request_timeout_ms=10_000)
    try:
        await eventually(
            lambda: txn_partition in owned_active(survivor), 60, "the survivor taking over"
        )
        assert await eventually(
            lambda: _is(transaction_state(at_survivor, transactional_id), "CompleteCommit"),
            30,
            "the prepared commit completed by the survivor",
        )
        assert await eventually(
            lambda: _is(committed_offset(at_survivor, group, source), 7), 15, "the offsets"
        )
    finally:
        await at_survivor.close()
    committed = await read_all(kafka_broker, out, "read_committed", expect=4)
    assert sorted(committed) == [f"record-{i}".encode() for i in range(4)]
    history = await transaction_history(kafka_broker, log_topic, txn_partition, transactional_id)
    # Prepared by the victim, completed once (by whichever node got there: the kill comes
    # right after the answer, so it is usually the survivor; when it was the victim, the
    # survivor's ownership record follows the completion).
    states = [state for kind, state in history if kind == "state"]
    assert PREPARE_COMMIT in states, str(history)
    assert states.count(COMPLETE_COMMIT) == 1 and states[-1] == COMPLETE_COMMIT, str(history)

    # The producer resuming with its transactional id: the next epoch, from the new owner
    # (its bootstrap servers name the dead node first).
    async with producer(kafka_broker, bootstrap(victim, survivor), transactional_id) as txn:
        assert (txn.producer_id, txn.producer_epoch) == (first_id, first_epoch + 1)
        async with txn.transaction():
            await txn.send(out, b"after", partition=0)
    committed = await read_all(kafka_broker, out, "read_committed", expect=5)
    assert sorted(committed) == sorted([b"after", *(f"record-{i}".encode() for i in range(4))])


async def transaction_history(
    broker: ApacheKafkaBroker, log_topic: str, partition: int, transactional_id: str
) -> list[tuple[str, int]]:
    """The log partition's ownership records ("owner", node id) and the transactional id's
    records ("state", Kafka's state id), in log order."""
    log = KafkaLog(broker.bootstrap, log_topic, PARTITIONS, 1, idempotent=False)
    await log.start()
    history: list[tuple[str, int]] = []

    def sink(offset: int, key: bytes, value: bytes | None) -> None:
        record_key = decode_key(key)
        record_value = decode_value(record_key, value)
        if isinstance(record_key, PartitionOwnershipKey):
            assert isinstance(record_value, PartitionOwnershipValue)
            history.append(("owner", record_value.node_id))
        elif (
            isinstance(record_key, TransactionKey)
            and record_key.transactional_id == transactional_id
            and isinstance(record_value, TransactionValue)
        ):
            history.append(("state", record_value.state))

    try:
        await log.load(partition, sink)
    finally:
        await log.close()
    return history


class RetriesSeen(logging.Handler):
    """What the client retried: the error of each retry of the RPC client's request path
    and each step the transactional producer's sender ran again."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.errors: list[object] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "coordinator_client.rpc.request_path" and "retry" in record.msg:
            self.errors.append(record.args[1] if isinstance(record.args, tuple) else None)
        elif (
            record.name == "coordinator_client.txn_sender"
            and record.levelno >= logging.INFO
            and isinstance(record.args, tuple)
        ):
            # "<step> for <id>: <code name>, retrying" or "... failed, retrying: <error>".
            last = record.args[-1]
            self.errors.append(ErrorCode[last] if isinstance(last, str) else last)


@contextlib.contextmanager
def retries_seen() -> Iterator[RetriesSeen]:
    seen = RetriesSeen()
    loggers = [logging.getLogger(name) for name in (
        "coordinator_client.rpc.request_path", "coordinator_client.txn_sender"
    )]  # fmt: skip
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(seen)
        logger.setLevel(logging.DEBUG)
    try:
        yield seen
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(seen)
            logger.setLevel(level)


# What a client may see while a partition moves: it looks the coordinator up again, or waits.
RETRIABLE = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


async def test_a_planned_stop_of_a_node_with_open_transactions_only_delays_them(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str], nodes: list[ServerProcess]
) -> None:
    log_topic, out, suffix = names
    await create_topic(kafka_broker, out)
    leaving, staying = await two_nodes(kafka_broker, log_topic, nodes)
    # One transaction coordinated by the leaving node with its offsets at the staying one,
    # one the other way round: both kinds of partition move.
    pairs = [
        (
            key_on(f"txn-a-{suffix}", owned_active(leaving)),
            key_on(f"group-a-{suffix}", owned_active(staying)),
        ),
        (
            key_on(f"txn-b-{suffix}", owned_active(staying)),
            key_on(f"group-b-{suffix}", owned_active(leaving)),
        ),
    ]
    source = TopicPartition("txn-input", 0)
    with retries_seen() as seen:
        await run_around_a_stop(kafka_broker, out, (leaving, staying), pairs, source)
    codes = [getattr(error, "code", error) for error in seen.errors]
    assert all(code in RETRIABLE or isinstance(code, ConnectionClosedError) for code in codes), (
        codes
    )

    at_staying = CoordinatorClient(bootstrap(staying), request_timeout_ms=10_000)
    try:
        for _, group in pairs:
            assert await eventually(
                lambda group=group: _is(committed_offset(at_staying, group, source), 12),
                15,
                f"the offsets of {group}",
            )
    finally:
        await at_staying.close()
    expected = sorted(
        f"{i}-{when}".encode() for i in (0, 1) for when in ("before", "during", "after")
    )
    assert sorted(await read_all(kafka_broker, out, "read_committed", expect=6)) == expected


async def run_around_a_stop(
    kafka_broker: ApacheKafkaBroker,
    out: str,
    both: tuple[ServerProcess, ServerProcess],
    pairs: list[tuple[str, str]],
    source: TopicPartition,
) -> None:
    """Two transactions opened, the first node stopped (SIGTERM) while they go on, both
    committed, then one more each."""
    leaving = both[0]
    coordinators = bootstrap(*both)
    async with contextlib.AsyncExitStack() as stack:
        producers = [
            await stack.enter_async_context(producer(kafka_broker, coordinators, tid))
            for tid, _ in pairs
        ]
        for index, (txn, (_, group)) in enumerate(zip(producers, pairs, strict=True)):
            await txn.begin_transaction()
            await txn.send(out, f"{index}-before".encode(), partition=0)
            await txn.send_offsets_to_transaction({source: OffsetAndMetadata(10, "")}, group)

        stopping = asyncio.ensure_future(asyncio.to_thread(leaving.terminate, 60))
        # Mid-stop and after it: more records, offsets and the commit. Any error that is not
        # retriable (the client retries NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
        # CONCURRENT_TRANSACTIONS) fails the transaction and raises here.
        for index, (txn, (_, group)) in enumerate(zip(producers, pairs, strict=True)):
            await txn.send(out, f"{index}-during".encode(), partition=1)
            await txn.send_offsets_to_transaction({source: OffsetAndMetadata(11, "")}, group)
        assert await stopping == 0, leaving.output()
        for txn in producers:
            await txn.commit_transaction()
        # The next transactions, at the staying node alone.
        for index, (txn, (_, group)) in enumerate(zip(producers, pairs, strict=True)):
            async with txn.transaction():
                await txn.send(out, f"{index}-after".encode(), partition=0)
                await txn.send_offsets_to_transaction({source: OffsetAndMetadata(12, "")}, group)


async def delete_topic(broker: ApacheKafkaBroker, name: str) -> None:
    """Delete `name` and wait until the broker no longer lists it (so it can be created
    again)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([name])
        deadline = asyncio.get_running_loop().time() + 30
        while name in await admin.list_topics():
            assert asyncio.get_running_loop().time() < deadline, f"{name} is still listed"
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def test_the_brokers_take_the_new_owners_markers_and_fence_the_paused_old_owners(
    kafka_broker: ApacheKafkaBroker, names: tuple[str, str, str], nodes: list[ServerProcess]
) -> None:
    log_topic, out, suffix = names
    await create_topic(kafka_broker, out)
    # A topic the transaction names, deleted before it ends: its marker cannot land until
    # the test creates the topic again, which keeps the old owner's completion waiting
    # across its pause. (One that does not exist yet is refused by AddPartitionsToTxn.)
    late = f"txn-cluster-late-{suffix}"
    await create_topic(kafka_broker, late, partitions=1)
    old, new = await two_nodes(kafka_broker, log_topic, nodes)
    transactional_id = key_on(f"txn-{suffix}", owned_active(old))
    txn_partition = partition_for(transactional_id, PARTITIONS)
    old_epoch = status(old)["transactions"]["coordinator_epochs"][str(txn_partition)]

    client = CoordinatorClient(bootstrap(old, new), request_timeout_ms=30_000)
    try:
        started = await client.init_producer_id(
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000)
        )
        producer_id, producer_epoch = started.producer_id, started.producer_epoch
        added = await client.add_partitions_to_txn(
            AddPartitionsToTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                topics=[
                    AddPartitionsToTxnRequestTopic(name=out, partitions=[0]),
                    AddPartitionsToTxnRequestTopic(name=late, partitions=[0]),
                ],
            )
        )
        assert {
            p.partition_error_code for t in added.results_by_topic for p in t.results_by_partition
        } == {ErrorCode.NONE}
        await delete_topic(kafka_broker, late)
        ended = await client.end_txn(
            EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=True,
            )
        )
        assert ended.error_code == ErrorCode.NONE
        # PrepareCommit: the old owner writes its markers (the late topic's is refused).
        assert await transaction_state(client, transactional_id) == "PrepareCommit"

        os.kill(old.pid, signal.SIGSTOP)
        await eventually(
            lambda: txn_partition in owned_active(new), 60, "the new owner taking over"
        )
        new_epoch = status(new)["transactions"]["coordinator_epochs"][str(txn_partition)]
        assert new_epoch > old_epoch
        await create_topic(kafka_broker, late, partitions=1)
        # The new owner's markers (at its epoch) land: it completes the transaction.
        at_new = CoordinatorClient(bootstrap(new), request_timeout_ms=10_000)
        try:
            assert await eventually(
                lambda: _is(transaction_state(at_new, transactional_id), "CompleteCommit"),
                40,
                "the new owner completing the transaction",
            )
        finally:
            await at_new.close()
        # The producer resuming through the client that knows the old owner as its
        # transaction coordinator: its InitProducerId waits in the paused node's socket, is
        # answered NOT_COORDINATOR once the node wakes up (no lease), and follows the
        # partition to the new owner (FindCoordinator key_type 1).
        resumed = TransactionalProducer(
            bootstrap_servers=kafka_broker.bootstrap,
            coordinator_client=client,
            transactional_id=transactional_id,
            transaction_timeout_ms=60_000,
        )
        with retries_seen() as seen:
            starting = asyncio.ensure_future(resumed.start())
            await asyncio.sleep(0.5)
            lines_before = len(old.lines)
            os.kill(old.pid, signal.SIGCONT)
            await starting
        try:
            assert (resumed.producer_id, resumed.producer_epoch) == (
                producer_id,
                producer_epoch + 1,
            )
        finally:
            await resumed.stop()
        assert ErrorCode.NOT_COORDINATOR in [getattr(e, "code", e) for e in seen.errors], (
            seen.errors
        )
        # The old owner wakes up with the transaction prepared and its markers owed: the
        # brokers refuse them, or its lease (then the log) stops it before it sends more.
        await eventually(
            lambda: txn_partition not in status(old)["cluster"]["owned"],
            30,
            "the old owner dropping the partition",
        )
        await asyncio.sleep(1)
    finally:
        await client.close()
    woke = "".join(old.lines[lines_before:])
    # Its partition stopped (its lease had run out, which its completion asks before every
    # marker), or a marker it sent refused by the brokers (the new owner wrote at a higher
    # coordinator epoch, as the writer shows below).
    assert "TRANSACTION_COORDINATOR_FENCED" in woke or "membership lapsed" in woke, woke

    # Exactly one completion, written by the new owner after its ownership record.
    history = await transaction_history(kafka_broker, log_topic, txn_partition, transactional_id)
    assert history.count(("state", COMPLETE_COMMIT)) == 1, history
    assert history.index(("state", COMPLETE_COMMIT)) > history.index(("owner", 2)), history

    # The brokers themselves: the old owner's epoch is fenced on the late topic's partition,
    # the new owner's accepted again (a repeated marker).
    writer = KafkaTxnMarkerWriter(kafka_broker.bootstrap, unknown_partition_timeout_ms=0)
    await writer.start()
    try:
        stale = await writer.write(producer_id, producer_epoch, old_epoch, True, {late: [0]})
        assert stale.fenced, stale
        assert set(stale.errors.values()) == {ErrorCode.TRANSACTION_COORDINATOR_FENCED}
        current = await writer.write(producer_id, producer_epoch, new_epoch, True, {late: [0]})
        assert current.complete and not current.errors, current
    finally:
        await writer.stop()
    committed = await read_all(kafka_broker, out, "read_committed", expect=0, timeout=2)
    assert committed == []
