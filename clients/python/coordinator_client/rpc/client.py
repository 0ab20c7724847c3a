"""`CoordinatorClient`: the asyncio client of the wire contract.

One typed method per API of the contract, and helpers in Kafka's terms (`commit_offsets`,
`fetch_offsets`, ...), all on the one request path of `RequestPath` (`request_path`), whose
docstring tells how calls are routed, retried and timed out.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Final, overload

from aiokafka.structs import OffsetAndMetadata, TopicPartition

from coordinator_client.rpc import apis
from coordinator_client.rpc.apis import single
from coordinator_client.rpc.errors import OffsetCommitError, OffsetDeleteError
from coordinator_client.rpc.nodes import Node, build_ssl_context, parse_bootstrap
from coordinator_client.rpc.request_path import RequestPath, _gather_all
from coordinator_client.rpc.requests import (
    commit_topics,
    delete_topics,
    fetch_topics,
    partition_errors,
    raise_for_code,
)
from coordinator_protocol.consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode, error_for_code
from coordinator_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseGroup,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupRequestMember,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListGroupsResponseGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
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
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsV1Request,
    DescribeTransactionsV1Response,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseState,
    ListTransactionsV1Request,
    ListTransactionsV1Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

__all__ = ["CoordinatorClient", "Node", "build_ssl_context", "parse_bootstrap"]

# Kafka's JOIN_GROUP_TIMEOUT_LAPSE: a JoinGroup may be parked for the whole rebalance
# timeout, so its own timeout is that plus a margin.
JOIN_GROUP_TIMEOUT_LAPSE_MS: Final = 5000


class CoordinatorClient(RequestPath):
    """An asyncio client for coordinator-server.

    Args:
        bootstrap: "host:port[,host:port]" of one or more servers to discover coordinators
            through.
        client_id: sent in every request header.
        request_timeout_ms: the default deadline of a call, retries included (Kafka's
            `request.timeout.ms`; JoinGroup gets at least its rebalance timeout plus 5 s).
        retry_backoff_ms, retry_backoff_max_ms: the back-off before the first retry and
            its cap (Kafka's `retry.backoff.ms` / `retry.backoff.max.ms`); 20% jitter.
        connect_timeout_ms: how long opening one connection may take.
        max_in_flight_requests: requests awaiting an answer per connection; more wait.
        max_frame_bytes: the largest frame sent or accepted (the contract's 8 MiB default).
        ssl_context: TLS to use; or build one from `ssl_cafile` (CAs to trust; default:
            the system's), `ssl_certfile` and `ssl_keyfile` (a client certificate), when
            `ssl_cafile` or `ssl_certfile` is given.
        ssl_server_hostname: the name to verify the server certificate against (default:
            the host connected to).
        coordinator_cache_size: how many groups' coordinators to remember.
        security: Kafka's client security settings (`ClientSecurity`, from Kafka's
            property names): TLS, and SASL (PLAIN, SCRAM, OAUTHBEARER) run on each connection
            before its first request, and again before the session's lifetime passes; give
            TLS through it or through the ssl_* arguments, not both.
    """

    # Life cycle

    async def start(self) -> None:
        """Check that a bootstrap server answers (ApiVersions). Optional: connections are
        otherwise opened on first use."""
        await self.api_versions()

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # The contract's APIs, one typed method each, all on the one path (`_call`)

    async def api_versions(self, *, timeout_ms: int | None = None) -> ApiVersionsResponse:
        """ApiVersions (18) from a bootstrap server."""
        return await self._call(
            apis.API_VERSIONS, ApiVersionsRequest(), timeout_ms, raise_on_error=True
        )

    async def find_coordinator_raw(
        self, request: FindCoordinatorRequest, *, timeout_ms: int | None = None
    ) -> FindCoordinatorResponse:
        """FindCoordinator (10) as sent, from a bootstrap server; per-key errors stay in
        the response (use `find_coordinator` for the cached, retried lookup)."""
        return await self._call(apis.FIND_COORDINATOR, request, timeout_ms)

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> DescribeClusterResponse:
        """DescribeCluster (60) from a bootstrap server: the nodes of its cluster."""
        request = DescribeClusterRequest()
        return await self._call(apis.DESCRIBE_CLUSTER, request, timeout_ms, raise_on_error=True)

    async def join_group(
        self,
        request: JoinGroupRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> JoinGroupResponse:
        """JoinGroup (11). The server may hold it until the rebalance completes, so the
        default timeout is at least the rebalance timeout plus 5 s.

        With `raise_on_error=False` an error answer (MEMBER_ID_REQUIRED, ...) is returned
        for the caller to read (the group member needs its member_id)."""
        if timeout_ms is None:
            rebalance_timeout_ms = request.rebalance_timeout_ms
            if rebalance_timeout_ms < 0:
                rebalance_timeout_ms = request.session_timeout_ms
            timeout_ms = max(
                self.request_timeout_ms, rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS
            )
        return await self._call(apis.JOIN_GROUP, request, timeout_ms, raise_on_error=raise_on_error)

    async def sync_group(
        self,
        request: SyncGroupRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> SyncGroupResponse:
        """SyncGroup (14). A follower's SyncGroup waits for the leader's assignment."""
        return await self._call(apis.SYNC_GROUP, request, timeout_ms, raise_on_error=raise_on_error)

    async def heartbeat(
        self,
        request: HeartbeatRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> HeartbeatResponse:
        """Heartbeat (12)."""
        return await self._call(apis.HEARTBEAT, request, timeout_ms, raise_on_error=raise_on_error)

    async def leave_group(
        self,
        request: LeaveGroupRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> LeaveGroupResponse:
        """LeaveGroup (13). With `raise_on_error`, a per-member error is raised too."""
        return await self._call(
            apis.LEAVE_GROUP, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def consumer_group_heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        *,
        raise_on_error: bool = False,
        timeout_ms: int | None = None,
    ) -> ConsumerGroupHeartbeatResponse:
        """ConsumerGroupHeartbeat (68), the consumer group protocol's one member API (join,
        reconcile, leave), to the group's coordinator. Coordinator errors are retried within
        the deadline; the others come back in the response (a member reads them there), or
        with `raise_on_error` are raised."""
        return await self._call(
            apis.CONSUMER_GROUP_HEARTBEAT, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def offset_commit(
        self, request: OffsetCommitRequest, *, timeout_ms: int | None = None
    ) -> OffsetCommitResponse:
        """OffsetCommit (8). Errors are per partition (as in Kafka, coordinator errors too,
        which are retried); the others are returned in the response."""
        return await self._call(apis.OFFSET_COMMIT, request, timeout_ms)

    async def offset_fetch(
        self, request: OffsetFetchRequest, *, timeout_ms: int | None = None
    ) -> OffsetFetchResponse:
        """OffsetFetch (9). Each group is asked of its own coordinator (in parallel) and
        the answers are put back in request order; group errors stay in the response."""
        return await self._call(apis.OFFSET_FETCH, request, timeout_ms)

    async def describe_groups(
        self, request: DescribeGroupsRequest, *, timeout_ms: int | None = None
    ) -> DescribeGroupsResponse:
        """DescribeGroups (15), each group asked of its own coordinator; group errors
        (GROUP_ID_NOT_FOUND, ...) stay in the response."""
        return await self._call(apis.DESCRIBE_GROUPS, request, timeout_ms)

    async def consumer_group_describe(
        self, request: ConsumerGroupDescribeRequest, *, timeout_ms: int | None = None
    ) -> ConsumerGroupDescribeResponse:
        """ConsumerGroupDescribe (69), each group asked of its own coordinator; group errors
        (GROUP_ID_NOT_FOUND for an id that is not a consumer group's, ...) stay in the
        response. A server that does not serve the consumer group protocol raises
        UNSUPPORTED_VERSION."""
        return await self._call(apis.CONSUMER_GROUP_DESCRIBE, request, timeout_ms)

    async def list_groups(
        self, request: ListGroupsRequest | None = None, *, timeout_ms: int | None = None
    ) -> ListGroupsResponse:
        """ListGroups (16), asked of every node of the cluster (each lists the groups it
        coordinates; DescribeCluster names the nodes) and merged; a group listed twice is
        listed once. If a node answers an error, that answer is returned (`list_all_groups`
        raises it)."""
        return await self._call(apis.LIST_GROUPS, request or ListGroupsRequest(), timeout_ms)

    async def delete_groups(
        self, request: DeleteGroupsRequest, *, timeout_ms: int | None = None
    ) -> DeleteGroupsResponse:
        """DeleteGroups (42), each group sent to its own coordinator; per-group errors
        (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...) stay in the response."""
        return await self._call(apis.DELETE_GROUPS, request, timeout_ms)

    async def offset_delete(
        self,
        request: OffsetDeleteRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> OffsetDeleteResponse:
        """OffsetDelete (47). With `raise_on_error`, a top-level error is raised;
        per-partition errors stay in the response (`delete_offsets` raises them)."""
        return await self._call(
            apis.OFFSET_DELETE, request, timeout_ms, raise_on_error=raise_on_error
        )

    # The transaction APIs (answered once the server's transaction coordinator is wired)

    async def init_producer_id(
        self,
        request: InitProducerIdRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> InitProducerIdResponse:
        """InitProducerId (22), to the transaction coordinator of its transactional id; an
        idempotent producer's (no transactional id) to a bootstrap server, as Kafka's
        producer asks any broker. CONCURRENT_TRANSACTIONS (an earlier transaction being
        aborted or completed) is retried within the deadline."""
        if request.transactional_id is None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._timeout_s(timeout_ms)
            api = apis.INIT_PRODUCER_ID
            response = await self._call_with_retries(
                lambda d: self._send_to_bootstrap(request, api.response_type, d),
                api.retry_code,
                deadline,
                what=api.name,
            )
            if raise_on_error:
                raise_for_code(response.error_code, response.error_message)
            return response
        return await self._call(
            apis.INIT_PRODUCER_ID, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def add_partitions_to_txn(
        self,
        request: AddPartitionsToTxnRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> AddPartitionsToTxnResponse:
        """AddPartitionsToTxn (24), to the transaction coordinator. With `raise_on_error`
        the top-level error, else the first partition's, is raised."""
        return await self._call(
            apis.ADD_PARTITIONS_TO_TXN, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def add_offsets_to_txn(
        self,
        request: AddOffsetsToTxnRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> AddOffsetsToTxnResponse:
        """AddOffsetsToTxn (25), to the transaction coordinator."""
        return await self._call(
            apis.ADD_OFFSETS_TO_TXN, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def end_txn(
        self,
        request: EndTxnRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> EndTxnResponse:
        """EndTxn (26), to the transaction coordinator: commit or abort."""
        return await self._call(apis.END_TXN, request, timeout_ms, raise_on_error=raise_on_error)

    async def txn_offset_commit(
        self, request: TxnOffsetCommitRequest, *, timeout_ms: int | None = None
    ) -> TxnOffsetCommitResponse:
        """TxnOffsetCommit (28), to the coordinator of its group (as Kafka routes it).
        Errors are per partition; coordinator errors and CONCURRENT_TRANSACTIONS are
        retried, the others returned in the response."""
        return await self._call(apis.TXN_OFFSET_COMMIT, request, timeout_ms)

    async def write_txn_markers(
        self,
        request: WriteTxnMarkersRequest,
        *,
        node: Node | None = None,
        timeout_ms: int | None = None,
    ) -> WriteTxnMarkersResponse:
        """WriteTxnMarkers (27), from one node of a coordinator cluster to `node` (the owner
        of the log partitions it names; a bootstrap server when None). Errors are per
        partition; COORDINATOR_LOAD_IN_PROGRESS and REQUEST_TIMED_OUT are retried on the same
        node, the others (NOT_COORDINATOR: the partition moved) returned for the caller to
        route again."""
        api = apis.WRITE_TXN_MARKERS
        if node is None:
            return await self._call(api, request, timeout_ms)
        deadline = asyncio.get_running_loop().time() + self._timeout_s(timeout_ms)
        return await self._call_with_retries(
            functools.partial(self._send, node.address, request, api.response_type),
            api.retry_code,
            deadline,
            what=f"{api.name}({node.host}:{node.port})",
        )

    @overload
    async def describe_transactions(
        self, request: DescribeTransactionsV1Request, *, timeout_ms: int | None = None
    ) -> DescribeTransactionsV1Response: ...

    @overload
    async def describe_transactions(
        self, request: DescribeTransactionsRequest, *, timeout_ms: int | None = None
    ) -> DescribeTransactionsResponse: ...

    async def describe_transactions(
        self,
        request: DescribeTransactionsRequest | DescribeTransactionsV1Request,
        *,
        timeout_ms: int | None = None,
    ) -> DescribeTransactionsResponse | DescribeTransactionsV1Response:
        """DescribeTransactions (65), each transactional id asked of its own transaction
        coordinator; per-id errors (TRANSACTIONAL_ID_NOT_FOUND, ...) stay in the response.
        A version 1 request (`DescribeTransactionsV1Request`) is answered with the markers
        each id's last transaction was completed without."""
        if isinstance(request, DescribeTransactionsV1Request):
            return await self._call(apis.DESCRIBE_TRANSACTIONS_V1, request, timeout_ms)
        return await self._call(apis.DESCRIBE_TRANSACTIONS, request, timeout_ms)

    async def list_transactions(
        self,
        request: ListTransactionsRequest | None = None,
        *,
        node: Node | None = None,
        timeout_ms: int | None = None,
    ) -> ListTransactionsResponse:
        """ListTransactions (66), asked of every node of the cluster and merged as
        `list_groups` is; a node's error answer is returned. With `node`, asked of that node
        alone: the transactions it coordinates (as Kafka's admin client lists them by
        broker).

        A node's list is read in pages (version 1: each page's `next_cursor` sent back
        until the list is whole, each page asked within `timeout_ms` of its own), so that a
        node holding more transactions than one answer can take lists them all; a server
        that does not serve version 1 (it answers UNSUPPORTED_VERSION) is asked version 0,
        the whole list in one answer. A request of version 1 starts at its `cursor`."""
        request = request or ListTransactionsRequest()
        if node is not None:
            return await self._list_transactions_of(node.address, request, timeout_ms)
        deadline = asyncio.get_running_loop().time() + self._timeout_s(timeout_ms)
        answers = await _gather_all(
            self._list_transactions_of(address, request, timeout_ms)
            for address in await self._every_node(deadline)
        )
        join = apis.LIST_TRANSACTIONS.join
        assert join is not None
        return join(request, answers)

    async def _list_transactions_of(
        self, address: tuple[str, int], request: ListTransactionsRequest, timeout_ms: int | None
    ) -> ListTransactionsResponse:
        """Every page of one node's list, as one answer of version 0's shape."""
        loop = asyncio.get_running_loop()
        api = apis.LIST_TRANSACTIONS_V1
        what = f"{api.name}({address[0]}:{address[1]})"
        cursor = request.cursor if isinstance(request, ListTransactionsV1Request) else None
        states: list[ListTransactionsResponseState] = []
        while True:
            page_request = ListTransactionsV1Request(
                state_filters=request.state_filters,
                producer_id_filters=request.producer_id_filters,
                duration_filter=request.duration_filter,
                transactional_id_pattern=request.transactional_id_pattern,
                cursor=cursor,
            )
            page = await self._call_with_retries(
                functools.partial(self._send, address, page_request, ListTransactionsV1Response),
                api.retry_code,
                loop.time() + self._timeout_s(timeout_ms),
                what=what,
            )
            if page.error_code == ErrorCode.UNSUPPORTED_VERSION and not states:
                # A server of the contract's first version: its list comes in one answer.
                whole = ListTransactionsRequest(
                    state_filters=request.state_filters,
                    producer_id_filters=request.producer_id_filters,
                    duration_filter=request.duration_filter,
                    transactional_id_pattern=request.transactional_id_pattern,
                )
                return await self._call_with_retries(
                    functools.partial(self._send, address, whole, ListTransactionsResponse),
                    apis.LIST_TRANSACTIONS.retry_code,
                    loop.time() + self._timeout_s(timeout_ms),
                    what=f"{apis.LIST_TRANSACTIONS.name}({address[0]}:{address[1]})",
                )
            if page.error_code != ErrorCode.NONE:
                return ListTransactionsResponse(
                    error_code=page.error_code, error_message=page.error_message
                )
            states.extend(page.transaction_states)
            if page.next_cursor is None:
                return ListTransactionsResponse(
                    unknown_state_filters=page.unknown_state_filters, transaction_states=states
                )
            if not page.transaction_states:
                # Every page the server answers lists at least one transaction: one that does
                # not would be asked again and again.
                raise error_for_code(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"{what}: a page of no transaction before {page.next_cursor!r}",
                )
            cursor = page.next_cursor

    # The security APIs: any node answers them (the server forwards each to the node that
    # holds the ACLs and credentials)

    async def describe_acls(
        self,
        request: DescribeAclsRequest,
        *,
        raise_on_error: bool = True,
        timeout_ms: int | None = None,
    ) -> DescribeAclsResponse:
        """DescribeAcls (29): the ACLs the request's filter selects, by resource. With
        `raise_on_error`, the answer's error (SECURITY_DISABLED: the server has no
        authorizer; CLUSTER_AUTHORIZATION_FAILED) is raised."""
        return await self._call(
            apis.DESCRIBE_ACLS, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def create_acls(
        self,
        request: CreateAclsRequest,
        *,
        raise_on_error: bool = False,
        timeout_ms: int | None = None,
    ) -> CreateAclsResponse:
        """CreateAcls (30): one result per creation, in the request's order; an ACL that
        exists already is not an error. With `raise_on_error`, the first creation's error is
        raised."""
        return await self._call(
            apis.CREATE_ACLS, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def delete_acls(
        self,
        request: DeleteAclsRequest,
        *,
        raise_on_error: bool = False,
        timeout_ms: int | None = None,
    ) -> DeleteAclsResponse:
        """DeleteAcls (31): one result per filter, naming the ACLs it deleted. With
        `raise_on_error`, the first filter's (or deleted ACL's) error is raised."""
        return await self._call(
            apis.DELETE_ACLS, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def describe_user_scram_credentials(
        self,
        request: DescribeUserScramCredentialsRequest | None = None,
        *,
        raise_on_error: bool = False,
        timeout_ms: int | None = None,
    ) -> DescribeUserScramCredentialsResponse:
        """DescribeUserScramCredentials (50): each user's mechanisms and iterations (never a
        salt or key); every user with a credential when `request` (or its `users`) is None.
        A user without one is answered RESOURCE_NOT_FOUND in its result; with
        `raise_on_error`, that (or the answer's own error) is raised."""
        request = request or DescribeUserScramCredentialsRequest()
        return await self._call(
            apis.DESCRIBE_USER_SCRAM_CREDENTIALS, request, timeout_ms, raise_on_error=raise_on_error
        )

    async def alter_user_scram_credentials(
        self,
        request: AlterUserScramCredentialsRequest,
        *,
        raise_on_error: bool = False,
        timeout_ms: int | None = None,
    ) -> AlterUserScramCredentialsResponse:
        """AlterUserScramCredentials (51): deletions and upsertions, one result per user.
        An upsertion carries the salted password, never the password
        (`coordinator_client.rpc.sasl.scram_upsertion` derives it). With `raise_on_error`,
        the first user's error is raised."""
        return await self._call(
            apis.ALTER_USER_SCRAM_CREDENTIALS, request, timeout_ms, raise_on_error=raise_on_error
        )

    # Helpers in Kafka's terms

    async def commit_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        generation: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets` for `group_id`.

        With the defaults (generation -1, empty member_id) it is a simple commit, which the
        server accepts only while the group has no members; a member commits with its
        member id and its generation (classic protocol) or member epoch (consumer protocol,
        which the request carries in the same field).

        Raises:
            OffsetCommitError: one or more partitions were refused; `errors` maps each
                such partition to its Kafka error (ILLEGAL_GENERATION,
                OFFSET_METADATA_TOO_LARGE, ...). The others were committed.
        """
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=group_instance_id,
            topics=commit_topics(offsets),
        )
        response = await self.offset_commit(request, timeout_ms=timeout_ms)
        errors = partition_errors(response.topics)
        if errors:
            raise OffsetCommitError(f"commit for group {group_id!r} failed", errors)

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of `group_id`: of `partitions`, or of every partition
        with a commit when None. A partition without a commit is left out.

        A member of a consumer-protocol group asks with its `member_id` and `member_epoch`
        (Kafka's consumer sends them while it is in the group; the coordinator then answers
        STALE_MEMBER_EPOCH or UNKNOWN_MEMBER_ID to a member it no longer knows so).

        Raises:
            ApiError: the group's error (GROUP_AUTHORIZATION_FAILED, ...) or a partition's.
        """
        topics = None if partitions is None else fetch_topics(partitions)
        response = await self.offset_fetch(
            OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(
                        group_id=group_id,
                        member_id=member_id,
                        member_epoch=member_epoch,
                        topics=topics,
                    )
                ],
                require_stable=require_stable,
            ),
            timeout_ms=timeout_ms,
        )
        group = single(response.groups, "OffsetFetch")
        raise_for_code(group.error_code, f"group {group_id!r}")
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in group.topics:
            for partition in topic.partitions:
                tp = TopicPartition(topic.name, partition.partition_index)
                raise_for_code(partition.error_code, f"{tp.topic}-{tp.partition}")
                if partition.committed_offset >= 0:
                    result[tp] = OffsetAndMetadata(
                        partition.committed_offset, partition.metadata or ""
                    )
        return result

    async def describe_group(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> DescribeGroupsResponseGroup:
        """One group's description.

        Raises:
            ApiError: the group's error (GROUP_ID_NOT_FOUND for a group that does not
                exist, as in Kafka's newest DescribeGroups).
        """
        response = await self.describe_groups(
            DescribeGroupsRequest(groups=[group_id]), timeout_ms=timeout_ms
        )
        group = single(response.groups, "DescribeGroups")
        raise_for_code(group.error_code, f"group {group_id!r}")
        return group

    async def describe_consumer_group(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> ConsumerGroupDescribeResponseGroup:
        """One consumer group's description (KIP-848): its state, epochs, assignor, and each
        member's current and target assignment.

        Raises:
            ApiError: the group's error, with the server's message (GROUP_ID_NOT_FOUND for
                an id no group has, or a classic group's: `describe_group` describes those),
                or UNSUPPORTED_VERSION from a server that does not serve ConsumerGroupDescribe.
        """
        response = await self.consumer_group_describe(
            ConsumerGroupDescribeRequest(group_ids=[group_id]), timeout_ms=timeout_ms
        )
        group = single(response.groups, "ConsumerGroupDescribe")
        raise_for_code(group.error_code, group.error_message or f"group {group_id!r}")
        return group

    async def list_all_groups(
        self,
        *,
        states_filter: Collection[str] = (),
        types_filter: Collection[str] = (),
        timeout_ms: int | None = None,
    ) -> list[ListGroupsResponseGroup]:
        """Every group the nodes of the cluster coordinate, optionally filtered by state
        ("Stable", "Empty", ...) and type ("classic")."""
        response = await self.list_groups(
            ListGroupsRequest(states_filter=list(states_filter), types_filter=list(types_filter)),
            timeout_ms=timeout_ms,
        )
        raise_for_code(response.error_code, response.error_message)
        return sorted(response.groups, key=lambda group: group.group_id)

    async def delete_group(self, group_id: str, *, timeout_ms: int | None = None) -> None:
        """Delete a group with no members and its offsets.

        Raises:
            ApiError: NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...
        """
        response = await self.delete_groups(
            DeleteGroupsRequest(groups_names=[group_id]), timeout_ms=timeout_ms
        )
        result = single(response.results, "DeleteGroups")
        raise_for_code(result.error_code, f"group {group_id!r}")

    async def delete_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Delete the committed offsets of `partitions`.

        Raises:
            ApiError: the request's error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...).
            OffsetDeleteError: some partitions were refused (GROUP_SUBSCRIBED_TO_TOPIC:
                a member subscribes to the topic); `errors` names them.
        """
        request = OffsetDeleteRequest(group_id=group_id, topics=delete_topics(partitions))
        response = await self.offset_delete(request, timeout_ms=timeout_ms)
        errors = partition_errors(response.topics)
        if errors:
            raise OffsetDeleteError(f"offset delete for group {group_id!r} failed", errors)

    async def leave(
        self,
        group_id: str,
        members: Sequence[LeaveGroupRequestMember],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Remove `members` from `group_id` (LeaveGroup), raising any error."""
        await self.leave_group(
            LeaveGroupRequest(group_id=group_id, members=list(members)), timeout_ms=timeout_ms
        )
