"""The state the log leaves behind, with compaction semantics: the latest record of each key
wins, and a tombstone deletes the key.

A group exists when its latest group metadata record is a value, or, without one (never
written, or deleted by a tombstone), when one of its offset commits written after that
tombstone survives: the coordinator keeps offsets committed to an unknown group as a
"simple" group, Empty and without a protocol type, and so does its replay of the log. A
transactional offset record written after that tombstone keeps a group too, even when the
end of its transaction deleted it since: the replay of the pending offset created the
group, as a commit's does, and the end does not delete it (the group lives on, Empty, until
the server's cleanup writes its tombstone).

A transactional id's state is its latest transaction record (a tombstone: the id expired);
a log partition's producer id block is its latest block record.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from coordinator_server.tools.pipeline.decode import (
    GROUP_METADATA,
    OFFSET_COMMIT,
    PRODUCER_ID_BLOCK,
    TRANSACTION,
    TRANSACTIONAL_OFFSET,
)

__all__ = [
    "final_groups",
    "final_offsets",
    "final_pending_offsets",
    "final_transactions",
    "group_positions",
    "latest_per_key",
    "producer_id_blocks",
    "transaction_positions",
]

KEY_COLUMNS = ("record_type", "group", "topic", "partition")


def _position() -> Column:
    return F.struct("log_partition", "log_offset")


def latest_per_key(log: DataFrame) -> DataFrame:
    """The latest record of every key, tombstones included (as after Kafka's cleaner)."""
    value_columns = [name for name in log.columns if name not in KEY_COLUMNS]
    return (
        log.groupBy(*KEY_COLUMNS)
        .agg(F.max_by(F.struct(*value_columns), _position()).alias("latest"))
        .select(*KEY_COLUMNS, "latest.*")
    )


def final_offsets(log: DataFrame) -> DataFrame:
    """The committed offsets that exist at the end of the log: one row per group, topic and
    partition."""
    return (
        latest_per_key(log.filter(F.col("record_type") == OFFSET_COMMIT))
        .filter(~F.col("tombstone"))
        .select(
            "group",
            "topic",
            "partition",
            "committed_offset",
            "leader_epoch",
            "metadata",
            "commit_timestamp",
            "expire_timestamp",
            "log_partition",
            "log_offset",
        )
    )


def final_pending_offsets(log: DataFrame) -> DataFrame:
    """The pending transactional offsets at the end of the log, compaction's way: the
    latest record of each group, topic, partition and producer that is not a tombstone
    (`transactional.replay_transactional_offsets` adds which of them are superseded)."""
    keys = ("group", "topic", "partition", "producer_id")
    value_columns = [name for name in log.columns if name not in (*keys, "record_type")]
    return (
        log.filter(F.col("record_type") == TRANSACTIONAL_OFFSET)
        .groupBy(*keys)
        .agg(F.max_by(F.struct(*value_columns), _position()).alias("latest"))
        .select(*keys, "latest.*")
        .filter(~F.col("tombstone"))
        .select(
            *keys,
            "producer_epoch",
            "committed_offset",
            "leader_epoch",
            "metadata",
            "commit_timestamp",
            "log_partition",
            "log_offset",
        )
    )


def final_transactions(log: DataFrame) -> DataFrame:
    """Every transactional id that exists at the end of the log, with its latest transaction
    record: transactional_id, producer_id, producer_epoch, transaction_state,
    transaction_timeout_ms, transaction_partitions, transaction_log_partitions,
    transaction_start_timestamp, transaction_update_timestamp, log_partition, log_offset."""
    columns = (
        "producer_id",
        "producer_epoch",
        "transaction_state",
        "transaction_timeout_ms",
        "transaction_partitions",
        "transaction_log_partitions",
        "transaction_start_timestamp",
        "transaction_update_timestamp",
        "log_partition",
        "log_offset",
        "tombstone",
    )
    return (
        log.filter(F.col("record_type") == TRANSACTION)
        .groupBy("transactional_id")
        .agg(F.max_by(F.struct(*columns), _position()).alias("latest"))
        .select("transactional_id", "latest.*")
        .filter(~F.col("tombstone"))
        .drop("tombstone")
    )


def transaction_positions(log: DataFrame) -> DataFrame:
    """Where each transactional id's records are and how far they go: transactional_id,
    log_partition and the offset of its latest record (tombstones included)."""
    return (
        log.filter(F.col("record_type") == TRANSACTION)
        .groupBy("transactional_id")
        .agg(
            F.max_by("log_partition", "log_offset").alias("log_partition"),
            F.max("log_offset").alias("last_log_offset"),
        )
    )


def producer_id_blocks(log: DataFrame) -> DataFrame:
    """Each log partition's latest producer id block: log_partition, next_block_start (the
    ids of the partition's part of the range below it are handed out or reserved),
    log_offset, log_timestamp, and blocks_reserved (its block records in the log; fewer
    than were written once compaction has run)."""
    blocks = log.filter((F.col("record_type") == PRODUCER_ID_BLOCK) & ~F.col("tombstone"))
    return blocks.groupBy("log_partition").agg(
        F.max_by("next_block_start", "log_offset").alias("next_block_start"),
        F.max("log_offset").alias("log_offset"),
        F.max_by("log_timestamp", "log_offset").alias("log_timestamp"),
        F.count(F.lit(1)).alias("blocks_reserved"),
    )


def final_groups(log: DataFrame) -> DataFrame:
    """The groups that exist at the end of the log, one row each: group, protocol_type,
    generation, protocol, leader, members, state ("Empty" without members, else "Active":
    the log does not say which of the active states), simple (no group record)."""
    metadata = latest_per_key(log.filter(F.col("record_type") == GROUP_METADATA)).select(
        "group",
        F.col("tombstone").alias("metadata_deleted"),
        F.col("log_offset").alias("metadata_offset"),
        "protocol_type",
        "generation",
        "protocol",
        "leader",
        "members",
    )
    last_commits = (
        final_offsets(log)
        .select("group", "log_offset")
        .unionByName(
            log.filter(F.col("record_type") == TRANSACTIONAL_OFFSET).select("group", "log_offset")
        )
        .groupBy("group")
        .agg(F.max("log_offset").alias("last_commit_offset"))
    )
    joined = metadata.join(last_commits, "group", "full_outer")
    has_record = F.col("metadata_offset").isNotNull() & ~F.col("metadata_deleted")
    simple = ~has_record & (
        F.col("last_commit_offset").isNotNull()
        & (
            F.col("metadata_offset").isNull()
            | (F.col("last_commit_offset") > F.col("metadata_offset"))
        )
    )
    empty_members = F.array().cast(metadata.schema["members"].dataType)
    members = F.when(has_record, F.coalesce("members", empty_members)).otherwise(empty_members)
    return joined.filter(has_record | simple).select(
        "group",
        F.when(has_record, F.col("protocol_type")).otherwise(F.lit("")).alias("protocol_type"),
        F.when(has_record, F.col("generation")).otherwise(F.lit(0)).alias("generation"),
        F.when(has_record, F.col("protocol")).alias("protocol"),
        F.when(has_record, F.col("leader")).alias("leader"),
        members.alias("members"),
        F.when(F.size(members) == 0, F.lit("Empty")).otherwise(F.lit("Active")).alias("state"),
        (~has_record).alias("simple"),
    )


def group_positions(log: DataFrame) -> DataFrame:
    """Where each group's records are and how far they go: group, log_partition and the
    offset of its latest record of any kind (tombstones included)."""
    return log.groupBy("group").agg(
        F.max_by("log_partition", "log_offset").alias("log_partition"),
        F.max("log_offset").alias("last_log_offset"),
    )
