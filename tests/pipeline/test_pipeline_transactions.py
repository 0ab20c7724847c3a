"""The pipeline over logs with transactions: the replay of transactional offsets by Kafka's
rule (a plain commit written after a pending offset supersedes it), the audit of pending
offsets (require_stable), of committed ones (an end of a transaction that broke the rule is
a mismatch) and of transactional ids (DescribeTransactions), on a SQLite log written by hand
and loaded by a real server, and on a Kafka log that real transactional producers wrote;
the history's transaction tables."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from apache_kafka import ApacheKafkaBroker
from pipeline_scenario import server_group_args
from server_process import ServerProcess

from coordinator_client import TransactionalProducer
from coordinator_client.rpc.client import CoordinatorClient
from coordinator_protocol.hashing import partition_for
from coordinator_protocol.transactions import DescribeTransactionsRequest
from coordinator_server.records import (
    CoordinatorRecord,
    encode_record,
    new_offset_commit_record,
    new_transactional_offset_record,
    new_transactional_offset_tombstone_record,
)
from coordinator_server.records.transactional_offsets import TransactionalOffsetValue
from coordinator_server.tools.pipeline.audit import MISMATCH, run_audit
from coordinator_server.tools.pipeline.history import HistoryOptions, compute_history
from coordinator_server.tools.pipeline.kafka_source import KafkaLogTopic
from coordinator_server.tools.pipeline.logs import SqliteLogFile
from coordinator_server.tools.pipeline.report import render_report
from coordinator_server.tools.pipeline.session import read_log
from coordinator_server.tools.pipeline.state import final_offsets, final_transactions
from coordinator_server.tools.pipeline.transactional import replay_transactional_offsets

pytestmark = [pytest.mark.slow]

LOG_PARTITIONS = 4
TS = 1_764_000_000_000
A, B, C = 1000, 2000, 3000


def pending(group: str, partition: int, producer_id: int, offset: int) -> CoordinatorRecord:
    return new_transactional_offset_record(
        group, "t", partition, producer_id, TransactionalOffsetValue(0, offset, -1, "", TS + offset)
    )


def ended(group: str, partition: int, producer_id: int) -> CoordinatorRecord:
    return new_transactional_offset_tombstone_record(group, "t", partition, producer_id)


def commit(group: str, partition: int, offset: int, timestamp: int = TS) -> CoordinatorRecord:
    return new_offset_commit_record(group, "t", partition, offset, -1, "", timestamp)


def end_commit(group: str, partition: int, offset: int) -> CoordinatorRecord:
    """The offset commit record an end of a transaction writes for a pending offset made by
    `pending(group, partition, _, offset)`: its values and commit time."""
    return commit(group, partition, offset, TS + offset)


def by_the_rule(group: str) -> list[CoordinatorRecord]:
    """Two producers' transactions ended as the server ends them: A's offset of t-0 is
    superseded by a plain commit, so A's commit writes only its tombstone there; A's offset
    of t-1 commits, and B's later pending offset of t-1 is written again after it; B
    aborts."""
    return [
        commit(group, 0, 5),
        pending(group, 0, A, 10),
        pending(group, 1, A, 11),
        commit(group, 0, 20),
        pending(group, 1, B, 30),
        pending(group, 2, B, 40),
        # A commits.
        ended(group, 0, A),
        ended(group, 1, A),
        end_commit(group, 1, 11),
        pending(group, 1, B, 30),
        # B aborts.
        ended(group, 1, B),
        ended(group, 2, B),
    ]


def against_the_rule(group: str) -> list[CoordinatorRecord]:
    """A pending offset superseded by a later plain commit, which the end of its
    transaction committed all the same (Kafka's C11 broken): the server's replay takes the
    record as it is (10), Kafka's rule says 20."""
    return [
        pending(group, 0, A, 10),
        commit(group, 0, 20),
        ended(group, 0, A),
        end_commit(group, 0, 10),
    ]


def still_pending(group: str) -> list[CoordinatorRecord]:
    """A committed offset, and a pending one of C, superseded by a later plain commit of
    the same partition; a pending offset of a partition without a committed one."""
    return [
        commit(group, 0, 1),
        pending(group, 0, C, 7),
        commit(group, 0, 8),
        pending(group, 3, C, 9),
    ]


async def write_log(path: Path, groups: dict[str, list[CoordinatorRecord]]) -> None:
    from coordinator_server.storage.sqlite import SqliteLog

    log = SqliteLog(path, LOG_PARTITIONS)
    await log.start()
    try:
        for group, records in groups.items():
            partition = partition_for(group, LOG_PARTITIONS)
            for record in records:
                await log.append(partition, [encode_record(record)])
    finally:
        await log.close()


def offsets_of(frame: Any) -> dict[tuple[str, int], int]:
    return {(row.group, row.partition): row.committed_offset for row in frame.collect()}


def test_the_replay_commits_what_kafkas_rule_says_at_each_end(spark: Any, tmp_path: Path) -> None:
    db = tmp_path / "coordinator.db"
    asyncio.run(
        write_log(
            db,
            {
                "ruled": by_the_rule("ruled"),
                "broken": against_the_rule("broken"),
                "open": still_pending("open"),
            },
        )
    )
    log = read_log(spark, SqliteLogFile(str(db))).cache()
    replayed = replay_transactional_offsets(spark, log)
    assert offsets_of(replayed.committed) == {
        ("ruled", 0): 20,
        ("ruled", 1): 11,
        ("broken", 0): 20,
        ("open", 0): 8,
    }
    # Compaction alone takes the broken end's record as it is.
    assert offsets_of(final_offsets(log))[("broken", 0)] == 10
    assert sorted(
        (r.group, r.partition, r.producer_id, r.committed_offset, r.superseded)
        for r in replayed.pending.collect()
    ) == [("open", 0, C, 7, True), ("open", 3, C, 9, False)]
    log.unpersist()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    asyncio.run(
        write_log(
            tmp_path / "coordinator.db",
            {"ruled": by_the_rule("ruled"), "open": still_pending("open")},
        )
    )
    return tmp_path


def test_the_audit_of_a_loaded_log_with_transactions_finds_no_mismatch(
    spark: Any, data_dir: Path
) -> None:
    with ServerProcess(server_group_args("--data-dir", str(data_dir))) as process:
        result = run_audit(
            spark, SqliteLogFile(str(data_dir / "coordinator.db")), f"{process.host}:{process.port}"
        )
    # The server answers require_stable with UNSTABLE_OFFSET_COMMIT for both of open's
    # pending partitions (t-3 has no committed offset: it is asked by name).
    assert (result.mismatches, result.unreachable) == (0, 0), result.rows
    assert (result.offsets_in_log, result.pending_offsets_in_log) == (3, 2)


def test_an_end_that_commits_a_superseded_offset_is_exactly_one_mismatch(
    spark: Any, tmp_path: Path
) -> None:
    asyncio.run(
        write_log(
            tmp_path / "coordinator.db",
            {"ruled": by_the_rule("ruled"), "broken": against_the_rule("broken")},
        )
    )
    with ServerProcess(server_group_args("--data-dir", str(tmp_path))) as process:
        result = run_audit(
            spark, SqliteLogFile(str(tmp_path / "coordinator.db")), f"{process.host}:{process.port}"
        )
    assert result.mismatches == 1
    assert [
        (r["status"], r["group"], r["kind"], r["topic"], r["partition"], r["log_value"],
         r["live_value"])
        for r in result.rows
    ] == [(MISMATCH, "broken", "offset_differs", "t", 0, "20", "10")]  # fmt: skip


def test_pending_offsets_on_one_side_only_are_mismatches(spark: Any, tmp_path: Path) -> None:
    """The audited log and the server's disagree: the log has a pending offset the server
    does not hold (`gone`: asked by name, answered without UNSTABLE_OFFSET_COMMIT), the
    server one the log does not have (`open` t-0: UNSTABLE_OFFSET_COMMIT)."""
    served, audited = tmp_path / "served", tmp_path / "audited"
    served.mkdir()
    audited.mkdir()
    asyncio.run(write_log(served / "coordinator.db", {"open": still_pending("open")[:3]}))
    asyncio.run(
        write_log(
            audited / "coordinator.db",
            {
                "open": [commit("open", 0, 1), commit("open", 0, 8)],
                "gone": [pending("gone", 0, C, 5)],
            },
        )
    )
    with ServerProcess(server_group_args("--data-dir", str(served))) as process:
        result = run_audit(
            spark, SqliteLogFile(str(audited / "coordinator.db")), f"{process.host}:{process.port}"
        )
    pending_rows = sorted(
        (r["status"], r["group"], r["kind"], r["partition"], r["log_value"], r["live_value"])
        for r in result.rows
        if r["kind"].startswith("pending_offset")
    )
    assert pending_rows == [
        (MISMATCH, "gone", "pending_offset_missing_on_server", 0, str(C), None),
        (MISMATCH, "open", "pending_offset_not_in_log", 0, None, "UNSTABLE_OFFSET_COMMIT"),
    ]


# A Kafka log that real transactional producers wrote.


async def create_topic(broker: ApacheKafkaBroker, name: str, partitions: int = 2) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def transactional(
    broker: ApacheKafkaBroker, server: ServerProcess, transactional_id: str
) -> AsyncIterator[TransactionalProducer]:
    made = TransactionalProducer(
        bootstrap_servers=broker.bootstrap,
        coordinator_bootstrap_servers=f"{server.host}:{server.port}",
        transactional_id=transactional_id,
        transaction_timeout_ms=60_000,
        coordinator_options={"request_timeout_ms": 10_000, "retry_backoff_ms": 20},
    )
    await made.start()
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            await made.stop()


async def wait_for_states(
    server: ServerProcess, expected: dict[str, str], timeout: float = 30
) -> None:
    """Until DescribeTransactions answers each id's state (a commit's markers and its
    completion record are written after EndTxn is answered)."""
    async with CoordinatorClient(f"{server.host}:{server.port}") as client:
        deadline = time.monotonic() + timeout
        while True:
            described = await client.describe_transactions(
                DescribeTransactionsRequest(transactional_ids=sorted(expected))
            )
            states = {s.transactional_id: s.transaction_state for s in described.transaction_states}
            if states == expected or time.monotonic() > deadline:
                assert states == expected
                return
            await asyncio.sleep(0.1)


@pytest.mark.kafka
@pytest.mark.timeout(240)
async def test_the_audit_of_a_kafka_log_written_by_transactional_producers(
    spark: Any, kafka_broker: ApacheKafkaBroker
) -> None:
    suffix = uuid.uuid4().hex[:8]
    log_topic, out = f"__txn_log_{suffix}", f"txn-out-{suffix}"
    committer, aborter, holder = (f"{name}-{suffix}" for name in ("commit", "abort", "open"))
    source = TopicPartition(f"txn-in-{suffix}", 0)
    await create_topic(kafka_broker, out)
    args = [
        "--port", "0",
        "--bootstrap-servers", kafka_broker.bootstrap,
        "--offsets-topic", log_topic,
        "--offsets-topic-partitions", str(LOG_PARTITIONS),
        "--offsets-topic-replication-factor", "1",
        "--transactions", "on",
        *kafka_broker.coordinator_args,
    ]  # fmt: skip
    location = KafkaLogTopic(kafka_broker.bootstrap, log_topic)
    with ServerProcess(args) as server:
        async with (
            transactional(kafka_broker, server, committer) as first,
            transactional(kafka_broker, server, aborter) as second,
            transactional(kafka_broker, server, holder) as third,
        ):
            for offset in (10, 20):
                async with first.transaction():
                    await first.send(out, b"x", partition=0)
                    await first.send_offsets_to_transaction(
                        {source: OffsetAndMetadata(offset, "")}, f"g-{committer}"
                    )
            await second.begin_transaction()
            await second.send(out, b"y", partition=1)
            await second.send_offsets_to_transaction(
                {source: OffsetAndMetadata(99, "")}, f"g-{aborter}"
            )
            await second.abort_transaction()
            # Left open while the audit runs: a pending offset, an Ongoing transaction.
            await third.begin_transaction()
            await third.send(out, b"z", partition=0)
            await third.send_offsets_to_transaction(
                {source: OffsetAndMetadata(7, "")}, f"g-{holder}"
            )
            await wait_for_states(
                server,
                {committer: "CompleteCommit", aborter: "CompleteAbort", holder: "Ongoing"},
            )
            result = await asyncio.to_thread(
                run_audit, spark, location, f"{server.host}:{server.port}"
            )
            assert (result.mismatches, result.changed_during_audit, result.unreachable) == (
                0,
                0,
                0,
            ), result.rows
            assert (result.transactions_in_log, result.pending_offsets_in_log) == (3, 1)
            assert result.offsets_in_log == 1

            log = read_log(spark, location).cache()
            states = {
                r.transactional_id: (r.transaction_state, r.producer_epoch)
                for r in final_transactions(log).collect()
            }
            assert {tid: state for tid, (state, _) in states.items()} == {
                committer: "CompleteCommit",
                aborter: "CompleteAbort",
                holder: "Ongoing",
            }
            history = compute_history(spark, log, HistoryOptions())
            by_state = {
                r.transaction_state: r.transactional_ids
                for r in history["transactions_by_state"].collect()
            }
            assert by_state == {"CompleteCommit": 1, "CompleteAbort": 1, "Ongoing": 1}
            # Producer ids from the Kafka cluster: no block of a range is reserved in the log.
            assert history["producer_id_blocks"].collect() == []
            page = render_report(history, "transactions", location.describe())
            assert "Transactions by state" in page and holder in page
            log.unpersist()
            await third.abort_transaction()
