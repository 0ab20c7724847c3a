"""`analyze audit`: is the live state of the coordinator exactly what its log says?

The log is replayed with compaction semantics (`state`) and compared with what a live
server answers: OffsetFetch of every offset of every group, DescribeGroups of every group
(the groups of the log and those ListGroups names). What DescribeGroups does not show
(generation, leader, expiry times) is not compared. Transactions are audited too
(`audit_transactions`): the committed offsets are those of the log with its transactions
replayed by Kafka's rules (`transactional`), its pending offsets are compared with
OffsetFetch's require_stable answers, and its transactional ids with DescribeTransactions.

A live server keeps writing while the audit runs, so a difference is only reported as a
mismatch when the audit can rule out that it saw the two sides at different moments:

1. Before asking the server, the audit notes each log partition's end (`HW0`).
2. It asks the server (the live state), then reads the log to its end (`HW1 >= HW0`).
3. A difference in a group with a record at or after HW0 is `changed_during_audit`: the
   server may have answered before that record. A group the server describes as
   PreparingRebalance is `rebalancing` (joining members are not in the log until the
   join completes).
4. The remaining differences are asked again; one the second answer no longer shows was a
   write in flight (already in the log, not yet visible to reads) and is
   `changed_during_audit` too. What is left is a `mismatch`: the log and the server
   disagree about a key nobody wrote meanwhile. That is what a record written into the log
   behind the server's back looks like, or a server that kept state its log does not hold;
   either way a restart would bring back something other than what it serves now.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from coordinator_client.rpc.client import CoordinatorClient
from coordinator_server.tools.pipeline.audit_live import (
    LIVE_GROUPS_SCHEMA,
    LIVE_OFFSETS_SCHEMA,
    LiveState,
    fetch_live_state,
    list_live_groups,
)
from coordinator_server.tools.pipeline.audit_transactions import (
    TRANSACTION_KIND_PREFIX,
    gather_transactional,
    live_frames,
    pending_rows,
    transaction_rows,
)
from coordinator_server.tools.pipeline.decode import PRODUCER_ID_BLOCK, TRANSACTION
from coordinator_server.tools.pipeline.logs import LogLocation, readable
from coordinator_server.tools.pipeline.session import log_end_offsets, read_log
from coordinator_server.tools.pipeline.state import (
    final_groups,
    final_transactions,
    group_positions,
    transaction_positions,
)
from coordinator_server.tools.pipeline.transactional import (
    TransactionalState,
    replay_transactional_offsets,
)

__all__ = [
    "MISMATCH_SCHEMA",
    "AuditResult",
    "LiveState",
    "compare",
    "fetch_live_state",
    "list_live_groups",
    "run_audit",
]

MISMATCH: Final = "mismatch"
CHANGED: Final = "changed_during_audit"
REBALANCING: Final = "rebalancing"
UNREACHABLE: Final = "unreachable"
PREPARING_REBALANCE: Final = "PreparingRebalance"
STABLE: Final = "Stable"
PRINTED_ROWS: Final = 1000
# Differences kept in audit.json and the result (the Parquet table has them all).
SAVED_ROWS: Final = 10_000
# topic, partition, member_id, field, log_value of a row that has none of them.
_NO_PLACE: Final = (None,) * 5

KEY_COLUMNS: Final = ("group", "kind", "topic", "partition", "member_id", "field")

MISMATCH_SCHEMA: Final = StructType(
    [
        StructField("status", StringType(), False),
        StructField("group", StringType(), False),
        StructField("kind", StringType(), False),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("member_id", StringType(), True),
        StructField("field", StringType(), True),
        StructField("log_value", StringType(), True),
        StructField("live_value", StringType(), True),
    ]
)


@dataclass
class AuditResult:
    mismatches: int
    changed_during_audit: int
    rebalancing: int
    unreachable: int
    groups_in_log: int
    offsets_in_log: int
    rows: list[dict[str, Any]]
    transactions_in_log: int = 0
    pending_offsets_in_log: int = 0

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.unreachable == 0


def _row(kind: str, field_name: str | None, log_value: Column, live_value: Column) -> Column:
    return F.struct(
        F.lit(kind).alias("kind"),
        F.lit(field_name).cast("string").alias("field"),
        log_value.cast("string").alias("log_value"),
        live_value.cast("string").alias("live_value"),
    )


def _differs(left: Column, right: Column) -> Column:
    return ~left.eqNullSafe(right)


def _checks(rows: list[Column]) -> Column:
    return F.filter(F.array(*rows), lambda row: row.isNotNull())


def _hex(column: Column) -> Column:
    return F.when(column.isNull(), F.lit(None)).otherwise(F.concat(F.lit("0x"), F.hex(column)))


def _log_assignment_text(member: Column) -> Column:
    topic_text = F.transform(
        F.array_sort(member["assignment"]),
        lambda tp: F.concat(
            tp["topic"],
            F.lit(":"),
            F.array_join(F.array_sort(tp["partitions"]).cast("array<string>"), ","),
        ),
    )
    return F.when(member["assignment"].isNull(), _hex(member["assignment_bytes"])).otherwise(
        F.array_join(topic_text, ";")
    )


def compare(
    spark: SparkSession,
    log: DataFrame,
    live: LiveState,
    groups: Sequence[str] | None = None,
    transactional: TransactionalState | None = None,
) -> DataFrame:
    """Every difference between the log's final state and `live`, as rows of
    (group, kind, topic, partition, member_id, field, log_value, live_value); for a
    transactional id's (kinds `transaction_*`), `group` is the id.

    `groups`: compare only these groups and transactional ids (both sides); by default
    every one the log or the live state has, less those whose live calls failed.
    `transactional`: the log's transactions replayed (computed when not given).
    """
    if transactional is None:
        transactional = replay_transactional_offsets(spark, log)
    expected_offsets = transactional.committed
    expected_pending = transactional.pending
    expected_groups = final_groups(log)
    expected_transactions = final_transactions(log)
    live_offsets = spark.createDataFrame(live.offsets, LIVE_OFFSETS_SCHEMA)
    live_groups = spark.createDataFrame(live.groups, LIVE_GROUPS_SCHEMA)
    live_require_stable, live_transactions = live_frames(spark, live.stable, live.transactions)
    excluded = sorted(live.errors)
    if groups is not None:
        wanted = sorted(set(groups))
        expected_offsets = expected_offsets.filter(F.col("group").isin(wanted))
        expected_pending = expected_pending.filter(F.col("group").isin(wanted))
        expected_groups = expected_groups.filter(F.col("group").isin(wanted))
        expected_transactions = expected_transactions.filter(F.col("transactional_id").isin(wanted))
        live_offsets = live_offsets.filter(F.col("group").isin(wanted))
        live_groups = live_groups.filter(F.col("group").isin(wanted))
        live_require_stable = live_require_stable.filter(F.col("group").isin(wanted))
        live_transactions = live_transactions.filter(F.col("transactional_id").isin(wanted))
    if excluded:
        expected_offsets = expected_offsets.filter(~F.col("group").isin(excluded))
        expected_pending = expected_pending.filter(~F.col("group").isin(excluded))
        expected_groups = expected_groups.filter(~F.col("group").isin(excluded))
        live_require_stable = live_require_stable.filter(~F.col("group").isin(excluded))
    if live.transaction_errors:
        expected_transactions = expected_transactions.filter(
            ~F.col("transactional_id").isin(sorted(live.transaction_errors))
        )

    # Offsets.
    log_side = expected_offsets.select(
        "group",
        "topic",
        "partition",
        F.col("committed_offset").alias("log_offset_value"),
        F.col("leader_epoch").alias("log_epoch"),
        F.col("metadata").alias("log_metadata"),
        F.lit(True).alias("in_log"),
    )
    live_side = live_offsets.select(
        "group",
        "topic",
        "partition",
        F.col("committed_offset").alias("live_offset_value"),
        F.col("leader_epoch").alias("live_epoch"),
        F.col("metadata").alias("live_metadata"),
        F.lit(True).alias("on_server"),
    )
    offsets = log_side.join(live_side, ["group", "topic", "partition"], "full_outer")
    in_log, on_server = F.col("in_log").isNotNull(), F.col("on_server").isNotNull()
    both = in_log & on_server
    offset_checks = _checks(
        [
            F.when(
                ~in_log,
                _row(
                    "offset_not_in_log", "committed_offset", F.lit(None), F.col("live_offset_value")
                ),
            ),
            F.when(
                ~on_server,
                _row(
                    "offset_missing_on_server",
                    "committed_offset",
                    F.col("log_offset_value"),
                    F.lit(None),
                ),
            ),
            *(
                F.when(
                    both & _differs(F.col(f"log_{name}"), F.col(f"live_{name}")),
                    _row("offset_differs", label, F.col(f"log_{name}"), F.col(f"live_{name}")),
                )
                for name, label in (
                    ("offset_value", "committed_offset"),
                    ("epoch", "leader_epoch"),
                    ("metadata", "metadata"),
                )
            ),
        ]
    )
    offset_rows = offsets.select(
        "group",
        "topic",
        "partition",
        F.lit(None).cast("string").alias("member_id"),
        F.explode(offset_checks).alias("check"),
    )

    # Groups.
    log_groups = expected_groups.select(
        "group",
        F.col("state").alias("log_state"),
        F.col("protocol_type").alias("log_protocol_type"),
        F.col("protocol").alias("log_protocol"),
        F.lit(True).alias("in_log"),
    )
    server_groups = live_groups.select(
        "group",
        F.col("state").alias("live_state"),
        F.col("protocol_type").alias("live_protocol_type"),
        F.col("protocol").alias("live_protocol"),
        F.lit(True).alias("on_server"),
    )
    group_pairs = log_groups.join(server_groups, "group", "full_outer")
    live_stable = F.col("live_state") == STABLE
    live_state_class = F.when(F.col("live_state") == "Empty", "Empty").otherwise("Active")
    group_checks = _checks(
        [
            F.when(~in_log, _row("group_not_in_log", "state", F.lit(None), F.col("live_state"))),
            F.when(
                ~on_server,
                _row("group_missing_on_server", "state", F.col("log_state"), F.lit(None)),
            ),
            F.when(
                both & _differs(F.col("log_state"), live_state_class),
                _row("group_differs", "state", F.col("log_state"), F.col("live_state")),
            ),
            F.when(
                both & _differs(F.col("log_protocol_type"), F.col("live_protocol_type")),
                _row(
                    "group_differs",
                    "protocol_type",
                    F.col("log_protocol_type"),
                    F.col("live_protocol_type"),
                ),
            ),
            # DescribeGroups names the protocol of Stable groups only.
            F.when(
                both & live_stable & _differs(F.col("log_protocol"), F.col("live_protocol")),
                _row("group_differs", "protocol", F.col("log_protocol"), F.col("live_protocol")),
            ),
        ]
    )
    group_rows = group_pairs.select(
        "group",
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("string").alias("member_id"),
        F.explode(group_checks).alias("check"),
    )

    # Members, of the groups both sides have.
    log_members = expected_groups.select("group", F.explode("members").alias("m")).select(
        "group",
        F.col("m.member_id").alias("member_id"),
        F.col("m.group_instance_id").alias("log_instance"),
        F.col("m.client_id").alias("log_client_id"),
        F.col("m.client_host").alias("log_client_host"),
        F.col("m.assignment_bytes").alias("log_assignment"),
        _log_assignment_text(F.col("m")).alias("log_assignment_text"),
        F.col("m.subscription_bytes").alias("log_subscription"),
        F.lit(True).alias("in_log"),
    )
    live_members = live_groups.select("group", "state", F.explode("members").alias("m")).select(
        "group",
        F.col("state").alias("member_live_state"),
        F.col("m.member_id").alias("member_id"),
        F.col("m.group_instance_id").alias("live_instance"),
        F.col("m.client_id").alias("live_client_id"),
        F.col("m.client_host").alias("live_client_host"),
        F.col("m.member_assignment").alias("live_assignment"),
        F.col("m.assignment_text").alias("live_assignment_text"),
        F.col("m.member_metadata").alias("live_subscription"),
        F.lit(True).alias("on_server"),
    )
    both_groups = log_groups.select("group").join(server_groups.select("group"), "group")
    member_pairs = log_members.join(live_members, ["group", "member_id"], "full_outer").join(
        both_groups, "group", "left_semi"
    )
    member_checks = _checks(
        [
            F.when(
                ~in_log,
                _row("member_not_in_log", "member_id", F.lit(None), F.col("member_id")),
            ),
            F.when(
                ~on_server,
                _row("member_missing_on_server", "member_id", F.col("member_id"), F.lit(None)),
            ),
            *(
                F.when(
                    both & _differs(F.col(f"log_{name}"), F.col(f"live_{name}")),
                    _row("member_differs", label, F.col(f"log_{name}"), F.col(f"live_{name}")),
                )
                for name, label in (
                    ("instance", "group_instance_id"),
                    ("client_id", "client_id"),
                    ("client_host", "client_host"),
                )
            ),
            F.when(
                both & _differs(F.col("log_assignment"), F.col("live_assignment")),
                _row(
                    "member_differs",
                    "assignment",
                    F.col("log_assignment_text"),
                    F.col("live_assignment_text"),
                ),
            ),
            F.when(
                both
                & (F.col("member_live_state") == STABLE)
                & _differs(F.col("log_subscription"), F.col("live_subscription")),
                _row(
                    "member_differs",
                    "subscription",
                    _hex(F.col("log_subscription")),
                    _hex(F.col("live_subscription")),
                ),
            ),
        ]
    )
    member_rows = member_pairs.select(
        "group",
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        "member_id",
        F.explode(member_checks).alias("check"),
    )
    return (
        offset_rows.unionByName(group_rows)
        .unionByName(member_rows)
        .unionByName(pending_rows(expected_pending, live_require_stable))
        .unionByName(transaction_rows(expected_transactions, live_transactions))
        .select(
            "group",
            F.col("check.kind").alias("kind"),
            "topic",
            "partition",
            "member_id",
            F.col("check.field").alias("field"),
            F.col("check.log_value").alias("log_value"),
            F.col("check.live_value").alias("live_value"),
        )
    )


def _null_safe_join(left: DataFrame, right: DataFrame, how: str) -> DataFrame:
    condition = [left[name].eqNullSafe(right[name]) for name in KEY_COLUMNS]
    return left.join(right, condition, how)


def classify(
    spark: SparkSession,
    differences: DataFrame,
    log: DataFrame,
    watermarks: dict[int, int],
    live: LiveState,
) -> DataFrame:
    """Each difference with its status (MISMATCH unless ruled out, see the module)."""
    hw0 = spark.createDataFrame(
        sorted(watermarks.items()), "log_partition int, audit_start_offset long"
    )
    live_states = spark.createDataFrame(
        [(row[0], row[1]) for row in live.groups], "group string, live_group_state string"
    )
    # A transactional id's records are its transaction records; a group's, all of the
    # records of its name.
    positions = (
        group_positions(log)
        .withColumn("subject", F.lit("group"))
        .unionByName(
            transaction_positions(log)
            .withColumnRenamed("transactional_id", "group")
            .withColumn("subject", F.lit("transaction"))
        )
    )
    subject = F.when(F.col("kind").startswith(TRANSACTION_KIND_PREFIX), "transaction").otherwise(
        "group"
    )
    live_states = live_states.withColumn("subject", F.lit("group"))
    positioned = (
        differences.withColumn("subject", subject)
        .join(positions, ["subject", "group"], "left")
        .join(hw0, "log_partition", "left")
        .join(live_states, ["subject", "group"], "left")
    )
    status = (
        F.when(
            F.col("last_log_offset").isNotNull()
            & (F.col("last_log_offset") >= F.coalesce("audit_start_offset", F.lit(0))),
            F.lit(CHANGED),
        )
        .when(F.col("live_group_state") == PREPARING_REBALANCE, F.lit(REBALANCING))
        .otherwise(F.lit(MISMATCH))
    )
    return positioned.select(status.alias("status"), *differences.columns)


@dataclass
class AuditRun:
    """The steps of an audit, for callers (and tests) that run them one by one:
    `log_watermarks`, `live_state`, then, with the log read to its end,
    `add_unlisted_groups` and `differences`."""

    spark: SparkSession
    location: LogLocation
    servers: str
    client_options: dict[str, Any] = field(default_factory=dict)

    def log_watermarks(self) -> dict[int, int]:
        with readable(self.location) as location:
            return log_end_offsets(self.spark, location)

    async def live_state(self) -> LiveState:
        """Every group ListGroups names, with its offsets and description, and the
        require_stable answers of its offsets; every transactional id ListTransactions
        names, described."""
        async with CoordinatorClient(self.servers, **self.client_options) as client:
            groups = await list_live_groups(client)
            state = await fetch_live_state(client, groups)
            return await self._with_transactional(client, state, groups, (), (), list_ids=True)

    async def live_state_of(
        self,
        groups: Sequence[str],
        pending: Sequence[tuple[str, str, int]] = (),
        transactional_ids: Sequence[str] = (),
    ) -> LiveState:
        """The groups' state (with the require_stable answers of their offsets and of the
        partitions `pending` names) and the transactional ids'."""
        async with CoordinatorClient(self.servers, **self.client_options) as client:
            state = await fetch_live_state(client, groups)
            return await self._with_transactional(
                client, state, groups, pending, transactional_ids, list_ids=False
            )

    @staticmethod
    async def _with_transactional(
        client: CoordinatorClient,
        state: LiveState,
        groups: Sequence[str],
        pending: Sequence[tuple[str, str, int]],
        transactional_ids: Sequence[str],
        *,
        list_ids: bool,
    ) -> LiveState:
        stable, transactions, group_errors, id_errors = await gather_transactional(
            client, groups, pending, transactional_ids, list_ids
        )
        errored = set(group_errors)
        state.errors.update(group_errors)
        state.offsets = [row for row in state.offsets if row[0] not in errored]
        state.groups = [row for row in state.groups if row[0] not in errored]
        state.stable = [row for row in stable if row[0] not in state.errors]
        state.transactions = transactions
        state.described = {row[0] for row in transactions} | set(transactional_ids)
        state.transaction_errors = id_errors
        return state

    def add_transactional(
        self, log: DataFrame, transactional: TransactionalState, live: LiveState
    ) -> LiveState:
        """Also ask about the log's pending offsets (by partition: one without a committed
        offset is not listed by a fetch of every offset) and its transactional ids that
        the first asking did not cover."""
        answered = {tuple(row[:3]) for row in live.stable}
        pending = sorted(
            (row.group, row.topic, row.partition)
            for row in transactional.pending.select("group", "topic", "partition")
            .distinct()
            .collect()
            if (row.group, row.topic, row.partition) not in answered
            and row.group not in live.errors
        )
        ids = sorted(
            row.transactional_id
            for row in log.filter(F.col("record_type") == TRANSACTION)
            .select("transactional_id")
            .distinct()
            .collect()
            if row.transactional_id not in live.described
            and row.transactional_id not in live.transaction_errors
        )
        if not pending and not ids:
            return live
        more = asyncio.run(self.live_state_of([], pending, ids))
        return live.merged(more)

    def add_unlisted_groups(self, log: DataFrame, live: LiveState) -> LiveState:
        """Also ask about the log's groups that ListGroups did not name: a group the server
        lost is exactly what an audit is for. (Groups the log deleted are asked about too;
        the server does not know them either, and they drop out.)"""
        asked = {row[0] for row in live.groups} | {row[0] for row in live.offsets}
        asked |= set(live.errors)
        group_records = log.filter(~F.col("record_type").isin(TRANSACTION, PRODUCER_ID_BLOCK))
        missing = sorted(
            row.group
            for row in group_records.select("group").distinct().collect()
            if row.group not in asked
        )
        if not missing:
            return live
        more = asyncio.run(self.live_state_of(missing))
        # The transactional part was asked already: keep it once.
        more.transactions, more.described, more.transaction_errors = [], set(), {}
        return live.merged(more)

    def differences(
        self,
        log: DataFrame,
        watermarks: dict[int, int],
        live: LiveState,
        transactional: TransactionalState | None = None,
    ) -> DataFrame:
        """Every difference with its status: compare, classify, then ask the server again
        about the groups and transactional ids with mismatches left (rows of
        MISMATCH_SCHEMA)."""
        if transactional is None:
            transactional = replay_transactional_offsets(self.spark, log)
        classified = classify(
            self.spark, compare(self.spark, log, live, None, transactional), log, watermarks, live
        ).cache()
        suspect_rows = (
            classified.filter(F.col("status") == MISMATCH)
            .select("group", F.col("kind").startswith(TRANSACTION_KIND_PREFIX).alias("txn"))
            .distinct()
            .collect()
        )
        suspects = sorted({row.group for row in suspect_rows})
        unreachable = self.spark.createDataFrame(
            [
                (UNREACHABLE, group, "live_call_failed", None, None, None, None, None, error)
                for group, error in sorted(live.errors.items())
            ]
            + [
                (
                    UNREACHABLE,
                    txn_id,
                    "transaction_call_failed",
                    None,
                    None,
                    None,
                    None,
                    None,
                    error,
                )
                for txn_id, error in sorted(live.transaction_errors.items())
            ],
            MISMATCH_SCHEMA,
        )
        if not suspects:
            return classified.unionByName(unreachable)
        suspect_groups = sorted({row.group for row in suspect_rows if not row.txn})
        suspect_ids = sorted({row.group for row in suspect_rows if row.txn})
        pending = sorted(
            (row.group, row.topic, row.partition)
            for row in transactional.pending.filter(F.col("group").isin(suspect_groups))
            .select("group", "topic", "partition")
            .distinct()
            .collect()
        )
        second = asyncio.run(self.live_state_of(suspect_groups, pending, suspect_ids))
        again = (
            compare(self.spark, log, second, suspects, transactional)
            .select(*KEY_COLUMNS)
            .withColumn("still", F.lit(True))
        )
        rechecked = _null_safe_join(classified, again, "left")
        status = (
            F.when((F.col("status") == MISMATCH) & F.col("still").isNull(), F.lit(CHANGED))
            .otherwise(F.col("status"))
            .alias("status")
        )
        columns = [classified[name] for name in MISMATCH_SCHEMA.names[1:]]
        return rechecked.select(status, *columns).unionByName(unreachable)


def run_audit(
    spark: SparkSession,
    location: LogLocation,
    servers: str,
    output: Path | None = None,
    *,
    client_options: dict[str, Any] | None = None,
) -> AuditResult:
    """Audit the live server(s) `servers` (host:port[,host:port]) against the log at
    `location`; with `output`, save the differences there (`audit.json`, and the Parquet
    table `audit_differences/` partitioned by status)."""
    run = AuditRun(spark, location, servers, client_options or {})
    watermarks = run.log_watermarks()
    live = asyncio.run(run.live_state())
    with readable(location) as readable_location:
        log = read_log(spark, readable_location).cache()
        transactional = replay_transactional_offsets(spark, log)
        live = run.add_unlisted_groups(log, live)
        live = run.add_transactional(log, transactional, live)
        differences = (
            run.differences(log, watermarks, live, transactional)
            .orderBy("status", "group", "kind", "topic", "partition", "member_id", "field")
            .cache()
        )
        counts = {
            row.status: row["count"] for row in differences.groupBy("status").count().collect()
        }
        rows = [row.asDict() for row in differences.limit(SAVED_ROWS).collect()]
        sizes = {
            row.what: row["count"]
            for row in final_groups(log)
            .select(F.lit("groups").alias("what"))
            .unionByName(transactional.committed.select(F.lit("offsets").alias("what")))
            .unionByName(transactional.pending.select(F.lit("pending").alias("what")))
            .unionByName(final_transactions(log).select(F.lit("transactions").alias("what")))
            .groupBy("what")
            .count()
            .collect()
        }
        result = AuditResult(
            mismatches=counts.get(MISMATCH, 0),
            changed_during_audit=counts.get(CHANGED, 0),
            rebalancing=counts.get(REBALANCING, 0),
            unreachable=counts.get(UNREACHABLE, 0),
            groups_in_log=sizes.get("groups", 0),
            offsets_in_log=sizes.get("offsets", 0),
            rows=rows,
            transactions_in_log=sizes.get("transactions", 0),
            pending_offsets_in_log=sizes.get("pending", 0),
        )
        if output is not None:
            output.mkdir(parents=True, exist_ok=True)
            differences.write.mode("overwrite").partitionBy("status").parquet(
                str(output / "audit_differences")
            )
            summary = {
                "log": location.describe(),
                "servers": servers,
                "log_end_offsets_at_start": {str(p): o for p, o in sorted(watermarks.items())},
                **{name: value for name, value in asdict(result).items() if name != "rows"},
                "differences": rows,
            }
            (output / "audit.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        differences.unpersist()
        log.unpersist()
    return result


def format_result(result: AuditResult) -> str:
    lines = [
        f"audit: {result.groups_in_log} groups, {result.offsets_in_log} offsets, "
        f"{result.pending_offsets_in_log} pending offsets and {result.transactions_in_log} "
        "transactional ids in the log; "
        f"{result.mismatches} mismatches, {result.changed_during_audit} changed during the "
        f"audit, {result.rebalancing} in groups rebalancing, {result.unreachable} groups "
        "unreachable"
    ]
    shown = [row for row in result.rows if row["status"] in (MISMATCH, UNREACHABLE)]
    for row in shown[:PRINTED_ROWS]:
        where = row["group"]
        if row["topic"] is not None:
            where += f" {row['topic']}-{row['partition']}"
        if row["member_id"] is not None:
            where += f" member {row['member_id']}"
        lines.append(
            f"{row['status'].upper()} {row['kind']} {where}: {row['field']} "
            f"log={row['log_value']} live={row['live_value']}"
        )
    if len(shown) > PRINTED_ROWS:
        lines.append(f"... {len(shown) - PRINTED_ROWS} more (see audit.json and the Parquet table)")
    return "\n".join(lines)
