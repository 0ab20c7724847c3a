"""CoordinatorClient's transaction APIs against a scripted server: the transaction
coordinator found with FindCoordinator key_type 1 and cached apart from groups, its retries
(CONCURRENT_TRANSACTIONS on the same node, NOT_COORDINATOR after a new lookup), TxnOffsetCommit
routed to the group's coordinator, an idempotent producer's InitProducerId and
WriteTxnMarkers sent to the node named."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from client_fake_server import FakeCoordinator, Received

from coordinator_client import CoordinatorClient
from coordinator_client.rpc.nodes import Node
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import (
    ConcurrentTransactionsError,
    ErrorCode,
    InvalidRequestError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
)
from coordinator_protocol.transactions import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestMarker,
    WriteTxnMarkersRequestTopic,
)

pytestmark = pytest.mark.timeout(60)

TXN = "payments-tx"


@pytest.fixture
async def server() -> AsyncIterator[FakeCoordinator]:
    async with FakeCoordinator() as fake:
        yield fake


def client_for(*servers: FakeCoordinator, **options: Any) -> CoordinatorClient:
    options.setdefault("retry_backoff_ms", 10)
    options.setdefault("retry_backoff_max_ms", 50)
    options.setdefault("request_timeout_ms", 5000)
    return CoordinatorClient(",".join(s.bootstrap for s in servers), **options)


def end_txn(transactional_id: str = TXN) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=transactional_id, producer_id=7, producer_epoch=0, committed=True
    )


def top_level(code: int) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": None}


def lookups(server: FakeCoordinator) -> list[tuple[int, list[str]]]:
    return [(r.body["key_type"], r.body["keys"]) for r in server.requests(ApiKey.FIND_COORDINATOR)]


async def test_a_transactional_id_is_found_with_key_type_1_and_cached_apart_from_a_group(
    server: FakeCoordinator,
) -> None:
    server.handler = lambda r: (
        top_level(0) if r.api_key in (ApiKey.END_TXN, ApiKey.HEARTBEAT) else None
    )
    async with client_for(server) as client:
        await asyncio.gather(*(client.end_txn(end_txn()) for _ in range(5)))
        await client.end_txn(end_txn())
        assert client.cached_coordinator(TXN, key_type=1) is not None
        # A group of the same name is another key.
        assert client.cached_coordinator(TXN) is None
        node = await client.find_coordinator(TXN)
        assert node == await client.find_coordinator(TXN, key_type=1)
        client.forget_coordinator(TXN, key_type=1)
        assert client.cached_coordinator(TXN, key_type=1) is None
        assert client.cached_coordinator(TXN) is not None
    # Concurrent calls for one transactional id shared one lookup.
    assert lookups(server) == [(1, [TXN]), (0, [TXN])]
    assert len(server.requests(ApiKey.END_TXN)) == 6


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    ],
)
async def test_transaction_errors_are_retried_and_only_coordinator_errors_look_it_up_again(
    server: FakeCoordinator, code: ErrorCode
) -> None:
    failures = 3

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.END_TXN:
            return None
        failed = len(server.requests(ApiKey.END_TXN)) <= failures
        return top_level(code if failed else 0)

    server.handler = handle
    async with client_for(server) as client:
        assert (await client.end_txn(end_txn())).error_code == 0
    assert len(server.requests(ApiKey.END_TXN)) == failures + 1
    rediscoveries = len(lookups(server)) - 1
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
        assert rediscoveries == failures
    else:
        assert rediscoveries == 0
    assert all(key_type == 1 for key_type, _ in lookups(server))


async def test_concurrent_transactions_past_the_deadline_raises_it(
    server: FakeCoordinator,
) -> None:
    server.handler = lambda r: (
        top_level(ErrorCode.CONCURRENT_TRANSACTIONS) if r.api_key == ApiKey.END_TXN else None
    )
    async with client_for(server) as client:
        with pytest.raises(ConcurrentTransactionsError):
            await client.end_txn(end_txn(), timeout_ms=300)
    assert len(server.requests(ApiKey.END_TXN)) > 1


async def test_not_coordinator_finds_the_new_transaction_coordinator() -> None:
    async with FakeCoordinator(node_id=1) as old, FakeCoordinator(node_id=2) as new:
        old.handler = lambda r: (
            top_level(ErrorCode.NOT_COORDINATOR if old.coordinator_address else 0)
            if r.api_key == ApiKey.END_TXN
            else None
        )
        new.handler = lambda r: top_level(0) if r.api_key == ApiKey.END_TXN else None
        async with client_for(old) as client:
            await client.end_txn(end_txn())
            assert client.cached_coordinator(TXN, key_type=1).node_id == 1  # type: ignore[union-attr]
            # The transactional id's partition moves to node 2.
            old.coordinator_address = (new.host, new.port)
            await client.end_txn(end_txn())
            # (The old node answers FindCoordinator with its own id and the new address.)
            assert client.cached_coordinator(TXN, key_type=1).port == new.port  # type: ignore[union-attr]
        assert len(new.requests(ApiKey.END_TXN)) == 1
        assert lookups(old) == [(1, [TXN]), (1, [TXN])]


async def test_a_key_type_the_server_does_not_serve_is_raised(server: FakeCoordinator) -> None:
    # What a server without a transaction coordinator answers: INVALID_REQUEST per key.
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.FIND_COORDINATOR:
            return None
        return {
            "coordinators": [
                {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 42}
                for key in received.body["keys"]
            ]
        }

    server.handler = handle
    async with client_for(server) as client:
        with pytest.raises(InvalidRequestError):
            await client.end_txn(end_txn())
    assert server.requests(ApiKey.END_TXN) == []


async def test_txn_offset_commit_goes_to_the_groups_coordinator(server: FakeCoordinator) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.TXN_OFFSET_COMMIT:
            return None
        # The group's partition is loading once; then the commit is taken.
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if len(
            server.requests(ApiKey.TXN_OFFSET_COMMIT)
        ) == 1 else 0  # fmt: skip
        return {
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "error_code": int(code)}]}
            ]
        }

    server.handler = handle
    request = TxnOffsetCommitRequest(
        transactional_id=TXN,
        group_id="orders",
        producer_id=7,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)],
            )
        ],
    )
    async with client_for(server) as client:
        response = await client.txn_offset_commit(request)
    assert response.reported_error_code() == 0
    assert lookups(server) == [(0, ["orders"])]
    assert len(server.requests(ApiKey.TXN_OFFSET_COMMIT)) == 2


async def test_add_partitions_raises_the_first_error_or_returns_it(server: FakeCoordinator) -> None:
    answers = iter(
        [
            # One partition's CONCURRENT_TRANSACTIONS retries the whole request.
            (0, [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.CONCURRENT_TRANSACTIONS]),
            (0, [0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]),
            (0, [0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]),
            (ErrorCode.PRODUCER_FENCED, []),
        ]
    )

    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.ADD_PARTITIONS_TO_TXN:
            return None
        top, codes = next(answers)
        return {
            "error_code": int(top),
            "results_by_topic": [
                {
                    "name": "t",
                    "results_by_partition": [
                        {"partition_index": i, "partition_error_code": int(c)}
                        for i, c in enumerate(codes)
                    ],
                }
            ],
        }

    server.handler = handle
    request = AddPartitionsToTxnRequest(
        transactional_id=TXN,
        producer_id=7,
        producer_epoch=0,
        topics=[AddPartitionsToTxnRequestTopic(name="t", partitions=[0, 1])],
    )
    async with client_for(server) as client:
        with pytest.raises(TopicAuthorizationFailedError, match="t-1"):
            await client.add_partitions_to_txn(request)
        assert len(server.requests(ApiKey.ADD_PARTITIONS_TO_TXN)) == 2
        response = await client.add_partitions_to_txn(request, raise_on_error=False)
        codes = [p.partition_error_code for p in response.results_by_topic[0].results_by_partition]
        assert codes == [0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        with pytest.raises(ProducerFencedError):
            await client.add_partitions_to_txn(request)


async def test_an_idempotent_producer_asks_a_bootstrap_server(server: FakeCoordinator) -> None:
    def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key != ApiKey.INIT_PRODUCER_ID:
            return None
        if len(server.requests(ApiKey.INIT_PRODUCER_ID)) == 1:
            return {**top_level(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "producer_id": -1}
        return {**top_level(0), "producer_id": 2**48, "producer_epoch": 0}

    server.handler = handle
    async with client_for(server) as client:
        response = await client.init_producer_id(
            InitProducerIdRequest(transaction_timeout_ms=60_000)
        )
        assert (response.producer_id, response.producer_epoch) == (2**48, 0)
        assert lookups(server) == []
        # A transactional one asks its transaction coordinator.
        await client.init_producer_id(
            InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=60_000)
        )
        assert lookups(server) == [(1, [TXN])]


async def test_markers_go_to_the_node_named_and_a_moved_partition_is_answered() -> None:
    async with FakeCoordinator(node_id=1) as bootstrap, FakeCoordinator(node_id=2) as owner:
        codes = iter([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 0, ErrorCode.NOT_COORDINATOR])

        def handle(received: Received) -> dict[str, Any] | None:
            if received.api_key != ApiKey.WRITE_TXN_MARKERS:
                return None
            marker = received.body["markers"][0]
            return {
                "markers": [
                    {
                        "producer_id": marker["producer_id"],
                        "topics": [
                            {
                                "name": "log",
                                "partitions": [
                                    {"partition_index": 3, "error_code": int(next(codes))}
                                ],
                            }
                        ],
                    }
                ]
            }

        owner.handler = handle
        request = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequestMarker(
                    producer_id=7,
                    producer_epoch=0,
                    transaction_result=True,
                    topics=[WriteTxnMarkersRequestTopic(name="log", partition_indexes=[3])],
                    coordinator_epoch=4,
                )
            ]
        )
        node = Node(2, owner.host, owner.port)
        async with client_for(bootstrap) as client:
            # Loading is retried on the same node.
            assert (await client.write_txn_markers(request, node=node)).reported_error_code() == 0
            # A partition that moved is the caller's to route again.
            moved = await client.write_txn_markers(request, node=node)
            assert moved.reported_error_code() == ErrorCode.NOT_COORDINATOR
        assert len(owner.requests(ApiKey.WRITE_TXN_MARKERS)) == 3
        assert bootstrap.received == []
