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
from typing import TypeAlias, TypeVar

from coordinator_server.offsets.manager import commit_error_response
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.shard import GroupCoordinatorShard
from coordinator_server.storage.api import AppendError
from protocol.api_keys import SUPPORTED_VERSIONS, ApiKey
from protocol.errors import ApiError, ErrorCode
from protocol.hashing import partition_for
from protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
    Message,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
)

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)
Reply: TypeAlias = "Message | asyncio.Future[Message]"
Handler: TypeAlias = Callable[[Message], Reply]

SERVER_NAME = "coordinator-server"


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
    source: asyncio.Future[M], on_error: Callable[[BaseException], Message]
) -> asyncio.Future[Message]:
    """A future of the response that completes with an error response instead of failing."""
    if source.done():
        result: asyncio.Future[Message] = source.get_loop().create_future()
        _settle(result, source, on_error)
        return result
    result = source.get_loop().create_future()
    source.add_done_callback(lambda done: _settle(result, done, on_error))
    return result


def _settle(
    target: asyncio.Future[Message],
    source: asyncio.Future[M],
    on_error: Callable[[BaseException], Message],
) -> None:
    if target.done():
        return
    if source.cancelled():
        target.set_result(on_error(asyncio.CancelledError()))
        return
    exc = source.exception()
    target.set_result(on_error(exc) if exc is not None else source.result())


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
        self.handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self._typed(ApiVersionsRequest, self.api_versions),
            ApiKey.FIND_COORDINATOR: self._typed(FindCoordinatorRequest, self.find_coordinator),
            ApiKey.OFFSET_COMMIT: self._typed(OffsetCommitRequest, self.offset_commit),
            ApiKey.OFFSET_FETCH: self._typed(OffsetFetchRequest, self.offset_fetch),
        }

    @staticmethod
    def _typed(request_type: type[M], method: Callable[[M], Reply]) -> Handler:
        def handler(request: Message) -> Reply:
            assert isinstance(request, request_type)
            return method(request)

        return handler

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._num_partitions)

    # ApiVersions and FindCoordinator answer at once, even while partitions load.

    def api_versions(self, request: ApiVersionsRequest | None = None) -> ApiVersionsResponse:
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

    def find_coordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
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

    # Offsets.

    def offset_commit(self, request: OffsetCommitRequest) -> Reply:
        group_id = request.group_id
        if group_id is None:
            return commit_error_response(request, ErrorCode.INVALID_GROUP_ID)

        def on_error(exc: BaseException) -> Message:
            code, _ = map_operation_error("commit-offset", exc)
            return commit_error_response(request, code)

        future = self._runtime.schedule_write(
            "commit-offset",
            self.partition_for(group_id),
            lambda shard: shard.offsets.commit_offset(request),
        )
        return _chain(future, on_error)

    def offset_fetch(self, request: OffsetFetchRequest) -> Reply:
        loop = asyncio.get_running_loop()
        parts = [self._fetch_group(g, request.require_stable, loop) for g in request.groups]
        if all(part.done() for part in parts):
            return OffsetFetchResponse(groups=[_group_result(part) for part in parts])
        result: asyncio.Future[Message] = loop.create_future()
        remaining = sum(not part.done() for part in parts)

        def one_done(_: asyncio.Future[Message]) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0 and not result.done():
                result.set_result(OffsetFetchResponse(groups=[_group_result(p) for p in parts]))

        for part in parts:
            if not part.done():
                part.add_done_callback(one_done)
        return result

    def _fetch_group(
        self, group: OffsetFetchRequestGroup, require_stable: bool, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[Message]:
        group_id = group.group_id
        if group_id is None:
            done: asyncio.Future[Message] = loop.create_future()
            done.set_result(_fetch_error(group, ErrorCode.INVALID_GROUP_ID))
            return done

        def on_error(exc: BaseException) -> Message:
            code, _ = map_operation_error("fetch-offsets", exc, require_stable=require_stable)
            return _fetch_error(group, code)

        partition = self.partition_for(group_id)
        future: asyncio.Future[OffsetFetchResponseGroup]
        if require_stable:
            # Kafka reads the latest state through the write path and answers once every
            # pending write is committed (a write with no records).
            future = self._runtime.schedule_write(
                "fetch-offsets-stable",
                partition,
                lambda shard: _no_records(shard.offsets.fetch_offsets(group, None)),
            )
        else:
            future = self._runtime.schedule_read(
                "fetch-offsets",
                partition,
                lambda shard, committed: shard.offsets.fetch_offsets(group, committed),
            )
        return _chain(future, on_error)


def _no_records(response: M) -> CoordinatorResult[M]:
    return CoordinatorResult(response=response)


def _group_result(part: asyncio.Future[Message]) -> OffsetFetchResponseGroup:
    group = part.result()
    assert isinstance(group, OffsetFetchResponseGroup)
    return group


def _fetch_error(group: OffsetFetchRequestGroup, code: ErrorCode) -> OffsetFetchResponseGroup:
    return OffsetFetchResponseGroup(group_id=group.group_id or "", error_code=code, topics=[])
