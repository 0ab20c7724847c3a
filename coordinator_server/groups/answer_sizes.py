"""How many bytes an answer takes on the wire, computed without encoding it.

Answers have a maximum size (`max_response_bytes`), and an answer that would exceed it must
be refused before it is built: an OffsetFetch naming one partition two million times would
otherwise make a 164 MB answer. These are the msgpack sizes of the answers' parts, exact for
what the server encodes (strings counted in UTF-8 bytes, every integer at its widest where
its value is not known yet), so that a sum of them bounds the encoded answer from above.

Each part's size is the size of the part with every field empty, measured once by encoding
it, plus what its variable fields add. Pure: used by the group and offset managers, by the
service and by the transaction APIs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from coordinator_protocol.envelope import encode_body
from coordinator_protocol.messages import (
    DeleteGroupsResponseResult,
    DescribeGroupsResponseGroup,
    DescribeGroupsResponseMember,
    FindCoordinatorResponseCoordinator,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupResponseMember,
    ListGroupsResponseGroup,
    Message,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from coordinator_protocol.transactions import (
    AddPartitionsToTxnResponsePartition,
    AddPartitionsToTxnResponseTopic,
    DescribeTransactionsResponseState,
    DescribeTransactionsResponseTopic,
    DescribeTransactionsV1ResponseRefusedMarker,
    DescribeTransactionsV1ResponseState,
    ListTransactionsResponseState,
)

# What an answer's envelope adds to its body: the array of two, the correlation id at its
# widest, and room for the frame's length.
ENVELOPE_BYTES: Final = 16

# An integer field whose value is not known yet, at its widest, beyond the 1 byte it takes
# empty: int32 (5 bytes) and int64 (9 bytes).
INT32_EXTRA: Final = 4
INT64_EXTRA: Final = 8
# An error code (int16) at its widest.
INT16_EXTRA: Final = 2

# What a list of items adds beyond the 1 byte it takes empty: array 32's header at most.
ARRAY_EXTRA: Final = 4


def utf8_length(s: str) -> int:
    if s.isascii():
        return len(s)
    return len(s.encode("utf-8", "surrogatepass"))


def str_bytes(s: str | None) -> int:
    """The msgpack size of a str (nil: 1 byte)."""
    if s is None:
        return 1
    return str_length_bytes(utf8_length(s))


def str_length_bytes(n: int) -> int:
    """The msgpack size of a str of `n` UTF-8 bytes."""
    if n < 32:
        return 1 + n
    if n < 256:
        return 2 + n
    if n < 65536:
        return 3 + n
    return 5 + n


def str_extra(s: str | None) -> int:
    """What a str adds to a part measured with it empty."""
    return str_bytes(s) - 1


def bin_extra(n: int) -> int:
    """What `n` bytes of bin add to a part measured with them empty (2 bytes)."""
    if n < 256:
        return n
    if n < 65536:
        return 1 + n
    return 3 + n


def _empty(message: Message) -> int:
    return len(encode_body(message))


_DESCRIBED_GROUP: Final = _empty(DescribeGroupsResponseGroup())
_DESCRIBED_MEMBER: Final = _empty(DescribeGroupsResponseMember())
_DELETED_GROUP: Final = _empty(DeleteGroupsResponseResult())
_COORDINATOR: Final = _empty(FindCoordinatorResponseCoordinator(error_message=""))
_LISTED_GROUP: Final = _empty(ListGroupsResponseGroup())
_LEFT_MEMBER: Final = _empty(LeaveGroupResponseMember())
_JOIN_MEMBER: Final = _empty(JoinGroupResponseMember())
_JOIN_ANSWER: Final = _empty(JoinGroupResponse(protocol_type="", protocol_name=""))
_FETCHED_GROUP: Final = _empty(OffsetFetchResponseGroup())
_FETCHED_TOPIC: Final = _empty(OffsetFetchResponseTopic())
_FETCHED_PARTITION: Final = _empty(OffsetFetchResponsePartition(committed_offset=0))
_DELETED_OFFSETS_TOPIC: Final = _empty(OffsetDeleteResponseTopic())
_DELETED_OFFSET: Final = _empty(OffsetDeleteResponsePartition())
_ADDED_TOPIC: Final = _empty(AddPartitionsToTxnResponseTopic())
_ADDED_PARTITION: Final = _empty(AddPartitionsToTxnResponsePartition())
_DESCRIBED_TXN: Final = _empty(DescribeTransactionsResponseState())
_DESCRIBED_TXN_V1: Final = _empty(DescribeTransactionsV1ResponseState())
_DESCRIBED_TXN_TOPIC: Final = _empty(DescribeTransactionsResponseTopic())
_REFUSED_MARKER: Final = _empty(DescribeTransactionsV1ResponseRefusedMarker())
_LISTED_TXN: Final = _empty(ListTransactionsResponseState())

# A top-level answer: a map of a few fields around the list of items, the widest error
# message the server writes included.
ANSWER_BYTES: Final = 512

DESCRIBED_GROUP_MIN_BYTES: Final = _DESCRIBED_GROUP
"""An answer's group of DescribeGroups with empty fields: what each group named costs at
least."""

DELETED_GROUP_MIN_BYTES: Final = _DELETED_GROUP
COORDINATOR_MIN_BYTES: Final = _COORDINATOR
LEFT_MEMBER_MIN_BYTES: Final = _LEFT_MEMBER
FETCHED_GROUP_MIN_BYTES: Final = _FETCHED_GROUP
FETCHED_TOPIC_MIN_BYTES: Final = _FETCHED_TOPIC + ARRAY_EXTRA
FETCHED_PARTITION_BYTES: Final = _FETCHED_PARTITION + INT32_EXTRA + INT64_EXTRA + INT32_EXTRA
"""A partition of an OffsetFetch answer, its metadata empty, its integers at their widest."""
DELETED_OFFSETS_TOPIC_MIN_BYTES: Final = _DELETED_OFFSETS_TOPIC + ARRAY_EXTRA
DELETED_OFFSET_BYTES: Final = _DELETED_OFFSET + INT32_EXTRA
ADDED_PARTITION_BYTES: Final = _ADDED_PARTITION + INT32_EXTRA + INT16_EXTRA
"""A partition of an AddPartitionsToTxn answer, its index and error code at their widest."""
DESCRIBED_TRANSACTION_MIN_BYTES: Final = _DESCRIBED_TXN + INT16_EXTRA
DESCRIBED_TRANSACTION_V1_MIN_BYTES: Final = _DESCRIBED_TXN_V1 + INT16_EXTRA
"""A state of a DescribeTransactions answer (of version 0 or 1) with empty fields and its
error code at its widest: what each transactional id named costs at least, besides the id."""
LISTED_TRANSACTION_MIN_BYTES: Final = _LISTED_TXN + INT64_EXTRA
"""A state of a ListTransactions answer, its producer id at its widest, id and state empty."""


def described_group_bytes(group: DescribeGroupsResponseGroup) -> int:
    size = (
        _DESCRIBED_GROUP
        + str_extra(group.group_id)
        + str_extra(group.group_state)
        + str_extra(group.protocol_type)
        + str_extra(group.protocol_data)
    )
    members = group.members
    if members:
        size += ARRAY_EXTRA
        for member in members:
            size += (
                _DESCRIBED_MEMBER
                + str_extra(member.member_id)
                + str_bytes(member.group_instance_id)
                - 1
                + str_extra(member.client_id)
                + str_extra(member.client_host)
                + bin_extra(len(member.member_metadata))
                + bin_extra(len(member.member_assignment))
            )
    return size


def coordinator_bytes(key: str, host: str, error_message: str | None) -> int:
    return (
        _COORDINATOR
        + str_extra(key)
        + str_extra(host)
        + INT32_EXTRA * 2
        + str_extra(error_message or "")
    )


def listed_group_bytes(
    group_id: str, protocol_type: str, state: str, group_type: str = "classic"
) -> int:
    return (
        _LISTED_GROUP
        + str_extra(group_id)
        + str_extra(protocol_type)
        + str_extra(state)
        + str_extra(group_type)
    )


def left_member_bytes(member_id: str, group_instance_id: str | None) -> int:
    return _LEFT_MEMBER + str_extra(member_id) + str_bytes(group_instance_id) - 1


def join_member_bytes(member_id_length: int, group_instance_id: str | None, metadata: int) -> int:
    """A member in the leader's JoinGroup answer: its id (`member_id_length` UTF-8 bytes),
    instance id and metadata (`metadata` bytes)."""
    return (
        _JOIN_MEMBER
        + str_length_bytes(member_id_length)
        - 1
        + str_bytes(group_instance_id)
        - 1
        + bin_extra(metadata)
    )


def join_answer_bytes(leader_id_length: int, protocol_type: str, protocol_name: str) -> int:
    """The leader's JoinGroup answer around its members: the leader's id (twice, as leader
    and as its member id) of `leader_id_length` UTF-8 bytes, the protocol type and name."""
    return (
        _JOIN_ANSWER
        + 2 * (str_length_bytes(leader_id_length) - 1)
        + str_extra(protocol_type)
        + str_extra(protocol_name)
        + INT32_EXTRA
        + ARRAY_EXTRA
    )


def fetched_group_bytes(group_id: str) -> int:
    return _FETCHED_GROUP + str_extra(group_id)


def fetched_topic_bytes(name: str) -> int:
    return FETCHED_TOPIC_MIN_BYTES + str_extra(name)


def fetched_partition_bytes(metadata: str | None) -> int:
    return FETCHED_PARTITION_BYTES + (str_bytes(metadata) - 1 if metadata else 0)


def deleted_offsets_topic_bytes(name: str) -> int:
    return DELETED_OFFSETS_TOPIC_MIN_BYTES + str_extra(name)


def added_topic_bytes(name: str) -> int:
    """A topic of an AddPartitionsToTxn answer, without its partitions."""
    return _ADDED_TOPIC + ARRAY_EXTRA + str_extra(name)


def described_transaction_extra_bytes(
    state: str,
    topics: Iterable[tuple[str, Sequence[int]]],
    refused_markers: Sequence[tuple[str, int, int]],
) -> int:
    """What a described transaction adds to the least its state costs: the state's name,
    its integers at their widest, its topics and partitions, and (version 1) the markers
    refused for good."""
    size = str_extra(state) + INT32_EXTRA + 2 * INT64_EXTRA + INT16_EXTRA
    first = True
    for topic, partitions in topics:
        if first:
            size += ARRAY_EXTRA
            first = False
        size += (
            _DESCRIBED_TXN_TOPIC
            + str_extra(topic)
            + ARRAY_EXTRA
            + len(partitions) * (1 + INT32_EXTRA)
        )
    if refused_markers:
        size += ARRAY_EXTRA + len(refused_markers) * (_REFUSED_MARKER + INT32_EXTRA + INT16_EXTRA)
        for topic, _, _ in refused_markers:
            size += str_extra(topic)
    return size


def listed_transaction_bytes(transactional_id: str, state: str) -> int:
    return LISTED_TRANSACTION_MIN_BYTES + str_extra(transactional_id) + str_extra(state)
