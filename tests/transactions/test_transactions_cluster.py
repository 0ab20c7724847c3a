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
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import node_args
from server_process import ServerProcess
from test_transactions_kafka import create_topic, fetch, read_all

from coordinator_server.client import TransactionalProducer
from coordinator_server.markers.writer import KafkaTxnMarkerWriter
from coordinator_server.records import (
    PartitionOwnershipKey,
    PartitionOwnershipValue,
    TransactionKey,
    TransactionValue,
    decode_key,
    decode_value,
)
from coordinator_server.rpc.client import CoordinatorClient
from coordinator_server.storage.kafka import KafkaLog
from protocol.errors import ErrorCode
from protocol.hashing import partition_for
from protocol.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 4
# Kafka's TransactionState ids (records/transactions.py).
COMPLETE_COMMIT = 4


def txn_node(broker: ApacheKafkaBroker, log_topic: str, node_id: int) -> ServerProcess:
    return ServerProcess(
        node_args(broker, log_topic, node_id, PARTITIONS, "--transactions", "on")
    )


def status(process: ServerProcess) -> dict[str, Any]:
    import json
    import urllib.request

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
    finally:
        await at_group.close()
    assert await read_all(kafka_broker, out, "read_committed", expect=1) == [b"committed"]
    assert first.proc is not None and first.proc.poll() is None


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
