"""What the RPC client raises.

Two families, split by who caused the problem (asyncpg's split):

- A Kafka error code the server answered is raised as its `coordinator_protocol.errors` class
  (`NotCoordinatorError`, `RebalanceInProgressError`, ...), one class per code, all
  `ApiError`. The client raises them for top-level errors; per-partition errors of a commit
  or an offset delete are collected into one `PartitionErrors` that names each failed
  partition.
- Problems on the client's side of the wire are `ClientError`s: the client was closed, the
  connection broke, no answer came in time, a request was too large to send. The client
  library adds its own (`coordinator_client.errors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum

from aiokafka.structs import TopicPartition

from coordinator_protocol.errors import ApiError

__all__ = [
    "ClientClosedError",
    "ClientError",
    "CloseReason",
    "ConnectionClosedError",
    "OffsetCommitError",
    "OffsetDeleteError",
    "PartitionErrors",
    "RequestTimeoutError",
    "RequestTooLargeError",
]


class CloseReason(IntEnum):
    """Why a connection was closed (aiokafka's `CloseReason`)."""

    CONNECTION_BROKEN = 0
    """The peer closed the connection or the socket failed."""
    CONNECTION_TIMEOUT = 1
    """The connection could not be opened in time."""
    OUT_OF_SYNC = 2
    """The server sent bytes the client cannot match to a request (bad frame, envelope or
    correlation id); nothing after them can be trusted."""
    SHUTDOWN = 3
    """The client closed it."""


class ClientError(Exception):
    """A problem on the client's side of the wire (not a Kafka error code)."""

    retriable = False


class ClientClosedError(ClientError):
    """The client was closed; the call cannot complete."""


class ConnectionClosedError(ClientError, ConnectionError):
    """The connection to a server closed before the response arrived.

    Retriable: the request may or may not have been applied, and the client sends it again
    (within the call's deadline) on a new connection.
    """

    retriable = True

    def __init__(self, message: str, reason: CloseReason = CloseReason.CONNECTION_BROKEN) -> None:
        super().__init__(message)
        self.reason = reason


class RequestTimeoutError(ClientError, TimeoutError):
    """No response within the call's timeout (the client-side `request.timeout.ms`).

    Not to be confused with `coordinator_protocol.errors.RequestTimedOutError`, the server's
    REQUEST_TIMED_OUT (7).
    """

    retriable = True


class RequestTooLargeError(ClientError, ValueError):
    """The encoded request is larger than the largest frame the server accepts."""


class PartitionErrors(ClientError):
    """Some partitions of a request failed; `errors` names each with its Kafka error.

    Partitions not in `errors` succeeded.
    """

    def __init__(self, message: str, errors: Mapping[TopicPartition, ApiError]) -> None:
        details = ", ".join(
            f"{tp.topic}-{tp.partition}: {error.code.name}" for tp, error in sorted(errors.items())
        )
        super().__init__(f"{message}: {details}")
        self.errors: dict[TopicPartition, ApiError] = dict(errors)


class OffsetCommitError(PartitionErrors):
    """An OffsetCommit was refused for one or more partitions."""


class OffsetDeleteError(PartitionErrors):
    """An OffsetDelete was refused for one or more partitions."""
