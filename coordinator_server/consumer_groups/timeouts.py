"""The timers of consumer groups, as Kafka's GroupMetadataManager keys and arms them: a
member's session, its rebalance timeout while it must revoke partitions, and a group's
deferred target assignment; for a member on the classic protocol, its session is its own
(its JoinGroup's session timeout), and it must join within its rebalance timeout once told
to (the join timeout) and sync within it once joined (the sync timeout).

Each fires as a write operation on the group's partition (the runtime's CoordinatorTimer),
which looks at the group as it is then: a timer armed for a state that has moved on does
nothing. Timers are not part of the replicated state: a partition's new owner arms them all
again when it loads (`ConsumerGroupManager.on_loaded`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator_server.runtime.api import CoordinatorResult, CoordinatorTimer

SessionExpiry = Callable[[str, str], CoordinatorResult[Any]]
RebalanceExpiry = Callable[[str, str, int], CoordinatorResult[Any]]
DeferredAssignment = Callable[[str], CoordinatorResult[Any]]


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session-timeout-{group_id}-{member_id}"


def rebalance_timeout_key(group_id: str, member_id: str) -> str:
    return f"rebalance-timeout-{group_id}-{member_id}"


def assignment_key(group_id: str) -> str:
    return f"consumer-group-assignment-{group_id}"


# Kafka names these "join-{group}-{member}" and "sync-{group}-{member}", which a classic
# group's own join and sync timers ("join-{group}", "sync-{group}") could equal for another
# group's id: a prefix of their own keeps them apart.


def join_timeout_key(group_id: str, member_id: str) -> str:
    return f"consumer-group-join-{group_id}-{member_id}"


def sync_timeout_key(group_id: str, member_id: str) -> str:
    return f"consumer-group-sync-{group_id}-{member_id}"


class ConsumerGroupTimeouts:
    """Arms and cancels a partition's consumer group timers; without a timer (a manager
    built for one heartbeat's test) it arms nothing."""

    __slots__ = ("_assign", "_expire_rebalance", "_expire_session", "_session_ms", "_timer")

    def __init__(
        self,
        timer: CoordinatorTimer | None,
        *,
        session_timeout_ms: int,
        expire_session: SessionExpiry,
        expire_rebalance: RebalanceExpiry,
        assign: DeferredAssignment,
    ) -> None:
        self._timer = timer
        self._session_ms = session_timeout_ms
        self._expire_session = expire_session
        self._expire_rebalance = expire_rebalance
        self._assign = assign

    def session(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        """(Re)start the member's session: every heartbeat pushes it back. `timeout_ms`: a
        classic member's own session timeout (None: the group's)."""
        timer = self._timer
        if timer is None:
            return
        key = session_timeout_key(group_id, member_id)
        session_ms = self._session_ms if timeout_ms is None else timeout_ms
        # Every timer of this key fences this member: an armed one only needs moving.
        if not timer.reschedule(key, session_ms):
            expire = self._expire_session
            timer.schedule(key, session_ms, lambda: expire(group_id, member_id), retry=True)

    def join(self, group_id: str, member_id: str, rebalance_timeout_ms: int) -> None:
        """A classic member told to rejoin must do so within its rebalance timeout, counted
        from the first time it is told (Kafka's `scheduleConsumerGroupJoinTimeoutIfAbsent`)."""
        timer = self._timer
        if timer is not None:
            expire = self._expire_session
            timer.schedule_if_absent(
                join_timeout_key(group_id, member_id),
                max(rebalance_timeout_ms, 0),
                lambda: expire(group_id, member_id),
                retry=True,
            )

    def cancel_join(self, group_id: str, member_id: str) -> None:
        if self._timer is not None:
            self._timer.cancel(join_timeout_key(group_id, member_id))

    def sync(self, group_id: str, member_id: str, rebalance_timeout_ms: int) -> None:
        """A classic member that joined must send its SyncGroup within its rebalance timeout
        (Kafka's `scheduleConsumerGroupSyncTimeout`)."""
        timer = self._timer
        if timer is not None:
            expire = self._expire_session
            timer.schedule(
                sync_timeout_key(group_id, member_id),
                max(rebalance_timeout_ms, 0),
                lambda: expire(group_id, member_id),
                retry=True,
            )

    def cancel_sync(self, group_id: str, member_id: str) -> None:
        if self._timer is not None:
            self._timer.cancel(sync_timeout_key(group_id, member_id))

    def rebalance(
        self, group_id: str, member_id: str, member_epoch: int, rebalance_timeout_ms: int
    ) -> None:
        """The member must revoke within its rebalance timeout, from now, at this epoch."""
        timer = self._timer
        if timer is None:
            return
        expire = self._expire_rebalance
        timer.schedule(
            rebalance_timeout_key(group_id, member_id),
            max(rebalance_timeout_ms, 0),
            lambda: expire(group_id, member_id, member_epoch),
            retry=True,
        )

    def cancel_rebalance(self, group_id: str, member_id: str) -> None:
        if self._timer is not None:
            self._timer.cancel(rebalance_timeout_key(group_id, member_id))

    def cancel(self, group_id: str, member_id: str) -> None:
        """The member is gone: none of its timers may fire."""
        timer = self._timer
        if timer is not None:
            timer.cancel(session_timeout_key(group_id, member_id))
            timer.cancel(rebalance_timeout_key(group_id, member_id))
            timer.cancel(join_timeout_key(group_id, member_id))
            timer.cancel(sync_timeout_key(group_id, member_id))

    def assignment(self, group_id: str, delay_ms: int) -> None:
        """Compute the group's target in `delay_ms` (once: a computation already armed
        covers every change until it runs)."""
        timer = self._timer
        if timer is None:
            return
        assign = self._assign
        timer.schedule_if_absent(
            assignment_key(group_id), max(delay_ms, 0), lambda: assign(group_id), retry=True
        )


__all__ = [
    "ConsumerGroupTimeouts",
    "assignment_key",
    "join_timeout_key",
    "rebalance_timeout_key",
    "session_timeout_key",
    "sync_timeout_key",
]
