"""The bodies of every request and response of the contract, as pydantic models.

One class per message and per nested item, named after Kafka's generated message classes
(`JoinGroupRequest`, `JoinGroupRequestProtocol`, ...) with PROTOCOL.md's field names.
Validation is strict because msgpack hands over exact types: a str where an int belongs,
a bool posing as an int or a number outside Kafka's int16/int32/int64 range is a bad
request, not something to coerce. Unknown fields are ignored, as the contract requires.

Requests: what a request cannot do without is required; a field Kafka's JSON schema makes
nullable or gives a default is optional with Kafka's default. `group_id` is always
optional, even though every such request needs one, because Kafka answers a missing group
id with INVALID_GROUP_ID (the service's call), not INVALID_REQUEST (this module's).

Responses: every field has Kafka's default, so a handler names only what it sets, and
`to_body` always writes every field (the contract: "an absent value is nil").

`parse_request` is the server's entry point: header + raw body -> request model, raising
`UnsupportedVersionError` or `InvalidRequestError`, both answered on the open connection.
`parse_response` is the client's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, ClassVar, Final, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocol.api_keys import ApiKey, api_name, version_range
from protocol.envelope import RequestHeader
from protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    ProtocolError,
    UnsupportedVersionError,
    error_for_code,
)

__all__ = [
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "ApiVersionsResponseKey",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteGroupsResponseResult",
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

Int8 = Annotated[int, Field(ge=-(2**7), le=2**7 - 1)]
Int16 = Annotated[int, Field(ge=-(2**15), le=2**15 - 1)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class InvalidResponseError(ProtocolError):
    """A response body that does not match its API's response schema."""


class Message(BaseModel):
    """A request or response body, or an item nested in one."""

    model_config = ConfigDict(strict=True, extra="ignore")
    # Set on top-level requests and responses only (nested items have no API key).
    API_KEY: ClassVar[ApiKey]

    def to_body(self) -> dict[str, object]:
        """The wire map: every field present, None as nil, bytes as bytes, items as maps."""
        # The serializer directly: model_dump() costs about twice as much per call, and
        # response encoding is on the hot path.
        return cast("dict[str, object]", self.__pydantic_serializer__.to_python(self))


# ApiVersions (18)


class ApiVersionsRequest(Message):
    """No fields in v0 of the contract."""

    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS


class ApiVersionsResponseKey(Message):
    api_key: Int16 = 0
    min_version: Int16 = 0
    max_version: Int16 = 0


class ApiVersionsResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS

    error_code: Int16 = 0
    error_message: str | None = None
    api_keys: list[ApiVersionsResponseKey] = Field(default_factory=list)
    server_name: str = ""
    server_version: str = ""


# FindCoordinator (10)


class FindCoordinatorRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR

    # 0: the keys are group ids; 1: transactional ids.
    key_type: Int8 = 0
    keys: list[str]


class FindCoordinatorResponseCoordinator(Message):
    key: str = ""
    # -1, "" and -1 are Kafka's "no node" (Node.noNode()), what an error answer carries.
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1
    error_code: Int16 = 0
    error_message: str | None = None


class FindCoordinatorResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR

    coordinators: list[FindCoordinatorResponseCoordinator] = Field(default_factory=list)


# JoinGroup (11)


class JoinGroupRequestProtocol(Message):
    name: str
    metadata: bytes


class JoinGroupRequest(Message):
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


class JoinGroupResponseMember(Message):
    member_id: str = ""
    group_instance_id: str | None = None
    metadata: bytes = b""


class JoinGroupResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.JOIN_GROUP

    error_code: Int16 = 0
    error_message: str | None = None
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[JoinGroupResponseMember] = Field(default_factory=list)


# SyncGroup (14)


class SyncGroupRequestAssignment(Message):
    member_id: str
    assignment: bytes


class SyncGroupRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.SYNC_GROUP

    group_id: str | None = None
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    # Only the leader sends assignments; followers send none.
    assignments: list[SyncGroupRequestAssignment] = Field(default_factory=list)


class SyncGroupResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.SYNC_GROUP

    error_code: Int16 = 0
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# Heartbeat (12)


class HeartbeatRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.HEARTBEAT

    group_id: str | None = None
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


class HeartbeatResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.HEARTBEAT

    error_code: Int16 = 0
    error_message: str | None = None


# LeaveGroup (13)


class LeaveGroupRequestMember(Message):
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


class LeaveGroupRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.LEAVE_GROUP

    group_id: str | None = None
    members: list[LeaveGroupRequestMember]


class LeaveGroupResponseMember(Message):
    member_id: str = ""
    group_instance_id: str | None = None
    error_code: Int16 = 0


class LeaveGroupResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.LEAVE_GROUP

    error_code: Int16 = 0
    error_message: str | None = None
    members: list[LeaveGroupResponseMember] = Field(default_factory=list)


# OffsetCommit (8)


class OffsetCommitRequestPartition(Message):
    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


class OffsetCommitRequestTopic(Message):
    name: str
    partitions: list[OffsetCommitRequestPartition]


class OffsetCommitRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT

    group_id: str | None = None
    # -1 with an empty member_id is a simple (non-group) commit.
    generation_id_or_member_epoch: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[OffsetCommitRequestTopic]


class OffsetCommitResponsePartition(Message):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetCommitResponseTopic(Message):
    name: str = ""
    partitions: list[OffsetCommitResponsePartition] = Field(default_factory=list)


class OffsetCommitResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT

    topics: list[OffsetCommitResponseTopic] = Field(default_factory=list)


# OffsetFetch (9)


class OffsetFetchRequestTopic(Message):
    name: str
    partition_indexes: list[Int32]


class OffsetFetchRequestGroup(Message):
    group_id: str | None = None
    # member_id and member_epoch matter only to consumer-protocol groups (KIP-848); the
    # contract's classic groups ignore them.
    member_id: str | None = None
    member_epoch: Int32 = -1
    # None (nil) asks for every committed offset of the group.
    topics: list[OffsetFetchRequestTopic] | None = None


class OffsetFetchRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH

    groups: list[OffsetFetchRequestGroup]
    require_stable: bool = False


class OffsetFetchResponsePartition(Message):
    partition_index: Int32 = 0
    # -1: no committed offset for this partition.
    committed_offset: Int64 = -1
    committed_leader_epoch: Int32 = -1
    metadata: str | None = ""
    error_code: Int16 = 0


class OffsetFetchResponseTopic(Message):
    name: str = ""
    partitions: list[OffsetFetchResponsePartition] = Field(default_factory=list)


class OffsetFetchResponseGroup(Message):
    group_id: str = ""
    error_code: Int16 = 0
    topics: list[OffsetFetchResponseTopic] = Field(default_factory=list)


class OffsetFetchResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH

    groups: list[OffsetFetchResponseGroup] = Field(default_factory=list)


# DescribeGroups (15)


class DescribeGroupsRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_GROUPS

    # Items may be nil so the service can answer INVALID_GROUP_ID for that group alone.
    groups: list[str | None]


class DescribeGroupsResponseMember(Message):
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


class DescribeGroupsResponseGroup(Message):
    error_code: Int16 = 0
    group_id: str = ""
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribeGroupsResponseMember] = Field(default_factory=list)


class DescribeGroupsResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_GROUPS

    groups: list[DescribeGroupsResponseGroup] = Field(default_factory=list)


# ListGroups (16)


class ListGroupsRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_GROUPS

    # Empty means no filter.
    states_filter: list[str] = Field(default_factory=list)
    types_filter: list[str] = Field(default_factory=list)


class ListGroupsResponseGroup(Message):
    group_id: str = ""
    protocol_type: str = ""
    group_state: str = ""
    group_type: str = ""


class ListGroupsResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_GROUPS

    error_code: Int16 = 0
    error_message: str | None = None
    groups: list[ListGroupsResponseGroup] = Field(default_factory=list)


# DeleteGroups (42)


class DeleteGroupsRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_GROUPS

    # Items may be nil so the service can answer INVALID_GROUP_ID for that group alone.
    groups_names: list[str | None]


class DeleteGroupsResponseResult(Message):
    group_id: str = ""
    error_code: Int16 = 0


class DeleteGroupsResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_GROUPS

    results: list[DeleteGroupsResponseResult] = Field(default_factory=list)


# OffsetDelete (47)


class OffsetDeleteRequestPartition(Message):
    partition_index: Int32


class OffsetDeleteRequestTopic(Message):
    name: str
    partitions: list[OffsetDeleteRequestPartition]


class OffsetDeleteRequest(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_DELETE

    group_id: str | None = None
    topics: list[OffsetDeleteRequestTopic]


class OffsetDeleteResponsePartition(Message):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetDeleteResponseTopic(Message):
    name: str = ""
    partitions: list[OffsetDeleteResponsePartition] = Field(default_factory=list)


class OffsetDeleteResponse(Message):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_DELETE

    error_code: Int16 = 0
    error_message: str | None = None
    topics: list[OffsetDeleteResponseTopic] = Field(default_factory=list)


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
)

# Every API is at version 0 in v1 of the contract; a new body shape adds a new row here
# (and a range in api_keys.SUPPORTED_VERSIONS) while the old one keeps being answered.
REQUEST_TYPES: Final[Mapping[tuple[int, int], type[Message]]] = MappingProxyType(
    {(request.API_KEY.value, 0): request for request, _ in _MESSAGE_PAIRS}
)
RESPONSE_TYPES: Final[Mapping[tuple[int, int], type[Message]]] = MappingProxyType(
    {(response.API_KEY.value, 0): response for _, response in _MESSAGE_PAIRS}
)


def _describe(error: ValidationError) -> str:
    """One line naming the first problem's field path, e.g. "topics.0.name: Field required".

    Only the first problem: a client fixes one at a time, and an answer must stay small
    whatever the body held.
    """
    first = error.errors(include_url=False, include_context=False, include_input=False)[0]
    path = ".".join(str(part) for part in first["loc"])
    return f"{path}: {first['msg']}" if path else first["msg"]


def _unsupported(api_key: int, api_version: int) -> UnsupportedVersionError:
    versions = version_range(api_key)
    if versions is None:
        return UnsupportedVersionError(f"api_key {api_key} is not supported")
    low, high = versions
    return UnsupportedVersionError(
        f"{api_name(api_key)} version {api_version} is not supported (supported: {low} to {high})"
    )


def _type_name(value: object) -> str:
    return "nil" if value is None else type(value).__name__


def parse_request(header: RequestHeader, body: object) -> Message:
    """Validate a request body against its API's schema.

    Returns:
        An instance of `REQUEST_TYPES[(header.api_key, header.api_version)]`.

    Raises:
        UnsupportedVersionError: the contract has no such (api_key, api_version).
        InvalidRequestError: the body is not a map or fails validation; the message names
            the first offending field.
    """
    message_type = REQUEST_TYPES.get((header.api_key, header.api_version))
    if message_type is None:
        raise _unsupported(header.api_key, header.api_version)
    if type(body) is not dict:
        raise InvalidRequestError(f"body: expected a map, got {_type_name(body)}")
    try:
        return message_type.model_validate(body)
    except ValidationError as e:
        raise InvalidRequestError(_describe(e)) from None


def parse_response(api_key: int, api_version: int, body: object) -> Message:
    """Validate a response body against its API's schema (the client's side).

    A server that cannot parse a request answers `{"error_code", "error_message"}` at the
    top level whatever the API (INVALID_REQUEST, UNSUPPORTED_VERSION). For an API whose
    response has no top-level error_code that error would vanish among the ignored
    fields, so it is raised instead.

    Raises:
        UnsupportedVersionError: the contract has no such (api_key, api_version).
        ApiError: a top-level error the response schema has no place for.
        InvalidResponseError: the body is not a map or fails validation.
    """
    message_type = RESPONSE_TYPES.get((api_key, api_version))
    if message_type is None:
        raise _unsupported(api_key, api_version)
    if type(body) is not dict:
        raise InvalidResponseError(f"body: expected a map, got {_type_name(body)}")
    if "error_code" not in message_type.model_fields:
        code = body.get("error_code")
        if type(code) is int and code != ErrorCode.NONE:
            message = body.get("error_message")
            raise error_for_code(code, message if type(message) is str else None)
    try:
        return message_type.model_validate(body)
    except ValidationError as e:
        raise InvalidResponseError(_describe(e)) from None


def error_body(code: ErrorCode, message: str | None) -> dict[str, object]:
    """The body of an answer that carries only an error, whatever the API."""
    return {"error_code": int(code), "error_message": message}
