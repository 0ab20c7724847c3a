"""The log's records as typed rows: the Spark schema, and the decoding that executors run.

Every record of the log becomes one row. Offset commits fill the offset columns, group
metadata records the group columns; a tombstone keeps its key columns and leaves the value
columns null. A transactional offset (a pending one) fills the offset columns too, and its
producer's columns; a transaction record the transaction columns (its `group` is "": it
belongs to a transactional id, not a group); a producer id block `next_block_start`.
The position of the record in the log (`log_partition`, `log_offset`, `log_timestamp`) is
on every row: it orders a key's records, which is what compaction and every "what came
before" question need.

Rows leave the executors as Arrow record batches built column by column, which Spark takes
as they are; handing it Python tuples costs several times more per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    InvalidConsumerProtocolError,
)
from coordinator_server.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionOwnershipKey,
    ProducerIdBlockKey,
    ProducerIdBlockValue,
    RecordFormatError,
    TransactionalOffsetKey,
    TransactionalOffsetValue,
    TransactionKey,
    TransactionState,
    TransactionValue,
    decode_record,
)
from coordinator_server.records.consumer_groups import is_consumer_group_key
from coordinator_server.records.security import is_security_key

__all__ = [
    "ARROW_SCHEMA",
    "GROUP_METADATA",
    "OFFSET_COMMIT",
    "PARTITION_OWNERSHIP",
    "PRODUCER_ID_BLOCK",
    "SCHEMA",
    "TRANSACTION",
    "TRANSACTIONAL_OFFSET",
    "RawLogRecord",
    "RecordBatchBuilder",
    "decode_arrow_batches",
    "decode_batches",
]

OFFSET_COMMIT: Final = "offset_commit"
GROUP_METADATA: Final = "group_metadata"
# A node's takeover of a log partition (a cluster's fencing record): group "", no offset.
PARTITION_OWNERSHIP: Final = "partition_ownership"
# A transactional id's metadata (group "", the id in `transactional_id`).
TRANSACTION: Final = "transaction"
# A log partition's producer id block (group "", one key per log partition).
PRODUCER_ID_BLOCK: Final = "producer_id_block"
# A producer's pending offset of a group's partition (key: group, topic, partition,
# producer_id).
TRANSACTIONAL_OFFSET: Final = "transactional_offset"
CONSUMER_PROTOCOL_TYPE: Final = "consumer"

# (log_offset, log_timestamp_ms, key, value): one record as a log gives it back.
RawLogRecord = tuple[int, int, bytes, bytes | None]

_ASSIGNMENT = ArrayType(
    StructType(
        [
            StructField("topic", StringType(), False),
            StructField("partitions", ArrayType(IntegerType(), False), False),
        ]
    ),
    False,
)

_MEMBER = StructType(
    [
        StructField("member_id", StringType(), False),
        StructField("group_instance_id", StringType(), True),
        StructField("client_id", StringType(), False),
        StructField("client_host", StringType(), False),
        StructField("rebalance_timeout_ms", IntegerType(), False),
        StructField("session_timeout_ms", IntegerType(), False),
        # Decoded from the "consumer" embedded protocol; null for other protocol types
        # and for bytes that do not parse.
        StructField("subscribed_topics", ArrayType(StringType(), False), True),
        StructField("assignment", _ASSIGNMENT, True),
        # As stored, for comparing with DescribeGroups and for other protocol types.
        StructField("subscription_bytes", BinaryType(), False),
        StructField("assignment_bytes", BinaryType(), False),
    ]
)

SCHEMA: Final = StructType(
    [
        StructField("record_type", StringType(), False),
        StructField("group", StringType(), False),
        # Offset commits: the key, then the value.
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("committed_offset", LongType(), True),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
        StructField("commit_timestamp", TimestampType(), True),
        StructField("expire_timestamp", TimestampType(), True),
        # Group metadata.
        StructField("generation", IntegerType(), True),
        StructField("protocol_type", StringType(), True),
        StructField("protocol", StringType(), True),
        StructField("leader", StringType(), True),
        StructField("state_timestamp", TimestampType(), True),
        StructField("members", ArrayType(_MEMBER, False), True),
        # Transactional offsets (the key's producer) and transactions (the value's).
        StructField("producer_id", LongType(), True),
        StructField("producer_epoch", IntegerType(), True),
        # Transactions: the key, then the value.
        StructField("transactional_id", StringType(), True),
        # Kafka's name of the state ("PrepareCommit"); "Unknown(<id>)" for an id it lacks.
        StructField("transaction_state", StringType(), True),
        StructField("transaction_timeout_ms", IntegerType(), True),
        StructField("transaction_partitions", _ASSIGNMENT, True),
        StructField("transaction_log_partitions", ArrayType(IntegerType(), False), True),
        StructField("transaction_start_timestamp", TimestampType(), True),
        StructField("transaction_update_timestamp", TimestampType(), True),
        # Producer id blocks.
        StructField("next_block_start", LongType(), True),
        # Where the record is in the log.
        StructField("log_partition", IntegerType(), False),
        StructField("log_offset", LongType(), False),
        StructField("log_timestamp", TimestampType(), True),
        StructField("tombstone", BooleanType(), False),
    ]
)


def _arrow_type(data_type: Any) -> pa.DataType:
    """Spark's own mapping of each type to Arrow (timestamps in UTC microseconds), so that
    the batches are exactly what Spark expects for SCHEMA."""
    if isinstance(data_type, StringType):
        return pa.string()
    if isinstance(data_type, IntegerType):
        return pa.int32()
    if isinstance(data_type, LongType):
        return pa.int64()
    if isinstance(data_type, BooleanType):
        return pa.bool_()
    if isinstance(data_type, BinaryType):
        return pa.binary()
    if isinstance(data_type, TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(data_type, ArrayType):
        element = _arrow_type(data_type.elementType)
        return pa.list_(pa.field("element", element, data_type.containsNull))
    if isinstance(data_type, StructType):
        return pa.struct([_arrow_field(field) for field in data_type.fields])
    raise TypeError(f"no Arrow type for {data_type}")


def _arrow_field(field: StructField) -> pa.Field:
    return pa.field(field.name, _arrow_type(field.dataType), field.nullable)


ARROW_SCHEMA: Final = pa.schema([_arrow_field(field) for field in SCHEMA.fields])
_COLUMNS: Final = tuple(SCHEMA.fieldNames())
_NO_OFFSET_VALUE: Final = (None,) * 5
_NO_GROUP_VALUE: Final = (None,) * 6
_NO_PRODUCER: Final = (None,) * 2
_NO_TRANSACTION: Final = (None,) * 7
_NO_BLOCK: Final = (None,)
_NO_TRANSACTIONAL_VALUES: Final = _NO_PRODUCER + _NO_TRANSACTION + _NO_BLOCK
_STATE_NAMES: Final = {state.value: state.kafka_name for state in TransactionState}


def _micros(timestamp_ms: int | None) -> int | None:
    """Milliseconds since the epoch to Arrow's microseconds; -1 ("unknown") to null."""
    if timestamp_ms is None or timestamp_ms < 0:
        return None
    return timestamp_ms * 1000


def _consumer_topics(data: bytes) -> list[str] | None:
    try:
        return ConsumerProtocolSubscription.decode(data).topics
    except InvalidConsumerProtocolError:
        return None


def _consumer_assignment(data: bytes) -> list[dict[str, Any]] | None:
    try:
        decoded = ConsumerProtocolAssignment.decode(data)
    except InvalidConsumerProtocolError:
        return None
    return [{"topic": tp.topic, "partitions": tp.partitions} for tp in decoded.partitions]


def _members(value: GroupMetadataValue) -> list[dict[str, Any]]:
    consumer = value.protocol_type == CONSUMER_PROTOCOL_TYPE
    return [
        {
            "member_id": member.member_id,
            "group_instance_id": member.group_instance_id,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "rebalance_timeout_ms": member.rebalance_timeout_ms,
            "session_timeout_ms": member.session_timeout_ms,
            "subscribed_topics": _consumer_topics(member.subscription) if consumer else None,
            "assignment": _consumer_assignment(member.assignment) if consumer else None,
            "subscription_bytes": member.subscription,
            "assignment_bytes": member.assignment,
        }
        for member in value.members
    ]


def decode_row(
    log_partition: int, log_offset: int, log_timestamp_ms: int, key: bytes, value: bytes | None
) -> tuple[Any, ...]:
    """One record as a row of SCHEMA (timestamps in microseconds, as Arrow takes them).

    Raises:
        RecordFormatError: the record is not in the documented format, or of a record type
            this reader does not know (RECORDS.md: a reader that reads every type must
            reject those rather than guess).
    """
    try:
        record = decode_record(key, value)
    except RecordFormatError as error:
        raise RecordFormatError(
            f"log partition {log_partition}, offset {log_offset}: {error}"
        ) from error
    position = (log_partition, log_offset, _micros(log_timestamp_ms), record.value is None)
    record_key, record_value = record.key, record.value
    if type(record_key) is OffsetCommitKey:
        head: tuple[Any, ...] = (
            OFFSET_COMMIT,
            record_key.group,
            record_key.topic,
            record_key.partition,
        )
        if type(record_value) is OffsetCommitValue:
            body: tuple[Any, ...] = (
                record_value.offset,
                record_value.leader_epoch,
                record_value.metadata,
                _micros(record_value.commit_timestamp_ms),
                _micros(record_value.expire_timestamp_ms),
            )
            return (*head, *body, *_NO_GROUP_VALUE, *_NO_TRANSACTIONAL_VALUES, *position)
        return (*head, *_NO_OFFSET_VALUE, *_NO_GROUP_VALUE, *_NO_TRANSACTIONAL_VALUES, *position)
    if type(record_key) is GroupMetadataKey:
        head = (GROUP_METADATA, record_key.group, None, None, *_NO_OFFSET_VALUE)
        if type(record_value) is GroupMetadataValue:
            body = (
                record_value.generation,
                record_value.protocol_type,
                record_value.protocol_name,
                record_value.leader,
                _micros(record_value.current_state_timestamp_ms),
                _members(record_value),
            )
            return (*head, *body, *_NO_TRANSACTIONAL_VALUES, *position)
        return (*head, *_NO_GROUP_VALUE, *_NO_TRANSACTIONAL_VALUES, *position)
    if type(record_key) is PartitionOwnershipKey:
        return (
            PARTITION_OWNERSHIP,
            "",
            None,
            None,
            *_NO_OFFSET_VALUE,
            *_NO_GROUP_VALUE,
            *_NO_TRANSACTIONAL_VALUES,
            *position,
        )
    if type(record_key) is TransactionalOffsetKey:
        head = (
            TRANSACTIONAL_OFFSET,
            record_key.group,
            record_key.topic,
            record_key.partition,
        )
        if type(record_value) is TransactionalOffsetValue:
            body = (
                record_value.offset,
                record_value.leader_epoch,
                record_value.metadata,
                _micros(record_value.commit_timestamp_ms),
                None,
            )
            epoch: int | None = record_value.producer_epoch
        else:
            body, epoch = _NO_OFFSET_VALUE, None
        return (
            *head,
            *body,
            *_NO_GROUP_VALUE,
            record_key.producer_id,
            epoch,
            *_NO_TRANSACTION,
            *_NO_BLOCK,
            *position,
        )
    if type(record_key) is TransactionKey:
        head = (TRANSACTION, "", None, None, *_NO_OFFSET_VALUE, *_NO_GROUP_VALUE)
        if type(record_value) is TransactionValue:
            return (
                *head,
                record_value.producer_id,
                record_value.producer_epoch,
                record_key.transactional_id,
                _state_name(record_value.state),
                record_value.timeout_ms,
                [
                    {"topic": topic, "partitions": list(partitions)}
                    for topic, partitions in record_value.partitions
                ],
                list(record_value.log_partitions),
                _micros(record_value.txn_start_timestamp_ms),
                _micros(record_value.txn_last_update_timestamp_ms),
                *_NO_BLOCK,
                *position,
            )
        return (
            *head,
            *_NO_PRODUCER,
            record_key.transactional_id,
            *_NO_TRANSACTION[1:],
            *_NO_BLOCK,
            *position,
        )
    if type(record_key) is ProducerIdBlockKey:
        block = (
            record_value.next_block_start if type(record_value) is ProducerIdBlockValue else None
        )
        return (
            PRODUCER_ID_BLOCK,
            "",
            None,
            None,
            *_NO_OFFSET_VALUE,
            *_NO_GROUP_VALUE,
            *_NO_PRODUCER,
            *_NO_TRANSACTION,
            block,
            *position,
        )
    raise RecordFormatError(f"unknown key {record_key!r}")


def _state_name(state: int) -> str:
    # A state this reader does not know is shown as its id, not guessed at.
    return _STATE_NAMES.get(state, f"Unknown({state})")


class RecordBatchBuilder:
    """Rows in, Arrow record batches of ARROW_SCHEMA out."""

    def __init__(self) -> None:
        self._rows: list[tuple[Any, ...]] = []

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, row: tuple[Any, ...]) -> None:
        self._rows.append(row)

    def flush(self) -> pa.RecordBatch:
        # Transposed in one C-level pass: cheaper than appending to every column per row.
        columns = list(zip(*self._rows, strict=True)) or [() for _ in _COLUMNS]
        arrays = [
            pa.array(column, type=field.type)
            for column, field in zip(columns, ARROW_SCHEMA, strict=True)
        ]
        self._rows = []
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def decode_batches(
    log_partition: int, records: Iterable[RawLogRecord], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Decode one log partition's records into record batches of at most `batch_rows`.

    The security partition's ACL and SCRAM credential records are left out here and in
    `decode_arrow_batches`: they are not the groups' and transactions' history, and
    credentials have no business in an analytics table. So are the records of Kafka's
    consumer group protocol (KIP-848), whose groups the tables do not describe yet."""
    builder = RecordBatchBuilder()
    for log_offset, timestamp_ms, key, value in records:
        if is_security_key(key) or is_consumer_group_key(key):
            continue
        builder.append(decode_row(log_partition, log_offset, timestamp_ms, key, value))
        if len(builder) >= batch_rows:
            yield builder.flush()
    if len(builder):
        yield builder.flush()


def decode_arrow_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Decode record batches of raw records (columns `log_partition`, `log_offset`,
    `log_timestamp_ms`, `key`, `value`) into record batches of ARROW_SCHEMA, one out per
    one in: the function `mapInArrow` runs over Spark's Kafka source."""
    builder = RecordBatchBuilder()
    for batch in batches:
        columns = (
            batch.column(name).to_pylist()
            for name in ("log_partition", "log_offset", "log_timestamp_ms", "key", "value")
        )
        for log_partition, log_offset, timestamp_ms, key, value in zip(*columns, strict=True):
            if is_security_key(key) or is_consumer_group_key(key):
                continue
            builder.append(decode_row(log_partition, log_offset, timestamp_ms, key, value))
        yield builder.flush()
