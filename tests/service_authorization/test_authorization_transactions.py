"""The transaction APIs authorized as Kafka's KafkaApis handlers authorize them: WRITE of the
transactional id for a producer's requests, the group's and topics' checks where a request
names them, DESCRIBE for the views, the cluster's for what only nodes send; a denial changes
nothing and says nothing of the transaction."""

from __future__ import annotations

import asyncio
import logging

import pytest
from authorization_harness import (
    ADMIN,
    CLUSTER,
    DENY,
    GROUP,
    LOG_TOPIC,
    PREFIXED,
    TOPIC,
    TXN_ID,
    Node,
    Op,
    acl,
)

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsRequest,
    DescribeTransactionsResponseTopic,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestMarker,
    WriteTxnMarkersRequestTopic,
)
from coordinator_server.authorizer.acls import CLUSTER_NAME
from coordinator_server.service.authorization import AUTHORIZER_LOGGER

TID = "orders-txn"
GROUP_ID = "orders-app"


def init_request(transactional_id: str | None = TID) -> InitProducerIdRequest:
    return InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=30_000)


# InitProducerId.


async def test_init_producer_id_of_a_transactional_id_needs_write_of_it(node: Node) -> None:
    node.allow(acl(TXN_ID, TID, Op.DESCRIBE), acl(CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE))
    denied = await node.call(ApiKey.INIT_PRODUCER_ID, init_request())
    assert (denied.error_code, denied.producer_id, denied.producer_epoch) == (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        -1,
        -1,
    )
    assert (await node.transaction_as_admin(TID)).error_code == (
        ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    )
    node.allow(acl(TXN_ID, TID, Op.WRITE))
    allowed = await node.call(ApiKey.INIT_PRODUCER_ID, init_request())
    assert allowed.error_code == ErrorCode.NONE and allowed.producer_id >= 0


async def test_an_idempotent_producer_needs_idempotent_write_of_the_cluster_or_write_of_a_topic(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    idempotent = init_request(None)
    node.allow(acl(TOPIC, "orders", Op.READ), acl(TXN_ID, "*", Op.WRITE))
    with caplog.at_level(logging.INFO, logger=AUTHORIZER_LOGGER):
        denied = await node.call(ApiKey.INIT_PRODUCER_ID, idempotent)
    assert (denied.error_code, denied.producer_id) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1)
    assert caplog.records == [], "Kafka logs neither denial of an idempotent producer"

    # WRITE of any one topic (Kafka's authorizeByResourceType), here by a prefix.
    writes = acl(TOPIC, "orders-", Op.WRITE, pattern=PREFIXED)
    node.allow(writes)
    assert (await node.call(ApiKey.INIT_PRODUCER_ID, idempotent)).error_code == ErrorCode.NONE
    # ... unless a DENY covers every topic it allows.
    node.allow(acl(TOPIC, "orders", Op.WRITE, DENY, pattern=PREFIXED))
    assert (await node.call(ApiKey.INIT_PRODUCER_ID, idempotent)).error_code == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    node.allow(acl(CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE))
    assert (await node.call(ApiKey.INIT_PRODUCER_ID, idempotent)).error_code == ErrorCode.NONE


# AddPartitionsToTxn.


def add_partitions_request(
    producer: tuple[int, int], topics: dict[str, list[int]]
) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        transactional_id=TID,
        producer_id=producer[0],
        producer_epoch=producer[1],
        topics=[
            AddPartitionsToTxnRequestTopic(name=name, partitions=partitions)
            for name, partitions in topics.items()
        ],
    )


def partition_codes(response: object) -> dict[tuple[str, int], int]:
    return {
        (topic.name, p.partition_index): p.partition_error_code
        for topic in response.results_by_topic  # type: ignore[attr-defined]
        for p in topic.results_by_partition
    }


async def test_add_partitions_needs_write_of_the_transactional_id_then_of_each_topic(
    node: Node,
) -> None:
    producer = await node.init_as_admin(TID)
    request = add_partitions_request(producer, {"orders": [0, 1], "audit": [0]})
    node.allow(acl(TOPIC, "*", Op.WRITE), acl(TXN_ID, TID, Op.DESCRIBE))
    refused = await node.call(ApiKey.ADD_PARTITIONS_TO_TXN, request)
    assert refused.reported_error_code() == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert set(partition_codes(refused).values()) == {
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    }

    node.remove(acl(TOPIC, "*", Op.WRITE))
    node.allow(acl(TXN_ID, TID, Op.WRITE), acl(TOPIC, "orders", Op.WRITE))
    partly = await node.call(ApiKey.ADD_PARTITIONS_TO_TXN, request)
    assert partly.error_code == ErrorCode.NONE
    assert partition_codes(partly) == {
        ("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("orders", 1): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("audit", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    state = await node.transaction_as_admin(TID)
    assert (state.transaction_state, state.topics) == ("Empty", [])

    node.allow(acl(TOPIC, "audit", Op.WRITE))
    added = await node.call(ApiKey.ADD_PARTITIONS_TO_TXN, request)
    assert set(partition_codes(added).values()) == {ErrorCode.NONE}
    assert (await node.transaction_as_admin(TID)).transaction_state == "Ongoing"


async def test_add_partitions_never_adds_kafkas_internal_topics(node: Node) -> None:
    producer = await node.init_as_admin(TID)
    node.allow(acl(TXN_ID, TID, Op.WRITE), acl(TOPIC, "*", Op.ALL))
    request = add_partitions_request(producer, {"__consumer_offsets": [0], "orders": [0]})
    response = await node.call(ApiKey.ADD_PARTITIONS_TO_TXN, request)
    assert partition_codes(response) == {
        ("__consumer_offsets", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
    }


# AddOffsetsToTxn, EndTxn.


async def test_add_offsets_needs_write_of_the_transactional_id_then_read_of_the_group(
    node: Node,
) -> None:
    producer_id, epoch = await node.init_as_admin(TID)
    request = AddOffsetsToTxnRequest(
        transactional_id=TID, producer_id=producer_id, producer_epoch=epoch, group_id=GROUP_ID
    )
    node.allow(acl(GROUP, GROUP_ID, Op.READ))
    assert (await node.call(ApiKey.ADD_OFFSETS_TO_TXN, request)).error_code == (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    node.remove(acl(GROUP, GROUP_ID, Op.READ))
    node.allow(acl(TXN_ID, TID, Op.WRITE), acl(GROUP, GROUP_ID, Op.DESCRIBE))
    assert (await node.call(ApiKey.ADD_OFFSETS_TO_TXN, request)).error_code == (
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    )
    assert (await node.transaction_as_admin(TID)).transaction_state == "Empty"
    node.allow(acl(GROUP, GROUP_ID, Op.READ))
    assert (await node.call(ApiKey.ADD_OFFSETS_TO_TXN, request)).error_code == ErrorCode.NONE
    assert (await node.transaction_as_admin(TID)).transaction_state == "Ongoing"


async def test_end_txn_needs_write_of_the_transactional_id(node: Node) -> None:
    producer_id, epoch = await node.open_transaction_as_admin(TID, topics={}, group=GROUP_ID)
    request = EndTxnRequest(
        transactional_id=TID, producer_id=producer_id, producer_epoch=epoch, committed=False
    )
    node.allow(acl(TXN_ID, TID, Op.DESCRIBE), acl(GROUP, GROUP_ID, Op.ALL))
    assert (await node.call(ApiKey.END_TXN, request)).error_code == (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    assert (await node.transaction_as_admin(TID)).transaction_state == "Ongoing"
    node.allow(acl(TXN_ID, TID, Op.WRITE))
    assert (await node.call(ApiKey.END_TXN, request)).error_code == ErrorCode.NONE
    assert (await node.transaction_as_admin(TID)).transaction_state != "Ongoing"


# TxnOffsetCommit.


def txn_commit_request(
    producer: tuple[int, int], offsets: dict[tuple[str, int], int]
) -> TxnOffsetCommitRequest:
    by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    return TxnOffsetCommitRequest(
        transactional_id=TID,
        group_id=GROUP_ID,
        producer_id=producer[0],
        producer_epoch=producer[1],
        topics=[
            TxnOffsetCommitRequestTopic(name=name, partitions=partitions)
            for name, partitions in by_topic.items()
        ],
    )


def commit_codes(response: object) -> dict[tuple[str, int], int]:
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in response.topics  # type: ignore[attr-defined]
        for p in topic.partitions
    }


async def test_txn_offset_commit_checks_the_transactional_id_the_group_then_each_topic(
    node: Node,
) -> None:
    producer = await node.open_transaction_as_admin(TID, topics={}, group=GROUP_ID)
    request = txn_commit_request(producer, {("in", 0): 10, ("secret", 0): 11})
    node.allow(acl(GROUP, GROUP_ID, Op.READ), acl(TOPIC, "*", Op.READ))
    refused = await node.call(ApiKey.TXN_OFFSET_COMMIT, request)
    assert set(commit_codes(refused).values()) == {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

    node.remove(acl(GROUP, GROUP_ID, Op.READ), acl(TOPIC, "*", Op.READ))
    node.allow(acl(TXN_ID, TID, Op.WRITE), acl(TOPIC, "in", Op.READ))
    no_group = await node.call(ApiKey.TXN_OFFSET_COMMIT, request)
    assert set(commit_codes(no_group).values()) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}

    node.allow(acl(GROUP, GROUP_ID, Op.READ))
    partly = await node.call(ApiKey.TXN_OFFSET_COMMIT, request)
    assert commit_codes(partly) == {
        ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("in", 0): ErrorCode.NONE,
    }
    # The one authorized offset is the transaction's: pending until it ends.
    end = EndTxnRequest(
        transactional_id=TID, producer_id=producer[0], producer_epoch=producer[1], committed=True
    )
    assert (await node.admin(ApiKey.END_TXN, end)).error_code == ErrorCode.NONE
    # The offset is the group's once the transaction's markers are written.
    for _ in range(200):
        if await node.offsets_as_admin(GROUP_ID):
            break
        await asyncio.sleep(0.02)
    assert await node.offsets_as_admin(GROUP_ID) == {("in", 0): 10}


async def test_txn_offset_commit_refused_by_the_transaction_keeps_the_topic_refusals(
    node: Node,
) -> None:
    """A commit outside the transaction (no AddOffsetsToTxn): the authorized partitions get
    the transaction's refusal, the others still their authorization error."""
    producer = await node.init_as_admin(TID)
    node.allow(acl(TXN_ID, TID, Op.WRITE), acl(GROUP, GROUP_ID, Op.READ), acl(TOPIC, "in", Op.READ))
    response = await node.call(
        ApiKey.TXN_OFFSET_COMMIT, txn_commit_request(producer, {("in", 0): 1, ("secret", 0): 2})
    )
    assert commit_codes(response) == {
        ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("in", 0): ErrorCode.INVALID_TXN_STATE,
    }


# DescribeTransactions, ListTransactions.


async def test_describe_transactions_answers_an_id_it_may_not_describe_with_its_error_alone(
    node: Node,
) -> None:
    topics = {"orders": [0, 1], "audit": [2]}
    await node.open_transaction_as_admin(TID, topics=topics, group=GROUP_ID)
    node.allow(acl(TXN_ID, "visible", Op.DESCRIBE))
    request = DescribeTransactionsRequest(transactional_ids=[TID, "never-seen", "visible"])
    existing, missing, visible = (
        await node.call(ApiKey.DESCRIBE_TRANSACTIONS, request)
    ).transaction_states
    assert existing.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert existing.replace(transactional_id="") == missing.replace(transactional_id="")
    assert visible.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


async def test_a_described_transaction_shows_only_the_topics_it_may_describe(node: Node) -> None:
    topics = {"orders": [0, 1], "audit": [2]}
    await node.open_transaction_as_admin(TID, topics=topics, group=GROUP_ID)
    node.allow(acl(TXN_ID, TID, Op.DESCRIBE), acl(TOPIC, "orders", Op.WRITE))
    request = DescribeTransactionsRequest(transactional_ids=[TID])
    (state,) = (await node.call(ApiKey.DESCRIBE_TRANSACTIONS, request)).transaction_states
    assert (state.error_code, state.transaction_state) == (ErrorCode.NONE, "Ongoing")
    assert state.topics == [DescribeTransactionsResponseTopic(topic="orders", partitions=[0, 1])]
    node.allow(acl(TOPIC, LOG_TOPIC, Op.DESCRIBE))
    (state,) = (await node.call(ApiKey.DESCRIBE_TRANSACTIONS, request)).transaction_states
    assert [topic.topic for topic in state.topics] == ["orders", LOG_TOPIC]
    (whole,) = (await node.admin(ApiKey.DESCRIBE_TRANSACTIONS, request)).transaction_states
    assert sorted(topic.topic for topic in whole.topics) == sorted(["audit", "orders", LOG_TOPIC])


async def test_list_transactions_lists_only_the_ids_it_may_describe(node: Node) -> None:
    for transactional_id in ("team-a", "team-b", "other"):
        await node.init_as_admin(transactional_id)
    node.allow(acl(TXN_ID, "team-", Op.WRITE, pattern=PREFIXED))
    node.allow(acl(TXN_ID, "team-b", Op.DESCRIBE, DENY))
    listed = await node.call(ApiKey.LIST_TRANSACTIONS, ListTransactionsRequest())
    assert [t.transactional_id for t in listed.transaction_states] == ["team-a"]
    # The pattern first, then what the principal may see.
    for pattern, seen in (("other|team-a", ["team-a"]), ("other|team-b", [])):
        by_pattern = ListTransactionsRequest(transactional_id_pattern=pattern)
        listed = await node.call(ApiKey.LIST_TRANSACTIONS, by_pattern)
        assert [t.transactional_id for t in listed.transaction_states] == seen
    everything = await node.admin(ApiKey.LIST_TRANSACTIONS, ListTransactionsRequest())
    assert sorted(t.transactional_id for t in everything.transaction_states) == [
        "other",
        "team-a",
        "team-b",
    ]


# WriteTxnMarkers: what a node sends another.


async def test_write_txn_markers_needs_cluster_action_or_alter_of_the_cluster(node: Node) -> None:
    producer_id, epoch = await node.open_transaction_as_admin(TID, topics={}, group=GROUP_ID)
    partition = node.partition_for(GROUP_ID)
    request = WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequestMarker(
                producer_id=producer_id,
                producer_epoch=epoch,
                transaction_result=False,
                coordinator_epoch=0,
                topics=[
                    WriteTxnMarkersRequestTopic(name=LOG_TOPIC, partition_indexes=[partition]),
                    WriteTxnMarkersRequestTopic(name="elsewhere", partition_indexes=[0, 1]),
                ],
            )
        ]
    )

    def codes(response: object) -> dict[tuple[str, int], int]:
        (marker,) = response.markers  # type: ignore[attr-defined]
        assert marker.producer_id == producer_id
        return {
            (topic.name, p.partition_index): p.error_code
            for topic in marker.topics
            for p in topic.partitions
        }

    node.allow(acl(CLUSTER, CLUSTER_NAME, Op.DESCRIBE), acl(TXN_ID, "*", Op.ALL))
    refused = codes(await node.call(ApiKey.WRITE_TXN_MARKERS, request))
    assert refused == {
        (LOG_TOPIC, partition): ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ("elsewhere", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ("elsewhere", 1): ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    }
    by_node = codes(await node.call(ApiKey.WRITE_TXN_MARKERS, request, ADMIN))
    assert by_node[(LOG_TOPIC, partition)] == ErrorCode.NONE
    for operation in (Op.CLUSTER_ACTION, Op.ALTER):
        granted = acl(CLUSTER, CLUSTER_NAME, operation)
        node.allow(granted)
        assert (
            codes(await node.call(ApiKey.WRITE_TXN_MARKERS, request))[(LOG_TOPIC, partition)]
            == ErrorCode.NONE
        )
        node.remove(granted)
