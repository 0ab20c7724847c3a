"""Record type 6, the transactional offset: an offset a TxnOffsetCommit stored for a
producer's ongoing transaction, pending until the transaction ends.

One key per (group, topic, partition, producer id), so that a producer's pending offset of
a partition is one key compaction keeps the latest of. The end of the transaction writes a
tombstone for it (and, when the transaction commits, a plain offset commit record with its
values); so does the deletion of the group or of the partition's offsets.

The key and value types and their msgpack fields; `coordinator_server.records` dispatches
to them like to its own types, and raises its RecordFormatError for what these reject
(ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TRANSACTIONAL_OFFSET_TYPE = 6
TRANSACTIONAL_OFFSET_VALUE_VERSION = 0


@dataclass(slots=True, unsafe_hash=True)
class TransactionalOffsetKey:
    group: str
    topic: str
    partition: int
    producer_id: int


@dataclass(slots=True, unsafe_hash=True)
class TransactionalOffsetValue:
    """The offset as the TxnOffsetCommit gave it, and the producer epoch of the transaction
    that stored it."""

    producer_epoch: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


def transactional_offset_key_fields(
    key: TransactionalOffsetKey, key_version: int
) -> tuple[Any, ...]:
    return (
        TRANSACTIONAL_OFFSET_TYPE,
        key_version,
        key.group,
        key.topic,
        key.partition,
        key.producer_id,
    )


def transactional_offset_value_fields(value: TransactionalOffsetValue) -> tuple[Any, ...]:
    return (
        TRANSACTIONAL_OFFSET_VALUE_VERSION,
        value.producer_epoch,
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp_ms,
    )


def transactional_offset_key_from_fields(fields: list[Any]) -> TransactionalOffsetKey:
    """The key of the fields after the type and version; ValueError when they are not a
    key's. Fields a later version appends are ignored."""
    # Fewer than four fields fail to unpack (ValueError).
    group, topic, partition, producer_id = fields[:4]
    return TransactionalOffsetKey(_str(group), _str(topic), _int(partition), _int(producer_id))


def transactional_offset_value_from_fields(fields: list[Any]) -> TransactionalOffsetValue:
    """The value of a value's fields (version first); ValueError when they are not a
    value's. Fields a later version appends are ignored."""
    if len(fields) < 6:
        raise ValueError("a transactional offset value has five fields after its version")
    _, producer_epoch, offset, leader_epoch, metadata, commit_ts = fields[:6]
    return TransactionalOffsetValue(
        _int(producer_epoch), _int(offset), _int(leader_epoch), _str(metadata), _int(commit_ts)
    )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


__all__ = [
    "TRANSACTIONAL_OFFSET_TYPE",
    "TRANSACTIONAL_OFFSET_VALUE_VERSION",
    "TransactionalOffsetKey",
    "TransactionalOffsetValue",
    "transactional_offset_key_fields",
    "transactional_offset_key_from_fields",
    "transactional_offset_value_fields",
    "transactional_offset_value_from_fields",
]
