"""The transaction APIs over real sockets, in process, on the in-memory log: routing, the
refusals Kafka's transaction coordinator answers, and a transaction that commits offsets only
(no data partition, so no Kafka cluster is needed to end it). Transactions with records on
Kafka: tests/transactions/test_transactions_kafka.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import (
    DescribeTransactionsResponseState,
    DescribeTransactionsResponseTopic,
)
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.defaults import TRANSACTION_PRODUCER_ID_START
from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.service.transaction_service import (
    TransactionCoordinatorService,
    remote_verdict,
)
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4
LOG_TOPIC = "__coordinator_offsets"
TID = "txn-a"
GROUP = "group-a"


@pytest.fixture
async def app() -> AsyncIterator[CoordinatorApp]:
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        offsets_topic_partitions=PARTITIONS,
        transaction_max_timeout_ms=60_000,
    )
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS, auto_commit=True))
    await app.start()
    yield app
    await app.shutdown()


@pytest.fixture
async def served(app: CoordinatorApp) -> AsyncIterator[CoordinatorApp]:
    """The app with its transaction coordinator wired as `app.py` wires it, minus the Kafka
    cluster: transactions that wrote no records end without data markers."""
    assert app.runtime is not None and app.service is not None
    completions = TxnMarkerChannel(app.runtime, None, coordinator_epoch=lambda _: 0)
    service = TransactionCoordinatorService(
        app.runtime,
        app.service.routing,
        limits=app.service.limits,
        sliced=app.service.sliced,
        log_topic=LOG_TOPIC,
        completions=completions,
        max_id_length=app.config.max_id_length,
    )
    app.dispatch.serve_transactions(service)
    completions.start()
    yield app
    await completions.stop()


async def client_of(app: CoordinatorApp) -> WireClient:
    assert app.address is not None
    return await WireClient.connect(*app.address)


async def test_a_node_without_transactions_says_why_and_does_not_list_them(
    app: CoordinatorApp,
) -> None:
    client = await client_of(app)
    try:
        versions = await client.call(ApiKey.API_VERSIONS, {})
        listed = {key["api_key"] for key in versions["api_keys"]}
        assert ApiKey.INIT_PRODUCER_ID not in listed
        answer = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 1, "keys": [TID]})
        (coordinator,) = answer["coordinators"]
        assert coordinator["error_code"] == ErrorCode.INVALID_REQUEST
        assert "coordinates no transactions" in coordinator["error_message"]
        refused = await client.call(
            ApiKey.INIT_PRODUCER_ID, {"transactional_id": TID, "transaction_timeout_ms": 1000}
        )
        assert refused["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    finally:
        await client.close()


async def test_transactional_ids_are_routed_like_group_ids(served: CoordinatorApp) -> None:
    client = await client_of(served)
    try:
        versions = await client.call(ApiKey.API_VERSIONS, {})
        listed = {key["api_key"] for key in versions["api_keys"]}
        assert {ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN, ApiKey.LIST_TRANSACTIONS} <= listed
        answer = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 1, "keys": [TID, ""]})
        found, empty = answer["coordinators"]
        assert found["error_code"] == ErrorCode.NONE
        assert served.address is not None
        assert found["port"] == served.address[1]
        assert empty["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        await client.close()


async def init(client: WireClient, **body: Any) -> dict[str, Any]:
    return await client.call(
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": TID, "transaction_timeout_ms": 30_000, **body},
    )


async def test_init_producer_id_hands_out_ids_from_the_range_and_bumps_epochs(
    served: CoordinatorApp,
) -> None:
    client = await client_of(served)
    try:
        first = await init(client)
        assert first["error_code"] == ErrorCode.NONE
        assert first["producer_id"] >= TRANSACTION_PRODUCER_ID_START
        again = await init(client)
        assert (again["producer_id"], again["producer_epoch"]) == (
            first["producer_id"],
            first["producer_epoch"] + 1,
        )
        # KIP-360: the current producer resumes at the next epoch; a stale one is fenced.
        resumed = await init(
            client, producer_id=again["producer_id"], producer_epoch=again["producer_epoch"]
        )
        assert resumed["producer_epoch"] == again["producer_epoch"] + 1
        stale = await init(
            client, producer_id=first["producer_id"], producer_epoch=first["producer_epoch"]
        )
        assert stale["error_code"] == ErrorCode.PRODUCER_FENCED

        idempotent = await client.call(
            ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 1}
        )
        assert idempotent["error_code"] == ErrorCode.NONE
        assert idempotent["producer_id"] not in (first["producer_id"], -1)
        assert (await init(client, transaction_timeout_ms=60_001))["error_code"] == (
            ErrorCode.INVALID_TRANSACTION_TIMEOUT
        )
        assert (await init(client, transactional_id=""))["error_code"] == ErrorCode.INVALID_REQUEST
        half = await init(client, producer_id=first["producer_id"])
        assert half["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        await client.close()


def txn_commit_body(producer: dict[str, Any], offset: int) -> dict[str, Any]:
    return {
        "transactional_id": TID,
        "group_id": GROUP,
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "topics": [
            {"name": "in", "partitions": [{"partition_index": 0, "committed_offset": offset}]}
        ],
    }


async def fetch(client: WireClient, *, require_stable: bool) -> dict[str, Any]:
    answer = await client.call(
        ApiKey.OFFSET_FETCH,
        {
            "groups": [{"group_id": GROUP, "topics": [{"name": "in", "partition_indexes": [0]}]}],
            "require_stable": require_stable,
        },
    )
    partition: dict[str, Any] = answer["groups"][0]["topics"][0]["partitions"][0]
    return partition


def txn_body(producer: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {
        "transactional_id": TID,
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        **body,
    }


async def test_offsets_committed_in_a_transaction(served: CoordinatorApp) -> None:
    client = await client_of(served)
    try:
        producer = await init(client)
        # Not in the transaction yet: refused (Kafka's verification, KIP-890).
        early = await client.call(ApiKey.TXN_OFFSET_COMMIT, txn_commit_body(producer, 10))
        assert early["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_TXN_STATE

        added = await client.call(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
        assert added["error_code"] == ErrorCode.NONE
        committed = await client.call(ApiKey.TXN_OFFSET_COMMIT, txn_commit_body(producer, 10))
        assert committed["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        assert (await fetch(client, require_stable=True))["error_code"] == (
            ErrorCode.UNSTABLE_OFFSET_COMMIT
        )
        assert (await fetch(client, require_stable=False))["committed_offset"] == -1

        ended = await client.call(ApiKey.END_TXN, txn_body(producer, committed=True))
        assert ended["error_code"] == ErrorCode.NONE
        await until_stable(client, 10)
        described = await client.call(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [TID]})
        (state,) = described["transaction_states"]
        assert state["transaction_state"] == "CompleteCommit"

        # An aborted one leaves the committed offset as it was.
        await client.call(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
        await client.call(ApiKey.TXN_OFFSET_COMMIT, txn_commit_body(producer, 20))
        await client.call(ApiKey.END_TXN, txn_body(producer, committed=False))
        await until_stable(client, 10)

        # A stale epoch is fenced, for the offsets as for the transaction.
        await init(client)
        fenced = await client.call(ApiKey.TXN_OFFSET_COMMIT, txn_commit_body(producer, 30))
        assert fenced["topics"][0]["partitions"][0]["error_code"] == ErrorCode.PRODUCER_FENCED
        late = await client.call(ApiKey.END_TXN, txn_body(producer, committed=True))
        assert late["error_code"] == ErrorCode.PRODUCER_FENCED
    finally:
        await client.close()


async def until_stable(client: WireClient, offset: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        partition = await fetch(client, require_stable=True)
        if partition["error_code"] == ErrorCode.NONE:
            assert partition["committed_offset"] == offset
            return
        assert partition["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert loop.time() < deadline, "the transaction never ended"
        await asyncio.sleep(0.02)


async def test_write_txn_markers_ends_a_producers_offsets_on_this_nodes_partitions(
    served: CoordinatorApp,
) -> None:
    client = await client_of(served)
    try:
        producer = await init(client)
        await client.call(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
        await client.call(ApiKey.TXN_OFFSET_COMMIT, txn_commit_body(producer, 7))
        assert served.service is not None
        partition = served.service.partition_for(GROUP)
        answer = await client.call(
            ApiKey.WRITE_TXN_MARKERS,
            {
                "markers": [
                    {
                        "producer_id": producer["producer_id"],
                        "producer_epoch": producer["producer_epoch"],
                        "transaction_result": True,
                        "coordinator_epoch": 0,
                        "topics": [
                            {"name": LOG_TOPIC, "partition_indexes": [partition]},
                            {"name": "not-the-log", "partition_indexes": [0]},
                        ],
                    }
                ]
            },
        )
        (marker,) = answer["markers"]
        codes = {
            (topic["name"], p["partition_index"]): p["error_code"]
            for topic in marker["topics"]
            for p in topic["partitions"]
        }
        assert codes == {
            (LOG_TOPIC, partition): ErrorCode.NONE,
            ("not-the-log", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        partition_answer = await fetch(client, require_stable=True)
        assert (partition_answer["error_code"], partition_answer["committed_offset"]) == (0, 7)
    finally:
        await client.close()


async def test_list_transactions_filters_and_names_unknown_states(served: CoordinatorApp) -> None:
    client = await client_of(served)
    try:
        producer = await init(client)
        await client.call(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
        listed = await client.call(
            ApiKey.LIST_TRANSACTIONS, {"state_filters": ["Ongoing", "Bogus"]}
        )
        assert listed["unknown_state_filters"] == ["Bogus"]
        assert [t["transactional_id"] for t in listed["transaction_states"]] == [TID]
        by_pattern = await client.call(
            ApiKey.LIST_TRANSACTIONS, {"transactional_id_pattern": "txn-.*"}
        )
        assert [t["transactional_id"] for t in by_pattern["transaction_states"]] == [TID]
        none = await client.call(ApiKey.LIST_TRANSACTIONS, {"transactional_id_pattern": "x.*"})
        assert none["transaction_states"] == []
        unknown = await client.call(
            ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["never-seen", ""]}
        )
        codes = [s["error_code"] for s in unknown["transaction_states"]]
        assert codes == [ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, ErrorCode.INVALID_REQUEST]
    finally:
        await client.close()


async def test_describe_names_the_log_partitions_a_transaction_added(
    served: CoordinatorApp,
) -> None:
    """As Kafka lists the __consumer_offsets partitions of AddOffsetsToTxn: the nodes of a
    cluster check a TxnOffsetCommit against it."""
    client = await client_of(served)
    try:
        producer = await init(client)
        await client.call(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
        described = await client.call(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [TID]})
        (state,) = described["transaction_states"]
        assert served.service is not None
        assert state["topics"] == [
            {"topic": LOG_TOPIC, "partitions": [served.service.partition_for(GROUP)]}
        ]
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({}, ErrorCode.NONE),
        (
            {"error_code": ErrorCode.TRANSACTIONAL_ID_NOT_FOUND},
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ),
        ({"producer_id": 8}, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ({"producer_epoch": 4}, ErrorCode.PRODUCER_FENCED),
        ({"transaction_state": "PrepareCommit"}, ErrorCode.INVALID_TXN_STATE),
        ({"topics": []}, ErrorCode.INVALID_TXN_STATE),
        ({"topics": [{"topic": LOG_TOPIC, "partitions": [2]}]}, ErrorCode.INVALID_TXN_STATE),
        ({"topics": [{"topic": "orders", "partitions": [1]}]}, ErrorCode.INVALID_TXN_STATE),
    ],
)
def test_a_transaction_another_node_describes_is_checked_as_a_local_one(
    change: dict[str, Any], code: ErrorCode
) -> None:
    fields: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "transactional_id": TID,
        "transaction_state": "Ongoing",
        "producer_id": 7,
        "producer_epoch": 5,
        "topics": [{"topic": LOG_TOPIC, "partitions": [1]}],
        **change,
    }
    fields["topics"] = [DescribeTransactionsResponseTopic(**t) for t in fields["topics"]]
    described = DescribeTransactionsResponseState(**fields)
    assert remote_verdict(described, 7, 5, LOG_TOPIC, 1) == code


class HeldCompletions:
    """TxnMarkerChannel whose ends start only once `release` is set: a transaction stays
    prepared, its markers "on their way", for as long as a test wants."""

    def __init__(self, inner: TxnMarkerChannel) -> None:
        self.inner = inner
        self.release = asyncio.Event()
        self._ends: dict[str, asyncio.Future[None]] = {}

    def submit(self, partition: int, completion: Any) -> None:
        async def later() -> None:
            await self.release.wait()
            self.inner.submit(partition, completion)
            task = self.inner.ending(completion.transactional_id)
            if task is not None:
                await task

        self._ends[completion.transactional_id] = asyncio.ensure_future(later())

    def ending(self, transactional_id: str) -> asyncio.Future[None] | None:
        end = self._ends.get(transactional_id)
        return None if end is None or end.done() else end


@asynccontextmanager
async def held_service(app: CoordinatorApp, wait_ms: int) -> AsyncIterator[HeldCompletions]:
    assert app.runtime is not None and app.service is not None
    inner = TxnMarkerChannel(app.runtime, None, coordinator_epoch=lambda _: 0)
    held = HeldCompletions(inner)
    service = TransactionCoordinatorService(
        app.runtime,
        app.service.routing,
        limits=app.service.limits,
        sliced=app.service.sliced,
        log_topic=LOG_TOPIC,
        completions=held,
        max_id_length=app.config.max_id_length,
        concurrent_wait_ms=wait_ms,
    )
    app.dispatch.serve_transactions(service)
    inner.start()
    try:
        yield held
    finally:
        held.release.set()
        await inner.stop()


async def ended_and_held(client: WireClient) -> dict[str, Any]:
    """A producer whose transaction (offsets only) is committed and still being ended."""
    producer = await init(client)
    added = await client.call(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
    assert added["error_code"] == ErrorCode.NONE
    ended = await client.call(ApiKey.END_TXN, txn_body(producer, committed=True))
    assert ended["error_code"] == ErrorCode.NONE
    return producer


async def test_the_next_transaction_waits_for_the_last_ones_end_not_for_a_retry(
    app: CoordinatorApp,
) -> None:
    async with held_service(app, wait_ms=10_000) as held:
        client = await client_of(app)
        try:
            producer = await ended_and_held(client)
            # What would be CONCURRENT_TRANSACTIONS now waits for the end...
            add = client.send(ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP))
            await asyncio.sleep(0.3)
            assert not add.done()
            # ...and is answered as soon as it is over, as a retry then would be.
            held.release.set()
            answer = await asyncio.wait_for(add, 5)
            assert answer["error_code"] == ErrorCode.NONE
            described = await client.call(
                ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [TID]}
            )
            assert described["transaction_states"][0]["transaction_state"] == "Ongoing"
        finally:
            await client.close()


@pytest.mark.parametrize("wait_ms", [0, 200])
async def test_an_end_that_takes_longer_than_the_wait_is_concurrent_transactions(
    app: CoordinatorApp, wait_ms: int
) -> None:
    async with held_service(app, wait_ms=wait_ms):
        client = await client_of(app)
        try:
            producer = await ended_and_held(client)
            loop = asyncio.get_running_loop()
            started = loop.time()
            answer = await client.call(
                ApiKey.ADD_OFFSETS_TO_TXN, txn_body(producer, group_id=GROUP)
            )
            waited = loop.time() - started
            assert answer["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
            # 0: at once, as Kafka answers; else after the wait, not sooner.
            assert waited >= wait_ms / 1000 * 0.9
            assert waited < wait_ms / 1000 + 2
            # Meanwhile the others are served.
            other = await client.call(
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": "txn-b", "transaction_timeout_ms": 30_000},
            )
            assert other["error_code"] == ErrorCode.NONE
        finally:
            await client.close()
