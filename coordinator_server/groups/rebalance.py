"""The rebalance of a classic group, and every timer of the classic protocol.

A rebalance takes a group from PreparingRebalance (the join phase: the members rejoin)
through CompletingRebalance (the sync phase: the leader assigns) to Stable. Requests start
its steps (`join`, `membership`), and so do timers: the end of the join phase (the initial
delay, the rebalance timeout), the deadline of the sync phase and each member's session.
The timers live here, beside the steps, because the two call each other: ending the join
phase arms the members' sessions and the sync phase's deadline, and an expired session or
deadline removes members and ends or starts a join phase.

Timers are armed and cancelled directly on the injected timer, as Kafka does; their
operations look the group up again when they fire, since the world may have moved on.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import JoinGroupResponse
from coordinator_server.groups.classic import ClassicGroup, ClassicGroupMember, ClassicGroupState
from coordinator_server.groups.store import (
    Effects,
    GroupStore,
    group_result,
    join_error,
    sync_error,
)
from coordinator_server.records import new_group_metadata_record
from coordinator_server.runtime.api import CoordinatorResult

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


def classic_group_heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def classic_group_join_key(group_id: str) -> str:
    return f"join-{group_id}"


def classic_group_sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


class ClassicRebalance:
    def __init__(self, store: GroupStore) -> None:
        self._groups = store.by_id
        self._clock = store.clock
        self._timer = store.timer
        self._config = store.config

    # The join phase.

    def maybe_prepare_rebalance_or_complete_join(
        self, group: ClassicGroup, fx: Effects
    ) -> ClassicGroup:
        if group.can_rebalance():
            return self.prepare_rebalance(group, fx)
        return self.maybe_complete_join_phase(group, fx)

    def prepare_rebalance(self, group: ClassicGroup, fx: Effects) -> ClassicGroup:
        if group.state is COMPLETING_REBALANCE:
            group = self._reset_and_propagate_assignment_with_error(
                group, ErrorCode.REBALANCE_IN_PROGRESS, fx
            )
        group = self._remove_sync_expiration(group)
        group_id = group.group_id
        is_initial_rebalance = group.state is EMPTY
        if is_initial_rebalance:
            # A new group: give the other members time to join before the first assignment.
            delay_ms = self._config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._timer.schedule(
                classic_group_join_key(group_id),
                delay_ms,
                lambda: self._try_complete_initial_rebalance_else_schedule(
                    group_id, delay_ms, remaining_ms
                ),
            )
        group = group.transition_to(PREPARING_REBALANCE, self._clock.now_ms())
        if is_initial_rebalance:
            return group
        return self._maybe_complete_join_else_schedule(group, fx)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, fx: Effects) -> ClassicGroup:
        if group.has_all_members_joined():
            return self.complete_join(group, fx)
        group_id = group.group_id
        self._timer.schedule(
            classic_group_join_key(group_id),
            group.rebalance_timeout_ms(),
            lambda: self._complete_join_on_timeout(group_id),
        )
        return group

    def maybe_complete_join_phase(self, group: ClassicGroup, fx: Effects) -> ClassicGroup:
        if group.state is not PREPARING_REBALANCE:
            return group
        if group.previous_state is EMPTY:
            # The initial rebalance waits for its delay even when everyone joined.
            return group
        if not group.has_all_members_joined():
            return group
        return self.complete_join(group, fx)

    def _try_complete_initial_rebalance_else_schedule(
        self, group_id: str, delay_ms: int, remaining_ms: int
    ) -> CoordinatorResult[None]:
        original = self._groups.get(group_id)
        if original is None or original.state is not PREPARING_REBALANCE:
            return CoordinatorResult()
        fx = Effects()
        if original.new_member_added and remaining_ms != 0:
            # Members are still arriving: wait a little longer, within the rebalance timeout.
            group = original.with_new_member_added(False)
            new_delay_ms = min(self._config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._timer.schedule(
                classic_group_join_key(group_id),
                new_delay_ms,
                lambda: self._try_complete_initial_rebalance_else_schedule(
                    group_id, new_delay_ms, new_remaining_ms
                ),
            )
        else:
            group = self.complete_join(original, fx)
        return group_result(group_id, original, group, fx, None, park=False)

    def _complete_join_on_timeout(self, group_id: str) -> CoordinatorResult[None]:
        original = self._groups.get(group_id)
        if original is None or original.state is not PREPARING_REBALANCE:
            return CoordinatorResult()
        fx = Effects()
        group = self.complete_join(original, fx)
        return group_result(group_id, original, group, fx, None, park=False)

    def complete_join(self, group: ClassicGroup, fx: Effects) -> ClassicGroup:
        """End the join phase: drop the dynamic members that did not rejoin, then start the
        next generation and answer every parked JoinGroup (the leader gets the members)."""
        group_id = group.group_id
        self._timer.cancel(classic_group_join_key(group_id))
        not_rejoined = [
            member.member_id
            for member in group.members.values()
            if not member.is_awaiting_join and not member.is_static
        ]
        if not_rejoined:
            for member_id in not_rejoined:
                self._timer.cancel(classic_group_heartbeat_key(group_id, member_id))
            group = group.remove_members(not_rejoined)
        if group.state is DEAD:
            return group

        group, has_leader = group.maybe_elect_new_joined_leader()
        if not has_leader and group.members:
            # Nobody rejoined (only static members are left): wait another rebalance timeout
            # for them to rejoin or for their sessions to expire.
            self._timer.schedule(
                classic_group_join_key(group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join_on_timeout(group_id),
            )
            return group

        group = group.init_next_generation(self._clock.now_ms())
        if group.state is EMPTY:
            fx.records.append(new_group_metadata_record(group_id, group.to_record_value()))
            return group

        leader_members = group.current_members_for_join()
        for member in group.members.values():
            if member.join_handle is not None:
                is_leader = group.is_leader(member.member_id)
                fx.complete(
                    member.join_handle,
                    JoinGroupResponse(
                        error_code=ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=False,
                        member_id=member.member_id,
                        members=leader_members if is_leader else [],
                    ),
                )
            self.reschedule_heartbeat(group_id, member.member_id, member.session_timeout_ms)
        group = group.update_members(
            lambda member: replace(member, join_handle=None, is_new=False)
        ).with_pending_sync_members(frozenset(group.members))
        self._schedule_pending_sync(group)
        return group

    def _reset_and_propagate_assignment_with_error(
        self, group: ClassicGroup, code: ErrorCode, fx: Effects
    ) -> ClassicGroup:
        assert group.state is COMPLETING_REBALANCE
        group_id = group.group_id
        for member in group.members.values():
            if member.sync_handle is not None:
                fx.complete(member.sync_handle, sync_error(code))
                # Its session may have expired while it waited (the wait satisfied it).
                self.reschedule_heartbeat(group_id, member.member_id, member.session_timeout_ms)
        return group.update_members(
            lambda member: replace(member, assignment=b"", sync_handle=None)
        )

    # Sessions.

    def reschedule_heartbeat(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        """(Re)arm a member's session timer for `timeout_ms`."""
        key = classic_group_heartbeat_key(group_id, member_id)
        # Every timer of this key expires this member, so an armed one only needs moving.
        if not self._timer.reschedule(key, timeout_ms):
            self._timer.schedule(
                key, timeout_ms, lambda: self._expire_member_heartbeat(group_id, member_id)
            )

    def schedule_heartbeat(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        """Arm a new session timer (a pending member's), replacing any of the same key."""
        self._timer.schedule(
            classic_group_heartbeat_key(group_id, member_id),
            timeout_ms,
            lambda: self._expire_member_heartbeat(group_id, member_id),
        )

    def cancel_heartbeat(self, group_id: str, member_id: str) -> None:
        self._timer.cancel(classic_group_heartbeat_key(group_id, member_id))

    def reschedule_member_heartbeat(self, group_id: str, member_id: str) -> None:
        """Re-arm a member's session timer (a heartbeat, a SyncGroup or a commit)."""
        group = self._groups.get(group_id)
        if group is None:
            return
        member = group.members.get(member_id)
        if member is not None:
            self.reschedule_heartbeat(group_id, member_id, member.session_timeout_ms)

    def _expire_member_heartbeat(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        original = self._groups.get(group_id)
        if original is None or original.state is DEAD:
            return CoordinatorResult()
        fx = Effects()
        if original.is_pending_member(member_id):
            group = original.remove_member(member_id)
            if group.state is PREPARING_REBALANCE and group.has_all_members_joined():
                group = self.complete_join(group, fx)
            return group_result(group_id, original, group, fx, None, park=False)
        member = original.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return CoordinatorResult()
        group = self._remove_member_and_update_group(original, member, fx)
        return group_result(group_id, original, group, fx, None, park=False)

    def _remove_member_and_update_group(
        self, group: ClassicGroup, member: ClassicGroupMember, fx: Effects
    ) -> ClassicGroup:
        group = self.remove_member_with_parked(group, member.member_id, fx)
        if group.state is STABLE or group.state is COMPLETING_REBALANCE:
            return self.maybe_prepare_rebalance_or_complete_join(group, fx)
        if group.state is PREPARING_REBALANCE and group.has_all_members_joined():
            return self.complete_join(group, fx)
        return group

    # Members leaving.

    def remove_member_with_parked(
        self, group: ClassicGroup, member_id: str, fx: Effects
    ) -> ClassicGroup:
        """Remove a member; its parked JoinGroup or SyncGroup learns it is gone, so that a
        client that is still alive joins again."""
        self._answer_parked_of_removed(group, member_id, fx)
        return group.remove_member(member_id)

    def leave_current_member(self, group: ClassicGroup, member_id: str, fx: Effects) -> None:
        """What a member's leaving ends besides its place in the group: its session timer and
        its parked JoinGroup or SyncGroup."""
        self._timer.cancel(classic_group_heartbeat_key(group.group_id, member_id))
        self._answer_parked_of_removed(group, member_id, fx)

    def _answer_parked_of_removed(self, group: ClassicGroup, member_id: str, fx: Effects) -> None:
        member = group.members.get(member_id)
        if member is not None:
            if member.join_handle is not None:
                fx.complete(member.join_handle, join_error(ErrorCode.UNKNOWN_MEMBER_ID, ""))
            if member.sync_handle is not None:
                fx.complete(member.sync_handle, sync_error(ErrorCode.UNKNOWN_MEMBER_ID))

    # The sync phase's deadline.

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        generation_id = group.generation_id
        self._timer.schedule(
            classic_group_sync_key(group_id),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group_id, generation_id),
        )

    def _remove_sync_expiration(self, group: ClassicGroup) -> ClassicGroup:
        self._timer.cancel(classic_group_sync_key(group.group_id))
        return group.with_pending_sync_members(frozenset())

    def remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> ClassicGroup:
        """The member's SyncGroup arrived; the deadline goes once it is not needed."""
        group = group.with_pending_sync_members(group.pending_sync_members - {member_id})
        if group.state in (DEAD, EMPTY, PREPARING_REBALANCE) or (
            group.has_received_sync_from_all_members()
        ):
            self._timer.cancel(classic_group_sync_key(group.group_id))
        return group

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> CoordinatorResult[None]:
        original = self._groups.get(group_id)
        if original is None or original.generation_id != generation_id:
            return CoordinatorResult()
        if original.state is not COMPLETING_REBALANCE and original.state is not STABLE:
            return CoordinatorResult()
        if original.has_received_sync_from_all_members():
            return CoordinatorResult()
        fx = Effects()
        expired = sorted(original.pending_sync_members)
        for member_id in expired:
            self.leave_current_member(original, member_id, fx)
        # All at once: one at a time would copy the group once per member.
        group = self.prepare_rebalance(original.remove_members(expired), fx)
        return group_result(group_id, original, group, fx, None, park=False)

    # A deleted group.

    def cancel_timers(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        self._timer.cancel(classic_group_join_key(group_id))
        self._timer.cancel(classic_group_sync_key(group_id))
        if group is not None:
            for member_id in (*group.members, *group.pending_join_members):
                self._timer.cancel(classic_group_heartbeat_key(group_id, member_id))
