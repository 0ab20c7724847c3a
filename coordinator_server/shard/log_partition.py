"""LogPartitionShard: the state machine of one partition of the coordinator log (Kafka's
GroupCoordinatorShard, with the transaction coordinator's state beside the groups').

It composes the managers, private behind it, and owns the single `replay` dispatch on
record type and `apply` dispatch on update type, the only paths through which live writes
and loads change the state. It is the services' one door (`doors.py`): a method per API,
reads included, each handing its arguments to the manager that answers. Operations that
span the managers (DeleteGroups, the offset expiration job) live here, as in Kafka's
GroupCoordinatorShard.

The door's methods forward a call (one more Python frame than the aliases of the managers'
bound methods that were here before: ~40 ns, under 1 % of a heartbeat's cost in the
server).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from coordinator_protocol.consumer_groups import (
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    DeleteGroupsResponseResult,
    DescribeGroupsResponseGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponseGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequestGroup,
    OffsetFetchResponseGroup,
    OffsetFetchResponseTopic,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from coordinator_server.consumer_groups import offsets as consumer_group_offsets
from coordinator_server.consumer_groups.describe import (
    describe_consumer_groups,
    described_as_classic_group,
    list_consumer_groups,
)
from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopics,
    ConsumerGroupConfig,
    no_cluster_topics,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.regex import DeniedTopics, nothing_denied
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
from coordinator_server.offsets.transactional import (
    TransactionalCommit,
    TransactionalCommitAnswer,
    TransactionalOffsetManager,
)
from coordinator_server.records import (
    AclKey,
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionOwnershipKey,
    PartitionOwnershipValue,
    ProducerIdBlockKey,
    ProducerIdBlockValue,
    ScramCredentialKey,
    ScramCredentialValue,
    TransactionalOffsetKey,
    TransactionalOffsetValue,
    TransactionKey,
    TransactionValue,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator_server.records.transactions import RefusedMarkers, TransactionState
from coordinator_server.runtime.api import (
    CoordinatorResult,
    RecordRun,
    RequestContext,
    ResponseHandle,
    ShardContext,
)
from coordinator_server.security.acl_control import AclControlManager, AclsConfig
from coordinator_server.security.scram_control import (
    ScramControlManager,
    ScramCredentialsConfig,
)
from coordinator_server.shard.group_migration import GroupMigration
from coordinator_server.shard.load_replay import ShardLoadReplay, takeover_coordinator_epoch
from coordinator_server.transactions.manager import TransactionManager
from coordinator_server.transactions.metadata import TxnPartitions
from coordinator_server.transactions.producer_ids import ProducerIdUpdate
from coordinator_server.transactions.results import (
    AddOffsetsToTxnResult,
    AddPartitionsToTxnResult,
    CompleteTransactionResult,
    EndTxnResult,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactionsResult,
    PendingCompleteTxn,
    TransactionDescription,
    TransactionsConfig,
)

GROUP_EXPIRATION_KEY = "expire-group-metadata"

CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)
"""The keys of the consumer group records (KIP-848), which the consumer groups replay."""


class ShardManagers(NamedTuple):
    """The managers behind a shard's doors, as `LogPartitionShard.managers` shows them."""

    groups: GroupMetadataManager
    offsets: OffsetMetadataManager
    transactions: TransactionManager
    transactional_offsets: TransactionalOffsetManager
    acls: AclControlManager
    scram_credentials: ScramControlManager
    consumer_groups: ConsumerGroupManager


@dataclass(frozen=True, slots=True)
class ShardConfig:
    offsets: OffsetsConfig = field(default_factory=OffsetsConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    transactions: TransactionsConfig = field(default_factory=TransactionsConfig)
    acls: AclsConfig = field(default_factory=AclsConfig)
    scram_credentials: ScramCredentialsConfig = field(default_factory=ScramCredentialsConfig)
    consumer_groups: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)


class LogPartitionShard:
    """The state of one partition of the coordinator log: its classic groups and committed
    offsets, the transactions of the transactional ids that hash to it with their
    transactional offsets, and who took it over last. The runtime drives it as a
    CoordinatorShard; the services see it through their doors (`GroupShard`,
    `TransactionShard`), one method per API, and never the managers behind them."""

    def __init__(
        self,
        context: ShardContext,
        config: ShardConfig,
        metrics: GroupCoordinatorMetricsShard | None = None,
        group_count: GroupCount | None = None,
        transactional_id_count: Callable[[], int] | None = None,
        cluster_topics: Callable[[], ClusterTopics] | None = None,
    ) -> None:
        """`group_count` and `transactional_id_count` say how many groups and transactional
        ids the node holds over all its partitions (for `max_groups` and
        `max_transactional_ids`); None: this shard's own. `cluster_topics` gives the data
        cluster's topics as they are now, which consumer groups are assigned from (None:
        the cluster has none)."""
        self.context = context
        self.config = config
        self._groups = groups = GroupMetadataManager(
            context.snapshot_registry,
            context.clock,
            context.timer,
            config.groups,
            metrics,
            group_count,
        )
        # The transaction coordinator of the transactional ids that hash to this partition.
        self._transactions = TransactionManager(
            context.snapshot_registry,
            context.clock,
            context.timer,
            replace(config.transactions, partition=context.partition),
            transactional_id_count,
        )
        # ACLs and SCRAM credentials: only the security partition's records and writes
        # reach them; on the other partitions they stay empty.
        self._acls = AclControlManager(context.snapshot_registry, config.acls)
        self._scram_credentials = ScramControlManager(
            context.snapshot_registry, config.scram_credentials
        )
        # The consumer groups (KIP-848), rebuilt from their records; the classic groups'
        # limit on a group's size bounds them too.
        self._cluster_topics = cluster_topics or no_cluster_topics
        self._consumer_groups = consumer_groups = ConsumerGroupManager(
            context.snapshot_registry,
            config.groups.max_size,
            config.consumer_groups,
            timer=context.timer,
            clock=context.clock,
            topics=self._cluster_topics,
            downgrade=self._downgrade,
        )
        # The doors both kinds of group answer behind, and the migration between them.
        self._migration = GroupMigration(
            groups, consumer_groups, context.clock, self._cluster_topics
        )
        # The committed offsets of both kinds of group: a group id names a consumer group or
        # a classic one, never both.
        self._offsets = offsets = OffsetMetadataManager(
            context.snapshot_registry, context.clock, config.offsets, groups, self._consumer_groups
        )
        # Transactional offsets: TxnOffsetCommit, and the end of a producer's transaction on
        # this log partition (our WriteTxnMarkers for our own log).
        self._transactional_offsets = TransactionalOffsetManager(
            offsets.pending, context.clock, groups, offsets, config.offsets
        )
        # The partition's latest takeover in the log (a cluster's; None for a node alone).
        # Written before the partition loads, never by a write of the runtime, so it needs
        # no snapshot: only a load sets it.
        self.ownership: PartitionOwnershipValue | None = None
        # The coordinator epoch of the transactions' markers (WriteTxnMarkers' fence of older
        # coordinators on the brokers), from the takeovers in the log: 0 without any.
        self.coordinator_epoch = 0

    @property
    def managers(self) -> ShardManagers:
        """The managers behind the doors, to look at the state they hold: for tests and a
        debugger. The services see the shard through its doors, which do not have this."""
        return ShardManagers(
            self._groups,
            self._offsets,
            self._transactions,
            self._transactional_offsets,
            self._acls,
            self._scram_credentials,
            self._consumer_groups,
        )

    # The group APIs' door (GroupShard).

    # A group id names a classic group or a consumer group; the classic APIs reach either
    # (a consumer group's classic members): `GroupMigration` routes them.

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[JoinGroupResponse]:
        return self._migration.join_group(ctx, request, handle)

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[SyncGroupResponse]:
        return self._migration.sync_group(ctx, request, handle)

    def heartbeat(
        self, ctx: RequestContext, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]:
        return self._migration.heartbeat(ctx, request)

    def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]:
        return self._migration.leave_group(ctx, request)

    def describe_groups(
        self, group_ids: list[str], committed_offset: int
    ) -> list[DescribeGroupsResponseGroup]:
        consumer_groups = self._consumer_groups
        if not consumer_groups.num_groups():
            return self._groups.describe_groups(group_ids, committed_offset)
        # The classic API describes a consumer group's id as one it does not have.
        classic_ids = [
            group_id
            for group_id in group_ids
            if consumer_groups.group(group_id, committed_offset) is None
        ]
        classic = iter(self._groups.describe_groups(classic_ids, committed_offset))
        return [
            described_as_classic_group(group_id)
            if consumer_groups.group(group_id, committed_offset) is not None
            else next(classic)
            for group_id in group_ids
        ]

    def list_groups(
        self,
        states: Collection[str],
        types: Collection[str],
        committed_offset: int,
        max_bytes: int | None = None,
    ) -> tuple[list[ListGroupsResponseGroup], int] | None:
        classic = self._groups.list_groups(states, types, committed_offset, max_bytes)
        if classic is None or not self._consumer_groups.num_groups():
            return classic
        listed, size = classic
        consumer = list_consumer_groups(
            self._consumer_groups,
            states,
            types,
            committed_offset,
            None if max_bytes is None else max_bytes - size,
        )
        if consumer is None:
            return None
        return [*listed, *consumer[0]], size + consumer[1]

    def commit_offset(
        self, request: OffsetCommitRequest, ctx: RequestContext | None = None
    ) -> CoordinatorResult[OffsetCommitResponse]:
        return self._offsets.commit_offset(request, ctx)

    def delete_offsets(
        self, request: OffsetDeleteRequest
    ) -> CoordinatorResult[OffsetDeleteResponse]:
        return self._offsets.delete_offsets(request)

    def fetch_offsets(
        self, request: OffsetFetchRequestGroup, committed_offset: int | None
    ) -> OffsetFetchResponseGroup:
        return self._offsets.fetch_offsets(request, committed_offset)

    def fetch_partition_offsets(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]],
        committed_offset: int | None,
        max_bytes: int | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[list[OffsetFetchResponseTopic], int] | None:
        """The partitions' offsets (see OffsetMetadataManager): a consumer group's refusal
        of the member (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH) is raised, the group's error."""
        return self._offsets.fetch_partition_offsets(
            group_id,
            topics,
            committed_offset,
            max_bytes,
            member_id=member_id,
            member_epoch=member_epoch,
        )

    def fetch_all_offsets(
        self,
        group_id: str,
        committed_offset: int | None,
        max_bytes: int | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[list[OffsetFetchResponseTopic], int] | None:
        """Every offset of the group, the member checked as `fetch_partition_offsets` does."""
        return self._offsets.fetch_all_offsets(
            group_id, committed_offset, max_bytes, member_id=member_id, member_epoch=member_epoch
        )

    # The consumer group protocol (KIP-848). A group id names one group, of one type:
    # a consumer group's id is not a classic group's, and the other way round.

    def consumer_group_heartbeat(
        self,
        ctx: RequestContext,
        request: ConsumerGroupHeartbeatRequest,
        denied_topics: DeniedTopics = nothing_denied,
    ) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]:
        return self._migration.consumer_group_heartbeat(ctx, request, denied_topics)

    def _downgrade(
        self, group: ConsumerGroup, leaving: Sequence[ConsumerGroupMember], now_ms: int
    ) -> CoordinatorResult[None]:
        return self._migration.downgrade(group, leaving, now_ms)

    def consumer_group_describe(
        self, group_ids: list[str], committed_offset: int
    ) -> list[ConsumerGroupDescribeResponseGroup]:
        classic = self._groups
        return describe_consumer_groups(
            self._consumer_groups,
            group_ids,
            committed_offset,
            self._cluster_topics(),
            lambda group_id: classic.group(group_id, committed_offset) is not None,
        )

    # The transaction APIs' door (TransactionShard).

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        fresh_producer_id: int | None = None,
    ) -> CoordinatorResult[InitProducerIdResult]:
        return self._transactions.init_producer_id(
            transactional_id, transaction_timeout_ms, producer_id, producer_epoch, fresh_producer_id
        )

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: TxnPartitions | Sequence[tuple[str, Sequence[int]]],
    ) -> CoordinatorResult[AddPartitionsToTxnResult]:
        return self._transactions.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, topics
        )

    def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        group_log_partition: int,
    ) -> CoordinatorResult[AddOffsetsToTxnResult]:
        return self._transactions.add_offsets_to_txn(
            transactional_id, producer_id, producer_epoch, group_id, group_log_partition
        )

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> CoordinatorResult[EndTxnResult]:
        return self._transactions.end_txn(transactional_id, producer_id, producer_epoch, committed)

    def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        log_partition: int,
        committed_offset: int | None = None,
    ) -> int:
        """The error code a write for the producer's ongoing transaction on `log_partition`
        gets (KIP-890's verification), NONE when it may go on."""
        return self._transactions.verify_transaction(
            transactional_id, producer_id, producer_epoch, log_partition, committed_offset
        )

    def txn_offset_commit(
        self, request: TransactionalCommit
    ) -> CoordinatorResult[TransactionalCommitAnswer]:
        return self._transactional_offsets.commit_transactional_offset(request)

    def complete_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        prepared_ms: int = -1,
        refused_markers: RefusedMarkers = (),
    ) -> CoordinatorResult[CompleteTransactionResult]:
        """The transaction's own completion once its markers are written (the log's
        partitions end its transactional offsets with `complete_transaction_offsets`)."""
        return self._transactions.complete_transaction(
            transactional_id, producer_id, producer_epoch, committed, prepared_ms, refused_markers
        )

    def complete_transaction_offsets(
        self, producer_id: int, producer_epoch: int, committed: bool
    ) -> CoordinatorResult[ErrorCode]:
        """The end of a producer's transaction on this log partition: its pending
        transactional offsets committed or dropped (our WriteTxnMarkers for our own log)."""
        return self._transactional_offsets.complete_transaction(
            producer_id, producer_epoch, committed
        )

    def pending_completions(self, committed_offset: int | None = None) -> list[PendingCompleteTxn]:
        return self._transactions.pending_completions(committed_offset)

    def is_prepared(
        self, completion: PendingCompleteTxn, committed_offset: int | None = None
    ) -> bool:
        return self._transactions.is_prepared(completion, committed_offset)

    def describe_transactions(
        self, transactional_ids: Sequence[str], committed_offset: int | None = None
    ) -> list[TransactionDescription]:
        return self._transactions.describe_transactions(transactional_ids, committed_offset)

    def list_transactions(
        self,
        state_filters: Collection[str],
        producer_id_filters: Collection[int],
        duration_filter_ms: int = -1,
        committed_offset: int | None = None,
    ) -> ListTransactionsResult:
        return self._transactions.list_transactions(
            state_filters, producer_id_filters, duration_filter_ms, committed_offset
        )

    def transactional_ids(self, committed_offset: int | None = None) -> list[str]:
        return self._transactions.transactional_ids(committed_offset)

    def list_transactions_of(
        self,
        transactional_ids: Iterable[str],
        states: Collection[TransactionState] | None,
        producer_id_filters: Collection[int],
        duration_filter_ms: int = -1,
        committed_offset: int | None = None,
    ) -> list[ListedTransaction]:
        return self._transactions.list_transactions_of(
            transactional_ids, states, producer_id_filters, duration_filter_ms, committed_offset
        )

    # The security APIs' door (SecurityShard): the security partition's.

    def create_acls(self, request: CreateAclsRequest) -> CoordinatorResult[CreateAclsResponse]:
        return self._acls.create_acls(request)

    def delete_acls(self, request: DeleteAclsRequest) -> CoordinatorResult[DeleteAclsResponse]:
        return self._acls.delete_acls(request)

    def describe_acls(
        self, request: DescribeAclsRequest, committed_offset: int
    ) -> DescribeAclsResponse:
        return self._acls.describe_acls(request, committed_offset)

    def alter_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> CoordinatorResult[AlterUserScramCredentialsResponse]:
        return self._scram_credentials.alter_credentials(request)

    def describe_scram_credentials(
        self, request: DescribeUserScramCredentialsRequest, committed_offset: int
    ) -> DescribeUserScramCredentialsResponse:
        return self._scram_credentials.describe_credentials(request, committed_offset)

    # What the gauges read at scrape time (the latest state, committed or not), and the
    # consumer lag's committed offsets.

    def num_groups(self) -> int:
        """Groups of both protocols: `max_groups` bounds them together."""
        return self._groups.num_groups() + self._consumer_groups.num_groups()

    def count_groups_by_state(self) -> dict[str, int]:
        return self._groups.count_by_state()

    def count_consumer_groups_by_state(self) -> dict[str, int]:
        return self._consumer_groups.count_by_state()

    def num_consumer_group_members(self) -> int:
        return self._consumer_groups.num_members()

    def num_members(self) -> int:
        return self._groups.num_members()

    def num_offsets(self) -> int:
        return self._offsets.num_offsets()

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        """Every committed offset held: (group, topic, partition, offset)."""
        return self._offsets.committed_offsets()

    def count_transactions_by_state(self) -> dict[str, int]:
        return self._transactions.count_by_state()

    def num_transactional_ids(self) -> int:
        return self._transactions.num_transactional_ids()

    def num_pending_transactional_offsets(self) -> int:
        return self._offsets.pending.count()

    def replay(self, offset: int, record: CoordinatorRecord | RecordRun) -> None:
        """The one way records change the state, live and loaded: each record type to the
        manager that owns it (Kafka's GroupCoordinatorShard.replay). An OffsetCommitRun is
        a run of one group's commits from `offset` on, replayed in one go."""
        if type(record) is OffsetCommitRun:
            self._offsets.replay_commits(record.group, record.commits)
            return
        if not isinstance(record, CoordinatorRecord):
            raise ValueError(f"unknown record {record!r} at offset {offset}")
        key = record.key
        if type(key) is OffsetCommitKey:
            value = record.value
            assert value is None or type(value) is OffsetCommitValue
            self._offsets.replay_commit(key.group, key.topic, key.partition, value)
        elif type(key) is GroupMetadataKey:
            value = record.value
            assert value is None or type(value) is GroupMetadataValue
            self._groups.replay(key, value)
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
            self._transactions.replay(key.transactional_id, value)
        elif type(key) is ProducerIdBlockKey:
            value = record.value
            assert type(value) is ProducerIdBlockValue
            self._transactions.replay_producer_id_block(value.next_block_start)
        elif type(key) is TransactionalOffsetKey:
            value = record.value
            assert value is None or type(value) is TransactionalOffsetValue
            self._offsets.replay_transactional(
                offset, key.group, key.topic, key.partition, key.producer_id, value
            )
        elif type(key) is AclKey:
            self._acls.replay(key, record.value is not None)
        elif type(key) is ScramCredentialKey:
            value = record.value
            assert value is None or type(value) is ScramCredentialValue
            self._scram_credentials.replay(key.user, key.mechanism, value)
        elif isinstance(key, CONSUMER_GROUP_KEYS):
            simple = self._groups.group(key.group)
            if simple is not None and not simple.members:
                # A compacted log may replay a consumer group's offsets, which make Kafka's
                # simple group, before the group's own records: the id is the consumer
                # group's (Kafka's `getOrMaybeCreatePersistedConsumerGroup`).
                self._groups.replay(GroupMetadataKey(key.group), None)
            self._consumer_groups.replay(key, record.value)
        else:
            raise ValueError(f"unknown record key {key!r} at offset {offset}")

    def load_replay(self) -> ShardLoadReplay:
        """Where a load hands the records of the log (see ShardLoadReplay)."""
        return ShardLoadReplay(self, self._offsets)

    def apply(self, update: object) -> None:
        if type(update) is ClassicGroupUpdate:
            self._groups.apply(update)
        elif type(update) is ProducerIdUpdate:
            self._transactions.apply(update)
        else:
            raise ValueError(f"unknown in-memory update {update!r}")

    def on_loaded(self) -> None:
        self._groups.on_loaded()
        self._consumer_groups.on_loaded()
        self._schedule_group_metadata_expiration()
        self._transactions.on_loaded()

    def on_unloaded(self) -> None:
        # The runtime fails every parked caller of the partition with NOT_COORDINATOR.
        self._groups.on_unloaded()

    def has_pending_transactional_offsets(
        self, producer_id: int, committed_offset: int | None = None
    ) -> bool:
        """Whether the producer has pending transactional offsets in this log partition, as
        of `committed_offset` (None: the latest state); for tools and metrics."""
        return self._offsets.pending.has_producer(producer_id, committed_offset)

    # Operations over both managers.

    def delete_groups(
        self, group_ids: list[str], max_records: int | None = None
    ) -> CoordinatorResult[list[DeleteGroupsResponseResult]]:
        """Kafka's DeleteGroups: an Empty group goes with all its offsets (a consumer group
        without members with its records' tombstones, in Kafka's order).

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
                consumer_group = self._consumer_groups.group(group_id)
                if consumer_group is not None:
                    error = consumer_group_offsets.validate_delete_group(consumer_group)
                else:
                    error = self._groups.validate_delete_group(group_id)
                if error is None:
                    self._offsets.delete_all_offsets(group_id, records)
                    if consumer_group is not None:
                        records.extend(self._consumer_groups.delete_group_records(group_id))
                    else:
                        self._groups.create_group_tombstone_records(group_id, records)
                    deleted.add(group_id)
                else:
                    code = error.code
            results.append(DeleteGroupsResponseResult(group_id=group_id, error_code=code))
        return CoordinatorResult(records, results)

    def cleanup_group_metadata(self) -> CoordinatorResult[None]:
        """The periodic offset expiration job: expired offsets are tombstoned, and an Empty
        group left without offsets is deleted (a consumer group when it has no members, as
        Kafka's `maybeDeleteGroup`)."""
        records: list[CoordinatorRecord] = []
        retention_ms = self.config.groups.offsets_retention_ms
        consumer_groups = self._consumer_groups
        for group_id in self._groups.group_ids():
            # A classic group of a consumer group's id (a load may replay the offsets that
            # made a simple group before the consumer group's records) is the consumer
            # group's to expire.
            if consumer_groups.group(group_id) is not None:
                continue
            if self._offsets.cleanup_expired_offsets(group_id, retention_ms, records):
                self._groups.maybe_delete_group(group_id, records)
        for group_id in consumer_groups.group_ids():
            if self._offsets.cleanup_expired_offsets(group_id, retention_ms, records):
                group = consumer_groups.group(group_id)
                if group is not None and not group.num_members():
                    records.extend(consumer_groups.delete_group_records(group_id))
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
