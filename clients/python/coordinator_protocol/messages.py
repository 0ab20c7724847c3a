"""The bodies of every request and response of the contract, as msgspec Structs.

One class per message and per nested item, named after Kafka's generated message classes
(`JoinGroupRequest`, `JoinGroupRequestProtocol`, ...) with PROTOCOL.md's field names.
Validation is strict because msgpack hands over exact types: a str where an int belongs,
a bool posing as an int, a str where bin belongs (or bin where a str belongs) or a number
outside Kafka's int8/int16/int32/int64 range is a bad request, not something to coerce.
Unknown fields are ignored, as the contract requires: they are skipped without being
built, whatever they hold.

Requests: what a request cannot do without is required; a field Kafka's JSON schema makes
nullable or gives a default is optional with Kafka's default. `group_id` is always
optional, even though every such request needs one, because Kafka answers a missing group
id with INVALID_GROUP_ID (the service's call), not INVALID_REQUEST (this module's).

Responses: every field has Kafka's default, so a handler names only what it sets, and the
wire form always has every field (the contract: "an absent value is nil"). A message is
encoded as it is, by `envelope.encode_body`; `to_body` gives the same map as plain
values for callers that want one.

A Struct does not validate what its constructor is given, only what it decodes: messages a
handler builds are trusted to use the declared types.

`parse_request` is the server's entry point: header + the body's msgpack bytes (from
`envelope.split_request`) -> request message, in one pass, raising
`UnsupportedVersionError` or `InvalidRequestError`, both answered on the open connection.
`parse_response` is the client's.

The transaction APIs' messages are in `transactions`, the security APIs' in `security` and
the consumer group protocol's (KIP-848) in `consumer_groups` (the base they share, in
`message_base`); the registries here hold every API of the contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Final

import msgspec

from coordinator_protocol import _msgpack
from coordinator_protocol.api_keys import ApiKey, api_name, version_range
from coordinator_protocol.consumer_groups import CONSUMER_GROUP_MESSAGE_PAIRS
from coordinator_protocol.envelope import MSGPACK_ERRORS, EnvelopeError, RequestHeader
from coordinator_protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    UnsupportedVersionError,
    error_for_code,
)
from coordinator_protocol.message_base import (
    AUTHORIZED_OPERATIONS_OMITTED,
    Int8,
    Int16,
    Int32,
    Int64,
    InvalidResponseError,
    Message,
)
from coordinator_protocol.security import SECURITY_MESSAGE_PAIRS
from coordinator_protocol.transactions import TRANSACTION_MESSAGE_PAIRS

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "ENDPOINT_TYPE_BROKERS",
    "ENDPOINT_TYPE_CONTROLLERS",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "ApiVersionsResponseKey",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteGroupsResponseResult",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeClusterResponseBroker",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribeGroupsResponseGroup",
    "DescribeGroupsResponseMember",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "FindCoordinatorResponseCoordinator",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "InvalidResponseError",
    "JoinGroupRequest",
    "JoinGroupRequestProtocol",
    "JoinGroupResponse",
    "JoinGroupResponseMember",
    "LeaveGroupRequest",
    "LeaveGroupRequestMember",
    "LeaveGroupResponse",
    "LeaveGroupResponseMember",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListGroupsResponseGroup",
    "Message",
    "OffsetCommitRequest",
    "OffsetCommitRequestPartition",
    "OffsetCommitRequestTopic",
    "OffsetCommitResponse",
    "OffsetCommitResponsePartition",
    "OffsetCommitResponseTopic",
    "OffsetDeleteRequest",
    "OffsetDeleteRequestPartition",
    "OffsetDeleteRequestTopic",
    "OffsetDeleteResponse",
    "OffsetDeleteResponsePartition",
    "OffsetDeleteResponseTopic",
    "OffsetFetchRequest",
    "OffsetFetchRequestGroup",
    "OffsetFetchRequestTopic",
    "OffsetFetchResponse",
    "OffsetFetchResponseGroup",
    "OffsetFetchResponsePartition",
    "OffsetFetchResponseTopic",
    "SyncGroupRequest",
    "SyncGroupRequestAssignment",
    "SyncGroupResponse",
    "error_body",
    "parse_request",
    "parse_response",
]

# ApiVersions (18)


class ApiVersionsRequest(Message, kw_only=True):
    """No fields in v0 of the contract."""

    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS


class ApiVersionsResponseKey(Message, kw_only=True):
    api_key: Int16 = 0
    min_version: Int16 = 0
    max_version: Int16 = 0


class ApiVersionsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS

    error_code: Int16 = 0
    error_message: str | None = None
    api_keys: list[ApiVersionsResponseKey] = msgspec.field(default_factory=list)
    server_name: str = ""
    server_version: str = ""


# FindCoordinator (10)


class FindCoordinatorRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR

    # 0: the keys are group ids; 1: transactional ids.
    key_type: Int8 = 0
    keys: list[str]


class FindCoordinatorResponseCoordinator(Message, kw_only=True):
    key: str = ""
    # -1, "" and -1 are Kafka's "no node" (Node.noNode()), what an error answer carries.
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1
    error_code: Int16 = 0
    error_message: str | None = None


class FindCoordinatorResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR

    coordinators: list[FindCoordinatorResponseCoordinator] = msgspec.field(default_factory=list)


# JoinGroup (11)


class JoinGroupRequestProtocol(Message, kw_only=True):
    name: str
    metadata: bytes


class JoinGroupRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.JOIN_GROUP

    group_id: str | None = None
    session_timeout_ms: Int32
    # -1: Kafka's JoinGroup v0 rule, the rebalance timeout is the session timeout.
    rebalance_timeout_ms: Int32 = -1
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str
    protocols: list[JoinGroupRequestProtocol]
    reason: str | None = None


class JoinGroupResponseMember(Message, kw_only=True):
    member_id: str = ""
    group_instance_id: str | None = None
    metadata: bytes = b""


class JoinGroupResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.JOIN_GROUP

    error_code: Int16 = 0
    error_message: str | None = None
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[JoinGroupResponseMember] = msgspec.field(default_factory=list)


# SyncGroup (14)


class SyncGroupRequestAssignment(Message, kw_only=True):
    member_id: str
    assignment: bytes


class SyncGroupRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.SYNC_GROUP

    group_id: str | None = None
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    # Only the leader sends assignments; followers send none.
    assignments: list[SyncGroupRequestAssignment] = msgspec.field(default_factory=list)


class SyncGroupResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.SYNC_GROUP

    error_code: Int16 = 0
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# Heartbeat (12)


class HeartbeatRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.HEARTBEAT

    group_id: str | None = None
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


class HeartbeatResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.HEARTBEAT

    error_code: Int16 = 0
    error_message: str | None = None


# LeaveGroup (13)


class LeaveGroupRequestMember(Message, kw_only=True):
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


class LeaveGroupRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LEAVE_GROUP

    group_id: str | None = None
    members: list[LeaveGroupRequestMember]


class LeaveGroupResponseMember(Message, kw_only=True):
    member_id: str = ""
    group_instance_id: str | None = None
    error_code: Int16 = 0


class LeaveGroupResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LEAVE_GROUP

    error_code: Int16 = 0
    error_message: str | None = None
    members: list[LeaveGroupResponseMember] = msgspec.field(default_factory=list)


# OffsetCommit (8)


class OffsetCommitRequestPartition(Message, kw_only=True):
    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


class OffsetCommitRequestTopic(Message, kw_only=True):
    name: str
    partitions: list[OffsetCommitRequestPartition]


class OffsetCommitRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT

    group_id: str | None = None
    # -1 with an empty member_id is a simple (non-group) commit.
    generation_id_or_member_epoch: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[OffsetCommitRequestTopic]

    def error_response(self, code: int) -> OffsetCommitResponse:
        """Every partition of the request answered with `code`, in the request's order
        (Kafka's `OffsetCommitRequest.getErrorResponse`)."""
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in self.topics
            ]
        )


class OffsetCommitResponsePartition(Message, kw_only=True):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetCommitResponseTopic(Message, kw_only=True):
    name: str = ""
    partitions: list[OffsetCommitResponsePartition] = msgspec.field(default_factory=list)


class OffsetCommitResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT

    topics: list[OffsetCommitResponseTopic] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The first partition's error code: OffsetCommit has no top-level one, and a
        commit that fails usually fails for every partition alike."""
        for topic in self.topics:
            for partition in topic.partitions:
                code = partition.error_code
                return code if type(code) is int else int(code)
        return 0


# OffsetFetch (9)


class OffsetFetchRequestTopic(Message, kw_only=True):
    name: str
    partition_indexes: list[Int32]


class OffsetFetchRequestGroup(Message, kw_only=True):
    group_id: str | None = None
    # member_id and member_epoch matter only to consumer-protocol groups (KIP-848); the
    # contract's classic groups ignore them.
    member_id: str | None = None
    member_epoch: Int32 = -1
    # None (nil) asks for every committed offset of the group.
    topics: list[OffsetFetchRequestTopic] | None = None


class OffsetFetchRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH

    groups: list[OffsetFetchRequestGroup]
    require_stable: bool = False


class OffsetFetchResponsePartition(Message, kw_only=True):
    partition_index: Int32 = 0
    # -1: no committed offset for this partition.
    committed_offset: Int64 = -1
    committed_leader_epoch: Int32 = -1
    metadata: str | None = ""
    error_code: Int16 = 0


class OffsetFetchResponseTopic(Message, kw_only=True):
    name: str = ""
    partitions: list[OffsetFetchResponsePartition] = msgspec.field(default_factory=list)


class OffsetFetchResponseGroup(Message, kw_only=True):
    group_id: str = ""
    error_code: Int16 = 0
    topics: list[OffsetFetchResponseTopic] = msgspec.field(default_factory=list)


class OffsetFetchResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH

    groups: list[OffsetFetchResponseGroup] = msgspec.field(default_factory=list)


# DescribeGroups (15)


class DescribeGroupsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_GROUPS

    # Items may be nil so the service can answer INVALID_GROUP_ID for that group alone.
    groups: list[str | None]


class DescribeGroupsResponseMember(Message, kw_only=True):
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


class DescribeGroupsResponseGroup(Message, kw_only=True):
    error_code: Int16 = 0
    group_id: str = ""
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribeGroupsResponseMember] = msgspec.field(default_factory=list)


class DescribeGroupsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_GROUPS

    groups: list[DescribeGroupsResponseGroup] = msgspec.field(default_factory=list)


# ListGroups (16)


class ListGroupsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_GROUPS

    # Empty means no filter.
    states_filter: list[str] = msgspec.field(default_factory=list)
    types_filter: list[str] = msgspec.field(default_factory=list)


class ListGroupsResponseGroup(Message, kw_only=True):
    group_id: str = ""
    protocol_type: str = ""
    group_state: str = ""
    group_type: str = ""


class ListGroupsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_GROUPS

    error_code: Int16 = 0
    error_message: str | None = None
    groups: list[ListGroupsResponseGroup] = msgspec.field(default_factory=list)


# DeleteGroups (42)


class DeleteGroupsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_GROUPS

    # Items may be nil so the service can answer INVALID_GROUP_ID for that group alone.
    groups_names: list[str | None]


class DeleteGroupsResponseResult(Message, kw_only=True):
    group_id: str = ""
    error_code: Int16 = 0


class DeleteGroupsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_GROUPS

    results: list[DeleteGroupsResponseResult] = msgspec.field(default_factory=list)


# OffsetDelete (47)


class OffsetDeleteRequestPartition(Message, kw_only=True):
    partition_index: Int32


class OffsetDeleteRequestTopic(Message, kw_only=True):
    name: str
    partitions: list[OffsetDeleteRequestPartition]


class OffsetDeleteRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_DELETE

    group_id: str | None = None
    topics: list[OffsetDeleteRequestTopic]


class OffsetDeleteResponsePartition(Message, kw_only=True):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetDeleteResponseTopic(Message, kw_only=True):
    name: str = ""
    partitions: list[OffsetDeleteResponsePartition] = msgspec.field(default_factory=list)


class OffsetDeleteResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_DELETE

    error_code: Int16 = 0
    error_message: str | None = None
    topics: list[OffsetDeleteResponseTopic] = msgspec.field(default_factory=list)


# DescribeCluster (60)

# Kafka's endpoint types: the brokers, or (KIP-919) the controllers.
ENDPOINT_TYPE_BROKERS: Final = 1
ENDPOINT_TYPE_CONTROLLERS: Final = 2


class DescribeClusterRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_CLUSTER

    include_cluster_authorized_operations: bool = False
    endpoint_type: Int8 = ENDPOINT_TYPE_BROKERS
    include_fenced_brokers: bool = False


class DescribeClusterResponseBroker(Message, kw_only=True):
    broker_id: Int32 = 0
    host: str = ""
    port: Int32 = 0
    rack: str | None = None
    is_fenced: bool = False


class DescribeClusterResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_CLUSTER

    error_code: Int16 = 0
    error_message: str | None = None
    endpoint_type: Int8 = ENDPOINT_TYPE_BROKERS
    cluster_id: str = ""
    controller_id: Int32 = -1
    brokers: list[DescribeClusterResponseBroker] = msgspec.field(default_factory=list)
    cluster_authorized_operations: Int32 = AUTHORIZED_OPERATIONS_OMITTED


# Registries

_MESSAGE_PAIRS: Final = (
    (ApiVersionsRequest, ApiVersionsResponse),
    (FindCoordinatorRequest, FindCoordinatorResponse),
    (JoinGroupRequest, JoinGroupResponse),
    (SyncGroupRequest, SyncGroupResponse),
    (HeartbeatRequest, HeartbeatResponse),
    (LeaveGroupRequest, LeaveGroupResponse),
    (OffsetCommitRequest, OffsetCommitResponse),
    (OffsetFetchRequest, OffsetFetchResponse),
    (DescribeGroupsRequest, DescribeGroupsResponse),
    (ListGroupsRequest, ListGroupsResponse),
    (DeleteGroupsRequest, DeleteGroupsResponse),
    (OffsetDeleteRequest, OffsetDeleteResponse),
    (DescribeClusterRequest, DescribeClusterResponse),
    *TRANSACTION_MESSAGE_PAIRS,
    *SECURITY_MESSAGE_PAIRS,
    *CONSUMER_GROUP_MESSAGE_PAIRS,
)

# Every API started at version 0 in v1 of the contract; a new body shape adds a pair of its
# version here (the classes' API_VERSION, and the range in api_keys.SUPPORTED_VERSIONS)
# while the old one keeps being answered.
REQUEST_TYPES: Final[Mapping[tuple[int, int], type[Message]]] = MappingProxyType(
    {(request.API_KEY.value, request.API_VERSION): request for request, _ in _MESSAGE_PAIRS}
)
RESPONSE_TYPES: Final[Mapping[tuple[int, int], type[Message]]] = MappingProxyType(
    {(response.API_KEY.value, response.API_VERSION): response for _, response in _MESSAGE_PAIRS}
)

# One decoder per message type, built once: a decoder compiles its type's schema, so
# the per-request cost is the decoding alone.
_REQUEST_DECODERS: Final[Mapping[tuple[int, int], msgspec.msgpack.Decoder[Message]]] = (
    MappingProxyType({key: msgspec.msgpack.Decoder(cls) for key, cls in REQUEST_TYPES.items()})
)
_RESPONSE_DECODERS: Final[Mapping[tuple[int, int], msgspec.msgpack.Decoder[Message]]] = (
    MappingProxyType({key: msgspec.msgpack.Decoder(cls) for key, cls in RESPONSE_TYPES.items()})
)
# Responses whose schema has no top-level error_code, where a top-level error (the answer
# to a request the server could not parse) would be ignored as an unknown field.
_WITHOUT_TOP_LEVEL_ERROR: Final = frozenset(
    key for key, cls in RESPONSE_TYPES.items() if "error_code" not in cls.__struct_fields__
)


class _TopLevelError(msgspec.Struct):
    error_code: object = None
    error_message: object = None


_TOP_LEVEL_ERROR: Final = msgspec.msgpack.Decoder(_TopLevelError)


def _describe(error: msgspec.ValidationError, body: bytes) -> str:
    """One line naming the problem and the path of the field it is in, e.g.
    "Expected `int`, got `str` - at `$.topics[0].partitions[3].committed_offset`".

    msgspec stops at the first problem: a client fixes one at a time, and an answer must
    stay small whatever the body held.
    """
    kind = _msgpack.kind_of(body)
    if kind != "dict":
        return f"body: expected a map, got {kind}"
    return str(error)


def _unsupported(api_key: int, api_version: int) -> UnsupportedVersionError:
    versions = version_range(api_key)
    if versions is None:
        return UnsupportedVersionError(f"api_key {api_key} is not supported")
    low, high = versions
    return UnsupportedVersionError(
        f"{api_name(api_key)} version {api_version} is not supported (supported: {low} to {high})"
    )


def parse_request(header: RequestHeader, body: msgspec.Raw | bytes) -> Message:
    """Decode and validate a request body against its API's schema, in one pass.

    Args:
        header: the request's header.
        body: the body's msgpack bytes, as `envelope.split_request` returns them.

    Returns:
        An instance of `REQUEST_TYPES[(header.api_key, header.api_version)]`.

    Raises:
        UnsupportedVersionError: the contract has no such (api_key, api_version).
        InvalidRequestError: the body is not a map or fails validation (a missing required
            field, a wrong type, an ext value, a value out of range, a map key that is not
            a str); the message names the first offending field.
        EnvelopeError: a str the schema reads is not valid UTF-8, or `body` is not one
            well-formed msgpack value (which `split_request` has ruled out already): bytes
            that are not msgpack end the connection, as the contract says.
    """
    decoder = _REQUEST_DECODERS.get((header.api_key, header.api_version))
    if decoder is None:
        raise _unsupported(header.api_key, header.api_version)
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        raise InvalidRequestError(_describe(e, body)) from None
    except MSGPACK_ERRORS as e:
        raise EnvelopeError(f"invalid msgpack: {str(e) or type(e).__name__}") from None


def parse_response(api_key: int, api_version: int, body: msgspec.Raw | bytes) -> Message:
    """Decode and validate a response body against its API's schema (the client's side).

    A server that cannot parse a request answers `{"error_code", "error_message"}` at the
    top level whatever the API (INVALID_REQUEST, UNSUPPORTED_VERSION). For an API whose
    response has no top-level error_code that error would vanish among the ignored
    fields, so it is raised instead.

    Args:
        api_key, api_version: the request's, which the response answers.
        body: the body's msgpack bytes, as `envelope.split_response` returns them.

    Raises:
        UnsupportedVersionError: the contract has no such (api_key, api_version).
        ApiError: a top-level error the response schema has no place for.
        InvalidResponseError: the body is not a map, fails validation, or is not valid
            msgpack.
    """
    key = (api_key, api_version)
    decoder = _RESPONSE_DECODERS.get(key)
    if decoder is None:
        raise _unsupported(api_key, api_version)
    try:
        if key in _WITHOUT_TOP_LEVEL_ERROR:
            top = _TOP_LEVEL_ERROR.decode(body)
            code = top.error_code
            if type(code) is int and code != ErrorCode.NONE:
                message = top.error_message
                raise error_for_code(code, message if type(message) is str else None)
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        raise InvalidResponseError(_describe(e, body)) from None
    except MSGPACK_ERRORS as e:
        raise InvalidResponseError(f"invalid msgpack: {str(e) or type(e).__name__}") from None


def error_body(code: ErrorCode, message: str | None) -> dict[str, object]:
    """The body of an answer that carries only an error, whatever the API."""
    return {"error_code": int(code), "error_message": message}
