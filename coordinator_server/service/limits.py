"""The limits a request must keep to that need no state: checked by the service before the
request reaches a partition.

Availability, not trust: ids and names longer than `max_id_length` (a member id may be that
plus the suffix the coordinator generates), member metadata and assignments larger than
`max_member_metadata_bytes`, and answers that the request alone makes larger than
`max_response_bytes` are refused with a clear error, in the API's own response shape, before
anything is allocated for them. A too-long group id is INVALID_GROUP_ID, as Kafka answers an
invalid one; the rest is INVALID_REQUEST, or MESSAGE_TOO_LARGE for an answer too large.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
)
from coordinator_server.groups.answer_sizes import (
    ANSWER_BYTES,
    DELETED_OFFSET_BYTES,
    ENVELOPE_BYTES,
    LEFT_MEMBER_MIN_BYTES,
    bin_extra,
    deleted_offsets_topic_bytes,
    left_member_bytes,
    str_extra,
)
from coordinator_server.groups.limits import GENERATED_MEMBER_ID_SUFFIX

Refusal: TypeAlias = tuple[ErrorCode, str]

# A JoinGroup protocol as a request encodes it, its name and metadata empty: {"name": "",
# "metadata": b""}.
_PROTOCOL_BYTES: Final = 18


@dataclass(frozen=True, slots=True)
class RequestLimits:
    max_id_length: int = 2147483647
    max_member_metadata_bytes: int = 2147483647
    max_response_bytes: int = 2147483647
    max_frame_bytes: int = 2147483647
    max_subscribed_topics: int = 2147483647

    @property
    def commit_answer_may_not_fit(self) -> bool:
        """Whether an OffsetCommit's answer can exceed `max_response_bytes`. It names each
        partition of the request in fewer bytes than the request does (a partition's
        `error_code` takes less than its `committed_offset`), so it cannot when the largest
        answer is at least the largest request frame, as by default."""
        return self.max_response_bytes < self.max_frame_bytes

    @property
    def max_member_id_length(self) -> int:
        return self.max_id_length + GENERATED_MEMBER_ID_SUFFIX

    @property
    def answer_items_bytes(self) -> int:
        """What the items of an answer may take: the largest answer less its envelope and
        top-level fields."""
        return self.max_response_bytes - ANSWER_BYTES - ENVELOPE_BYTES


def too_long(what: str, value: str | None, max_length: int) -> str | None:
    """Why `value` is refused, or None (None is never too long)."""
    if value is None or len(value) <= max_length:
        return None
    return f"{what} is {len(value)} characters long, more than max_id_length {max_length}"


def group_id_refusal(group_id: str, limits: RequestLimits) -> str | None:
    return too_long("group_id", group_id, limits.max_id_length)


def answer_too_large(size: int, limits: RequestLimits) -> Refusal:
    return (
        ErrorCode.MESSAGE_TOO_LARGE,
        f"the answer would take at least {size} bytes, more than the largest answer "
        f"(max_response_bytes {limits.max_response_bytes})",
    )


def join_group_refusal(
    request: JoinGroupRequest, client_id: str, limits: RequestLimits
) -> Refusal | None:
    """Ids, names and metadata of a JoinGroup (whose group id is given)."""
    assert request.group_id is not None
    if (refusal := group_id_refusal(request.group_id, limits)) is not None:
        return ErrorCode.INVALID_GROUP_ID, refusal
    max_length = limits.max_id_length
    refusal = (
        too_long("member_id", request.member_id, limits.max_member_id_length)
        or too_long("group_instance_id", request.group_instance_id, max_length)
        or too_long("protocol_type", request.protocol_type, max_length)
        or too_long("client_id", client_id, max_length)
    )
    if refusal is not None:
        return ErrorCode.INVALID_REQUEST, refusal
    # The protocols as the request encodes them: with each one's framing counted, a list
    # of a million empty protocols is as large as what it would make the member hold.
    size = 0
    for protocol in request.protocols:
        if (refusal := too_long("a protocol name", protocol.name, max_length)) is not None:
            return ErrorCode.INVALID_REQUEST, refusal
        size += _PROTOCOL_BYTES + str_extra(protocol.name) + bin_extra(len(protocol.metadata))
    if size > limits.max_member_metadata_bytes:
        return (
            ErrorCode.INVALID_REQUEST,
            f"the protocols (names and metadata) take {size} bytes, more than "
            f"max_member_metadata_bytes {limits.max_member_metadata_bytes}",
        )
    return None


def sync_group_refusal(request: SyncGroupRequest, limits: RequestLimits) -> Refusal | None:
    """Ids, names and assignments of a SyncGroup (whose group id is given)."""
    assert request.group_id is not None
    if (refusal := group_id_refusal(request.group_id, limits)) is not None:
        return ErrorCode.INVALID_GROUP_ID, refusal
    max_length = limits.max_id_length
    refusal = (
        too_long("member_id", request.member_id, limits.max_member_id_length)
        or too_long("group_instance_id", request.group_instance_id, max_length)
        or too_long("protocol_type", request.protocol_type, max_length)
        or too_long("protocol_name", request.protocol_name, max_length)
    )
    if refusal is not None:
        return ErrorCode.INVALID_REQUEST, refusal
    max_bytes = limits.max_member_metadata_bytes
    for assignment in request.assignments:
        if len(assignment.assignment) > max_bytes:
            return (
                ErrorCode.INVALID_REQUEST,
                f"the assignment of member {assignment.member_id[:max_length]} takes "
                f"{len(assignment.assignment)} bytes, more than max_member_metadata_bytes "
                f"{max_bytes}",
            )
    return None


def leave_group_refusal(request: LeaveGroupRequest, limits: RequestLimits) -> Refusal | None:
    """Ids of a LeaveGroup (whose group id is given), and its answer's size: it names every
    member the request does."""
    assert request.group_id is not None
    if (refusal := group_id_refusal(request.group_id, limits)) is not None:
        return ErrorCode.INVALID_GROUP_ID, refusal
    members = request.members
    max_size = limits.answer_items_bytes
    if len(members) * LEFT_MEMBER_MIN_BYTES > max_size:
        return answer_too_large(len(members) * LEFT_MEMBER_MIN_BYTES, limits)
    max_member_id_length = limits.max_member_id_length
    max_length = limits.max_id_length
    size = 0
    for member in members:
        refusal = too_long("member_id", member.member_id, max_member_id_length) or too_long(
            "group_instance_id", member.group_instance_id, max_length
        )
        if refusal is not None:
            return ErrorCode.INVALID_REQUEST, refusal
        size += left_member_bytes(member.member_id, member.group_instance_id)
    if size > max_size:
        return answer_too_large(size, limits)
    return None


def offset_delete_refusal(request: OffsetDeleteRequest, limits: RequestLimits) -> Refusal | None:
    """Ids of an OffsetDelete (whose group id is given), and its answer's size: it names
    every partition the request does."""
    assert request.group_id is not None
    if (refusal := group_id_refusal(request.group_id, limits)) is not None:
        return ErrorCode.INVALID_GROUP_ID, refusal
    max_length = limits.max_id_length
    size = 0
    for topic in request.topics:
        if (refusal := too_long("a topic name", topic.name, max_length)) is not None:
            return ErrorCode.INVALID_REQUEST, refusal
        size += deleted_offsets_topic_bytes(topic.name) + len(topic.partitions) * (
            DELETED_OFFSET_BYTES
        )
    if size > limits.answer_items_bytes:
        return answer_too_large(size, limits)
    return None


def commit_answer_refusal(request: OffsetCommitRequest, limits: RequestLimits) -> Refusal | None:
    """An OffsetCommit whose answer would exceed `max_response_bytes`: refused before it is
    written, since a commit the log took must not be answered as failed. Its answer has the
    shape of OffsetDelete's items (topics by name, partitions with an error code)."""
    size = 0
    for topic in request.topics:
        size += deleted_offsets_topic_bytes(topic.name) + len(topic.partitions) * (
            DELETED_OFFSET_BYTES
        )
    if size > limits.answer_items_bytes:
        return answer_too_large(size, limits)
    return None
