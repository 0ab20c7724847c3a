"""Decoding the log's records into the pipeline's typed rows (no Spark session needed)."""

from __future__ import annotations

import dataclasses

import msgpack
import pyarrow as pa
import pytest

from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_server.records import (
    ConsumerGroupMetadataValue,
    CoordinatorRecord,
    GroupMemberValue,
    GroupMetadataValue,
    RecordFormatError,
    encode_record,
    new_consumer_group_metadata_record,
    new_consumer_group_metadata_tombstone_record,
    new_group_metadata_record,
    new_group_metadata_tombstone_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
    new_producer_id_block_record,
    new_transaction_record,
    new_transaction_tombstone_record,
    new_transactional_offset_record,
    new_transactional_offset_tombstone_record,
)
from coordinator_server.records.security import (
    AclKey,
    AclValue,
    ScramCredentialKey,
    ScramCredentialValue,
)
from coordinator_server.records.transactional_offsets import TransactionalOffsetValue
from coordinator_server.records.transactions import TransactionValue
from coordinator_server.tools.pipeline.decode import (
    ARROW_SCHEMA,
    SCHEMA,
    RecordBatchBuilder,
    decode_arrow_batches,
    decode_batches,
    decode_row,
)

COLUMNS = SCHEMA.fieldNames()


def row_of(record: object, *, partition: int = 3, offset: int = 41) -> dict[str, object]:
    key, value = encode_record(record)  # type: ignore[arg-type]
    return dict(
        zip(COLUMNS, decode_row(partition, offset, 1_764_000_000_123, key, value), strict=True)
    )


def test_arrow_schema_is_sparks_own_mapping_of_the_schema() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_offset_commit_fills_the_offset_columns_and_the_log_position() -> None:
    row = row_of(
        new_offset_commit_record(
            "g", "orders", 7, 42, 5, "meta", 1_764_000_000_000, 1_764_000_100_000
        )
    )
    assert row["record_type"] == "offset_commit"
    assert (row["group"], row["topic"], row["partition"]) == ("g", "orders", 7)
    assert (row["committed_offset"], row["leader_epoch"], row["metadata"]) == (42, 5, "meta")
    # Arrow takes timestamps in microseconds.
    assert row["commit_timestamp"] == 1_764_000_000_000_000
    assert row["expire_timestamp"] == 1_764_000_100_000_000
    assert (row["log_partition"], row["log_offset"], row["log_timestamp"]) == (
        3,
        41,
        1_764_000_000_123_000,
    )
    assert row["tombstone"] is False
    assert row["generation"] is None and row["members"] is None


def test_offset_commit_tombstone_keeps_its_key_only() -> None:
    row = row_of(new_offset_commit_tombstone_record("g", "orders", 7))
    assert (row["record_type"], row["group"], row["topic"], row["partition"]) == (
        "offset_commit",
        "g",
        "orders",
        7,
    )
    assert row["tombstone"] is True
    assert row["committed_offset"] is None and row["commit_timestamp"] is None


def test_consumer_group_metadata_decodes_subscriptions_and_assignments() -> None:
    member = GroupMemberValue(
        "m-1", "instance-1", "client-1", "/10.0.0.1", 30_000, 10_000,
        ConsumerProtocolSubscription(["orders", "refunds"]).encode(),
        ConsumerProtocolAssignment([TopicPartitions("orders", [0, 2])]).encode(),
    )  # fmt: skip
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 1_764_000_000_000, (member,))
    row = row_of(new_group_metadata_record("g", value))
    assert row["record_type"] == "group_metadata"
    assert (row["generation"], row["protocol_type"], row["protocol"], row["leader"]) == (
        4,
        "consumer",
        "range",
        "m-1",
    )
    assert row["topic"] is None and row["committed_offset"] is None
    (decoded,) = row["members"]  # type: ignore[misc]
    assert decoded["member_id"] == "m-1" and decoded["group_instance_id"] == "instance-1"
    assert decoded["subscribed_topics"] == ["orders", "refunds"]
    assert decoded["assignment"] == [{"topic": "orders", "partitions": [0, 2]}]
    assert decoded["assignment_bytes"] == member.assignment


def test_other_protocol_types_stay_opaque() -> None:
    member = GroupMemberValue("m", None, "c", "/h", 1, 1, b"\x01\x02", b"\x03")
    row = row_of(
        new_group_metadata_record(
            "g", GroupMetadataValue("connect", 1, "sessioned", "m", -1, (member,))
        )
    )
    (decoded,) = row["members"]  # type: ignore[misc]
    assert decoded["subscribed_topics"] is None and decoded["assignment"] is None
    assert decoded["subscription_bytes"] == b"\x01\x02"
    assert row["state_timestamp"] is None  # -1: unknown


def test_group_tombstone() -> None:
    row = row_of(new_group_metadata_tombstone_record("g"))
    assert (row["record_type"], row["tombstone"], row["members"]) == ("group_metadata", True, None)


def test_transactional_offset_fills_the_offset_and_producer_columns() -> None:
    row = row_of(
        new_transactional_offset_record(
            "g", "orders", 3, 1007, TransactionalOffsetValue(2, 42, 5, "m", 1_764_000_000_000)
        )
    )
    assert row["record_type"] == "transactional_offset"
    assert (row["group"], row["topic"], row["partition"]) == ("g", "orders", 3)
    assert (row["producer_id"], row["producer_epoch"]) == (1007, 2)
    assert (row["committed_offset"], row["leader_epoch"], row["metadata"]) == (42, 5, "m")
    assert (row["commit_timestamp"], row["expire_timestamp"]) == (1_764_000_000_000_000, None)
    assert (row["tombstone"], row["transactional_id"], row["members"]) == (False, None, None)

    tombstone = row_of(new_transactional_offset_tombstone_record("g", "orders", 3, 1007))
    assert (tombstone["record_type"], tombstone["producer_id"], tombstone["tombstone"]) == (
        "transactional_offset",
        1007,
        True,
    )
    assert (tombstone["committed_offset"], tombstone["producer_epoch"]) == (None, None)


def test_transaction_fills_the_transaction_columns() -> None:
    value = TransactionValue(
        producer_id=5000,
        previous_producer_id=-1,
        next_producer_id=-1,
        producer_epoch=3,
        last_producer_epoch=2,
        timeout_ms=60_000,
        state=2,
        partitions=(("out", (0, 1)), ("other", (4,))),
        log_partitions=(1, 7),
        txn_start_timestamp_ms=1_764_000_000_000,
        txn_last_update_timestamp_ms=1_764_000_000_500,
    )
    row = row_of(new_transaction_record("payments-job", value))
    assert (row["record_type"], row["group"], row["transactional_id"]) == (
        "transaction",
        "",
        "payments-job",
    )
    assert (row["producer_id"], row["producer_epoch"], row["transaction_state"]) == (
        5000,
        3,
        "PrepareCommit",
    )
    assert row["transaction_timeout_ms"] == 60_000
    assert row["transaction_partitions"] == [
        {"topic": "out", "partitions": [0, 1]},
        {"topic": "other", "partitions": [4]},
    ]
    assert row["transaction_log_partitions"] == [1, 7]
    assert row["transaction_start_timestamp"] == 1_764_000_000_000_000
    assert row["transaction_update_timestamp"] == 1_764_000_000_500_000
    assert row["committed_offset"] is None
    # A state id Kafka does not have is shown as it is, not guessed at.
    odd = row_of(new_transaction_record("x", dataclasses.replace(value, state=9)))
    assert odd["transaction_state"] == "Unknown(9)"

    expired = row_of(new_transaction_tombstone_record("payments-job"))
    assert (expired["transactional_id"], expired["tombstone"], expired["producer_id"]) == (
        "payments-job",
        True,
        None,
    )


def test_producer_id_block_fills_next_block_start() -> None:
    row = row_of(new_producer_id_block_record(6000))
    assert (row["record_type"], row["group"], row["next_block_start"]) == (
        "producer_id_block",
        "",
        6000,
    )
    assert (row["log_partition"], row["producer_id"], row["tombstone"]) == (3, None, False)


def test_every_row_of_the_new_types_fits_the_arrow_schema() -> None:
    builder = RecordBatchBuilder()
    for record in (
        new_producer_id_block_record(6000),
        new_transaction_tombstone_record("t"),
        new_transactional_offset_tombstone_record("g", "orders", 3, 1007),
    ):
        key, value = encode_record(record)
        builder.append(decode_row(0, 1, 0, key, value))
    assert builder.flush().num_rows == 3


def test_unknown_record_types_are_rejected_with_their_position() -> None:
    with pytest.raises(RecordFormatError, match="log partition 3, offset 41"):
        decode_row(3, 41, 0, msgpack.packb([9, 0, "g"]), msgpack.packb([0]))


def test_batches_hold_every_row_in_order() -> None:
    records = [
        (
            offset,
            1_000 + offset,
            *encode_record(new_offset_commit_record("g", "t", 0, offset, -1, "", 5)),
        )
        for offset in range(25)
    ]
    batches = list(decode_batches(2, records, batch_rows=10))
    assert [batch.num_rows for batch in batches] == [10, 10, 5]
    assert all(batch.schema.equals(ARROW_SCHEMA) for batch in batches)
    offsets = [value for batch in batches for value in batch.column("committed_offset").to_pylist()]
    assert offsets == list(range(25))
    assert len(RecordBatchBuilder()) == 0


def test_arrow_batches_of_the_kafka_source_decode_one_for_one() -> None:
    """What mapInArrow hands the decoder: Spark's Kafka rows, binary keys and values."""
    raw = pa.schema(
        [
            ("log_partition", pa.int32()),
            ("log_offset", pa.int64()),
            ("log_timestamp_ms", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
        ]
    )
    commits = [encode_record(new_offset_commit_record("g", "t", 0, n, -1, "", 5)) for n in (7, 9)]
    tombstone = encode_record(new_group_metadata_tombstone_record("g"))
    first = pa.RecordBatch.from_pylist(
        [
            {
                "log_partition": 4,
                "log_offset": 10 + i,
                "log_timestamp_ms": 1_000,
                "key": k,
                "value": v,
            }
            for i, (k, v) in enumerate(commits)
        ],
        schema=raw,
    )
    second = pa.RecordBatch.from_pylist(
        [{"log_partition": 4, "log_offset": 12, "log_timestamp_ms": None,
          "key": tombstone[0], "value": tombstone[1]}],
        schema=raw,
    )  # fmt: skip
    decoded = list(decode_arrow_batches(iter([first, second])))
    assert [batch.num_rows for batch in decoded] == [2, 1]
    assert all(batch.schema.equals(ARROW_SCHEMA) for batch in decoded)
    rows = [row for batch in decoded for row in batch.to_pylist()]
    assert [(r["record_type"], r["committed_offset"], r["tombstone"]) for r in rows] == [
        ("offset_commit", 7, False),
        ("offset_commit", 9, False),
        ("group_metadata", None, True),
    ]
    assert [(r["log_partition"], r["log_offset"]) for r in rows] == [(4, 10), (4, 11), (4, 12)]
    assert rows[0]["log_timestamp"] is not None and rows[2]["log_timestamp"] is None


def test_consumer_group_protocol_records_are_left_out_of_the_history() -> None:
    """Kafka's consumer group protocol's records (KIP-848) are not in the tables yet: a log
    holding them still decodes, their rows left out."""
    epoch = encode_record(
        new_consumer_group_metadata_record("g", ConsumerGroupMetadataValue(epoch=3))
    )
    gone = encode_record(new_consumer_group_metadata_tombstone_record("g"))
    commit = encode_record(new_offset_commit_record("g", "t", 0, 7, -1, "", 5))
    raw = [(0, 1_000, *epoch), (1, 1_000, *commit), (2, 1_000, *gone)]
    batches = list(decode_batches(0, raw, batch_rows=10))
    assert [v for b in batches for v in b.column("log_offset").to_pylist()] == [1]


def test_acls_and_scram_credentials_are_left_out_of_the_history() -> None:
    """The security partition's records are not analytics data: an ACL and a credential
    beside two commits leave the two commits' rows only, in both decoders."""
    acl = encode_record(CoordinatorRecord(AclKey(3, "g", 3, "User:alice", "*", 3, 3), AclValue()))
    credential = encode_record(
        CoordinatorRecord(
            ScramCredentialKey("alice", 2), ScramCredentialValue(b"salt", b"k", b"s", 4096)
        )
    )
    commits = [encode_record(new_offset_commit_record("g", "t", 0, n, -1, "", 5)) for n in (7, 9)]
    raw = [commits[0], acl, credential, commits[1]]
    batches = list(
        decode_batches(0, [(i, 1_000, k, v) for i, (k, v) in enumerate(raw)], batch_rows=10)
    )
    assert [v for b in batches for v in b.column("committed_offset").to_pylist()] == [7, 9]
    source = pa.RecordBatch.from_pylist(
        [
            {"log_partition": 0, "log_offset": i, "log_timestamp_ms": 1_000, "key": k, "value": v}
            for i, (k, v) in enumerate(raw)
        ]
    )
    decoded = list(decode_arrow_batches([source]))
    assert [v for b in decoded for v in b.column("log_offset").to_pylist()] == [0, 3]
    assert b"salt" not in str([b.to_pylist() for b in decoded]).encode()
