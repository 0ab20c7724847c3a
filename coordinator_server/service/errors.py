"""How the service turns the failure of an operation into the error code a client gets:
Kafka's translation of log errors into coordinator errors (CoordinatorOperationExceptionHelper)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_server.storage.api import AppendError

logger = logging.getLogger(__name__)

# The message of a listing a node cannot give: it does not know which partitions it owns.
NO_OWNERSHIP = (
    "this node does not know yet which partitions it owns (it is joining its cluster, or "
    "its lease ran out); ask again"
)

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
    # The log's own producer meets these; they mean nothing to a group's or a transaction's
    # client (a fenced owner's appends fail as NOT_COORDINATOR before they get here).
    ErrorCode.UNKNOWN_PRODUCER_ID: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.PRODUCER_FENCED: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def map_operation_error(
    operation: str, exc: BaseException, *, require_stable: bool = False
) -> tuple[ErrorCode, str | None]:
    """The error a client gets for an operation that failed with `exc`."""
    if isinstance(exc, AppendError):
        if exc.stops_partition:
            # Fenced: another node owns the partition now (or will once it is taken over).
            return ErrorCode.NOT_COORDINATOR, str(exc) or None
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
