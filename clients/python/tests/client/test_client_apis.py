"""The RPC client's API handlers: one per API of the contract, and the pure parts of the one
request path (routing keys, retry codes, errors raised, the split and join of a request
naming several groups)."""

from __future__ import annotations

import pytest

from coordinator_client.rpc import apis
from coordinator_client.rpc.apis import ApiHandler, Lookup
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResponseResult,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupResponse,
    LeaveGroupResponseMember,
    ListGroupsRequest,
    ListGroupsResponse,
    ListGroupsResponseGroup,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
)
from coordinator_protocol.transactions import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponsePartition,
    AddPartitionsToTxnResponseTopic,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseState,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseState,
    ListTransactionsV1Request,
    ListTransactionsV1Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseMarker,
    WriteTxnMarkersResponsePartition,
    WriteTxnMarkersResponseTopic,
)

HANDLERS = [value for value in vars(apis).values() if isinstance(value, ApiHandler)]


def test_every_version_of_the_contract_has_one_handler_with_its_message_types() -> None:
    assert sorted(
        (handler.request_type.API_KEY.value, handler.request_type.API_VERSION)
        for handler in HANDLERS
    ) == sorted(REQUEST_TYPES)
    for handler in HANDLERS:
        key = (handler.request_type.API_KEY.value, handler.request_type.API_VERSION)
        assert handler.request_type is REQUEST_TYPES[key]
        assert handler.response_type is RESPONSE_TYPES[key]
        if handler.split is not None or handler.lookup is Lookup.EVERY_NODE:
            assert handler.join is not None, handler.name


def test_a_group_api_goes_to_the_coordinator_of_its_group_and_retries_coordinator_errors() -> None:
    request = HeartbeatRequest(group_id=None, generation_id=1, member_id="m")
    assert apis.HEARTBEAT.lookup is Lookup.COORDINATOR
    assert apis.HEARTBEAT.key(request) == ""
    for code in ErrorCode:
        answer = HeartbeatResponse(error_code=code)
        expected = code if code in apis.RETRY_CODES else None
        assert apis.HEARTBEAT.retry_code(answer) == expected
    assert {14, 7, 15, 16} == apis.RETRY_CODES


def test_leave_group_raises_the_top_level_error_before_a_members() -> None:
    answer = LeaveGroupResponse(
        error_code=0,
        members=[
            LeaveGroupResponseMember(member_id="a", error_code=0),
            LeaveGroupResponseMember(member_id="b", error_code=ErrorCode.UNKNOWN_MEMBER_ID),
        ],
    )
    errors = [(code, message) for code, message in apis.LEAVE_GROUP.errors(answer) if code]
    assert errors == [(ErrorCode.UNKNOWN_MEMBER_ID, "member 'b'")]


def test_a_commit_is_retried_on_a_coordinator_error_of_any_partition() -> None:
    def answer(*codes: int) -> OffsetCommitResponse:
        partitions = [
            OffsetCommitResponsePartition(partition_index=index, error_code=code)
            for index, code in enumerate(codes)
        ]
        topic = OffsetCommitResponseTopic(name="t", partitions=partitions)
        return OffsetCommitResponse(topics=[topic])

    assert apis.OFFSET_COMMIT.retry_code(answer(0, ErrorCode.OFFSET_METADATA_TOO_LARGE)) is None
    assert apis.OFFSET_COMMIT.retry_code(answer(0, ErrorCode.NOT_COORDINATOR)) == 16
    assert list(apis.OFFSET_COMMIT.errors(answer(ErrorCode.NOT_COORDINATOR))) == []


def test_a_request_naming_several_groups_is_one_request_per_group_answered_in_its_order() -> None:
    request = OffsetFetchRequest(
        groups=[OffsetFetchRequestGroup(group_id=g) for g in ("b", "a", "c")],
        require_stable=True,
    )
    assert apis.OFFSET_FETCH.split is not None and apis.OFFSET_FETCH.join is not None
    parts = apis.OFFSET_FETCH.split(request)
    assert [group for group, _ in parts] == ["b", "a", "c"]
    assert all(part.require_stable and len(part.groups) == 1 for _, part in parts)
    items = [
        apis.OFFSET_FETCH.item(OffsetFetchResponse(groups=[OffsetFetchResponseGroup(group_id=g)]))
        for g, _ in parts
    ]
    joined = apis.OFFSET_FETCH.join(request, items)
    assert [group.group_id for group in joined.groups] == ["b", "a", "c"]

    deletes = DeleteGroupsRequest(groups_names=["x", None])
    assert apis.DELETE_GROUPS.split is not None
    assert [group for group, _ in apis.DELETE_GROUPS.split(deletes)] == ["x", ""]
    two = DeleteGroupsResponse(
        results=[DeleteGroupsResponseResult(group_id="x"), DeleteGroupsResponseResult()]
    )
    with pytest.raises(ApiError, match="DeleteGroups answered 2 items for one"):
        apis.DELETE_GROUPS.item(two)


def test_listed_groups_are_joined_once_each_and_an_error_answers_the_call() -> None:
    assert apis.LIST_GROUPS.join is not None
    one = ListGroupsResponse(groups=[ListGroupsResponseGroup(group_id=g) for g in ("a", "b")])
    two = ListGroupsResponse(groups=[ListGroupsResponseGroup(group_id=g) for g in ("b", "c")])
    joined = apis.LIST_GROUPS.join(ListGroupsRequest(), [one, two])
    assert [group.group_id for group in joined.groups] == ["a", "b", "c"]
    failed = ListGroupsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert apis.LIST_GROUPS.join(ListGroupsRequest(), [one, failed]) is failed


# The transaction APIs


def _add_partitions_answer(top: int, *codes: int) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(
        error_code=top,
        results_by_topic=[
            AddPartitionsToTxnResponseTopic(
                name="t",
                results_by_partition=[
                    AddPartitionsToTxnResponsePartition(partition_index=i, partition_error_code=c)
                    for i, c in enumerate(codes)
                ],
            )
        ],
    )


def test_the_transaction_apis_go_to_the_coordinator_of_their_transactional_id() -> None:
    end = EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True)
    for handler in (apis.INIT_PRODUCER_ID, apis.ADD_PARTITIONS_TO_TXN, apis.ADD_OFFSETS_TO_TXN,
                    apis.END_TXN, apis.DESCRIBE_TRANSACTIONS):  # fmt: skip
        assert (handler.lookup, handler.key_type) == (Lookup.COORDINATOR, 1), handler.name
    assert apis.END_TXN.key(end) == "tx"
    # TxnOffsetCommit goes to the group's coordinator, as in Kafka.
    commit = TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0, topics=[]
    )
    assert (apis.TXN_OFFSET_COMMIT.key_type, apis.TXN_OFFSET_COMMIT.key(commit)) == (0, "g")
    assert apis.TXN_OFFSET_COMMIT.key(commit.replace(group_id=None)) == ""
    assert apis.LIST_TRANSACTIONS.lookup is Lookup.EVERY_NODE
    assert apis.WRITE_TXN_MARKERS.lookup is Lookup.BOOTSTRAP
    # The group APIs keep key type 0.
    assert all(h.key_type == 0 for h in HANDLERS if h.request_type.API_KEY < 20)


def test_the_transaction_apis_also_retry_concurrent_transactions_on_the_same_node() -> None:
    assert {14, 7, 15, 16, 51} == apis.TXN_RETRY_CODES
    for code in ErrorCode:
        expected = code if code in apis.TXN_RETRY_CODES else None
        assert apis.END_TXN.retry_code(EndTxnResponse(error_code=code)) == expected
        assert apis.INIT_PRODUCER_ID.retry_code(InitProducerIdResponse(error_code=code)) == expected
        assert apis.ADD_OFFSETS_TO_TXN.retry_code(AddOffsetsToTxnResponse(error_code=code)) == (
            expected
        )
    # CONCURRENT_TRANSACTIONS is not a reason to look the coordinator up again.
    assert ErrorCode.CONCURRENT_TRANSACTIONS not in apis.RETRY_REDISCOVER
    # The group APIs do not retry it: they never get it.
    assert apis.HEARTBEAT.retry_code(HeartbeatResponse(error_code=51)) is None


def test_add_partitions_retries_and_raises_per_partition_errors() -> None:
    retry = apis.ADD_PARTITIONS_TO_TXN.retry_code
    assert retry(_add_partitions_answer(0, 0, 0)) is None
    assert retry(_add_partitions_answer(0, ErrorCode.OPERATION_NOT_ATTEMPTED, 51)) == 51
    assert retry(_add_partitions_answer(ErrorCode.NOT_COORDINATOR)) == 16
    assert retry(_add_partitions_answer(0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)) is None
    errors = [
        (code, message)
        for code, message in apis.ADD_PARTITIONS_TO_TXN.errors(
            _add_partitions_answer(0, 0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        )
        if code
    ]
    assert errors == [(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "t-1")]


def test_a_txn_offset_commit_is_retried_on_a_retriable_error_of_any_partition() -> None:
    def answer(*codes: int) -> TxnOffsetCommitResponse:
        partitions = [
            TxnOffsetCommitResponsePartition(partition_index=i, error_code=c)
            for i, c in enumerate(codes)
        ]
        return TxnOffsetCommitResponse(
            topics=[TxnOffsetCommitResponseTopic(name="t", partitions=partitions)]
        )

    retry = apis.TXN_OFFSET_COMMIT.retry_code
    assert retry(answer(0, ErrorCode.INVALID_PRODUCER_EPOCH)) is None
    assert retry(answer(0, ErrorCode.CONCURRENT_TRANSACTIONS)) == 51
    assert retry(answer(ErrorCode.NOT_COORDINATOR)) == 16


def test_markers_retry_only_what_the_same_node_may_answer_differently() -> None:
    def answer(code: int) -> WriteTxnMarkersResponse:
        partition = WriteTxnMarkersResponsePartition(partition_index=0, error_code=code)
        topic = WriteTxnMarkersResponseTopic(name="log", partitions=[partition])
        return WriteTxnMarkersResponse(
            markers=[WriteTxnMarkersResponseMarker(producer_id=1, topics=[topic])]
        )

    retry = apis.WRITE_TXN_MARKERS.retry_code
    assert retry(answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)) == 14
    assert retry(answer(ErrorCode.NOT_COORDINATOR)) is None
    assert retry(answer(0)) is None


def test_describe_transactions_is_one_request_per_transactional_id() -> None:
    handler = apis.DESCRIBE_TRANSACTIONS
    assert handler.split is not None and handler.join is not None
    request = DescribeTransactionsRequest(transactional_ids=["b", "a"])
    parts = handler.split(request)
    assert [(key, part.transactional_ids) for key, part in parts] == [("b", ["b"]), ("a", ["a"])]
    items = [
        handler.item(
            DescribeTransactionsResponse(
                transaction_states=[DescribeTransactionsResponseState(transactional_id=key)]
            )
        )
        for key, _ in parts
    ]
    joined = handler.join(request, items)
    assert [state.transactional_id for state in joined.transaction_states] == ["b", "a"]
    retry = handler.retry_code
    not_coordinator = DescribeTransactionsResponseState(error_code=ErrorCode.NOT_COORDINATOR)
    assert retry(DescribeTransactionsResponse(transaction_states=[not_coordinator])) == 16


def test_listed_transactions_are_joined_once_each_and_an_error_answers_the_call() -> None:
    join = apis.LIST_TRANSACTIONS.join
    assert join is not None

    def listed(*ids: str, unknown: tuple[str, ...] = ()) -> ListTransactionsResponse:
        return ListTransactionsResponse(
            unknown_state_filters=list(unknown),
            transaction_states=[ListTransactionsResponseState(transactional_id=i) for i in ids],
        )

    joined = join(ListTransactionsRequest(), [listed("a", "b", unknown=("X",)), listed("b", "c")])
    assert [state.transactional_id for state in joined.transaction_states] == ["a", "b", "c"]
    assert joined.unknown_state_filters == ["X"]
    failed = ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert join(ListTransactionsRequest(), [listed("a"), failed]) is failed


def test_pages_of_listed_transactions_are_joined_only_when_each_is_whole() -> None:
    join = apis.LIST_TRANSACTIONS_V1.join
    assert join is not None

    def page(*ids: str, next_cursor: str | None = None) -> ListTransactionsV1Response:
        return ListTransactionsV1Response(
            transaction_states=[ListTransactionsResponseState(transactional_id=i) for i in ids],
            next_cursor=next_cursor,
        )

    joined = join(ListTransactionsV1Request(), [page("a", "b"), page("b", "c")])
    assert [state.transactional_id for state in joined.transaction_states] == ["a", "b", "c"]
    assert joined.next_cursor is None
    # A node's next pages are the client's to follow (`CoordinatorClient.list_transactions`).
    with pytest.raises(ApiError):
        join(ListTransactionsV1Request(), [page("a", next_cursor="b"), page("c")])


def test_consumer_group_apis_go_to_the_coordinator_of_each_group() -> None:
    from coordinator_protocol.consumer_groups import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupDescribeResponseGroup,
        ConsumerGroupHeartbeatRequest,
    )

    heartbeat = ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0)
    assert apis.CONSUMER_GROUP_HEARTBEAT.lookup is Lookup.COORDINATOR
    assert apis.CONSUMER_GROUP_HEARTBEAT.key(heartbeat) == "g"
    request = ConsumerGroupDescribeRequest(
        group_ids=["a", None], include_authorized_operations=True
    )
    split = apis.CONSUMER_GROUP_DESCRIBE.split(request)  # type: ignore[misc]
    assert split == [
        ("a", ConsumerGroupDescribeRequest(group_ids=["a"], include_authorized_operations=True)),
        ("", ConsumerGroupDescribeRequest(group_ids=[None], include_authorized_operations=True)),
    ]
    groups = [ConsumerGroupDescribeResponseGroup(group_id=g) for g in ("a", "")]
    items = [
        apis.CONSUMER_GROUP_DESCRIBE.item(ConsumerGroupDescribeResponse(groups=[g])) for g in groups
    ]
    joined = apis.CONSUMER_GROUP_DESCRIBE.join(request, items)  # type: ignore[misc]
    assert joined == ConsumerGroupDescribeResponse(groups=groups)
