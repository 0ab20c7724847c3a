"""The coordinator log's record types and their msgpack encoding.

Every record is a Kafka record with a key and a value (a missing value is a tombstone). The
key says what the record is about, so that compaction (latest value per key wins, a
tombstone deletes) leaves exactly the current state. `docs/RECORDS.md` is the format's
reference for tools outside the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, TypeAlias

import msgpack
import msgspec

from coordinator_server.records.consumer_groups import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_VERSION,
    CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSION,
    CONSUMER_GROUP_METADATA_VALUE_VERSION,
    CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSION,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_VERSION,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_VERSION,
    CONSUMER_GROUP_TYPES,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicIdPartitions,
    consumer_group_key_fields,
    consumer_group_key_from_fields,
    consumer_group_member_key_fields,
    consumer_group_metadata_value_fields,
    consumer_group_metadata_value_from_fields,
    current_member_assignment_value_fields,
    current_member_assignment_value_from_fields,
    member_metadata_value_fields,
    member_metadata_value_from_fields,
    regular_expression_key_fields,
    regular_expression_value_fields,
    regular_expression_value_from_fields,
    target_assignment_member_value_fields,
    target_assignment_member_value_from_fields,
    target_assignment_metadata_value_fields,
    target_assignment_metadata_value_from_fields,
)
from coordinator_server.records.security import (
    ACL_VALUE_VERSION,
    SCRAM_CREDENTIAL_VALUE_VERSION,
    AclKey,
    AclValue,
    ScramCredentialKey,
    ScramCredentialValue,
    acl_key_fields,
    acl_key_from_fields,
    acl_value_fields,
    acl_value_from_fields,
    scram_credential_key_fields,
    scram_credential_key_from_fields,
    scram_credential_value_fields,
    scram_credential_value_from_fields,
)
from coordinator_server.records.transactional_offsets import (
    TRANSACTIONAL_OFFSET_VALUE_VERSION,
    TransactionalOffsetKey,
    TransactionalOffsetValue,
    transactional_offset_key_fields,
    transactional_offset_key_from_fields,
    transactional_offset_value_fields,
    transactional_offset_value_from_fields,
)
from coordinator_server.records.transactions import (
    PRODUCER_ID_BLOCK_VALUE_VERSION,
    TRANSACTION_VALUE_VERSION,
    ProducerIdBlockKey,
    ProducerIdBlockValue,
    RefusedMarkers,
    TransactionKey,
    TransactionState,
    TransactionValue,
    decode_producer_id_block_value,
    decode_transaction_value,
    producer_id_block_value_fields,
    transaction_value_fields,
)


class RecordType(IntEnum):
    """The first element of every key."""

    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    PARTITION_OWNERSHIP = 3
    TRANSACTION = 4
    PRODUCER_ID_BLOCK = 5
    TRANSACTIONAL_OFFSET = 6
    # The security partition's (partition 0 only): an ACL, a SCRAM credential.
    ACL = 7
    SCRAM_CREDENTIAL = 8
    # The consumer group protocol's (KIP-848), Kafka's consumer group records.
    CONSUMER_GROUP_METADATA = 9
    CONSUMER_GROUP_MEMBER_METADATA = 10
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 11
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 12
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 13
    CONSUMER_GROUP_REGULAR_EXPRESSION = 14


KEY_VERSION: Final = 0
OFFSET_COMMIT_VALUE_VERSION: Final = 0
GROUP_METADATA_VALUE_VERSION: Final = 0
PARTITION_OWNERSHIP_VALUE_VERSION: Final = 0


class RecordFormatError(ValueError):
    """A key or value that is not in the documented format."""


# The record types are values: nothing changes one once it is made. The dataclasses among
# them are not declared frozen only because a frozen dataclass costs three to four times as
# much to build (each field goes through object.__setattr__), and a load builds them for
# every record; they still hash and compare by value.


@dataclass(slots=True, unsafe_hash=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


class OffsetCommitValue(msgspec.Struct, frozen=True, gc=False):
    """A committed offset. The state holds one per offset, and every commit builds one per
    partition and every load one per record: a Struct is built in C (a third of a slotted
    dataclass's time), takes 16 bytes less, and stays out of the cyclic garbage collector's
    way (it holds only numbers and a string, so it can be in no cycle)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass(slots=True, unsafe_hash=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True, unsafe_hash=True)
class GroupMemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True, unsafe_hash=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[GroupMemberValue, ...] = ()


@dataclass(slots=True, unsafe_hash=True)
class PartitionOwnershipKey:
    """The one key of a log partition's ownership record (compaction keeps the latest)."""


@dataclass(slots=True, unsafe_hash=True)
class PartitionOwnershipValue:
    """A node took the log partition over: the first record it wrote there, at the producer
    epoch that fences every earlier owner out of the partition."""

    node_id: int
    producer_id: int
    producer_epoch: int
    timestamp_ms: int


RecordKey: TypeAlias = (
    OffsetCommitKey
    | GroupMetadataKey
    | PartitionOwnershipKey
    | TransactionKey
    | ProducerIdBlockKey
    | TransactionalOffsetKey
    | AclKey
    | ScramCredentialKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)
RecordValue: TypeAlias = (
    OffsetCommitValue
    | GroupMetadataValue
    | PartitionOwnershipValue
    | TransactionValue
    | ProducerIdBlockValue
    | TransactionalOffsetValue
    | AclValue
    | ScramCredentialValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)


@dataclass(slots=True, unsafe_hash=True)
class CoordinatorRecord:
    """One record of the log: a typed key and a typed value, or None for a tombstone."""

    key: RecordKey
    value: RecordValue | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


def new_offset_commit_record(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_timestamp_ms: int,
    expire_timestamp_ms: int | None = None,
) -> CoordinatorRecord:
    return CoordinatorRecord(
        OffsetCommitKey(group, topic, partition),
        OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms),
    )


def new_offset_commit_tombstone_record(group: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group, topic, partition), None)


def new_group_metadata_record(group: str, value: GroupMetadataValue) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), value)


def new_group_metadata_tombstone_record(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), None)


def new_partition_ownership_record(
    node_id: int, producer_id: int, producer_epoch: int, timestamp_ms: int
) -> CoordinatorRecord:
    return CoordinatorRecord(
        PartitionOwnershipKey(),
        PartitionOwnershipValue(node_id, producer_id, producer_epoch, timestamp_ms),
    )


def new_transaction_record(transactional_id: str, value: TransactionValue) -> CoordinatorRecord:
    return CoordinatorRecord(TransactionKey(transactional_id), value)


def new_transaction_tombstone_record(transactional_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TransactionKey(transactional_id), None)


def new_producer_id_block_record(next_block_start: int) -> CoordinatorRecord:
    return CoordinatorRecord(ProducerIdBlockKey(), ProducerIdBlockValue(next_block_start))


def new_transactional_offset_record(
    group: str, topic: str, partition: int, producer_id: int, value: TransactionalOffsetValue
) -> CoordinatorRecord:
    return CoordinatorRecord(TransactionalOffsetKey(group, topic, partition, producer_id), value)


def new_transactional_offset_tombstone_record(
    group: str, topic: str, partition: int, producer_id: int
) -> CoordinatorRecord:
    return CoordinatorRecord(TransactionalOffsetKey(group, topic, partition, producer_id), None)


def new_acl_record(key: AclKey) -> CoordinatorRecord:
    return CoordinatorRecord(key, AclValue())


def new_acl_tombstone_record(key: AclKey) -> CoordinatorRecord:
    return CoordinatorRecord(key, None)


def new_scram_credential_record(
    user: str, mechanism: int, value: ScramCredentialValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ScramCredentialKey(user, mechanism), value)


def new_scram_credential_tombstone_record(user: str, mechanism: int) -> CoordinatorRecord:
    return CoordinatorRecord(ScramCredentialKey(user, mechanism), None)


def new_consumer_group_metadata_record(
    group: str, value: ConsumerGroupMetadataValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMetadataKey(group), value)


def new_consumer_group_metadata_tombstone_record(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMetadataKey(group), None)


def new_consumer_group_member_metadata_record(
    group: str, member_id: str, value: ConsumerGroupMemberMetadataValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMemberMetadataKey(group, member_id), value)


def new_consumer_group_member_metadata_tombstone_record(
    group: str, member_id: str
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMemberMetadataKey(group, member_id), None)


def new_consumer_group_target_assignment_metadata_record(
    group: str, value: ConsumerGroupTargetAssignmentMetadataValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(group), value)


def new_consumer_group_target_assignment_metadata_tombstone_record(
    group: str,
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(group), None)


def new_consumer_group_target_assignment_member_record(
    group: str, member_id: str, value: ConsumerGroupTargetAssignmentMemberValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group, member_id), value)


def new_consumer_group_target_assignment_member_tombstone_record(
    group: str, member_id: str
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group, member_id), None)


def new_consumer_group_current_member_assignment_record(
    group: str, member_id: str, value: ConsumerGroupCurrentMemberAssignmentValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(group, member_id), value)


def new_consumer_group_current_member_assignment_tombstone_record(
    group: str, member_id: str
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(group, member_id), None)


def new_consumer_group_regular_expression_record(
    group: str, regular_expression: str, value: ConsumerGroupRegularExpressionValue
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupRegularExpressionKey(group, regular_expression), value)


def new_consumer_group_regular_expression_tombstone_record(
    group: str, regular_expression: str
) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupRegularExpressionKey(group, regular_expression), None)


# Encoding. Keys and values are msgpack arrays whose first elements say what they are; a
# newer version only appends elements, so a reader ignores elements it does not know.

_packer: Final = msgpack.Packer(use_bin_type=True, autoreset=True)
_pack: Final = _packer.pack
# Plain ints: reading an enum member's value goes through a descriptor, on every record.
_OFFSET_COMMIT_KEY_TYPE: Final = int(RecordType.OFFSET_COMMIT)
_GROUP_METADATA_KEY_TYPE: Final = int(RecordType.GROUP_METADATA)
_PARTITION_OWNERSHIP_KEY_TYPE: Final = int(RecordType.PARTITION_OWNERSHIP)
_TRANSACTION_KEY_TYPE: Final = int(RecordType.TRANSACTION)
_PRODUCER_ID_BLOCK_KEY_TYPE: Final = int(RecordType.PRODUCER_ID_BLOCK)
# msgpack's header of an array of five elements (fixarray: 0x90 | length).
_FIXARRAY_5: Final = b"\x95"
_encode: Final = msgspec.msgpack.Encoder().encode
# Untyped: the same values msgpack's unpackb gives (lists, str, bytes, ints, None), about a
# quarter faster, which a load of a million records decoding two each notices.
_decode: Final = msgspec.msgpack.Decoder().decode


def _packb(fields: tuple[Any, ...]) -> bytes:
    data: bytes = _pack(fields)
    return data


def encode_key(key: RecordKey) -> bytes:
    if type(key) is OffsetCommitKey:
        return _packb((_OFFSET_COMMIT_KEY_TYPE, KEY_VERSION, key.group, key.topic, key.partition))
    if type(key) is GroupMetadataKey:
        return _packb((_GROUP_METADATA_KEY_TYPE, KEY_VERSION, key.group))
    if type(key) is PartitionOwnershipKey:
        return _packb((_PARTITION_OWNERSHIP_KEY_TYPE, KEY_VERSION))
    if type(key) is TransactionKey:
        return _packb((_TRANSACTION_KEY_TYPE, KEY_VERSION, key.transactional_id))
    if type(key) is ProducerIdBlockKey:
        return _packb((_PRODUCER_ID_BLOCK_KEY_TYPE, KEY_VERSION))
    if type(key) is TransactionalOffsetKey:
        return _packb(transactional_offset_key_fields(key, KEY_VERSION))
    if type(key) is AclKey:
        return _packb(acl_key_fields(key, KEY_VERSION))
    if type(key) is ScramCredentialKey:
        return _packb(scram_credential_key_fields(key, KEY_VERSION))
    if (
        type(key) is ConsumerGroupMetadataKey
        or type(key) is ConsumerGroupTargetAssignmentMetadataKey
    ):
        return _packb(consumer_group_key_fields(key, KEY_VERSION))
    if (
        type(key) is ConsumerGroupMemberMetadataKey
        or type(key) is ConsumerGroupTargetAssignmentMemberKey
        or type(key) is ConsumerGroupCurrentMemberAssignmentKey
    ):
        return _packb(consumer_group_member_key_fields(key, KEY_VERSION))
    if type(key) is ConsumerGroupRegularExpressionKey:
        return _packb(regular_expression_key_fields(key, KEY_VERSION))
    raise RecordFormatError(f"unknown key type {type(key).__name__}")


def _encode_member(member: GroupMemberValue) -> tuple[Any, ...]:
    return (
        member.member_id,
        member.group_instance_id,
        member.client_id,
        member.client_host,
        member.rebalance_timeout_ms,
        member.session_timeout_ms,
        member.subscription,
        member.assignment,
    )


def encode_value(value: RecordValue | None) -> bytes | None:
    if value is None:
        return None
    if type(value) is OffsetCommitValue:
        return _packb(
            (
                OFFSET_COMMIT_VALUE_VERSION,
                value.offset,
                value.leader_epoch,
                value.metadata,
                value.commit_timestamp_ms,
                value.expire_timestamp_ms,
            )
        )
    if type(value) is GroupMetadataValue:
        return _packb(
            (
                GROUP_METADATA_VALUE_VERSION,
                value.protocol_type,
                value.generation,
                value.protocol_name,
                value.leader,
                value.current_state_timestamp_ms,
                [_encode_member(m) for m in value.members],
            )
        )
    if type(value) is PartitionOwnershipValue:
        return _packb(
            (
                PARTITION_OWNERSHIP_VALUE_VERSION,
                value.node_id,
                value.producer_id,
                value.producer_epoch,
                value.timestamp_ms,
            )
        )
    if type(value) is TransactionValue:
        return _packb(transaction_value_fields(value))
    if type(value) is ProducerIdBlockValue:
        return _packb(producer_id_block_value_fields(value))
    if type(value) is TransactionalOffsetValue:
        return _packb(transactional_offset_value_fields(value))
    if type(value) is AclValue:
        return _packb(acl_value_fields(value))
    if type(value) is ScramCredentialValue:
        return _packb(scram_credential_value_fields(value))
    if type(value) is ConsumerGroupMetadataValue:
        return _packb(consumer_group_metadata_value_fields(value))
    if type(value) is ConsumerGroupMemberMetadataValue:
        return _packb(member_metadata_value_fields(value))
    if type(value) is ConsumerGroupTargetAssignmentMetadataValue:
        return _packb(target_assignment_metadata_value_fields(value))
    if type(value) is ConsumerGroupTargetAssignmentMemberValue:
        return _packb(target_assignment_member_value_fields(value))
    if type(value) is ConsumerGroupCurrentMemberAssignmentValue:
        return _packb(current_member_assignment_value_fields(value))
    if type(value) is ConsumerGroupRegularExpressionValue:
        return _packb(regular_expression_value_fields(value))
    raise RecordFormatError(f"unknown value type {type(value).__name__}")


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    key = record.key
    value = record.value
    if type(key) is OffsetCommitKey and type(value) is OffsetCommitValue:
        # The common case, without the two dispatching calls.
        return (
            _packb((_OFFSET_COMMIT_KEY_TYPE, KEY_VERSION, key.group, key.topic, key.partition)),
            _packb(
                (
                    OFFSET_COMMIT_VALUE_VERSION,
                    value.offset,
                    value.leader_epoch,
                    value.metadata,
                    value.commit_timestamp_ms,
                    value.expire_timestamp_ms,
                )
            ),
        )
    return encode_key(key), encode_value(value)


def encode_offset_commits(
    group: str, commits: Sequence[tuple[tuple[str, int], OffsetCommitValue]]
) -> list[tuple[bytes, bytes | None]]:
    """The encoded records of a group's offset commits, given as ((topic, partition),
    value) pairs: exactly what `encode_record` makes of their records, in one loop.

    An OffsetCommit writes a record per partition; the keys of a topic's partitions share
    everything up to the partition, so that part is encoded once per topic. msgspec's
    encoder writes the same msgpack as msgpack's packer (the smallest encoding of every
    integer and string) in a third of the time.
    """
    encode = _encode
    encoded: list[tuple[bytes, bytes | None]] = []
    append = encoded.append
    last_topic: str | None = None
    prefix = b""
    for (topic, partition), value in commits:
        if topic != last_topic:
            # A key is an array of five: the array of its first four elements, under the
            # header of an array of five, then the partition.
            prefix = _FIXARRAY_5 + encode((_OFFSET_COMMIT_KEY_TYPE, KEY_VERSION, group, topic))[1:]
            last_topic = topic
        append(
            (
                prefix + encode(partition),
                encode(
                    (
                        OFFSET_COMMIT_VALUE_VERSION,
                        value.offset,
                        value.leader_epoch,
                        value.metadata,
                        value.commit_timestamp_ms,
                        value.expire_timestamp_ms,
                    )
                ),
            )
        )
    return encoded


def _unpack(data: bytes) -> Any:
    try:
        # msgpack's defaults: str as str, arrays as lists, map keys str or bytes only.
        return msgpack.unpackb(data)
    except Exception as exc:
        raise RecordFormatError(f"not msgpack: {exc}") from exc


def decode_key(data: bytes) -> RecordKey:
    fields = _unpack(data)
    if not isinstance(fields, list) or len(fields) < 2:
        raise RecordFormatError("a key is an array [record_type, version, ...]")
    record_type, version = fields[0], fields[1]
    if not isinstance(version, int) or version < 0:
        raise RecordFormatError(f"bad key version {version!r}")
    try:
        if record_type == RecordType.OFFSET_COMMIT:
            group, topic, partition = fields[2:5]
            key: RecordKey = OffsetCommitKey(_str(group), _str(topic), _int(partition))
            return key
        if record_type == RecordType.GROUP_METADATA:
            return GroupMetadataKey(_str(fields[2]))
        if record_type == RecordType.PARTITION_OWNERSHIP:
            return PartitionOwnershipKey()
        if record_type == RecordType.TRANSACTION:
            return TransactionKey(_str(fields[2]))
        if record_type == RecordType.PRODUCER_ID_BLOCK:
            return ProducerIdBlockKey()
        if record_type == RecordType.TRANSACTIONAL_OFFSET:
            return transactional_offset_key_from_fields(fields[2:])
        if record_type == RecordType.ACL:
            return acl_key_from_fields(fields[2:])
        if record_type == RecordType.SCRAM_CREDENTIAL:
            return scram_credential_key_from_fields(fields[2:])
        if type(record_type) is int and record_type in CONSUMER_GROUP_TYPES:
            return consumer_group_key_from_fields(record_type, fields[2:])
    except (IndexError, ValueError) as exc:
        raise RecordFormatError(f"bad key for record type {record_type!r}: {exc}") from exc
    raise RecordFormatError(f"unknown record type {record_type!r}")


def decode_value(key: RecordKey, data: bytes | None) -> RecordValue | None:
    if data is None:
        return None
    fields = _unpack(data)
    if not isinstance(fields, list) or not fields or not isinstance(fields[0], int):
        raise RecordFormatError("a value is an array [version, ...]")
    try:
        if type(key) is OffsetCommitKey:
            _, offset, leader_epoch, metadata, commit_ts, expire_ts = fields[:6]
            return OffsetCommitValue(
                _int(offset),
                _int(leader_epoch),
                _str(metadata),
                _int(commit_ts),
                None if expire_ts is None else _int(expire_ts),
            )
        if type(key) is GroupMetadataKey:
            _, protocol_type, generation, protocol_name, leader, state_ts, members = fields[:7]
            return GroupMetadataValue(
                _str(protocol_type),
                _int(generation),
                None if protocol_name is None else _str(protocol_name),
                None if leader is None else _str(leader),
                _int(state_ts),
                tuple(_decode_member(m) for m in members),
            )
        if type(key) is PartitionOwnershipKey:
            _, node_id, producer_id, producer_epoch, timestamp_ms = fields[:5]
            return PartitionOwnershipValue(
                _int(node_id), _int(producer_id), _int(producer_epoch), _int(timestamp_ms)
            )
        if type(key) is TransactionKey:
            return decode_transaction_value(fields)
        if type(key) is ProducerIdBlockKey:
            return decode_producer_id_block_value(fields)
        if type(key) is TransactionalOffsetKey:
            return transactional_offset_value_from_fields(fields)
        if type(key) is AclKey:
            return acl_value_from_fields(fields)
        if type(key) is ScramCredentialKey:
            return scram_credential_value_from_fields(fields)
        if type(key) is ConsumerGroupMetadataKey:
            return consumer_group_metadata_value_from_fields(fields)
        if type(key) is ConsumerGroupMemberMetadataKey:
            return member_metadata_value_from_fields(fields)
        if type(key) is ConsumerGroupTargetAssignmentMetadataKey:
            return target_assignment_metadata_value_from_fields(fields)
        if type(key) is ConsumerGroupTargetAssignmentMemberKey:
            return target_assignment_member_value_from_fields(fields)
        if type(key) is ConsumerGroupCurrentMemberAssignmentKey:
            return current_member_assignment_value_from_fields(fields)
        if type(key) is ConsumerGroupRegularExpressionKey:
            return regular_expression_value_from_fields(fields)
    except (ValueError, TypeError) as exc:
        raise RecordFormatError(f"bad value for {type(key).__name__}: {exc}") from exc
    raise RecordFormatError(f"unknown key type {type(key).__name__}")


def _decode_member(fields: Any) -> GroupMemberValue:
    if not isinstance(fields, list):
        raise ValueError("a member is an array")
    member_id, instance_id, client_id, client_host, rebalance_ms, session_ms, sub, assign = fields[
        :8
    ]
    return GroupMemberValue(
        _str(member_id),
        None if instance_id is None else _str(instance_id),
        _str(client_id),
        _str(client_host),
        _int(rebalance_ms),
        _int(session_ms),
        _bytes(sub),
        _bytes(assign),
    )


_OFFSET_COMMIT_TYPE: Final = RecordType.OFFSET_COMMIT.value
_COMMIT_TIMES_KEPT: Final = 4096
# Any, not int, here and in the decoders' results below: compiled by mypyc, an int-typed
# value is unboxed and boxed again as a new object, and the offsets of a commit would each
# hold a timestamp of their own (52 bytes more an offset loaded, measured when this module
# was in compiled.py's list; it is left out of it for its loads' speed).
_commit_times: Final[dict[Any, Any]] = {}


_decode_commit_key: Final = msgspec.msgpack.Decoder(tuple[int, int, str, str, int]).decode
_decode_commit_value: Final = msgspec.msgpack.Decoder(
    tuple[int, int, int, str, int, int | None]
).decode


def decode_offset_commit(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, OffsetCommitValue | None] | None:
    """(group, topic, partition, value or None for a tombstone) of a well-formed offset
    commit record; None for any other record, or for one that is not well formed.

    Offset commits are nearly every record of a log: this decodes them with the checks
    inline, without the key and record objects (a load of a million records spends most of
    its time decoding). Records of exactly the shape this version writes are decoded and
    checked by typed decoders, in C; any other (another record type, more fields from a
    later version, a malformed one) goes through `_decode_offset_commit_fields`, which
    decides the same for those. `decode_record` is the general path, with its errors.
    """
    fields: Any
    try:
        record_type, version, group, topic, partition = _decode_commit_key(key)
        fields = None if value is None else _decode_commit_value(value)
    except msgspec.DecodeError:
        return _decode_offset_commit_fields(key, value)
    if record_type != _OFFSET_COMMIT_TYPE or version < 0:
        return None
    if fields is None:
        return group, topic, partition, None
    _, offset, leader_epoch, metadata, commit_ts, expire_ts = fields
    return (
        group,
        topic,
        partition,
        OffsetCommitValue(offset, leader_epoch, metadata, _shared_time(commit_ts), expire_ts),
    )


def _shared_time(commit_ts: Any) -> Any:
    """The offsets of one commit share its timestamp: one int object for them all rather
    than one each (32 bytes an offset, loaded or not)."""
    shared_ts = _commit_times.get(commit_ts)
    if shared_ts is None:
        if len(_commit_times) >= _COMMIT_TIMES_KEPT:
            _commit_times.clear()
        shared_ts = _commit_times[commit_ts] = commit_ts
    return shared_ts


def _decode_offset_commit_fields(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, OffsetCommitValue | None] | None:
    """`decode_offset_commit` of a record of any shape, field by field."""
    unpack = _decode
    try:
        fields = unpack(key)
        if type(fields) is not list or len(fields) < 5 or fields[0] != _OFFSET_COMMIT_TYPE:
            return None
        record_type, version, group, topic, partition = fields[:5]
        if not (
            type(record_type) is int
            and type(version) is int
            and version >= 0
            and type(group) is str
            and type(topic) is str
            and type(partition) is int
        ):
            return None
        if value is None:
            return group, topic, partition, None
        values = unpack(value)
    except Exception:
        return None
    if type(values) is not list or len(values) < 6 or type(values[0]) is not int:
        return None
    _, offset, leader_epoch, metadata, commit_ts, expire_ts = values[:6]
    if not (
        type(offset) is int
        and type(leader_epoch) is int
        and type(metadata) is str
        and type(commit_ts) is int
        and (expire_ts is None or type(expire_ts) is int)
    ):
        return None
    return (
        group,
        topic,
        partition,
        OffsetCommitValue(offset, leader_epoch, metadata, _shared_time(commit_ts), expire_ts),
    )


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    commit = decode_offset_commit(key, value)
    if commit is not None:
        group, topic, partition, commit_value = commit
        return CoordinatorRecord(OffsetCommitKey(group, topic, partition), commit_value)
    typed_key = decode_key(key)
    return CoordinatorRecord(typed_key, decode_value(typed_key, value))


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError(f"expected bytes, got {type(value).__name__}")
    return value


__all__ = [
    "ACL_VALUE_VERSION",
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE_VERSION",
    "CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSION",
    "CONSUMER_GROUP_METADATA_VALUE_VERSION",
    "CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSION",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE_VERSION",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "PARTITION_OWNERSHIP_VALUE_VERSION",
    "PRODUCER_ID_BLOCK_VALUE_VERSION",
    "SCRAM_CREDENTIAL_VALUE_VERSION",
    "TRANSACTIONAL_OFFSET_VALUE_VERSION",
    "TRANSACTION_VALUE_VERSION",
    "AclKey",
    "AclValue",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "CoordinatorRecord",
    "GroupMemberValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "PartitionOwnershipKey",
    "PartitionOwnershipValue",
    "ProducerIdBlockKey",
    "ProducerIdBlockValue",
    "RecordFormatError",
    "RecordKey",
    "RecordType",
    "RecordValue",
    "RefusedMarkers",
    "ScramCredentialKey",
    "ScramCredentialValue",
    "TopicIdPartitions",
    "TransactionKey",
    "TransactionState",
    "TransactionValue",
    "TransactionalOffsetKey",
    "TransactionalOffsetValue",
    "decode_key",
    "decode_offset_commit",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_offset_commits",
    "encode_record",
    "encode_value",
    "new_acl_record",
    "new_acl_tombstone_record",
    "new_consumer_group_current_member_assignment_record",
    "new_consumer_group_current_member_assignment_tombstone_record",
    "new_consumer_group_member_metadata_record",
    "new_consumer_group_member_metadata_tombstone_record",
    "new_consumer_group_metadata_record",
    "new_consumer_group_metadata_tombstone_record",
    "new_consumer_group_regular_expression_record",
    "new_consumer_group_regular_expression_tombstone_record",
    "new_consumer_group_target_assignment_member_record",
    "new_consumer_group_target_assignment_member_tombstone_record",
    "new_consumer_group_target_assignment_metadata_record",
    "new_consumer_group_target_assignment_metadata_tombstone_record",
    "new_group_metadata_record",
    "new_group_metadata_tombstone_record",
    "new_offset_commit_record",
    "new_offset_commit_tombstone_record",
    "new_partition_ownership_record",
    "new_producer_id_block_record",
    "new_scram_credential_record",
    "new_scram_credential_tombstone_record",
    "new_transaction_record",
    "new_transaction_tombstone_record",
    "new_transactional_offset_record",
    "new_transactional_offset_tombstone_record",
]
