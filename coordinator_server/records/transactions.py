"""The transaction coordinator's record types: a transactional id's metadata (Kafka's
TransactionLogKey and TransactionLogValue) and a log partition's producer id block.

The types and their fields in the log's order; the package's `encode_*` and `decode_*`
dispatch to them, so that msgpack and the format's errors stay in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

TRANSACTION_VALUE_VERSION = 1
PRODUCER_ID_BLOCK_VALUE_VERSION = 0

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]
"""Kafka data partitions by topic: ((topic, (partition, ...)), ...), sorted, so that one set
of partitions always encodes to the same bytes."""

RefusedMarkers = tuple[tuple[str, int, int], ...]
"""Data partitions whose marker the brokers refused for good, with the error each ended
with: ((topic, partition, error code), ...), sorted."""


class TransactionState(IntEnum):
    """Kafka's TransactionState, by the ids its log writes."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return _NAMES[self]

    @staticmethod
    def from_name(name: str) -> TransactionState | None:
        return _BY_NAME.get(name)

    @property
    def is_expiration_allowed(self) -> bool:
        return self in _EXPIRABLE


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_EXPIRABLE = frozenset(
    {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
)


@dataclass(slots=True, unsafe_hash=True)
class TransactionKey:
    transactional_id: str


@dataclass(slots=True, unsafe_hash=True)
class TransactionValue:
    """A transactional id's metadata after a transition (Kafka's TxnTransitMetadata)."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    # Kafka's TransactionState id (Empty 0 ... PrepareEpochFence 7).
    state: int
    partitions: TopicPartitions
    # The coordinator log's partitions holding the transaction's offsets (AddOffsetsToTxn).
    log_partitions: tuple[int, ...]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    # Version 1: the markers of the id's last completed transaction that the brokers refused
    # for good (the transaction was completed without them).
    refused_markers: RefusedMarkers = ()


@dataclass(slots=True, unsafe_hash=True)
class ProducerIdBlockKey:
    """The one key of a log partition's producer id block (compaction keeps the latest)."""


@dataclass(slots=True, unsafe_hash=True)
class ProducerIdBlockValue:
    """Ids of the partition's range below `next_block_start` are handed out or reserved."""

    next_block_start: int


def transaction_value_fields(value: TransactionValue) -> tuple[Any, ...]:
    return (
        TRANSACTION_VALUE_VERSION,
        value.producer_id,
        value.previous_producer_id,
        value.next_producer_id,
        value.producer_epoch,
        value.last_producer_epoch,
        value.timeout_ms,
        value.state,
        [[topic, list(partitions)] for topic, partitions in value.partitions],
        list(value.log_partitions),
        value.txn_start_timestamp_ms,
        value.txn_last_update_timestamp_ms,
        [list(refused) for refused in value.refused_markers],
    )


def producer_id_block_value_fields(value: ProducerIdBlockValue) -> tuple[Any, ...]:
    return (PRODUCER_ID_BLOCK_VALUE_VERSION, value.next_block_start)


def decode_transaction_value(fields: list[Any]) -> TransactionValue:
    """The value of version 0 or later (later versions only append fields); ValueError or
    TypeError for one not in the format."""
    (
        _,
        producer_id,
        previous_producer_id,
        next_producer_id,
        producer_epoch,
        last_producer_epoch,
        timeout_ms,
        state,
        partitions,
        log_partitions,
        start_ts,
        last_update_ts,
    ) = fields[:12]
    if not isinstance(partitions, list) or not isinstance(log_partitions, list):
        raise ValueError("partitions and log partitions are arrays")
    refused = fields[12] if len(fields) > 12 else []
    if not isinstance(refused, list):
        raise ValueError("refused markers are an array")
    return TransactionValue(
        _int(producer_id),
        _int(previous_producer_id),
        _int(next_producer_id),
        _int(producer_epoch),
        _int(last_producer_epoch),
        _int(timeout_ms),
        _int(state),
        tuple(_topic_partitions(entry) for entry in partitions),
        tuple(_int(p) for p in log_partitions),
        _int(start_ts),
        _int(last_update_ts),
        tuple(_refused_marker(entry) for entry in refused),
    )


def decode_producer_id_block_value(fields: list[Any]) -> ProducerIdBlockValue:
    _, next_block_start = fields[:2]
    return ProducerIdBlockValue(_int(next_block_start))


def _topic_partitions(entry: Any) -> tuple[str, tuple[int, ...]]:
    if not isinstance(entry, list) or len(entry) < 2 or not isinstance(entry[1], list):
        raise ValueError("a topic's partitions are an array [topic, [partition, ...]]")
    topic = entry[0]
    if not isinstance(topic, str):
        raise ValueError(f"expected a topic name, got {type(topic).__name__}")
    return topic, tuple(_int(p) for p in entry[1])


def _refused_marker(entry: Any) -> tuple[str, int, int]:
    if not isinstance(entry, list) or len(entry) < 3 or not isinstance(entry[0], str):
        raise ValueError("a refused marker is an array [topic, partition, error code]")
    return entry[0], _int(entry[1]), _int(entry[2])


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value
