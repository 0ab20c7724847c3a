"""What the services see of a partition's shard: one door per service, as protocols.

Kafka's GroupCoordinatorService calls its GroupCoordinatorShard's per-API methods, and its
TransactionCoordinator its TransactionStateManager's; here one shard holds both, and each
service is typed by the door it uses: `GroupShard` for the group APIs (the group service and
its bulk requests), `TransactionShard` for the transaction APIs (the transaction service,
its views, the writes that end a transaction and the markers' channel), `SecurityShard` for
the ACL and SCRAM credential APIs (the security service, on the security partition). None
names the managers behind the door, so a service cannot reach past it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

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
from coordinator_server.consumer_groups.regex import DeniedTopics, nothing_denied
from coordinator_server.offsets.transactional import TransactionalCommit, TransactionalCommitAnswer
from coordinator_server.records.transactions import RefusedMarkers, TransactionState
from coordinator_server.runtime.api import (
    CoordinatorResult,
    CoordinatorShard,
    RequestContext,
    ResponseHandle,
)
from coordinator_server.transactions.metadata import TxnPartitions
from coordinator_server.transactions.results import (
    AddOffsetsToTxnResult,
    AddPartitionsToTxnResult,
    CompleteTransactionResult,
    EndTxnResult,
    InitProducerIdResult,
    ListedTransaction,
    PendingCompleteTxn,
    TransactionDescription,
)


class GroupShard(CoordinatorShard, Protocol):
    """The group APIs' door: classic groups and committed offsets."""

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[JoinGroupResponse]: ...

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[SyncGroupResponse]: ...

    def heartbeat(
        self, ctx: RequestContext, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]: ...

    def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]: ...

    def describe_groups(
        self, group_ids: list[str], committed_offset: int
    ) -> list[DescribeGroupsResponseGroup]: ...

    def list_groups(
        self,
        states: Collection[str],
        types: Collection[str],
        committed_offset: int,
        max_bytes: int | None = None,
    ) -> tuple[list[ListGroupsResponseGroup], int] | None: ...

    def delete_groups(
        self, group_ids: list[str], max_records: int | None = None
    ) -> CoordinatorResult[list[DeleteGroupsResponseResult]]: ...

    def commit_offset(
        self, request: OffsetCommitRequest, ctx: RequestContext | None = None
    ) -> CoordinatorResult[OffsetCommitResponse]: ...

    def delete_offsets(
        self, request: OffsetDeleteRequest
    ) -> CoordinatorResult[OffsetDeleteResponse]: ...

    def fetch_partition_offsets(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]],
        committed_offset: int | None,
        max_bytes: int | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[list[OffsetFetchResponseTopic], int] | None: ...

    def fetch_all_offsets(
        self,
        group_id: str,
        committed_offset: int | None,
        max_bytes: int | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[list[OffsetFetchResponseTopic], int] | None: ...

    def consumer_group_heartbeat(
        self,
        ctx: RequestContext,
        request: ConsumerGroupHeartbeatRequest,
        denied_topics: DeniedTopics = nothing_denied,
    ) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]: ...

    def consumer_group_describe(
        self, group_ids: list[str], committed_offset: int
    ) -> list[ConsumerGroupDescribeResponseGroup]: ...


class TransactionShard(CoordinatorShard, Protocol):
    """The transaction APIs' door: the transaction coordinator of the transactional ids that
    hash to the partition, and the transactional offsets of its groups."""

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        fresh_producer_id: int | None = None,
    ) -> CoordinatorResult[InitProducerIdResult]: ...

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: TxnPartitions | Sequence[tuple[str, Sequence[int]]],
    ) -> CoordinatorResult[AddPartitionsToTxnResult]: ...

    def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        group_log_partition: int,
    ) -> CoordinatorResult[AddOffsetsToTxnResult]: ...

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> CoordinatorResult[EndTxnResult]: ...

    def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        log_partition: int,
        committed_offset: int | None = None,
    ) -> int: ...

    def txn_offset_commit(
        self, request: TransactionalCommit
    ) -> CoordinatorResult[TransactionalCommitAnswer]: ...

    def complete_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        prepared_ms: int = -1,
        refused_markers: RefusedMarkers = (),
    ) -> CoordinatorResult[CompleteTransactionResult]: ...

    def complete_transaction_offsets(
        self, producer_id: int, producer_epoch: int, committed: bool
    ) -> CoordinatorResult[ErrorCode]: ...

    def pending_completions(
        self, committed_offset: int | None = None
    ) -> list[PendingCompleteTxn]: ...

    def is_prepared(
        self, completion: PendingCompleteTxn, committed_offset: int | None = None
    ) -> bool: ...

    def describe_transactions(
        self, transactional_ids: Sequence[str], committed_offset: int | None = None
    ) -> list[TransactionDescription]: ...

    def transactional_ids(self, committed_offset: int | None = None) -> list[str]: ...

    def list_transactions_of(
        self,
        transactional_ids: Iterable[str],
        states: Collection[TransactionState] | None,
        producer_id_filters: Collection[int],
        duration_filter_ms: int = -1,
        committed_offset: int | None = None,
    ) -> list[ListedTransaction]: ...


class SecurityShard(CoordinatorShard, Protocol):
    """The security APIs' door: the ACLs and SCRAM credentials of the security partition
    (writes return records and the answer; reads answer as of the committed offset)."""

    def create_acls(self, request: CreateAclsRequest) -> CoordinatorResult[CreateAclsResponse]: ...

    def delete_acls(self, request: DeleteAclsRequest) -> CoordinatorResult[DeleteAclsResponse]: ...

    def describe_acls(
        self, request: DescribeAclsRequest, committed_offset: int
    ) -> DescribeAclsResponse: ...

    def alter_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> CoordinatorResult[AlterUserScramCredentialsResponse]: ...

    def describe_scram_credentials(
        self, request: DescribeUserScramCredentialsRequest, committed_offset: int
    ) -> DescribeUserScramCredentialsResponse: ...
