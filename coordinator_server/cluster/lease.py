"""How long the group's coordinator counts this node a member for sure: the lease that lets a
node refuse to append once it may have been evicted.

The lease starts at the send time of the last Heartbeat or SyncGroup answered without an
error, and lasts the session timeout. The broker removes a member only when its session
runs out, counted from a heartbeat that arrived after that send, or when a rebalance that
started after it outlasts its rebalance timeout (never shorter than the session timeout: the
membership refuses settings that would make it). A JoinGroup answer proves nothing more than
the SyncGroup that follows it. An answer that says the node is no member ends the lease at
once, and so does leaving the group.

Pure: the times are given (time.monotonic's, by the membership).
"""

from __future__ import annotations

from typing import Final

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

__all__ = ["MembershipLease"]

_PROVES_MEMBERSHIP: Final = frozenset({ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP})
_ASKS_MEMBERSHIP: Final = frozenset({ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP})
_NOT_A_MEMBER: Final = frozenset(
    {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}
)


class MembershipLease:
    """The lease of one member, `session_timeout_s` long from its last proof."""

    __slots__ = ("_breaks", "_ended", "_ever", "_from", "_session_timeout_s")

    def __init__(self, session_timeout_s: float) -> None:
        assert session_timeout_s > 0
        self._session_timeout_s = session_timeout_s
        self._from: float | None = None
        self._ended = False
        self._breaks = 0
        self._ever = False

    @property
    def last_proof(self) -> float | None:
        """When the last request that proved the membership was sent, or None."""
        return self._from

    @property
    def deadline(self) -> float | None:
        """Until when the node is a member for sure, or None when it may be none."""
        return None if self._from is None else self._from + self._session_timeout_s

    @property
    def breaks(self) -> int:
        """How many times a lease was renewed after it had run out or been ended: each time,
        the broker may have removed the node meanwhile, and another node may have owned its
        partitions (and moved their state on) before it got them back."""
        return self._breaks

    def holds(self, now: float) -> bool:
        deadline = self.deadline
        return deadline is not None and now < deadline

    def on_response(self, api_key: int | None, error_code: int | None, sent: float) -> None:
        """A group request sent at `sent` was answered with `error_code`."""
        if self._ended:
            return
        if error_code == ErrorCode.NONE and api_key in _PROVES_MEMBERSHIP:
            previous = self._from
            if previous is None:
                # The first lease, or one after an answer that said the node is no member.
                if self._ever:
                    self._breaks += 1
            elif sent >= previous + self._session_timeout_s:
                self._breaks += 1
            if previous is None or sent > previous:
                self._from = sent
            self._ever = True
        elif error_code in _NOT_A_MEMBER and api_key in _ASKS_MEMBERSHIP:
            self._from = None

    def end(self) -> None:
        """The node leaves: no answer renews the lease any more."""
        self._ended = True
        self._from = None
