"""Message models: the contract's field lists, defaults, validation and wire round trips."""

from __future__ import annotations

from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from message_strategies import message_strategy

from coordinator_protocol import messages
from coordinator_protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from coordinator_protocol.envelope import (
    EnvelopeError,
    RequestHeader,
    encode_body,
    encode_request,
    encode_response,
    encode_response_of,
    split_request,
    split_response,
)
from coordinator_protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    NotCoordinatorError,
    UnsupportedVersionError,
)
from coordinator_protocol.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    ApiVersionsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseGroup,
    DescribeGroupsResponseMember,
    FindCoordinatorRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    InvalidResponseError,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    ListGroupsRequest,
    Message,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponsePartition,
    SyncGroupRequest,
    SyncGroupResponse,
    error_body,
    parse_request,
    parse_response,
)

# The field lists of PROTOCOL.md's table, item by item, plus `error_message` where the
# contract allows it next to a top-level error_code. Order is the wire order.
CONTRACT_FIELDS: dict[str, list[str]] = {
    "ApiVersionsRequest": [],
    "ApiVersionsResponse": [
        "error_code",
        "error_message",
        "api_keys",
        "server_name",
        "server_version",
    ],
    "ApiVersionsResponseKey": ["api_key", "min_version", "max_version"],
    "FindCoordinatorRequest": ["key_type", "keys"],
    "FindCoordinatorResponse": ["coordinators"],
    "FindCoordinatorResponseCoordinator": [
        "key",
        "node_id",
        "host",
        "port",
        "error_code",
        "error_message",
    ],
    "JoinGroupRequest": [
        "group_id",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "member_id",
        "group_instance_id",
        "protocol_type",
        "protocols",
        "reason",
    ],
    "JoinGroupRequestProtocol": ["name", "metadata"],
    "JoinGroupResponse": [
        "error_code",
        "error_message",
        "generation_id",
        "protocol_type",
        "protocol_name",
        "leader",
        "skip_assignment",
        "member_id",
        "members",
    ],
    "JoinGroupResponseMember": ["member_id", "group_instance_id", "metadata"],
    "SyncGroupRequest": [
        "group_id",
        "generation_id",
        "member_id",
        "group_instance_id",
        "protocol_type",
        "protocol_name",
        "assignments",
    ],
    "SyncGroupRequestAssignment": ["member_id", "assignment"],
    "SyncGroupResponse": [
        "error_code",
        "error_message",
        "protocol_type",
        "protocol_name",
        "assignment",
    ],
    "HeartbeatRequest": ["group_id", "generation_id", "member_id", "group_instance_id"],
    "HeartbeatResponse": ["error_code", "error_message"],
    "LeaveGroupRequest": ["group_id", "members"],
    "LeaveGroupRequestMember": ["member_id", "group_instance_id", "reason"],
    "LeaveGroupResponse": ["error_code", "error_message", "members"],
    "LeaveGroupResponseMember": ["member_id", "group_instance_id", "error_code"],
    "OffsetCommitRequest": [
        "group_id",
        "generation_id_or_member_epoch",
        "member_id",
        "group_instance_id",
        "topics",
    ],
    "OffsetCommitRequestTopic": ["name", "partitions"],
    "OffsetCommitRequestPartition": [
        "partition_index",
        "committed_offset",
        "committed_leader_epoch",
        "committed_metadata",
    ],
    "OffsetCommitResponse": ["topics"],
    "OffsetCommitResponseTopic": ["name", "partitions"],
    "OffsetCommitResponsePartition": ["partition_index", "error_code"],
    "OffsetFetchRequest": ["groups", "require_stable"],
    "OffsetFetchRequestGroup": ["group_id", "member_id", "member_epoch", "topics"],
    "OffsetFetchRequestTopic": ["name", "partition_indexes"],
    "OffsetFetchResponse": ["groups"],
    "OffsetFetchResponseGroup": ["group_id", "error_code", "topics"],
    "OffsetFetchResponseTopic": ["name", "partitions"],
    "OffsetFetchResponsePartition": [
        "partition_index",
        "committed_offset",
        "committed_leader_epoch",
        "metadata",
        "error_code",
    ],
    "DescribeGroupsRequest": ["groups"],
    "DescribeGroupsResponse": ["groups"],
    "DescribeGroupsResponseGroup": [
        "error_code",
        "group_id",
        "group_state",
        "protocol_type",
        "protocol_data",
        "members",
    ],
    "DescribeGroupsResponseMember": [
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "member_metadata",
        "member_assignment",
    ],
    "ListGroupsRequest": ["states_filter", "types_filter"],
    "ListGroupsResponse": ["error_code", "error_message", "groups"],
    "ListGroupsResponseGroup": ["group_id", "protocol_type", "group_state", "group_type"],
    "DeleteGroupsRequest": ["groups_names"],
    "DeleteGroupsResponse": ["results"],
    "DeleteGroupsResponseResult": ["group_id", "error_code"],
    "OffsetDeleteRequest": ["group_id", "topics"],
    "OffsetDeleteRequestTopic": ["name", "partitions"],
    "OffsetDeleteRequestPartition": ["partition_index"],
    "OffsetDeleteResponse": ["error_code", "error_message", "topics"],
    "OffsetDeleteResponseTopic": ["name", "partitions"],
    "OffsetDeleteResponsePartition": ["partition_index", "error_code"],
    "DescribeClusterRequest": [
        "include_cluster_authorized_operations",
        "endpoint_type",
        "include_fenced_brokers",
    ],
    "DescribeClusterResponse": [
        "error_code",
        "error_message",
        "endpoint_type",
        "cluster_id",
        "controller_id",
        "brokers",
        "cluster_authorized_operations",
    ],
    "DescribeClusterResponseBroker": ["broker_id", "host", "port", "rack", "is_fenced"],
}

MESSAGE_CLASSES: list[type[Message]] = [getattr(messages, name) for name in CONTRACT_FIELDS]
RESPONSE_CLASSES = [cls for cls in MESSAGE_CLASSES if "Response" in cls.__name__]


def test_every_message_class_is_in_the_contract_table() -> None:
    exported = {
        name
        for name in messages.__all__
        if isinstance(getattr(messages, name), type)
        and issubclass(getattr(messages, name), Message)
        and name != "Message"
    }
    assert exported == set(CONTRACT_FIELDS)


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
def test_fields_are_the_contract_fields(cls: type[Message]) -> None:
    assert list(cls.__struct_fields__) == CONTRACT_FIELDS[cls.__name__]


@pytest.mark.parametrize("cls", RESPONSE_CLASSES, ids=lambda cls: cls.__name__)
def test_responses_build_from_defaults_and_write_every_field(cls: type[Message]) -> None:
    body = cls().to_body()
    assert list(body) == CONTRACT_FIELDS[cls.__name__]


def test_registries_cover_every_supported_version() -> None:
    expected = {
        (int(api_key), version)
        for api_key, (low, high) in SUPPORTED_VERSIONS.items()
        for version in range(low, high + 1)
    }
    assert set(REQUEST_TYPES) == expected
    assert set(RESPONSE_TYPES) == expected
    for (api_key, version), request_type in REQUEST_TYPES.items():
        assert request_type.__name__.endswith("Request")
        assert api_key == request_type.API_KEY  # type: ignore[attr-defined]
        assert version == request_type.API_VERSION
    for (api_key, version), response_type in RESPONSE_TYPES.items():
        request_name = REQUEST_TYPES[(api_key, version)].__name__
        assert response_type.__name__ == request_name.removesuffix("Request") + "Response"
        assert api_key == response_type.API_KEY  # type: ignore[attr-defined]


# Golden bodies: a minimal valid body per request, and what it parses to.


def _header(api_key: ApiKey, api_version: int = 0) -> RequestHeader:
    return RequestHeader(api_key, api_version, correlation_id=1, client_id="test")


def packb(value: object) -> bytes:
    """A body as a client puts it on the wire."""
    return bytes(msgpack.packb(value, use_bin_type=True))


def _parse(api_key: ApiKey, body: object) -> Message:
    return parse_request(_header(api_key), packb(body))


def test_api_versions_request_has_no_fields() -> None:
    assert _parse(ApiKey.API_VERSIONS, {}) == ApiVersionsRequest()
    assert ApiVersionsRequest().to_body() == {}


def test_find_coordinator_minimal() -> None:
    request = _parse(ApiKey.FIND_COORDINATOR, {"keys": ["g1", "g2"]})
    assert request == FindCoordinatorRequest(key_type=0, keys=["g1", "g2"])


def test_join_group_minimal_and_defaults() -> None:
    body = {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x80"}],
    }
    request = _parse(ApiKey.JOIN_GROUP, body)
    assert isinstance(request, JoinGroupRequest)
    assert request.rebalance_timeout_ms == -1
    assert request.group_instance_id is None
    assert request.reason is None
    assert request.protocols == [JoinGroupRequestProtocol(name="range", metadata=b"\x80")]
    assert request.to_body() == {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": -1,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x80"}],
        "reason": None,
    }


def test_sync_group_minimal_and_defaults() -> None:
    body = {"group_id": "g", "generation_id": 3, "member_id": "m"}
    request = _parse(ApiKey.SYNC_GROUP, body)
    assert request == SyncGroupRequest(
        group_id="g",
        generation_id=3,
        member_id="m",
        group_instance_id=None,
        protocol_type=None,
        protocol_name=None,
        assignments=[],
    )


def test_heartbeat_minimal() -> None:
    body = {"group_id": "g", "generation_id": 3, "member_id": "m"}
    request = _parse(ApiKey.HEARTBEAT, body)
    assert request == HeartbeatRequest(group_id="g", generation_id=3, member_id="m")


def test_leave_group_minimal() -> None:
    body = {"group_id": "g", "members": [{"member_id": "m"}]}
    request = _parse(ApiKey.LEAVE_GROUP, body)
    assert isinstance(request, LeaveGroupRequest)
    assert request.members[0].group_instance_id is None
    assert request.members[0].reason is None


def test_offset_commit_minimal_and_defaults() -> None:
    body = {
        "group_id": "g",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42}]}],
    }
    request = _parse(ApiKey.OFFSET_COMMIT, body)
    assert isinstance(request, OffsetCommitRequest)
    assert request.generation_id_or_member_epoch == -1
    assert request.member_id == ""
    assert request.group_instance_id is None
    partition = request.topics[0].partitions[0]
    assert partition.committed_leader_epoch == -1
    assert partition.committed_metadata is None


def test_offset_fetch_minimal_and_defaults() -> None:
    body = {"groups": [{"group_id": "g"}]}
    request = _parse(ApiKey.OFFSET_FETCH, body)
    assert request == OffsetFetchRequest(
        groups=[OffsetFetchRequestGroup(group_id="g", member_id=None, member_epoch=-1)],
        require_stable=False,
    )
    assert isinstance(request, OffsetFetchRequest)
    assert request.groups[0].topics is None  # nil: every committed offset
    assert request.to_body() == {
        "groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": None}],
        "require_stable": False,
    }


def test_offset_fetch_topics_list() -> None:
    body = {"groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 2]}]}]}
    request = _parse(ApiKey.OFFSET_FETCH, body)
    assert isinstance(request, OffsetFetchRequest)
    topics = request.groups[0].topics
    assert topics is not None
    assert topics[0].partition_indexes == [0, 2]


def test_describe_and_delete_groups_accept_nil_items() -> None:
    request = _parse(ApiKey.DESCRIBE_GROUPS, {"groups": ["a", None, ""]})
    assert request == DescribeGroupsRequest(groups=["a", None, ""])
    request = _parse(ApiKey.DELETE_GROUPS, {"groups_names": [None, "b"]})
    assert request == DeleteGroupsRequest(groups_names=[None, "b"])


def test_list_groups_defaults_to_no_filter() -> None:
    request = _parse(ApiKey.LIST_GROUPS, {})
    assert request == ListGroupsRequest(states_filter=[], types_filter=[])


def test_offset_delete_minimal() -> None:
    body = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}]}
    request = _parse(ApiKey.OFFSET_DELETE, body)
    assert isinstance(request, OffsetDeleteRequest)
    assert request.topics[0].partitions[0].partition_index == 1


@pytest.mark.parametrize(
    ("api_key", "body"),
    [
        (ApiKey.JOIN_GROUP, {"session_timeout_ms": 1, "member_id": "", "protocol_type": "c"}),
        (ApiKey.SYNC_GROUP, {"generation_id": 1, "member_id": "m"}),
        (ApiKey.HEARTBEAT, {"generation_id": 1, "member_id": "m"}),
        (ApiKey.LEAVE_GROUP, {"members": []}),
        (ApiKey.OFFSET_COMMIT, {"topics": []}),
        (ApiKey.OFFSET_FETCH, {"groups": [{}]}),
        (ApiKey.OFFSET_DELETE, {"topics": []}),
    ],
)
def test_missing_or_nil_group_id_is_not_invalid_request(
    api_key: ApiKey, body: dict[str, object]
) -> None:
    # The service answers these with INVALID_GROUP_ID, so validation must let them through.
    if api_key == ApiKey.JOIN_GROUP:
        body = {**body, "protocols": []}
    for variant in (body, {**body, "group_id": None}):
        request = _parse(api_key, variant)
        target = request.groups[0] if isinstance(request, OffsetFetchRequest) else request
        assert target.group_id is None  # type: ignore[attr-defined]


def test_unknown_fields_are_ignored() -> None:
    body = {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
        "throttle_time_ms": 5,
        "future_field": {"nested": [1, 2]},
    }
    request = _parse(ApiKey.HEARTBEAT, body)
    assert request == HeartbeatRequest(group_id="g", generation_id=1, member_id="m")


# The fields of a valid heartbeat, encoded, for bodies written byte by byte.
HEARTBEAT_FIELDS = b"\xa8group_id\xa1g\xadgeneration_id\x01\xa9member_id\xa1m"
EXT = bytes(msgpack.packb(msgpack.ExtType(5, b"x")))
TIMESTAMP = b"\xd6\xff\x00\x00\x00\x01"


@pytest.mark.parametrize(
    ("unknown_value", "what"),
    [
        (EXT, "an ext type"),
        (TIMESTAMP, "msgpack's timestamp ext"),
        (b"\x91" + EXT, "an ext type in an array"),
        (b"\x81\x01\x02", "a map with an int key"),
        (b"\x81\x91\x01\x01", "a map with an array key"),
        (b"\xa2\xff\xfe", "a str that is not UTF-8"),
    ],
)
def test_whatever_an_unknown_field_holds_is_ignored(unknown_value: bytes, what: str) -> None:
    # Unknown fields are skipped, not built: only what the schema reads is judged.
    body = b"\x84" + HEARTBEAT_FIELDS + b"\xa6future" + unknown_value
    request = parse_request(_header(ApiKey.HEARTBEAT), body)
    assert request == HeartbeatRequest(group_id="g", generation_id=1, member_id="m")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b"\x83\xa8group_id\xa1g\xa9member_id\xa1m\xadgeneration_id" + EXT,
            "Expected `int`, got `ext` - at `$.generation_id`",
        ),
        (
            b"\x83\xa8group_id\xa1g\xa9member_id\xa1m\xadgeneration_id" + TIMESTAMP,
            "Expected `int`, got `ext` - at `$.generation_id`",
        ),
        (
            b"\x83\xa8group_id" + EXT + b"\xadgeneration_id\x01\xa9member_id\xa1m",
            "Expected `str | null`, got `ext` - at `$.group_id`",
        ),
        (
            b"\x84" + HEARTBEAT_FIELDS + b"\xc4\x01x\x01",
            "Expected `str`, got `bytes` - at `key` in `$`",
        ),
        (EXT, "body: expected a map, got ext"),
        (TIMESTAMP, "body: expected a map, got ext"),
    ],
)
def test_an_ext_type_or_a_bin_key_the_schema_reads_is_invalid_request(
    body: bytes, message: str
) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        parse_request(_header(ApiKey.HEARTBEAT), body)
    assert raised.value.message == message


def test_a_str_the_schema_reads_that_is_not_utf8_is_not_msgpack() -> None:
    body = b"\x83\xa8group_id\xa2\xff\xfe\xadgeneration_id\x01\xa9member_id\xa1m"
    with pytest.raises(EnvelopeError) as raised:
        parse_request(_header(ApiKey.HEARTBEAT), body)
    assert str(raised.value).startswith("invalid msgpack: 'utf-8' codec can't decode")


@pytest.mark.parametrize(
    "body",
    [
        b"\x83" + HEARTBEAT_FIELDS + b"\x00",  # a byte after the value
        b"\x84" + HEARTBEAT_FIELDS,  # one pair short
        b"\x81\xa6topics\xdd\xff\xff\xff\xff",  # 2**32 - 1 items declared, none sent
        b"\x81\xa6future" + b"\x91" * 5000 + b"\xc0",  # nested too deep
    ],
)
def test_a_body_that_is_not_one_msgpack_value_is_not_msgpack(body: bytes) -> None:
    # split_request never hands such bodies over; parse_request still refuses them alone.
    with pytest.raises(EnvelopeError):
        parse_request(_header(ApiKey.HEARTBEAT), body)


def test_a_repeated_field_takes_its_last_value() -> None:
    body = b"\x84" + HEARTBEAT_FIELDS + b"\xadgeneration_id\x02"
    request = parse_request(_header(ApiKey.HEARTBEAT), body)
    assert request == HeartbeatRequest(group_id="g", generation_id=2, member_id="m")


def test_a_body_from_split_request_parses_without_a_copy() -> None:
    header = _header(ApiKey.HEARTBEAT)
    body = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    split_header, raw = split_request(encode_request(header, body))
    assert type(raw) is msgspec.Raw
    request = parse_request(split_header, raw)
    assert request == HeartbeatRequest(group_id="g", generation_id=1, member_id="m")


GOOD_COMMIT: dict[str, Any] = {
    "group_id": "g",
    "generation_id_or_member_epoch": 1,
    "member_id": "m",
    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
}


def _commit_with_partition(**fields: object) -> dict[str, object]:
    partition = {"partition_index": 0, "committed_offset": 5, **fields}
    return {**GOOD_COMMIT, "topics": [{"name": "t", "partitions": [partition]}]}


GOOD_JOIN: dict[str, Any] = {
    "group_id": "g",
    "session_timeout_ms": 10_000,
    "member_id": "",
    "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": b""}],
}


@pytest.mark.parametrize(
    ("api_key", "body", "message"),
    [
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(committed_offset="5"),
            "Expected `int`, got `str` - at `$.topics[0].partitions[0].committed_offset`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(committed_offset=True),
            "Expected `int`, got `bool` - at `$.topics[0].partitions[0].committed_offset`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(committed_offset=5.0),
            "Expected `int`, got `float` - at `$.topics[0].partitions[0].committed_offset`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(committed_offset=2**63),
            "Expected `int` <= 9223372036854775807 - at "
            "`$.topics[0].partitions[0].committed_offset`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(committed_offset=2**64 - 1),
            "Expected `int` <= 9223372036854775807 - at "
            "`$.topics[0].partitions[0].committed_offset`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(partition_index=-(2**31) - 1),
            "Expected `int` >= -2147483648 - at `$.topics[0].partitions[0].partition_index`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            _commit_with_partition(committed_metadata=b"meta"),
            "Expected `str | null`, got `bytes` - at "
            "`$.topics[0].partitions[0].committed_metadata`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            {**GOOD_COMMIT, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
            "Object missing required field `committed_offset` - at `$.topics[0].partitions[0]`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            {"group_id": "g"},
            "Object missing required field `topics`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            {**GOOD_COMMIT, "topics": {"t": []}},
            "Expected `array`, got `object` - at `$.topics`",
        ),
        (
            ApiKey.OFFSET_COMMIT,
            {**GOOD_COMMIT, "group_id": 7},
            "Expected `str | null`, got `int` - at `$.group_id`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {k: v for k, v in GOOD_JOIN.items() if k != "session_timeout_ms"},
            "Object missing required field `session_timeout_ms`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {**GOOD_JOIN, "session_timeout_ms": 2**31},
            "Expected `int` <= 2147483647 - at `$.session_timeout_ms`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {**GOOD_JOIN, "member_id": None},
            "Expected `str`, got `None` - at `$.member_id`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {**GOOD_JOIN, "member_id": b"m"},
            "Expected `str`, got `bytes` - at `$.member_id`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {**GOOD_JOIN, "protocols": [{"name": "range", "metadata": "not bin"}]},
            "Expected `bytes`, got `str` - at `$.protocols[0].metadata`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {**GOOD_JOIN, "protocols": [{"name": "range"}]},
            "Object missing required field `metadata` - at `$.protocols[0]`",
        ),
        (
            ApiKey.JOIN_GROUP,
            {**GOOD_JOIN, "protocols": ["range"]},
            "Expected `object`, got `str` - at `$.protocols[0]`",
        ),
        (
            ApiKey.HEARTBEAT,
            {"group_id": "g", "generation_id": False, "member_id": "m"},
            "Expected `int`, got `bool` - at `$.generation_id`",
        ),
        (
            ApiKey.HEARTBEAT,
            {"group_id": "g", "member_id": "m"},
            "Object missing required field `generation_id`",
        ),
        (
            ApiKey.SYNC_GROUP,
            {
                "group_id": "g",
                "generation_id": 1,
                "member_id": "m",
                "assignments": [{"member_id": "m", "assignment": None}],
            },
            "Expected `bytes`, got `None` - at `$.assignments[0].assignment`",
        ),
        (
            ApiKey.LEAVE_GROUP,
            {"group_id": "g"},
            "Object missing required field `members`",
        ),
        (
            ApiKey.LEAVE_GROUP,
            {"group_id": "g", "members": [{"group_instance_id": "i"}]},
            "Object missing required field `member_id` - at `$.members[0]`",
        ),
        (
            ApiKey.FIND_COORDINATOR,
            {"keys": ["g"], "key_type": 128},
            "Expected `int` <= 127 - at `$.key_type`",
        ),
        (
            ApiKey.FIND_COORDINATOR,
            {"keys": ["g"], "key_type": -129},
            "Expected `int` >= -128 - at `$.key_type`",
        ),
        (
            ApiKey.FIND_COORDINATOR,
            {"key_type": 0},
            "Object missing required field `keys`",
        ),
        (
            ApiKey.FIND_COORDINATOR,
            {"keys": "g"},
            "Expected `array`, got `str` - at `$.keys`",
        ),
        (
            ApiKey.OFFSET_FETCH,
            {"groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1.5]}]}]},
            "Expected `int`, got `float` - at `$.groups[0].topics[0].partition_indexes[0]`",
        ),
        (
            ApiKey.OFFSET_FETCH,
            {"groups": [], "require_stable": 1},
            "Expected `bool`, got `int` - at `$.require_stable`",
        ),
        (
            ApiKey.DESCRIBE_GROUPS,
            {"groups": ["a", 1]},
            "Expected `str | null`, got `int` - at `$.groups[1]`",
        ),
        (
            ApiKey.LIST_GROUPS,
            {"states_filter": [None]},
            "Expected `str`, got `None` - at `$.states_filter[0]`",
        ),
        (
            ApiKey.DELETE_GROUPS,
            {"groups_names": None},
            "Expected `array`, got `None` - at `$.groups_names`",
        ),
        (
            ApiKey.OFFSET_DELETE,
            {"group_id": "g", "topics": [{"name": "t", "partitions": [{}]}]},
            "Object missing required field `partition_index` - at `$.topics[0].partitions[0]`",
        ),
        (
            ApiKey.HEARTBEAT,
            {"group_id": "g", "generation_id": 1, "member_id": "m", 7: "an int key"},
            "Expected `str`, got `int` - at `key` in `$`",
        ),
    ],
)
def test_invalid_bodies(api_key: ApiKey, body: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(api_key, body)
    assert raised.value.message == message
    assert raised.value.code == ErrorCode.INVALID_REQUEST


def test_only_the_first_problem_is_reported() -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(ApiKey.HEARTBEAT, {"generation_id": "x", "member_id": 1})
    assert raised.value.message == "Expected `int`, got `str` - at `$.generation_id`"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "body: expected a map, got list"),
        (None, "body: expected a map, got nil"),
        ("body", "body: expected a map, got str"),
        (b"body", "body: expected a map, got bytes"),
        (7, "body: expected a map, got int"),
        (-7, "body: expected a map, got int"),
        (2**40, "body: expected a map, got int"),
        (1.5, "body: expected a map, got float"),
        (True, "body: expected a map, got bool"),
        ("x" * 40, "body: expected a map, got str"),
        (list(range(20)), "body: expected a map, got list"),
        (msgpack.ExtType(5, b"x"), "body: expected a map, got ext"),
    ],
)
def test_body_that_is_not_a_map(body: object, message: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        _parse(ApiKey.HEARTBEAT, body)
    assert raised.value.message == message


@pytest.mark.parametrize(
    ("api_key", "api_version", "message"),
    [
        (ApiKey.JOIN_GROUP, 1, "JoinGroup version 1 is not supported (supported: 0 to 0)"),
        (ApiKey.API_VERSIONS, -1, "ApiVersions version -1 is not supported (supported: 0 to 0)"),
        (99, 0, "api_key 99 is not supported"),
        (23, 0, "api_key 23 is not supported"),
    ],
)
def test_unsupported_versions(api_key: int, api_version: int, message: str) -> None:
    with pytest.raises(UnsupportedVersionError) as raised:
        parse_request(RequestHeader(api_key, api_version, 1, None), packb({}))
    assert raised.value.message == message
    with pytest.raises(UnsupportedVersionError):
        parse_response(api_key, api_version, packb({}))


def test_unsupported_version_wins_over_a_bad_body() -> None:
    with pytest.raises(UnsupportedVersionError):
        parse_request(RequestHeader(ApiKey.JOIN_GROUP, 5, 1, None), packb([1]))


# Responses


def test_response_defaults_follow_kafka() -> None:
    assert JoinGroupResponse().to_body() == {
        "error_code": 0,
        "error_message": None,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }
    assert SyncGroupResponse().assignment == b""
    partition = OffsetFetchResponsePartition()
    assert (partition.committed_offset, partition.committed_leader_epoch) == (-1, -1)
    assert partition.metadata == ""


def test_to_body_keeps_bytes_and_nil_and_nests_maps() -> None:
    response = DescribeGroupsResponse(
        groups=[
            DescribeGroupsResponseGroup(
                group_id="g",
                group_state="Stable",
                protocol_type="consumer",
                protocol_data="range",
                members=[
                    DescribeGroupsResponseMember(
                        member_id="m",
                        client_id="c",
                        client_host="/127.0.0.1",
                        member_metadata=b"\x00\x01",
                        member_assignment=b"",
                    )
                ],
            )
        ]
    )
    assert response.to_body() == {
        "groups": [
            {
                "error_code": 0,
                "group_id": "g",
                "group_state": "Stable",
                "protocol_type": "consumer",
                "protocol_data": "range",
                "members": [
                    {
                        "member_id": "m",
                        "group_instance_id": None,
                        "client_id": "c",
                        "client_host": "/127.0.0.1",
                        "member_metadata": b"\x00\x01",
                        "member_assignment": b"",
                    }
                ],
            }
        ]
    }


def test_error_code_enum_goes_out_as_a_plain_int() -> None:
    response = HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    body = response.to_body()
    assert body == {"error_code": 27, "error_message": None}
    assert type(body["error_code"]) is int
    assert encode_body(response) == b"\x82\xaaerror_code\x1b\xaderror_message\xc0"


def test_reported_error_code_is_the_top_level_one() -> None:
    code = HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS).reported_error_code()
    assert code == 27
    assert type(code) is int
    assert JoinGroupResponse().reported_error_code() == 0
    # No top-level error code and no special rule: nothing to report.
    assert (
        DescribeGroupsResponse(
            groups=[DescribeGroupsResponseGroup(error_code=69)]
        ).reported_error_code()
        == 0
    )


def test_reported_error_code_of_offset_commit_is_the_first_partitions() -> None:
    def commit(*topics: list[int]) -> OffsetCommitResponse:
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponseTopic(
                    name=f"t{index}",
                    partitions=[
                        OffsetCommitResponsePartition(partition_index=p, error_code=code)
                        for p, code in enumerate(codes)
                    ],
                )
                for index, codes in enumerate(topics)
            ]
        )

    assert commit().reported_error_code() == 0
    assert commit([]).reported_error_code() == 0
    assert commit([], [ErrorCode.NOT_COORDINATOR, 0]).reported_error_code() == 16
    assert commit([0, 16]).reported_error_code() == 0
    code = commit([ErrorCode.REBALANCE_IN_PROGRESS]).reported_error_code()
    assert (code, type(code)) == (27, int)


def test_messages_are_built_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        HeartbeatResponse(0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        HeartbeatResponse(no_such_field=1)  # type: ignore[call-arg]


def test_replace_copies() -> None:
    request = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
    changed = request.replace(generation_id=2)
    assert changed == HeartbeatRequest(group_id="g", generation_id=2, member_id="m")
    assert request.generation_id == 1


def test_response_golden_bytes() -> None:
    response = JoinGroupResponse(
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader="m",
        member_id="m",
        members=[JoinGroupResponseMember(member_id="m", metadata=b"\x01")],
    )
    assert encode_response(9, response.to_body()) == (
        b"\x92"  # fixarray of 2
        b"\x09"  # correlation_id 9
        b"\x89"  # body: fixmap of 9
        b"\xaaerror_code\x00"  # "error_code": 0
        b"\xaderror_message\xc0"  # "error_message": nil
        b"\xadgeneration_id\x01"  # "generation_id": 1
        b"\xadprotocol_type\xa8consumer"  # "protocol_type": "consumer"
        b"\xadprotocol_name\xa5range"  # "protocol_name": "range"
        b"\xa6leader\xa1m"  # "leader": "m"
        b"\xafskip_assignment\xc2"  # "skip_assignment": false
        b"\xa9member_id\xa1m"  # "member_id": "m"
        b"\xa7members\x91"  # "members": fixarray of 1
        b"\x83"  # fixmap of 3
        b"\xa9member_id\xa1m"  # "member_id": "m"
        b"\xb1group_instance_id\xc0"  # "group_instance_id": nil
        b"\xa8metadata\xc4\x01\x01"  # "metadata": bin 8 of length 1
    )


def test_parse_response() -> None:
    body = {"error_code": 0, "generation_id": 2, "members": [{"member_id": "m", "metadata": b""}]}
    response = parse_response(ApiKey.JOIN_GROUP, 0, packb(body))
    assert response == JoinGroupResponse(
        generation_id=2, members=[JoinGroupResponseMember(member_id="m")]
    )


def test_parse_response_keeps_a_top_level_error_its_schema_has() -> None:
    body = packb(error_body(ErrorCode.NOT_COORDINATOR, "moved"))
    response = parse_response(ApiKey.HEARTBEAT, 0, body)
    assert response == HeartbeatResponse(error_code=16, error_message="moved")


def test_parse_response_raises_a_top_level_error_its_schema_lacks() -> None:
    # OffsetCommit has per-partition error codes only; an INVALID_REQUEST answer would
    # otherwise parse as an empty, successful response.
    with pytest.raises(InvalidRequestError) as raised:
        parse_response(
            ApiKey.OFFSET_COMMIT, 0, packb(error_body(ErrorCode.INVALID_REQUEST, "topics: bad"))
        )
    assert raised.value.message == "topics: bad"
    with pytest.raises(NotCoordinatorError):
        parse_response(ApiKey.OFFSET_FETCH, 0, packb({"error_code": 16}))
    empty = OffsetCommitResponse()
    assert parse_response(ApiKey.OFFSET_COMMIT, 0, packb({"error_code": 0})) == empty
    # Neither a bool nor a non-int error code passes as an error.
    for code in (True, "16", None):
        assert parse_response(ApiKey.OFFSET_COMMIT, 0, packb({"error_code": code})) == empty


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (packb([1]), "body: expected a map, got list"),
        (packb({"error_code": "0"}), "Expected `int`, got `str` - at `$.error_code`"),
        (
            packb({"members": [{"metadata": "x"}]}),
            "Expected `bytes`, got `str` - at `$.members[0].metadata`",
        ),
        (
            b"\x81\xa6leader\xa2\xff\xfe",
            "invalid msgpack: 'utf-8' codec can't decode byte "
            "0xff in position 0: invalid start byte",
        ),
        (
            packb({}) + b"\x00",
            "invalid msgpack: MessagePack data is malformed: trailing characters (byte 1)",
        ),
    ],
)
def test_parse_response_rejects(body: bytes, message: str) -> None:
    with pytest.raises(InvalidResponseError) as raised:
        parse_response(ApiKey.JOIN_GROUP, 0, body)
    assert str(raised.value) == message


def test_error_body() -> None:
    body = error_body(ErrorCode.UNSUPPORTED_VERSION, "no such version")
    assert body == {"error_code": 35, "error_message": "no such version"}
    assert type(body["error_code"]) is int
    assert error_body(ErrorCode.INVALID_REQUEST, None) == {
        "error_code": 42,
        "error_message": None,
    }


# Round trips through the wire for every message class, with values drawn from each
# field's own type and range.


REQUEST_CLASSES = [cls for cls in MESSAGE_CLASSES if cls in REQUEST_TYPES.values()]
TOP_RESPONSE_CLASSES = [cls for cls in MESSAGE_CLASSES if cls in RESPONSE_TYPES.values()]


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_request_wire_round_trip(cls: type[Message], data: st.DataObject) -> None:
    request = data.draw(message_strategy(cls))
    header = _header(cls.API_KEY)  # type: ignore[attr-defined]
    payload = encode_request(header, request)
    # A message goes out as its to_body() map would, byte for byte.
    assert payload == encode_request(header, request.to_body())
    decoded_header, body = split_request(payload)
    assert decoded_header == header
    assert parse_request(decoded_header, body) == request


@pytest.mark.parametrize("cls", TOP_RESPONSE_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_response_wire_round_trip(cls: type[Message], data: st.DataObject) -> None:
    response = data.draw(message_strategy(cls))
    payload = encode_response(7, response)
    assert payload == encode_response(7, response.to_body())
    assert payload == encode_response_of(7, encode_body(response))
    correlation_id, body = split_response(payload)
    assert correlation_id == 7
    assert parse_response(cls.API_KEY, 0, body) == response  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_to_body_decodes_back_to_the_same_message(cls: type[Message], data: st.DataObject) -> None:
    message = data.draw(message_strategy(cls))
    body = message.to_body()
    assert list(body) == CONTRACT_FIELDS[cls.__name__]
    assert msgspec.msgpack.decode(packb(body), type=cls) == message


@pytest.mark.parametrize("module", ["messages", "transactions"])
def test_a_commits_error_response_names_every_partition_in_the_requests_order(
    module: str,
) -> None:
    from coordinator_protocol import transactions

    def topic(name: str, partitions: list[int]) -> Any:
        if module == "messages":
            return messages.OffsetCommitRequestTopic(
                name=name,
                partitions=[
                    messages.OffsetCommitRequestPartition(partition_index=p, committed_offset=1)
                    for p in partitions
                ],
            )
        return transactions.TxnOffsetCommitRequestTopic(
            name=name,
            partitions=[
                transactions.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=1)
                for p in partitions
            ],
        )

    topics = [topic("b", [3, 0]), topic("a", [1])]
    if module == "messages":
        request: Any = messages.OffsetCommitRequest(group_id="g", topics=topics)
    else:
        request = transactions.TxnOffsetCommitRequest(
            transactional_id="t", group_id="g", producer_id=1, producer_epoch=0, topics=topics
        )
    answer = request.error_response(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics
    ] == [
        ("b", [(3, ErrorCode.COORDINATOR_NOT_AVAILABLE), (0, ErrorCode.COORDINATOR_NOT_AVAILABLE)]),
        ("a", [(1, ErrorCode.COORDINATOR_NOT_AVAILABLE)]),
    ]
