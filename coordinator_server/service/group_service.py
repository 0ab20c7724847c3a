"""GroupCoordinatorService: the coordinator's front door, one method per API.

Each method validates what needs no state, finds the group's partition, schedules a read or
write operation on the runtime and turns failures into the error codes Kafka's coordinator
answers with. Methods return either a response or a future of one that never fails, so the
server needs no task per request.

With an authorizer, each method checks what Kafka's KafkaApis handler of its API checks,
after the refusals that depend on the request alone and before any state is read or written;
without one (None) a request pays a single `is None` test for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from coordinator_protocol.api_keys import ApiKey, api_name
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    ENDPOINT_TYPE_BROKERS,
    ENDPOINT_TYPE_CONTROLLERS,
    DeleteGroupsRequest,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeClusterResponseBroker,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    Message,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator_server.authorizer.acls import CLUSTER_NAME, AclOperation, ResourceType
from coordinator_server.node_address import ClusterNodes, NodeAddress, Placement
from coordinator_server.runtime.api import CoordinatorResult, RequestContext
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.bulk_requests import BulkRequests, ErrorOnlyResponse
from coordinator_server.service.errors import map_operation_error
from coordinator_server.service.limits import (
    RequestLimits,
    commit_answer_refusal,
    group_id_refusal,
    join_group_refusal,
    leave_group_refusal,
    offset_delete_refusal,
    sync_group_refusal,
)
from coordinator_server.service.offset_fetch import OffsetFetchRequests
from coordinator_server.service.replies import (
    Handler,
    Reply,
    reply_to,
    sliced_reply,
    typed_handler,
)
from coordinator_server.service.routing import Routing
from coordinator_server.service.slicing import SlicedRequests
from coordinator_server.shard import GroupShard

# Kafka's names of the requests, which the authorizer's log and counts say.
_JOIN_GROUP: Final = api_name(ApiKey.JOIN_GROUP)
_SYNC_GROUP: Final = api_name(ApiKey.SYNC_GROUP)
_HEARTBEAT: Final = api_name(ApiKey.HEARTBEAT)
_LEAVE_GROUP: Final = api_name(ApiKey.LEAVE_GROUP)
_OFFSET_COMMIT: Final = api_name(ApiKey.OFFSET_COMMIT)
_OFFSET_DELETE: Final = api_name(ApiKey.OFFSET_DELETE)
_DESCRIBE_CLUSTER: Final = api_name(ApiKey.DESCRIBE_CLUSTER)

# What Kafka answers as a cluster's authorized operations (AclEntry.supportedOperations).
_CLUSTER_OPERATIONS: Final = (
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
)


class GroupCoordinatorService:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        num_partitions: int,
        node: NodeAddress,
        *,
        limits: RequestLimits | None = None,
        placement: Placement | None = None,
        cluster_id: str = "",
        cluster_nodes: ClusterNodes | None = None,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        """`node` is this node as FindCoordinator names it; `placement` says which node owns
        each partition (None: this node owns every partition); `cluster_nodes` names the
        nodes of its cluster, `cluster_id`, for DescribeCluster (None: this node alone);
        `authorizer`: what requests are checked against (None: nothing is checked)."""
        self._authorizer = authorizer
        self._runtime = runtime
        self._num_partitions = num_partitions
        self._node = node
        self.routing = routing = Routing(num_partitions, node, placement)
        self.partition_for = routing.partition_for
        self._cluster_id = cluster_id
        self._cluster_nodes = cluster_nodes
        self._limits = limits = limits or RequestLimits()
        self._max_id_length = limits.max_id_length
        self._commit_answer_may_not_fit = limits.commit_answer_may_not_fit
        self._sliced = SlicedRequests()
        self._bulk = BulkRequests(
            runtime,
            routing.partition_for,
            num_partitions,
            routing.coordinator_of,
            limits,
            self._sliced,
            authorizer,
        )
        self._offset_fetches = OffsetFetchRequests(
            runtime, routing.partition_for, limits, self._sliced, authorizer
        )
        self.handlers: dict[int, Handler] = {
            ApiKey.FIND_COORDINATOR: typed_handler(FindCoordinatorRequest, self.find_coordinator),
            ApiKey.JOIN_GROUP: typed_handler(JoinGroupRequest, self.join_group),
            ApiKey.SYNC_GROUP: typed_handler(SyncGroupRequest, self.sync_group),
            ApiKey.HEARTBEAT: typed_handler(HeartbeatRequest, self.heartbeat),
            ApiKey.LEAVE_GROUP: typed_handler(LeaveGroupRequest, self.leave_group),
            ApiKey.OFFSET_COMMIT: typed_handler(OffsetCommitRequest, self.offset_commit),
            ApiKey.OFFSET_FETCH: typed_handler(OffsetFetchRequest, self.offset_fetch),
            ApiKey.DESCRIBE_GROUPS: typed_handler(DescribeGroupsRequest, self.describe_groups),
            ApiKey.LIST_GROUPS: typed_handler(ListGroupsRequest, self.list_groups),
            ApiKey.DELETE_GROUPS: typed_handler(DeleteGroupsRequest, self.delete_groups),
            ApiKey.OFFSET_DELETE: typed_handler(OffsetDeleteRequest, self.offset_delete),
            ApiKey.DESCRIBE_CLUSTER: typed_handler(DescribeClusterRequest, self.describe_cluster),
        }

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @property
    def authorizer(self) -> RequestAuthorizer | None:
        """What requests are checked against, which the transaction APIs share."""
        return self._authorizer

    @property
    def sliced_requests(self) -> int:
        """Requests answered in slices that are under way."""
        return len(self._sliced)

    @property
    def limits(self) -> RequestLimits:
        """The limits requests keep to, which the transaction APIs share."""
        return self._limits

    @property
    def sliced(self) -> SlicedRequests:
        """What runs the requests answered in slices (the transaction APIs' too), so that
        the shutdown stops every one of them."""
        return self._sliced

    def serve_transactions(self) -> None:
        """Answer FindCoordinator for transactional ids (the dispatch serves their APIs)."""
        self._bulk.transactions_refusal = None

    def refuse_transactions(self, why: str) -> None:
        """Say `why` to FindCoordinator for transactional ids (the node serves none)."""
        self._bulk.transactions_refusal = why

    def close(self) -> None:
        """Shutdown: large requests still under way stop between two slices, answered
        COORDINATOR_NOT_AVAILABLE (retriable), so that they do not hold the shutdown up."""
        self._sliced.cancel_all()

    # FindCoordinator answers at once, even while partitions load.

    def find_coordinator(self, request: FindCoordinatorRequest, ctx: RequestContext) -> Reply:
        return sliced_reply(self._bulk.find_coordinator(request, ctx))

    def describe_cluster(self, request: DescribeClusterRequest, ctx: RequestContext) -> Reply:
        """The nodes of the cluster, so that a client can ask each of them (ListGroups);
        answered at once, like FindCoordinator, from the latest assignment."""
        endpoint_type = request.endpoint_type
        if endpoint_type != ENDPOINT_TYPE_BROKERS:
            # As a Kafka broker answers: it is no controller, and knows no other type.
            if endpoint_type == ENDPOINT_TYPE_CONTROLLERS:
                code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
                message = "the coordinator's nodes are brokers (endpoint type 1), no controllers"
            else:
                code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
                message = f"unsupported endpoint type {endpoint_type}"
            return DescribeClusterResponse(
                error_code=code,
                error_message=message,
                endpoint_type=endpoint_type,
                cluster_id=self._cluster_id,
            )
        nodes = [] if self._cluster_nodes is None else list(self._cluster_nodes())
        answer = DescribeClusterResponse(
            cluster_id=self._cluster_id,
            brokers=[
                DescribeClusterResponseBroker(
                    broker_id=node.node_id, host=node.host, port=node.port
                )
                for node in sorted(nodes or [self._node], key=lambda node: node.node_id)
            ],
        )
        authorizer = self._authorizer
        if authorizer is not None and request.include_cluster_authorized_operations:
            # Kafka's: the nodes whoever asks; the operations the principal may take on the
            # cluster only to one that may describe it (0 to any other).
            answer.cluster_authorized_operations = (
                authorizer.authorized_operations(
                    ctx,
                    ResourceType.CLUSTER,
                    CLUSTER_NAME,
                    _CLUSTER_OPERATIONS,
                    api=_DESCRIBE_CLUSTER,
                )
                if authorizer.allowed_cluster(ctx, AclOperation.DESCRIBE, api=_DESCRIBE_CLUSTER)
                else 0
            )
        return answer

    # The classic group protocol.

    def join_group(self, request: JoinGroupRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> JoinGroupResponse:
            return JoinGroupResponse(
                error_code=code, error_message=message, generation_id=-1, member_id=""
            )

        if not request.group_id:
            return error(ErrorCode.INVALID_GROUP_ID, "group_id is missing or empty")
        refusal = join_group_refusal(request, ctx.client_id, self._limits)
        if refusal is not None:
            return error(*refusal)
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allowed(
            ctx, AclOperation.READ, ResourceType.GROUP, request.group_id, api=_JOIN_GROUP
        ):
            return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        outcome = self._runtime.parkable_write(
            "classic-group-join",
            self.partition_for(request.group_id),
            lambda shard, handle: shard.join_group(ctx, request, handle),
        )
        return reply_to(outcome, lambda exc: error(*map_operation_error("join-group", exc)))

    def sync_group(self, request: SyncGroupRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> SyncGroupResponse:
            return SyncGroupResponse(error_code=code, error_message=message)

        if not request.group_id:
            return error(ErrorCode.INVALID_GROUP_ID, "group_id is missing or empty")
        refusal = sync_group_refusal(request, self._limits)
        if refusal is not None:
            return error(*refusal)
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allowed(
            ctx, AclOperation.READ, ResourceType.GROUP, request.group_id, api=_SYNC_GROUP
        ):
            return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        outcome = self._runtime.parkable_write(
            "classic-group-sync",
            self.partition_for(request.group_id),
            lambda shard, handle: shard.sync_group(ctx, request, handle),
        )
        return reply_to(outcome, lambda exc: error(*map_operation_error("sync-group", exc)))

    def heartbeat(self, request: HeartbeatRequest, ctx: RequestContext) -> Reply:
        group_id = request.group_id
        if not group_id:
            return HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        if len(group_id) > self._max_id_length:
            return HeartbeatResponse(
                error_code=ErrorCode.INVALID_GROUP_ID,
                error_message=group_id_refusal(group_id, self._limits),
            )
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allowed(
            ctx, AclOperation.READ, ResourceType.GROUP, group_id, api=_HEARTBEAT
        ):
            return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        outcome = self._runtime.write(
            "classic-group-heartbeat",
            self.partition_for(group_id),
            lambda shard: shard.heartbeat(ctx, request),
        )
        return reply_to(outcome, _heartbeat_error)

    def leave_group(self, request: LeaveGroupRequest, ctx: RequestContext) -> Reply:
        if not request.group_id:
            return LeaveGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        refusal = leave_group_refusal(request, self._limits)
        if refusal is not None:
            code, message = refusal
            return LeaveGroupResponse(error_code=code, error_message=message)
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allowed(
            ctx, AclOperation.READ, ResourceType.GROUP, request.group_id, api=_LEAVE_GROUP
        ):
            return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)

        def on_error(exc: BaseException) -> Message:
            code, message = map_operation_error("leave-group", exc)
            return LeaveGroupResponse(error_code=code, error_message=message)

        outcome = self._runtime.write(
            "classic-group-leave",
            self.partition_for(request.group_id),
            lambda shard: shard.leave_group(ctx, request),
        )
        return reply_to(outcome, on_error)

    # Offsets.

    def offset_commit(self, request: OffsetCommitRequest, ctx: RequestContext) -> Reply:
        group_id = request.group_id
        if group_id is None or len(group_id) > self._max_id_length:
            return request.error_response(ErrorCode.INVALID_GROUP_ID)
        if self._commit_answer_may_not_fit and (
            refusal := commit_answer_refusal(request, self._limits)
        ):
            # No answer naming every partition fits: the contract's error body instead.
            code, message = refusal
            return ErrorOnlyResponse(error_code=code, error_message=message)

        def on_error(exc: BaseException) -> Message:
            code, _ = map_operation_error("commit-offset", exc)
            if code is ErrorCode.MESSAGE_TOO_LARGE:
                # Records that cannot fit a batch: what Kafka's OffsetCommit answers them
                # with (the commit checks first, so this is a backstop).
                code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
            return request.error_response(code)

        authorizer = self._authorizer
        if authorizer is not None:
            return self._authorized_commit(authorizer, request, group_id, ctx, on_error)
        outcome = self._runtime.write(
            "commit-offset",
            self.partition_for(group_id),
            lambda shard: shard.commit_offset(request, ctx),
        )
        return reply_to(outcome, on_error)

    def _authorized_commit(
        self,
        authorizer: RequestAuthorizer,
        request: OffsetCommitRequest,
        group_id: str,
        ctx: RequestContext,
        on_error: Callable[[BaseException], Message],
    ) -> Reply:
        """OffsetCommit as Kafka's handler authorizes it: READ of the group, else every
        partition refused; then READ of each topic, the partitions of a topic refused
        answered TOPIC_AUTHORIZATION_FAILED and the others committed. A failure of the
        commit is every partition's, as Kafka answers it."""
        if not authorizer.allowed(
            ctx, AclOperation.READ, ResourceType.GROUP, group_id, api=_OFFSET_COMMIT
        ):
            return request.error_response(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        topics = request.topics
        denied = authorizer.denied(
            ctx, AclOperation.READ, ResourceType.TOPIC, [t.name for t in topics], api=_OFFSET_COMMIT
        )
        if not denied:
            outcome = self._runtime.write(
                "commit-offset",
                self.partition_for(group_id),
                lambda shard: shard.commit_offset(request, ctx),
            )
            return reply_to(outcome, on_error)
        refused = request.replace(
            topics=[topic for topic in topics if topic.name in denied]
        ).error_response(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        commit = request.replace(topics=[topic for topic in topics if topic.name not in denied])
        if not commit.topics:
            # Nothing left to commit: Kafka does not ask the coordinator.
            return refused
        outcome = self._runtime.write(
            "commit-offset",
            self.partition_for(group_id),
            lambda shard: _with_refused_commits(shard.commit_offset(commit, ctx), refused),
        )
        return reply_to(outcome, on_error)

    def offset_fetch(self, request: OffsetFetchRequest, ctx: RequestContext) -> Reply:
        return sliced_reply(self._offset_fetches.offset_fetch(request, ctx))

    def offset_delete(self, request: OffsetDeleteRequest, ctx: RequestContext) -> Reply:
        group_id = request.group_id
        if not group_id:
            return OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        refusal = offset_delete_refusal(request, self._limits)
        if refusal is not None:
            code, message = refusal
            return OffsetDeleteResponse(error_code=code, error_message=message)

        def on_error(exc: BaseException) -> Message:
            code, message = map_operation_error("delete-offsets", exc)
            return OffsetDeleteResponse(error_code=code, error_message=message)

        authorizer = self._authorizer
        if authorizer is not None:
            return self._authorized_offset_delete(authorizer, request, group_id, ctx, on_error)
        outcome = self._runtime.write(
            "delete-offsets",
            self.partition_for(group_id),
            lambda shard: shard.delete_offsets(request),
        )
        return reply_to(outcome, on_error)

    def _authorized_offset_delete(
        self,
        authorizer: RequestAuthorizer,
        request: OffsetDeleteRequest,
        group_id: str,
        ctx: RequestContext,
        on_error: Callable[[BaseException], Message],
    ) -> Reply:
        """OffsetDelete as Kafka's handler authorizes it: DELETE of the group, else the
        request refused; then READ of each topic, the partitions of a topic refused answered
        TOPIC_AUTHORIZATION_FAILED and the others deleted (the group is checked as for any
        deletion, whatever is left to delete)."""
        if not authorizer.allowed(
            ctx, AclOperation.DELETE, ResourceType.GROUP, group_id, api=_OFFSET_DELETE
        ):
            return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        topics = request.topics
        denied = authorizer.denied(
            ctx, AclOperation.READ, ResourceType.TOPIC, [t.name for t in topics], api=_OFFSET_DELETE
        )
        deletion = request.replace(topics=[topic for topic in topics if topic.name not in denied])
        refused = [
            OffsetDeleteResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    )
                    for p in topic.partitions
                ],
            )
            for topic in topics
            if topic.name in denied
        ]
        outcome = self._runtime.write(
            "delete-offsets",
            self.partition_for(group_id),
            lambda shard: _with_refused_deletions(shard.delete_offsets(deletion), refused),
        )
        return reply_to(outcome, on_error)

    # Admin APIs (see bulk_requests).

    def describe_groups(self, request: DescribeGroupsRequest, ctx: RequestContext) -> Reply:
        return sliced_reply(self._bulk.describe_groups(request, ctx))

    def delete_groups(self, request: DeleteGroupsRequest, ctx: RequestContext) -> Reply:
        return sliced_reply(self._bulk.delete_groups(request, ctx))

    def list_groups(self, request: ListGroupsRequest, ctx: RequestContext) -> Reply:
        return sliced_reply(self._bulk.list_groups(request, ctx))


def _with_refused_commits(
    result: CoordinatorResult[OffsetCommitResponse], refused: OffsetCommitResponse
) -> CoordinatorResult[OffsetCommitResponse]:
    """The commit's result, its answer naming the refused topics first (Kafka's
    `OffsetCommitResponse.Builder` merges the coordinator's answer into them)."""
    response = result.response
    assert response is not None
    return replace(result, response=OffsetCommitResponse(topics=refused.topics + response.topics))


def _with_refused_deletions(
    result: CoordinatorResult[OffsetDeleteResponse], refused: list[OffsetDeleteResponseTopic]
) -> CoordinatorResult[OffsetDeleteResponse]:
    """The deletion's result, its answer naming the refused topics first; an error of the
    whole request replaces them, as Kafka's `OffsetDeleteResponse.Builder` merges it."""
    response = result.response
    assert response is not None
    if refused and response.error_code == ErrorCode.NONE:
        return replace(result, response=response.replace(topics=refused + response.topics))
    return result


def _heartbeat_error(exc: BaseException) -> Message:
    code, message = map_operation_error("heartbeat", exc)
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # Kafka answers a heartbeat to a loading partition with NONE: the member keeps its
        # session and the group is rebuilt once loaded.
        code, message = ErrorCode.NONE, None
    return HeartbeatResponse(error_code=code, error_message=message)
