"""The audit's transactional part: pending offsets against OffsetFetch with require_stable,
and transactional ids against DescribeTransactions.

- A partition with a pending offset in the log (`transactional.replay_transactional_offsets`)
  must be answered UNSTABLE_OFFSET_COMMIT by an OffsetFetch with require_stable, and only
  such a partition. A plain OffsetFetch never shows a pending offset: the committed offsets
  the audit compares are the replay's, in which an end of a transaction commits what
  Kafka's rule says.
- A transactional id's latest transaction record must match DescribeTransactions: its
  state, producer id and producer epoch; an id whose latest record is a tombstone (expired)
  or that the log lacks must be unknown to the server.

The partitions asked with require_stable are every partition the server has a committed
offset of (an OffsetFetch of every offset) and every partition the log has a pending offset
of (asked by name: a partition with only a pending offset has no committed one to list).
A pending offset the server holds on a partition neither side has a committed offset of,
and the log no pending one of, is not seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
)
from coordinator_protocol.transactions import DescribeTransactionsRequest, ListTransactionsRequest

__all__ = [
    "LIVE_TRANSACTIONS_SCHEMA",
    "STABLE_PARTITIONS_SCHEMA",
    "TRANSACTION_KIND_PREFIX",
    "describe_transactions",
    "fetch_unstable_partitions",
    "list_live_transactions",
    "pending_rows",
    "transaction_rows",
]

# The kinds of differences about a transactional id (their `group` is the id).
TRANSACTION_KIND_PREFIX: Final = "transaction_"
FETCH_CHUNK: Final = 256

# (group, topic, partition, unstable): a partition asked with require_stable.
STABLE_PARTITIONS_SCHEMA: Final = "group string, topic string, partition int, unstable boolean"
LIVE_TRANSACTIONS_SCHEMA: Final = (
    "transactional_id string, transaction_state string, producer_id long, producer_epoch int"
)

GroupPartition = tuple[str, str, int]


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def fetch_unstable_partitions(
    client: CoordinatorClient, groups: Iterable[str], named: Iterable[GroupPartition] = ()
) -> tuple[list[tuple[str, str, int, bool]], dict[str, str]]:
    """OffsetFetch with require_stable of every offset of each of `groups` and of the
    partitions `named`: (group, topic, partition, unstable) of every partition answered,
    and the groups whose calls failed, with the error."""
    answered: dict[GroupPartition, bool] = {}
    errors: dict[str, str] = {}
    by_group: dict[str, dict[str, list[int]]] = {}
    for named_group, named_topic, partition in sorted(set(named)):
        by_group.setdefault(named_group, {}).setdefault(named_topic, []).append(partition)
    requests = [OffsetFetchRequestGroup(group_id=group) for group in sorted(set(groups))]
    requests += [
        OffsetFetchRequestGroup(
            group_id=group,
            topics=[
                OffsetFetchRequestTopic(name=topic, partition_indexes=indexes)
                for topic, indexes in sorted(topics.items())
            ],
        )
        for group, topics in sorted(by_group.items())
    ]
    for chunk in _chunks(requests, FETCH_CHUNK):
        fetched = await client.offset_fetch(
            OffsetFetchRequest(groups=list(chunk), require_stable=True)
        )
        for answered_group in fetched.groups:
            group_id = answered_group.group_id
            if answered_group.error_code != 0:
                errors[group_id] = f"OffsetFetch(require_stable) error {answered_group.error_code}"
                continue
            for topic in answered_group.topics:
                for answer in topic.partitions:
                    key = (group_id, topic.name, answer.partition_index)
                    if answer.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                        answered[key] = True
                    elif answer.error_code != 0:
                        errors[group_id] = (
                            f"OffsetFetch(require_stable) error {answer.error_code} for "
                            f"{topic.name}-{answer.partition_index}"
                        )
                    else:
                        answered.setdefault(key, False)
    rows = [(*key, unstable) for key, unstable in sorted(answered.items()) if key[0] not in errors]
    return rows, errors


async def list_live_transactions(client: CoordinatorClient) -> list[str] | None:
    """The transactional ids the servers know; None when they run no transaction
    coordinator (ListTransactions fails)."""
    try:
        listed = await client.list_transactions(ListTransactionsRequest())
    except Exception:
        return None
    if listed.error_code != 0:
        return None
    return sorted(state.transactional_id for state in listed.transaction_states)


async def describe_transactions(
    client: CoordinatorClient, transactional_ids: Iterable[str]
) -> tuple[list[tuple[str, str, int, int]], dict[str, str]]:
    """DescribeTransactions of each id: (transactional_id, state, producer_id,
    producer_epoch) of the ids the server knows, and the ids whose answer was an error
    other than TRANSACTIONAL_ID_NOT_FOUND."""
    rows: list[tuple[str, str, int, int]] = []
    errors: dict[str, str] = {}
    for chunk in _chunks(sorted(set(transactional_ids)), FETCH_CHUNK):
        try:
            described = await client.describe_transactions(
                DescribeTransactionsRequest(transactional_ids=list(chunk))
            )
        except Exception as error:
            for transactional_id in chunk:
                errors[transactional_id] = f"DescribeTransactions failed: {error}"
            continue
        for state in described.transaction_states:
            if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                continue
            if state.error_code != 0:
                errors[state.transactional_id] = f"DescribeTransactions error {state.error_code}"
                continue
            rows.append(
                (
                    state.transactional_id,
                    state.transaction_state,
                    state.producer_id,
                    state.producer_epoch,
                )
            )
    return rows, errors


def _row(kind: str, field_name: str, log_value: Column, live_value: Column) -> Column:
    return F.struct(
        F.lit(kind).alias("kind"),
        F.lit(field_name).alias("field"),
        log_value.cast("string").alias("log_value"),
        live_value.cast("string").alias("live_value"),
    )


def _checks(rows: list[Column]) -> Column:
    return F.filter(F.array(*rows), lambda row: row.isNotNull())


def pending_rows(pending: DataFrame, stable: DataFrame) -> DataFrame:
    """The differences between the log's pending offsets and the require_stable answers
    `stable` (STABLE_PARTITIONS_SCHEMA), as rows of (group, topic, partition, member_id,
    check)."""
    log_side = (
        pending.groupBy("group", "topic", "partition")
        .agg(F.array_join(F.array_sort(F.collect_list("producer_id")), ",").alias("producers"))
        .withColumn("in_log", F.lit(True))
    )
    pairs = log_side.join(stable, ["group", "topic", "partition"], "full_outer")
    in_log = F.col("in_log").isNotNull()
    asked = F.col("unstable").isNotNull()
    unstable = F.coalesce(F.col("unstable"), F.lit(False))
    checks = _checks(
        [
            # Asked and answered with an offset (or none): the server has nothing pending.
            F.when(
                in_log & asked & ~unstable,
                _row(
                    "pending_offset_missing_on_server",
                    "pending_producers",
                    F.col("producers"),
                    F.lit(None),
                ),
            ),
            F.when(
                ~in_log & unstable,
                _row(
                    "pending_offset_not_in_log",
                    "pending_producers",
                    F.lit(None),
                    F.lit(ErrorCode.UNSTABLE_OFFSET_COMMIT.name),
                ),
            ),
        ]
    )
    return pairs.select(
        "group",
        "topic",
        "partition",
        F.lit(None).cast("string").alias("member_id"),
        F.explode(checks).alias("check"),
    )


def transaction_rows(expected: DataFrame, live: DataFrame) -> DataFrame:
    """The differences between the log's transactional ids (`state.final_transactions`)
    and DescribeTransactions' (LIVE_TRANSACTIONS_SCHEMA), as rows of (group: the
    transactional id, topic, partition, member_id, check)."""
    log_side = expected.select(
        "transactional_id",
        F.col("transaction_state").alias("log_state"),
        F.col("producer_id").alias("log_producer_id"),
        F.col("producer_epoch").alias("log_producer_epoch"),
        F.lit(True).alias("in_log"),
    )
    live_side = live.select(
        "transactional_id",
        F.col("transaction_state").alias("live_state"),
        F.col("producer_id").alias("live_producer_id"),
        F.col("producer_epoch").alias("live_producer_epoch"),
        F.lit(True).alias("on_server"),
    )
    pairs = log_side.join(live_side, "transactional_id", "full_outer")
    in_log, on_server = F.col("in_log").isNotNull(), F.col("on_server").isNotNull()
    both = in_log & on_server
    prefix = TRANSACTION_KIND_PREFIX
    checks = _checks(
        [
            F.when(~in_log, _row(f"{prefix}not_in_log", "state", F.lit(None), F.col("live_state"))),
            F.when(
                ~on_server,
                _row(f"{prefix}missing_on_server", "state", F.col("log_state"), F.lit(None)),
            ),
            *(
                F.when(
                    both & ~F.col(f"log_{name}").eqNullSafe(F.col(f"live_{name}")),
                    _row(f"{prefix}differs", name, F.col(f"log_{name}"), F.col(f"live_{name}")),
                )
                for name in ("state", "producer_id", "producer_epoch")
            ),
        ]
    )
    return pairs.select(
        F.col("transactional_id").alias("group"),
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("string").alias("member_id"),
        F.explode(checks).alias("check"),
    )


def live_frames(
    spark: SparkSession, stable: list[tuple[Any, ...]], transactions: list[tuple[Any, ...]]
) -> tuple[DataFrame, DataFrame]:
    return (
        spark.createDataFrame(stable, STABLE_PARTITIONS_SCHEMA),
        spark.createDataFrame(transactions, LIVE_TRANSACTIONS_SCHEMA),
    )


async def gather_transactional(
    client: CoordinatorClient,
    groups: Iterable[str],
    named: Iterable[GroupPartition],
    transactional_ids: Iterable[str],
    list_ids: bool,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, str], dict[str, str]]:
    """The live side of the transactional part: (stable rows, transaction rows, the
    groups' errors, the transactional ids' errors). With `list_ids`, the ids
    ListTransactions names are described too."""
    ids = set(transactional_ids)
    if list_ids:
        listed = await list_live_transactions(client)
        if listed is None and not ids:
            # No transaction coordinator, and no transactional id in the log to ask about.
            stable, group_errors = await fetch_unstable_partitions(client, groups, named)
            return stable, [], group_errors, {}
        ids.update(listed or ())
    (stable, group_errors), (transactions, id_errors) = await asyncio.gather(
        fetch_unstable_partitions(client, groups, named),
        describe_transactions(client, ids),
    )
    return stable, transactions, group_errors, id_errors
