"""GroupCoordinatorService: the coordinator's front door, one method per API.

Each method validates what needs no state, finds the group's partition, schedules a read or
write operation on the runtime and turns failures into the error codes Kafka's coordinator
answers with. Methods return either a response or a future of one that never fails, so the
server needs no task per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast

from coordinator_server.groups.manager import RequestContext as RequestContext
from coordinator_server.groups.manager import list_filter
from coordinator_server.offsets.manager import commit_error_response
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.runtime import CoordinatorRuntime, WriteDone
from coordinator_server.shard import GroupCoordinatorShard
from coordinator_server.storage.api import AppendError
from protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from protocol.errors import ApiError, ErrorCode
from protocol.hashing import partition_for
from protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseKey,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResponseResult,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseGroup,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListGroupsResponseGroup,
    Message,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    SyncGroupRequest,
    SyncGroupResponse,
)

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)
R = TypeVar("R")


class PendingReply:
    """A response still to come: `future`'s result, or where the future fails,
    `on_error(exc)` (None: the connection answers UNKNOWN_SERVER_ERROR). The connection
    waits on the runtime's own future this way, with no second future per request to turn
    a failure into an error response."""

    __slots__ = ("future", "on_error")

    def __init__(
        self,
        future: asyncio.Future[Any],
        on_error: Callable[[BaseException], Message] | None = None,
    ) -> None:
        self.future = future
        self.on_error = on_error


Reply: TypeAlias = "Message | PendingReply"
Handler: TypeAlias = Callable[[Message, RequestContext], Reply]

SERVER_NAME = "coordinator-server"

# Group ids whose partition is remembered; past it the memory starts over.
_PARTITION_CACHE_SIZE = 100_000


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int


# Kafka's translation of log errors into coordinator errors (CoordinatorOperationExceptionHelper).
_APPEND_ERROR_MAPPING: Mapping[int, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def map_operation_error(
    operation: str, exc: BaseException, *, require_stable: bool = False
) -> tuple[ErrorCode, str | None]:
    """The error a client gets for an operation that failed with `exc`."""
    if isinstance(exc, AppendError):
        raw = exc.error_code
        code = _APPEND_ERROR_MAPPING.get(raw)
        if code is None:
            try:
                code = ErrorCode(raw)
            except ValueError:
                code = ErrorCode.UNKNOWN_SERVER_ERROR
        if require_stable and code is ErrorCode.COORDINATOR_NOT_AVAILABLE:
            # Consumers before Kafka 3.9 do not retry COORDINATOR_NOT_AVAILABLE on a
            # require-stable OffsetFetch, so Kafka answers NOT_COORDINATOR there.
            code = ErrorCode.NOT_COORDINATOR
        return code, str(exc) or None
    if isinstance(exc, ApiError):
        code = exc.code
        if code is ErrorCode.REQUEST_TIMED_OUT:
            code = (
                ErrorCode.NOT_COORDINATOR if require_stable else ErrorCode.COORDINATOR_NOT_AVAILABLE
            )
        return code, exc.message
    if isinstance(exc, asyncio.CancelledError):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is shutting down"
    logger.error("operation %s failed unexpectedly", operation, exc_info=exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, None


def _chain(
    source: WriteDone[M] | asyncio.Future[M], on_error: Callable[[BaseException], Message]
) -> Reply:
    """The response, or the future of it with `on_error` for its failure. A write that was
    over before the runtime returned (it runs one at once when its partition is idle) is
    answered without a future at all."""
    if isinstance(source, WriteDone):
        error = source.error
        return cast(Message, source.response) if error is None else on_error(error)
    if source.done():
        if source.cancelled():
            return on_error(asyncio.CancelledError())
        error = source.exception()
        return source.result() if error is None else on_error(error)
    return PendingReply(source, on_error)


class GroupCoordinatorService:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupCoordinatorShard],
        num_partitions: int,
        node: NodeAddress,
        *,
        server_version: str,
    ) -> None:
        self._runtime = runtime
        self._num_partitions = num_partitions
        self._node = node
        self._server_version = server_version
        self._partitions: dict[str, int] = {}
        self.handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: _typed(ApiVersionsRequest, self.api_versions),
            ApiKey.FIND_COORDINATOR: _typed(FindCoordinatorRequest, self.find_coordinator),
            ApiKey.JOIN_GROUP: _typed(JoinGroupRequest, self.join_group),
            ApiKey.SYNC_GROUP: _typed(SyncGroupRequest, self.sync_group),
            ApiKey.HEARTBEAT: _typed(HeartbeatRequest, self.heartbeat),
            ApiKey.LEAVE_GROUP: _typed(LeaveGroupRequest, self.leave_group),
            ApiKey.OFFSET_COMMIT: _typed(OffsetCommitRequest, self.offset_commit),
            ApiKey.OFFSET_FETCH: _typed(OffsetFetchRequest, self.offset_fetch),
            ApiKey.DESCRIBE_GROUPS: _typed(DescribeGroupsRequest, self.describe_groups),
            ApiKey.LIST_GROUPS: _typed(ListGroupsRequest, self.list_groups),
            ApiKey.DELETE_GROUPS: _typed(DeleteGroupsRequest, self.delete_groups),
            ApiKey.OFFSET_DELETE: _typed(OffsetDeleteRequest, self.offset_delete),
        }

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def partition_for(self, group_id: str) -> int:
        # Java's string hash runs in Python, a character at a time, and the same groups come
        # back with every heartbeat and commit: remember the answers.
        partitions = self._partitions
        partition = partitions.get(group_id)
        if partition is None:
            if len(partitions) >= _PARTITION_CACHE_SIZE:
                partitions.clear()
            partition = partitions[group_id] = partition_for(group_id, self._num_partitions)
        return partition

    # ApiVersions and FindCoordinator answer at once, even while partitions load.

    def api_versions(self, request: ApiVersionsRequest, ctx: RequestContext) -> Reply:
        return self.api_versions_response(ErrorCode.NONE, None)

    def api_versions_response(self, code: ErrorCode, message: str | None) -> ApiVersionsResponse:
        return ApiVersionsResponse(
            error_code=code,
            error_message=message,
            api_keys=[
                ApiVersionsResponseKey(api_key=key, min_version=low, max_version=high)
                for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
                if key in self.handlers
            ],
            server_name=SERVER_NAME,
            server_version=self._server_version,
        )

    def find_coordinator(self, request: FindCoordinatorRequest, ctx: RequestContext) -> Reply:
        coordinators = []
        for key in request.keys:
            if request.key_type != 0:
                coordinators.append(
                    FindCoordinatorResponseCoordinator(
                        key=key,
                        node_id=-1,
                        host="",
                        port=-1,
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"key type {request.key_type} is not served: "
                        "this node is a group coordinator only",
                    )
                )
                continue
            # A single node owns every partition, so it answers with itself.
            coordinators.append(
                FindCoordinatorResponseCoordinator(
                    key=key,
                    node_id=self._node.node_id,
                    host=self._node.host,
                    port=self._node.port,
                    error_code=ErrorCode.NONE,
                    error_message=None,
                )
            )
        return FindCoordinatorResponse(coordinators=coordinators)

    # The classic group protocol.

    def join_group(self, request: JoinGroupRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> JoinGroupResponse:
            return JoinGroupResponse(
                error_code=code, error_message=message, generation_id=-1, member_id=""
            )

        if not request.group_id:
            return error(ErrorCode.INVALID_GROUP_ID, "group_id is missing or empty")
        future = self._runtime.schedule_parkable_write(
            "classic-group-join",
            self.partition_for(request.group_id),
            lambda shard, handle: shard.groups.join_group(ctx, request, handle),
        )
        return _chain(future, lambda exc: error(*map_operation_error("join-group", exc)))

    def sync_group(self, request: SyncGroupRequest, ctx: RequestContext) -> Reply:
        def error(code: ErrorCode, message: str | None = None) -> SyncGroupResponse:
            return SyncGroupResponse(error_code=code, error_message=message)

        if not request.group_id:
            return error(ErrorCode.INVALID_GROUP_ID, "group_id is missing or empty")
        future = self._runtime.schedule_parkable_write(
            "classic-group-sync",
            self.partition_for(request.group_id),
            lambda shard, handle: shard.groups.sync_group(ctx, request, handle),
        )
        return _chain(future, lambda exc: error(*map_operation_error("sync-group", exc)))

    def heartbeat(self, request: HeartbeatRequest, ctx: RequestContext) -> Reply:
        group_id = request.group_id
        if not group_id:
            return HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        outcome = self._runtime.write(
            "classic-group-heartbeat",
            self.partition_for(group_id),
            lambda shard: shard.groups.heartbeat(ctx, request),
        )
        return _chain(outcome, _heartbeat_error)

    def leave_group(self, request: LeaveGroupRequest, ctx: RequestContext) -> Reply:
        if not request.group_id:
            return LeaveGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID)

        def on_error(exc: BaseException) -> Message:
            code, message = map_operation_error("leave-group", exc)
            return LeaveGroupResponse(error_code=code, error_message=message)

        outcome = self._runtime.write(
            "classic-group-leave",
            self.partition_for(request.group_id),
            lambda shard: shard.groups.leave_group(ctx, request),
        )
        return _chain(outcome, on_error)

    # Offsets.

    def offset_commit(self, request: OffsetCommitRequest, ctx: RequestContext) -> Reply:
        group_id = request.group_id
        if group_id is None:
            return commit_error_response(request, ErrorCode.INVALID_GROUP_ID)

        def on_error(exc: BaseException) -> Message:
            code, _ = map_operation_error("commit-offset", exc)
            return commit_error_response(request, code)

        outcome = self._runtime.write(
            "commit-offset",
            self.partition_for(group_id),
            lambda shard: shard.offsets.commit_offset(request, ctx),
        )
        return _chain(outcome, on_error)

    def offset_fetch(self, request: OffsetFetchRequest, ctx: RequestContext) -> Reply:
        loop = asyncio.get_running_loop()
        parts = [self._fetch_group(g, request.require_stable, loop) for g in request.groups]
        return _gather(
            loop, parts, lambda groups: OffsetFetchResponse(groups=[g for [g] in groups])
        )

    def _fetch_group(
        self, group: OffsetFetchRequestGroup, require_stable: bool, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[list[OffsetFetchResponseGroup]]:
        group_id = group.group_id
        if group_id is None:
            return _done(loop, [_fetch_error(group, ErrorCode.INVALID_GROUP_ID)])

        def on_error(exc: BaseException) -> list[OffsetFetchResponseGroup]:
            code, _ = map_operation_error("fetch-offsets", exc, require_stable=require_stable)
            return [_fetch_error(group, code)]

        partition = self.partition_for(group_id)
        future: asyncio.Future[list[OffsetFetchResponseGroup]]
        if require_stable:
            # Kafka reads the latest state through the write path and answers once every
            # pending write is committed (a write with no records).
            future = self._runtime.schedule_write(
                "fetch-offsets-stable",
                partition,
                lambda shard: CoordinatorResult(
                    response=[shard.offsets.fetch_offsets(group, None)]
                ),
            )
        else:
            future = self._runtime.schedule_read(
                "fetch-offsets",
                partition,
                lambda shard, committed: [shard.offsets.fetch_offsets(group, committed)],
            )
        return _recover(future, on_error)

    def offset_delete(self, request: OffsetDeleteRequest, ctx: RequestContext) -> Reply:
        if not request.group_id:
            return OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID)

        def on_error(exc: BaseException) -> Message:
            code, message = map_operation_error("delete-offsets", exc)
            return OffsetDeleteResponse(error_code=code, error_message=message)

        future = self._runtime.schedule_write(
            "delete-offsets",
            self.partition_for(request.group_id),
            lambda shard: shard.offsets.delete_offsets(request),
        )
        return _chain(future, on_error)

    # Admin APIs: one operation per partition, answered together.

    def describe_groups(self, request: DescribeGroupsRequest, ctx: RequestContext) -> Reply:
        loop = asyncio.get_running_loop()
        parts: list[asyncio.Future[list[DescribeGroupsResponseGroup]]] = []
        for partition, group_ids in self._by_partition(
            request.groups, loop, parts, _described_error
        ):
            parts.append(self._describe_partition(partition, group_ids))
        return _gather(
            loop,
            parts,
            lambda results: DescribeGroupsResponse(
                groups=_in_request_order(request.groups, results, lambda g: g.group_id)
            ),
        )

    def _describe_partition(
        self, partition: int, group_ids: list[str]
    ) -> asyncio.Future[list[DescribeGroupsResponseGroup]]:
        future = self._runtime.schedule_read(
            "describe-groups",
            partition,
            lambda shard, committed: shard.groups.describe_groups(group_ids, committed),
        )

        def on_error(exc: BaseException) -> list[DescribeGroupsResponseGroup]:
            code, _ = map_operation_error("describe-groups", exc)
            return [_described_error(group_id, code) for group_id in group_ids]

        return _recover(future, on_error)

    def delete_groups(self, request: DeleteGroupsRequest, ctx: RequestContext) -> Reply:
        loop = asyncio.get_running_loop()
        parts: list[asyncio.Future[list[DeleteGroupsResponseResult]]] = []
        for partition, group_ids in self._by_partition(
            request.groups_names, loop, parts, _deleted_error
        ):
            parts.append(self._delete_partition(partition, group_ids))
        return _gather(
            loop,
            parts,
            lambda results: DeleteGroupsResponse(
                results=_in_request_order(request.groups_names, results, lambda r: r.group_id)
            ),
        )

    def _delete_partition(
        self, partition: int, group_ids: list[str]
    ) -> asyncio.Future[list[DeleteGroupsResponseResult]]:
        future = self._runtime.schedule_write(
            "delete-groups", partition, lambda shard: shard.delete_groups(group_ids)
        )

        def on_error(exc: BaseException) -> list[DeleteGroupsResponseResult]:
            code, _ = map_operation_error("delete-groups", exc)
            return [_deleted_error(group_id, code) for group_id in group_ids]

        return _recover(future, on_error)

    def _by_partition(
        self,
        group_ids: list[str | None],
        loop: asyncio.AbstractEventLoop,
        parts: list[asyncio.Future[list[R]]],
        failed: Callable[[str | None, ErrorCode], R],
    ) -> list[tuple[int, list[str]]]:
        """Group ids by partition; a missing id gets INVALID_GROUP_ID at once."""
        by_partition: dict[int, list[str]] = {}
        for group_id in group_ids:
            if group_id is None:
                parts.append(_done(loop, [failed(None, ErrorCode.INVALID_GROUP_ID)]))
            else:
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)
        return list(by_partition.items())

    def list_groups(self, request: ListGroupsRequest, ctx: RequestContext) -> Reply:
        loop = asyncio.get_running_loop()
        parts: list[asyncio.Future[list[ListGroupsResponseGroup]]] = []
        errors: list[ErrorCode] = []
        states = list_filter(request.states_filter)
        types = list_filter(request.types_filter)

        def listed(shard: GroupCoordinatorShard, committed: int) -> list[ListGroupsResponseGroup]:
            groups = shard.groups.list_groups(states, types, committed)
            assert groups is not None, "no byte limit, no refusal"
            return groups[0]

        for partition in range(self._num_partitions):
            future = self._runtime.schedule_read("list-groups", partition, listed)

            def on_error(exc: BaseException) -> list[ListGroupsResponseGroup]:
                code, _ = map_operation_error("list-groups", exc)
                # Partitions this node does not own are someone else's to list (Kafka's
                # read-all skips NOT_COORDINATOR); any other error fails the listing.
                if code is not ErrorCode.NOT_COORDINATOR:
                    errors.append(code)
                return []

            parts.append(_recover(future, on_error))

        def combine(results: list[list[ListGroupsResponseGroup]]) -> Message:
            if errors:
                return ListGroupsResponse(error_code=errors[0], groups=[])
            return ListGroupsResponse(groups=[g for part in results for g in part])

        return _gather(loop, parts, combine)


def _heartbeat_error(exc: BaseException) -> Message:
    code, message = map_operation_error("heartbeat", exc)
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # Kafka answers a heartbeat to a loading partition with NONE: the member keeps its
        # session and the group is rebuilt once loaded.
        code, message = ErrorCode.NONE, None
    return HeartbeatResponse(error_code=code, error_message=message)


def _typed(request_type: type[M], method: Callable[[M, RequestContext], Reply]) -> Handler:
    """`method` as a handler of any message. The server gives it only `request_type`'s
    (parse_request builds the type registered for the handler's api key), so no wrapper
    checks the type again on every request; `request_type` documents the pairing."""
    return cast(Handler, method)


def _done(loop: asyncio.AbstractEventLoop, value: R) -> asyncio.Future[R]:
    future: asyncio.Future[R] = loop.create_future()
    future.set_result(value)
    return future


def _recover(
    source: asyncio.Future[R], on_error: Callable[[BaseException], R]
) -> asyncio.Future[R]:
    """A future that completes with `on_error(exc)` where `source` fails."""
    result: asyncio.Future[R] = source.get_loop().create_future()

    def settle(done: asyncio.Future[R]) -> None:
        if result.done():
            return
        if done.cancelled():
            result.set_result(on_error(asyncio.CancelledError()))
        elif (exc := done.exception()) is not None:
            result.set_result(on_error(exc))
        else:
            result.set_result(done.result())

    if source.done():
        settle(source)
    else:
        source.add_done_callback(settle)
    return result


def _gather(
    loop: asyncio.AbstractEventLoop,
    parts: list[asyncio.Future[R]],
    combine: Callable[[list[R]], Message],
) -> Reply:
    """The combined response of futures that never fail: at once if they are all done."""
    if all(part.done() for part in parts):
        return combine([part.result() for part in parts])
    result: asyncio.Future[Message] = loop.create_future()
    remaining = sum(not part.done() for part in parts)

    def one_done(_: asyncio.Future[R]) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0 and not result.done():
            result.set_result(combine([part.result() for part in parts]))

    for part in parts:
        if not part.done():
            part.add_done_callback(one_done)
    return PendingReply(result)


def _in_request_order(
    requested: list[str | None], results: list[list[M]], group_id_of: Callable[[M], str]
) -> list[M]:
    """Per-group results in the order the request named the groups."""
    by_id: dict[str, list[M]] = {}
    for part in results:
        for item in part:
            by_id.setdefault(group_id_of(item), []).append(item)
    ordered: list[M] = []
    for group_id in requested:
        items = by_id.get(group_id or "")
        if items:
            ordered.append(items.pop(0))
    return ordered


def _described_error(group_id: str | None, code: ErrorCode) -> DescribeGroupsResponseGroup:
    # Kafka's answer for a group it could not describe: empty state, type and protocol.
    return DescribeGroupsResponseGroup(
        group_id=group_id or "", error_code=code, group_state="", protocol_type=""
    )


def _deleted_error(group_id: str | None, code: ErrorCode) -> DeleteGroupsResponseResult:
    return DeleteGroupsResponseResult(group_id=group_id or "", error_code=code)


def _fetch_error(group: OffsetFetchRequestGroup, code: ErrorCode) -> OffsetFetchResponseGroup:
    return OffsetFetchResponseGroup(group_id=group.group_id or "", error_code=code, topics=[])
