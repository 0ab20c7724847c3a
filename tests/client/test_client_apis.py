"""The RPC client's API handlers: one per API of the contract, and the pure parts of the one
request path (routing keys, retry codes, errors raised, the split and join of a request
naming several groups)."""

from __future__ import annotations

import pytest

from coordinator_server.rpc import apis
from coordinator_server.rpc.apis import ApiHandler, Lookup
from protocol.api_keys import ApiKey
from protocol.errors import ApiError, ErrorCode
from protocol.messages import (
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

HANDLERS = [value for value in vars(apis).values() if isinstance(value, ApiHandler)]


def test_every_api_of_the_contract_has_one_handler_with_its_message_types() -> None:
    assert sorted(handler.request_type.API_KEY for handler in HANDLERS) == sorted(ApiKey)
    for handler in HANDLERS:
        key = (handler.request_type.API_KEY.value, 0)
        assert handler.request_type is REQUEST_TYPES[key]
        assert handler.response_type is RESPONSE_TYPES[key]
        if handler.split is not None or handler.lookup is Lookup.EVERY_NODE:
            assert handler.join is not None, handler.name


def test_a_group_api_goes_to_the_coordinator_of_its_group_and_retries_coordinator_errors() -> None:
    request = HeartbeatRequest(group_id=None, generation_id=1, member_id="m")
    assert apis.HEARTBEAT.lookup is Lookup.COORDINATOR
    assert apis.HEARTBEAT.group_id(request) == ""
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
