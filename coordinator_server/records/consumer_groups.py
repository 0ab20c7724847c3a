"""The consumer group protocol's record types (KIP-848), record types 9 to 14, Kafka's
consumer group records mapped to the log's msgpack encoding:

- 9, consumer group metadata: Kafka's ConsumerGroupMetadataKey/Value, the group's epoch and
  the hash of its subscribed topics' metadata (KIP-1101);
- 10, member metadata: ConsumerGroupMemberMetadataKey/Value, a member's subscription and
  client (and, for a member still on the classic protocol, its classic metadata);
- 11, target assignment metadata: ConsumerGroupTargetAssignmentMetadataKey/Value, the group
  epoch the target assignment was computed at, and when (KIP-1263);
- 12, target assignment member: ConsumerGroupTargetAssignmentMemberKey/Value, a member's
  partitions in the target assignment;
- 13, current member assignment: ConsumerGroupCurrentMemberAssignmentKey/Value, a member's
  epochs, reconciliation state, owned partitions and partitions pending revocation;
- 14, regular expression: ConsumerGroupRegularExpressionKey/Value, the topics a regex
  subscription resolved to.

A tombstone of a member's keys (10, 12, 13) removes the member; a group's deletion writes
them for every member, then the target assignment metadata's and the group metadata's
(Kafka's order, so that replay never sees a group without its epoch while it has members).

Left out, and why:
- Kafka's ConsumerGroupPartitionMetadata record (the subscribed topics' ids, names and
  partition counts). Kafka 4.1 (KIP-1101) stopped writing it: the group's metadata hash
  replaces it, and the topics come from the cluster's metadata when the group loads.
- Kafka's flexible-versions bookkeeping (tagged fields, unknown tagged fields): our values
  are versioned msgpack arrays to which a later version appends; the tagged fields Kafka has
  today are plain fields here, with Kafka's defaults.
- The current assignment's per-partition AssignmentEpochs (KIP-1251, offset commits checked
  against the epoch a partition was assigned at) and the group's CreationTimeMs (KIP-1282):
  issue 29 asks for neither; a version 1 of the value appends them.

Topic ids are Kafka's 16-byte UUIDs as msgpack bin; a member's partitions are
((topic id, (partition, ...)), ...), sorted, so that one assignment always encodes to the
same bytes. The key and value types and their msgpack fields; `coordinator_server.records`
dispatches to them like to its own types, and raises its RecordFormatError for what these
reject (ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

CONSUMER_GROUP_METADATA_TYPE: Final = 9
CONSUMER_GROUP_MEMBER_METADATA_TYPE: Final = 10
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE: Final = 11
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE: Final = 12
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE: Final = 13
CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE: Final = 14

CONSUMER_GROUP_METADATA_VALUE_VERSION: Final = 0
CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSION: Final = 0
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_VERSION: Final = 0
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_VERSION: Final = 0
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_VERSION: Final = 0
CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSION: Final = 0

TOPIC_ID_SIZE: Final = 16

TopicIdPartitions = tuple[tuple[bytes, tuple[int, ...]], ...]
"""Partitions by topic id: ((16-byte topic id, (partition, ...)), ...), sorted."""


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupMetadataValue:
    epoch: int
    # The hash of the subscribed topics' metadata (KIP-1101): a different hash on load or on
    # a metadata change means the target assignment must be computed again. 0: none.
    metadata_hash: int = 0


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupMemberKey:
    """The key of a member's records: its metadata, target and current assignment."""

    group: str
    member_id: str


@dataclass(slots=True, unsafe_hash=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(slots=True, unsafe_hash=True)
class ClassicMemberMetadata:
    """A member of a consumer group that still speaks the classic protocol (a group
    upgraded online keeps what its JoinGroup said)."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupMemberMetadataKey(ConsumerGroupMemberKey):
    pass


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    # Sorted, as Kafka writes them.
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    # When the computation of the assignment finished (KIP-1263), ms; 0 when unknown.
    assignment_timestamp_ms: int = 0


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupTargetAssignmentMemberKey(ConsumerGroupMemberKey):
    pass


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupTargetAssignmentMemberValue:
    partitions: TopicIdPartitions


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupCurrentMemberAssignmentKey(ConsumerGroupMemberKey):
    pass


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    # The epoch before the last bump: a member that missed the bump's answer retries with it.
    previous_member_epoch: int
    # Kafka's MemberState id (`consumer_groups.member.ReconciliationState`).
    state: int
    assigned_partitions: TopicIdPartitions
    partitions_pending_revocation: TopicIdPartitions


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupRegularExpressionKey:
    group: str
    regular_expression: str


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupRegularExpressionValue:
    """The topics the regex matched (sorted), at which version of the cluster's metadata,
    and when it was resolved (ms)."""

    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


# Keys.


def consumer_group_key_fields(
    key: ConsumerGroupMetadataKey | ConsumerGroupTargetAssignmentMetadataKey, key_version: int
) -> tuple[Any, ...]:
    record_type = (
        CONSUMER_GROUP_METADATA_TYPE
        if type(key) is ConsumerGroupMetadataKey
        else CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE
    )
    return (record_type, key_version, key.group)


def consumer_group_member_key_fields(
    key: ConsumerGroupMemberKey, key_version: int
) -> tuple[Any, ...]:
    return (_MEMBER_KEY_TYPES[type(key)], key_version, key.group, key.member_id)


def regular_expression_key_fields(
    key: ConsumerGroupRegularExpressionKey, key_version: int
) -> tuple[Any, ...]:
    return (CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE, key_version, key.group, key.regular_expression)


_MEMBER_KEY_TYPES: Final[dict[type[ConsumerGroupMemberKey], int]] = {
    ConsumerGroupMemberMetadataKey: CONSUMER_GROUP_MEMBER_METADATA_TYPE,
    ConsumerGroupTargetAssignmentMemberKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE,
    ConsumerGroupCurrentMemberAssignmentKey: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE,
}
_MEMBER_KEYS_BY_TYPE: Final[dict[int, Any]] = {
    number: cls for cls, number in _MEMBER_KEY_TYPES.items()
}

CONSUMER_GROUP_TYPES: Final = frozenset(
    {
        CONSUMER_GROUP_METADATA_TYPE,
        CONSUMER_GROUP_MEMBER_METADATA_TYPE,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE,
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE,
        CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE,
    }
)

# A key is a msgpack fixarray (header 0x90 | length) whose first element, the record type,
# is a positive fixint: its second byte.
_FIXARRAY_HEADERS: Final = range(0x90, 0xA0)


def is_consumer_group_key(key: bytes) -> bool:
    """Whether the encoded key is one of a consumer group's records, without decoding it."""
    return len(key) > 1 and key[0] in _FIXARRAY_HEADERS and key[1] in CONSUMER_GROUP_TYPES


ConsumerGroupRecordKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)


def consumer_group_key_from_fields(record_type: int, fields: list[Any]) -> ConsumerGroupRecordKey:
    """The key of a consumer group record type (one of CONSUMER_GROUP_TYPES) from the fields
    after the type and version; ValueError when they are not a key's. Fields a later version
    appends are ignored."""
    if record_type == CONSUMER_GROUP_METADATA_TYPE:
        return ConsumerGroupMetadataKey(_str(fields[0]))
    if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE:
        return ConsumerGroupTargetAssignmentMetadataKey(_str(fields[0]))
    # Fewer than two fields fail to unpack (ValueError).
    group, second = fields[:2]
    if record_type == CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE:
        return ConsumerGroupRegularExpressionKey(_str(group), _str(second))
    member_key: ConsumerGroupRecordKey = _MEMBER_KEYS_BY_TYPE[record_type](
        _str(group), _str(second)
    )
    return member_key


# Values.


def consumer_group_metadata_value_fields(value: ConsumerGroupMetadataValue) -> tuple[Any, ...]:
    return (CONSUMER_GROUP_METADATA_VALUE_VERSION, value.epoch, value.metadata_hash)


def consumer_group_metadata_value_from_fields(fields: list[Any]) -> ConsumerGroupMetadataValue:
    """The value of a value's fields (version first); ValueError when they are not a
    value's. Fields a later version appends are ignored (so in every `*_from_fields`)."""
    if len(fields) < 3:
        raise ValueError("a consumer group metadata value has two fields after its version")
    _, epoch, metadata_hash = fields[:3]
    return ConsumerGroupMetadataValue(_int(epoch), _int(metadata_hash))


def member_metadata_value_fields(value: ConsumerGroupMemberMetadataValue) -> tuple[Any, ...]:
    classic = value.classic_member_metadata
    return (
        CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSION,
        value.instance_id,
        value.rack_id,
        value.client_id,
        value.client_host,
        list(value.subscribed_topic_names),
        value.subscribed_topic_regex,
        value.rebalance_timeout_ms,
        value.server_assignor,
        None
        if classic is None
        else [
            classic.session_timeout_ms,
            [[protocol.name, protocol.metadata] for protocol in classic.supported_protocols],
        ],
    )


def member_metadata_value_from_fields(fields: list[Any]) -> ConsumerGroupMemberMetadataValue:
    if len(fields) < 10:
        raise ValueError("a member metadata value has nine fields after its version")
    (
        _,
        instance_id,
        rack_id,
        client_id,
        client_host,
        topic_names,
        topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
    ) = fields[:10]
    return ConsumerGroupMemberMetadataValue(
        _optional_str(instance_id),
        _optional_str(rack_id),
        _str(client_id),
        _str(client_host),
        tuple(_str(name) for name in _list(topic_names)),
        _optional_str(topic_regex),
        _int(rebalance_timeout_ms),
        _optional_str(server_assignor),
        None if classic is None else _classic_member_metadata(classic),
    )


def target_assignment_metadata_value_fields(
    value: ConsumerGroupTargetAssignmentMetadataValue,
) -> tuple[Any, ...]:
    return (
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_VERSION,
        value.assignment_epoch,
        value.assignment_timestamp_ms,
    )


def target_assignment_metadata_value_from_fields(
    fields: list[Any],
) -> ConsumerGroupTargetAssignmentMetadataValue:
    if len(fields) < 3:
        raise ValueError("a target assignment metadata value has two fields after its version")
    _, assignment_epoch, assignment_timestamp_ms = fields[:3]
    return ConsumerGroupTargetAssignmentMetadataValue(
        _int(assignment_epoch), _int(assignment_timestamp_ms)
    )


def target_assignment_member_value_fields(
    value: ConsumerGroupTargetAssignmentMemberValue,
) -> tuple[Any, ...]:
    return (
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_VERSION,
        _topic_id_partitions_fields(value.partitions),
    )


def target_assignment_member_value_from_fields(
    fields: list[Any],
) -> ConsumerGroupTargetAssignmentMemberValue:
    if len(fields) < 2:
        raise ValueError("a target assignment member value has one field after its version")
    return ConsumerGroupTargetAssignmentMemberValue(_topic_id_partitions(fields[1]))


def current_member_assignment_value_fields(
    value: ConsumerGroupCurrentMemberAssignmentValue,
) -> tuple[Any, ...]:
    return (
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_VERSION,
        value.member_epoch,
        value.previous_member_epoch,
        value.state,
        _topic_id_partitions_fields(value.assigned_partitions),
        _topic_id_partitions_fields(value.partitions_pending_revocation),
    )


def current_member_assignment_value_from_fields(
    fields: list[Any],
) -> ConsumerGroupCurrentMemberAssignmentValue:
    if len(fields) < 6:
        raise ValueError("a current member assignment value has five fields after its version")
    _, member_epoch, previous_member_epoch, state, assigned, pending = fields[:6]
    return ConsumerGroupCurrentMemberAssignmentValue(
        _int(member_epoch),
        _int(previous_member_epoch),
        _int(state),
        _topic_id_partitions(assigned),
        _topic_id_partitions(pending),
    )


def regular_expression_value_fields(value: ConsumerGroupRegularExpressionValue) -> tuple[Any, ...]:
    return (
        CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSION,
        list(value.topics),
        value.version,
        value.timestamp_ms,
    )


def regular_expression_value_from_fields(fields: list[Any]) -> ConsumerGroupRegularExpressionValue:
    if len(fields) < 4:
        raise ValueError("a regular expression value has three fields after its version")
    _, topics, version, timestamp_ms = fields[:4]
    return ConsumerGroupRegularExpressionValue(
        tuple(_str(topic) for topic in _list(topics)), _int(version), _int(timestamp_ms)
    )


def _topic_id_partitions_fields(partitions: TopicIdPartitions) -> list[Any]:
    return [[topic_id, list(indexes)] for topic_id, indexes in partitions]


def _topic_id_partitions(value: Any) -> TopicIdPartitions:
    entries = []
    for entry in _list(value):
        if not isinstance(entry, list) or len(entry) < 2:
            raise ValueError("a topic's partitions are an array [topic id, [partition, ...]]")
        topic_id = _bytes(entry[0])
        if len(topic_id) != TOPIC_ID_SIZE:
            raise ValueError(f"a topic id is {TOPIC_ID_SIZE} bytes, not {len(topic_id)}")
        entries.append((topic_id, tuple(_int(p) for p in _list(entry[1]))))
    return tuple(entries)


def _classic_member_metadata(value: Any) -> ClassicMemberMetadata:
    if not isinstance(value, list) or len(value) < 2:
        raise ValueError("classic member metadata is an array [session timeout, protocols]")
    protocols = []
    for protocol in _list(value[1]):
        if not isinstance(protocol, list) or len(protocol) < 2:
            raise ValueError("a classic protocol is an array [name, metadata]")
        protocols.append(ClassicProtocol(_str(protocol[0]), _bytes(protocol[1])))
    return ClassicMemberMetadata(_int(value[0]), tuple(protocols))


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"expected an array, got {type(value).__name__}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _optional_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError(f"expected bytes, got {type(value).__name__}")
    return value


__all__ = [
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE",
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_VERSION",
    "CONSUMER_GROUP_MEMBER_METADATA_TYPE",
    "CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSION",
    "CONSUMER_GROUP_METADATA_TYPE",
    "CONSUMER_GROUP_METADATA_VALUE_VERSION",
    "CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE",
    "CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSION",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_VERSION",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_VERSION",
    "CONSUMER_GROUP_TYPES",
    "TOPIC_ID_SIZE",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupRecordKey",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "TopicIdPartitions",
    "consumer_group_key_fields",
    "consumer_group_key_from_fields",
    "consumer_group_member_key_fields",
    "consumer_group_metadata_value_fields",
    "consumer_group_metadata_value_from_fields",
    "current_member_assignment_value_fields",
    "current_member_assignment_value_from_fields",
    "is_consumer_group_key",
    "member_metadata_value_fields",
    "member_metadata_value_from_fields",
    "regular_expression_key_fields",
    "regular_expression_value_fields",
    "regular_expression_value_from_fields",
    "target_assignment_member_value_fields",
    "target_assignment_member_value_from_fields",
    "target_assignment_metadata_value_fields",
    "target_assignment_metadata_value_from_fields",
]
