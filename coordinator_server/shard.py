"""GroupCoordinatorShard: the state machine of one partition of the coordinator log.

It composes the managers and owns the single `replay` dispatch on record type and `apply`
dispatch on update type, the only paths through which live writes and loads change the
state. It is the service's one door: an operation per API, reads included, and the service
reaches no further in. Operations that span both managers (DeleteGroups, the offset
expiration job) live here, as in Kafka's GroupCoordinatorShard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import DeleteGroupsResponseResult
from coordinator_server.groups.manager import GroupMetadataManager
from coordinator_server.groups.store import (
    ClassicGroupUpdate,
    GroupCoordinatorMetricsShard,
    GroupCount,
    GroupsConfig,
)
from coordinator_server.offsets.manager import (
    OffsetCommitRun,
    OffsetMetadataManager,
    OffsetsConfig,
)
from coordinator_server.offsets.transactional import TransactionalOffsetManager
from coordinator_server.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionOwnershipKey,
    PartitionOwnershipValue,
    ProducerIdBlockKey,
    ProducerIdBlockValue,
    TransactionalOffsetKey,
    TransactionalOffsetValue,
    TransactionKey,
    TransactionValue,
    decode_offset_commit,
    decode_record,
)
from coordinator_server.runtime.api import CoordinatorResult, RecordRun, ShardContext
from coordinator_server.transactions.manager import TransactionManager
from coordinator_server.transactions.producer_ids import ProducerIdUpdate
from coordinator_server.transactions.results import TransactionsConfig

GROUP_EXPIRATION_KEY = "expire-group-metadata"

LOAD_RUN_LIMIT = 1024
"""Offset commits a load holds before replaying them (see GroupLoadReplay)."""


@dataclass(frozen=True, slots=True)
class ShardConfig:
    offsets: OffsetsConfig = field(default_factory=OffsetsConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    transactions: TransactionsConfig = field(default_factory=TransactionsConfig)


class GroupCoordinatorShard:
    def __init__(
        self,
        context: ShardContext,
        config: ShardConfig,
        metrics: GroupCoordinatorMetricsShard | None = None,
        group_count: GroupCount | None = None,
        transactional_id_count: Callable[[], int] | None = None,
    ) -> None:
        """`group_count` and `transactional_id_count` say how many groups and transactional
        ids the node holds over all its partitions (for `max_groups` and
        `max_transactional_ids`); None: this shard's own."""
        self.context = context
        self.config = config
        self.groups = GroupMetadataManager(
            context.snapshot_registry,
            context.clock,
            context.timer,
            config.groups,
            metrics,
            group_count,
        )
        self.offsets = offsets = OffsetMetadataManager(
            context.snapshot_registry, context.clock, config.offsets, self.groups
        )
        # The transaction coordinator of the transactional ids that hash to this partition.
        self.transactions = transactions = TransactionManager(
            context.snapshot_registry,
            context.clock,
            context.timer,
            replace(config.transactions, partition=context.partition),
            transactional_id_count,
        )
        groups = self.groups
        # The shard's door, as Kafka's GroupCoordinatorService sees its GroupCoordinatorShard:
        # one operation per API. They are the managers' own handlers, bound here once, so
        # that the service's call through the shard costs what a call to the manager does
        # (heartbeats and commits are the hot path).
        self.join_group = groups.join_group
        self.sync_group = groups.sync_group
        self.heartbeat = groups.heartbeat
        self.leave_group = groups.leave_group
        self.describe_groups = groups.describe_groups
        self.list_groups = groups.list_groups
        self.commit_offset = offsets.commit_offset
        self.delete_offsets = offsets.delete_offsets
        self.fetch_offsets = offsets.fetch_offsets
        self.fetch_partition_offsets = offsets.fetch_partition_offsets
        self.fetch_all_offsets = offsets.fetch_all_offsets
        self.init_producer_id = transactions.init_producer_id
        self.add_partitions_to_txn = transactions.add_partitions_to_txn
        self.add_offsets_to_txn = transactions.add_offsets_to_txn
        self.end_txn = transactions.end_txn
        # The transaction's own completion once its markers are written (the log's
        # partitions settle their transactional offsets with the offsets' operation).
        self.complete_txn = transactions.complete_transaction
        self.pending_completions = transactions.pending_completions
        self.verify_transaction = transactions.verify_transaction
        self.is_prepared = transactions.is_prepared
        self.describe_transactions = transactions.describe_transactions
        self.list_transactions = transactions.list_transactions
        self.transactional_ids = transactions.transactional_ids
        self.list_transactions_of = transactions.list_transactions_of
        # Transactional offsets: TxnOffsetCommit, and the end of a producer's transaction on
        # this log partition (our WriteTxnMarkers for our own log).
        self.transactional_offsets = transactional = TransactionalOffsetManager(
            offsets.pending, context.clock, groups, offsets, config.offsets
        )
        self.txn_offset_commit = transactional.commit_transactional_offset
        self.complete_transaction_offsets = transactional.complete_transaction
        # What the gauges read at scrape time (the latest state, committed or not), and the
        # node's group count for `max_groups`.
        self.num_groups = groups.num_groups
        self.count_groups_by_state = groups.count_by_state
        self.num_members = groups.num_members
        # The committed offsets held, and each of them (for the consumer lag).
        self.num_offsets = offsets.num_offsets
        self.committed_offsets = offsets.committed_offsets
        # And the transaction coordinator's: transactional ids by state, and the pending
        # transactional offsets.
        self.count_transactions_by_state = transactions.count_by_state
        self.num_transactional_ids = transactions.num_transactional_ids
        self.num_pending_transactional_offsets = offsets.pending.count
        # The partition's latest takeover in the log (a cluster's; None for a node alone).
        # Written before the partition loads, never by a write of the runtime, so it needs
        # no snapshot: only a load sets it.
        self.ownership: PartitionOwnershipValue | None = None
        # The coordinator epoch of the transactions' markers (WriteTxnMarkers' fence of older
        # coordinators on the brokers), from the takeovers in the log: 0 without any.
        self.coordinator_epoch = 0

    def replay(self, offset: int, record: CoordinatorRecord | RecordRun) -> None:
        """The one way records change the state, live and loaded: each record type to the
        manager that owns it (Kafka's GroupCoordinatorShard.replay). An OffsetCommitRun is
        a run of one group's commits from `offset` on, replayed in one go."""
        if type(record) is OffsetCommitRun:
            self.offsets.replay_commits(record.group, record.commits)
            return
        if not isinstance(record, CoordinatorRecord):
            raise ValueError(f"unknown record {record!r} at offset {offset}")
        key = record.key
        if type(key) is OffsetCommitKey:
            value = record.value
            assert value is None or type(value) is OffsetCommitValue
            self.offsets.replay_commit(key.group, key.topic, key.partition, value)
        elif type(key) is GroupMetadataKey:
            value = record.value
            assert value is None or type(value) is GroupMetadataValue
            self.groups.replay(key, value)
        elif type(key) is PartitionOwnershipKey:
            value = record.value
            assert value is None or type(value) is PartitionOwnershipValue
            # Who took the partition over last: the fence itself is Kafka's; the state only
            # remembers it, for the operators, and counts the coordinator epoch on.
            self.ownership = value
            if value is not None:
                self.coordinator_epoch = takeover_coordinator_epoch(
                    self.coordinator_epoch, value.timestamp_ms
                )
        elif type(key) is TransactionKey:
            value = record.value
            assert value is None or type(value) is TransactionValue
            self.transactions.replay(key.transactional_id, value)
        elif type(key) is ProducerIdBlockKey:
            value = record.value
            assert type(value) is ProducerIdBlockValue
            self.transactions.replay_producer_id_block(value.next_block_start)
        elif type(key) is TransactionalOffsetKey:
            value = record.value
            assert value is None or type(value) is TransactionalOffsetValue
            self.offsets.replay_transactional(
                offset, key.group, key.topic, key.partition, key.producer_id, value
            )
        else:
            raise ValueError(f"unknown record key {key!r} at offset {offset}")

    def load_replay(self) -> GroupLoadReplay:
        """Where a load hands the records of the log (see GroupLoadReplay)."""
        return GroupLoadReplay(self)

    def apply(self, update: object) -> None:
        if type(update) is ClassicGroupUpdate:
            self.groups.apply(update)
        elif type(update) is ProducerIdUpdate:
            self.transactions.apply(update)
        else:
            raise ValueError(f"unknown in-memory update {update!r}")

    def on_loaded(self) -> None:
        self.groups.on_loaded()
        self._schedule_group_metadata_expiration()
        self.transactions.on_loaded()

    def on_unloaded(self) -> None:
        # The runtime fails every parked caller of the partition with NOT_COORDINATOR.
        self.groups.on_unloaded()

    def has_pending_transactional_offsets(
        self, producer_id: int, committed_offset: int | None = None
    ) -> bool:
        """Whether the producer has pending transactional offsets in this log partition, as
        of `committed_offset` (None: the latest state); for tools and metrics."""
        return self.offsets.pending.has_producer(producer_id, committed_offset)

    # Operations over both managers.

    def delete_groups(
        self, group_ids: list[str], max_records: int | None = None
    ) -> CoordinatorResult[list[DeleteGroupsResponseResult]]:
        """Kafka's DeleteGroups: an Empty group goes with all its offsets.

        With `max_records`, only the first groups are deleted, up to the first whose
        tombstones reach that many records (at least one group): the results say how many,
        and the caller asks again for the rest. A group named twice is answered twice, as
        Kafka answers it, and its tombstones are written once.
        """
        records: list[CoordinatorRecord] = []
        results: list[DeleteGroupsResponseResult] = []
        deleted: set[str] = set()
        for group_id in group_ids:
            if max_records is not None and len(records) >= max_records:
                break
            code = ErrorCode.NONE
            if group_id not in deleted:
                error = self.groups.validate_delete_group(group_id)
                if error is None:
                    self.offsets.delete_all_offsets(group_id, records)
                    self.groups.create_group_tombstone_records(group_id, records)
                    deleted.add(group_id)
                else:
                    code = error.code
            results.append(DeleteGroupsResponseResult(group_id=group_id, error_code=code))
        return CoordinatorResult(records, results)

    def cleanup_group_metadata(self) -> CoordinatorResult[None]:
        """The periodic offset expiration job: expired offsets are tombstoned, and an Empty
        group left without offsets is deleted."""
        records: list[CoordinatorRecord] = []
        retention_ms = self.config.groups.offsets_retention_ms
        for group_id in self.groups.group_ids():
            if self.offsets.cleanup_expired_offsets(group_id, retention_ms, records):
                self.groups.maybe_delete_group(group_id, records)
        self._schedule_group_metadata_expiration()
        return CoordinatorResult(records)

    def _schedule_group_metadata_expiration(self) -> None:
        interval_ms = self.config.groups.offsets_retention_check_interval_ms
        self.context.timer.schedule(
            GROUP_EXPIRATION_KEY,
            interval_ms,
            self.cleanup_group_metadata,
            retry=True,
            retry_backoff_ms=interval_ms,
        )


COORDINATOR_EPOCH_ORIGIN_MS = 1_735_689_600_000
"""2025-01-01 UTC: the coordinator epoch counts seconds from here (an int32 lasts 68 years)."""


def takeover_coordinator_epoch(previous: int, timestamp_ms: int) -> int:
    """The coordinator epoch of a takeover after one of epoch `previous`: one more, or the
    seconds since COORDINATOR_EPOCH_ORIGIN_MS at the takeover if that is more.

    The brokers refuse a marker whose coordinator epoch is below the last one a producer's
    markers carried (Kafka's fence of older transaction coordinators), so the epoch of a
    partition's owners must only grow, across nodes and restarts, for as long as the log
    lasts. Kafka's producer epoch of the takeover does not: it starts again at 0 when Kafka
    gives the partition's fencing transactional id a new producer id (after
    transactional.id.expiration.ms without a takeover). Counting takeovers in the log grows,
    but compaction keeps only the latest ownership record, so a later load may see that one
    alone: its time keeps the count going, as long as the nodes' clocks are within a
    second of each other's order of takeovers (the takeovers themselves are a session
    timeout apart)."""
    return max(previous + 1, max(timestamp_ms - COORDINATOR_EPOCH_ORIGIN_MS, 0) // 1000)


class GroupLoadReplay:
    """The shard's LoadReplay: the log's records decoded into what the shard's `replay`
    takes, and handed to it in log order; offset commits decoded without the key and record
    objects that `decode_record` builds.

    An OffsetCommit writes one record per partition, one after the other, so a log is runs
    of one group's commits: a run is held (up to LOAD_RUN_LIMIT records) and replayed as one
    OffsetCommitRun, as the live write that made it was. Any other record replays what is
    held first, so the state sees every record in log order. `close` replays the rest: the
    runtime calls it when the load has read everything, before the partition becomes ACTIVE.
    """

    __slots__ = ("_commits", "_group", "_offset", "_offsets", "_shard", "_topic", "_topic_name")

    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self._shard = shard
        self._offsets = shard.offsets
        self._group = ""
        self._offset = 0
        self._commits: list[tuple[tuple[str, int], OffsetCommitValue]] = []
        self._topic = ""
        self._topic_name = ""

    def __call__(self, offset: int, key: bytes, value: bytes | None) -> None:
        commit = decode_offset_commit(key, value)
        if commit is not None:
            group, topic, partition, commit_value = commit
            if commit_value is not None:
                if group != self._group or len(self._commits) >= LOAD_RUN_LIMIT:
                    self.close()
                    self._group = group
                if not self._commits:
                    self._offset = offset
                if topic != self._topic:
                    self._topic = topic
                    self._topic_name = self._offsets.topic_name(topic)
                self._commits.append(((self._topic_name, partition), commit_value))
                return
            self.close()
            self._shard.replay(
                offset, CoordinatorRecord(OffsetCommitKey(group, topic, partition), None)
            )
            return
        self.close()
        self._shard.replay(offset, decode_record(key, value))

    def close(self) -> None:
        commits = self._commits
        if commits:
            self._commits = []
            self._shard.replay(self._offset, OffsetCommitRun(self._group, commits))
