"""What the client library raises beside the RPC client's errors (`rpc.errors`): a
group member's own failures."""

from __future__ import annotations

from coordinator_client.rpc.errors import ClientError

__all__ = ["AssignmentTimeoutError", "CommitFailedError", "GroupMemberError"]


class CommitFailedError(ClientError):
    """A group member's commit cannot complete because the group has rebalanced (Kafka's
    CommitFailedException): the member's generation is no longer valid. The partitions will
    be reassigned; their new owner starts from the last successful commit."""


class GroupMemberError(ClientError):
    """A group member stopped because of an error it cannot recover from (for example
    FENCED_INSTANCE_ID or INCONSISTENT_GROUP_PROTOCOL); `__cause__` is the server's error."""


class AssignmentTimeoutError(ClientError, TimeoutError):
    """A group member got no assignment in the time it was given. The message names the
    coordinator's address and the last error met reaching it (connection refused, a peer
    that does not speak the coordinator protocol, ...). A `TimeoutError`, so code that
    catches that keeps working; the member itself keeps trying."""
