"""Transactional offsets in the log, replayed as the server's offsets manager replays them,
and what the end of each transaction should have written by Kafka's rules.

A TxnOffsetCommit writes a pending offset (record type 6, one key per group, partition and
producer). The end of the producer's transaction on a log partition is one write of the
tombstones of its pending offsets there, then, when it commits, a plain offset commit
(type 1) with the values of each pending offset that no later plain commit superseded
(Kafka's C11: a plain commit written after the pending offset wins), then the other
producers' later pending offsets again (docs/RECORDS.md, `offsets/transactional.py`).

The server replays those records as they are. This replay reads the log partition in order
the same way, keeping each pending offset's `superseded` flag as the server does, except at
the end of a transaction that commits: there it commits what Kafka's rule says (each
non-superseded pending offset of the producer, no superseded one) instead of taking the
offset commit records the end wrote. When the server wrote its ends by the rule, both give
the same committed offsets; when an end broke it (a superseded offset committed over a
later plain commit, a pending offset left out), the audit's comparison of these offsets
with OffsetFetch shows the partition.

An end is recognized in the log as a run of transactional offset tombstones of one producer
directly followed by offset commit records that carry exactly the values of pending offsets
of that run (as only an end writes them: the pending offset's commit time, no explicit
expiry). Tombstones followed by anything else (an abort, DeleteGroups, OffsetDelete) only
remove the pending offsets. An end that commits nothing (every pending offset superseded)
looks like an abort; both leave the same state.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from coordinator_server.tools.pipeline.decode import OFFSET_COMMIT, TRANSACTIONAL_OFFSET
from coordinator_server.tools.pipeline.state import final_offsets

__all__ = [
    "REPLAY_SCHEMA",
    "TransactionalState",
    "replay_log_partition",
    "replay_transactional_offsets",
]

COMMITTED: Final = "committed"
PENDING: Final = "pending"

_INPUT_COLUMNS: Final = (
    "record_type",
    "group",
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "expire_timestamp",
    "log_offset",
    "tombstone",
)

REPLAY_SCHEMA: Final = StructType(
    [
        # COMMITTED: a committed offset at the end of the log; PENDING: a pending one.
        StructField("state", StringType(), False),
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("producer_id", LongType(), True),
        StructField("producer_epoch", IntegerType(), True),
        StructField("committed_offset", LongType(), False),
        StructField("leader_epoch", IntegerType(), True),
        StructField("metadata", StringType(), True),
        StructField("commit_timestamp", TimestampType(), True),
        StructField("expire_timestamp", TimestampType(), True),
        StructField("superseded", BooleanType(), True),
        StructField("log_partition", IntegerType(), False),
        # The record that wrote it (for a committed offset of an end: the end's tombstone).
        StructField("log_offset", LongType(), False),
    ]
)

Key = tuple[str, str, int]
# (offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)
Values = tuple[int, int | None, str | None, datetime.datetime | None, datetime.datetime | None]


@dataclass
class _ReplayedPending:
    producer_epoch: int | None
    values: Values
    order: int
    superseded: bool = False


def _values(row: Any) -> Values:
    return (
        row.committed_offset,
        row.leader_epoch,
        row.metadata,
        row.commit_timestamp,
        row.expire_timestamp,
    )


def _key(row: Any) -> Key:
    return (row.group, row.topic, row.partition)


def replay_log_partition(log_partition: int, rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """The committed and pending offsets (rows of REPLAY_SCHEMA) that the offset commit and
    transactional offset records `rows` of one log partition leave, replayed in log order
    (see the module)."""
    ordered = sorted(rows, key=lambda row: row.log_offset)
    committed: dict[Key, tuple[Values, int]] = {}
    pending: dict[Key, dict[int, _ReplayedPending]] = {}

    def plain_commit(key: Key, values: Values, log_offset: int) -> None:
        committed[key] = (values, log_offset)
        for entry in pending.get(key, {}).values():
            entry.superseded = True

    index = 0
    while index < len(ordered):
        row = ordered[index]
        key = _key(row)
        if row.record_type == OFFSET_COMMIT:
            if row.tombstone:
                committed.pop(key, None)
            else:
                plain_commit(key, _values(row), row.log_offset)
            index += 1
            continue
        if not row.tombstone:
            held = pending.setdefault(key, {})
            held[row.producer_id] = _ReplayedPending(
                row.producer_epoch, _values(row), row.log_offset
            )
            index += 1
            continue
        # A run of tombstones: an end of a transaction, or a deletion.
        run_end = index
        while (
            run_end < len(ordered)
            and ordered[run_end].record_type == TRANSACTIONAL_OFFSET
            and ordered[run_end].tombstone
        ):
            run_end += 1
        run = ordered[index:run_end]
        ended = [
            (
                _key(tombstone),
                tombstone.producer_id,
                pending.get(_key(tombstone), {}).get(tombstone.producer_id),
            )
            for tombstone in run
        ]
        producers = {producer_id for _, producer_id, _ in ended}
        # The offset commit records the end wrote: each the values of a pending offset of
        # the run, with no explicit expiry.
        written = run_end
        if len(producers) == 1:
            expected = {(key_, entry.values[:4]) for key_, _, entry in ended if entry is not None}
            while written < len(ordered):
                after = ordered[written]
                if (
                    after.record_type != OFFSET_COMMIT
                    or after.tombstone
                    or after.expire_timestamp is not None
                    or (_key(after), _values(after)[:4]) not in expected
                ):
                    break
                written += 1
        commits = written > run_end
        for (key_, producer_id, entry), tombstone in zip(ended, run, strict=True):
            producers_of_key = pending.get(key_)
            if producers_of_key is not None:
                producers_of_key.pop(producer_id, None)
                if not producers_of_key:
                    del pending[key_]
            if commits and entry is not None and not entry.superseded:
                plain_commit(key_, entry.values, tombstone.log_offset)
        index = written

    for (group, topic, partition), (values, log_offset) in committed.items():
        yield (COMMITTED, group, topic, partition, None, None, *values, None, log_partition,
               log_offset)  # fmt: skip
    for (group, topic, partition), held in pending.items():
        for producer_id, entry in sorted(held.items()):
            yield (PENDING, group, topic, partition, producer_id, entry.producer_epoch,
                   *entry.values, entry.superseded, log_partition, entry.order)  # fmt: skip


@dataclass
class TransactionalState:
    """The log's offsets with its transactions replayed: `committed` (the columns of
    `state.final_offsets`) and `pending` (group, topic, partition, producer_id,
    producer_epoch, committed_offset, leader_epoch, metadata, superseded, log_partition,
    log_offset)."""

    committed: DataFrame
    pending: DataFrame


def replay_transactional_offsets(spark: SparkSession, log: DataFrame) -> TransactionalState:
    """The replay of the groups that have transactional offset records (each group's
    records are in one log partition, replayed in order on an executor); the other groups'
    committed offsets are compaction's (`state.final_offsets`)."""
    transactional_groups = (
        log.filter(F.col("record_type") == TRANSACTIONAL_OFFSET).select("group").distinct()
    )
    rows = log.filter(F.col("record_type").isin(OFFSET_COMMIT, TRANSACTIONAL_OFFSET)).join(
        transactional_groups, "group", "left_semi"
    )
    replayed_rdd = (
        rows.select("log_partition", *_INPUT_COLUMNS)
        .rdd.map(lambda row: (row.log_partition, row))
        .groupByKey()
        .flatMap(lambda item: replay_log_partition(item[0], item[1]))
    )
    replayed = spark.createDataFrame(replayed_rdd, REPLAY_SCHEMA).cache()
    offset_columns = final_offsets(log).columns
    plain = final_offsets(log).join(transactional_groups, "group", "left_anti")
    committed = plain.unionByName(
        replayed.filter(F.col("state") == COMMITTED).select(*offset_columns)
    )
    pending = replayed.filter(F.col("state") == PENDING).select(
        "group",
        "topic",
        "partition",
        "producer_id",
        "producer_epoch",
        "committed_offset",
        "leader_epoch",
        "metadata",
        "superseded",
        "log_partition",
        "log_offset",
    )
    return TransactionalState(committed, pending)
