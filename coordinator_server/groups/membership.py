"""SyncGroup, Heartbeat and LeaveGroup: a member's life in a classic group between two
join phases.

In CompletingRebalance a SyncGroup parks its caller until the leader's SyncGroup brings the
assignment, written in one GroupMetadata record; in Stable it is answered at once. A
heartbeat keeps the member's session alive and tells it whether a rebalance is under way.
LeaveGroup takes members out at once and starts, or ends, a join phase. The session and
sync deadlines these requests move are the rebalance's (`rebalance`).
"""

from __future__ import annotations

from dataclasses import replace

from coordinator_protocol.errors import ErrorCode, NotCoordinatorError
from coordinator_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveGroupResponseMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator_server.groups.classic import ClassicGroup, ClassicGroupState
from coordinator_server.groups.rebalance import ClassicRebalance
from coordinator_server.groups.store import (
    Effects,
    GroupStore,
    group_result,
    sync_error,
)
from coordinator_server.records import new_group_metadata_record
from coordinator_server.runtime.api import CoordinatorResult, RequestContext, ResponseHandle

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


def _is_protocol_inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and requested != current


class ClassicGroupMembership:
    def __init__(self, store: GroupStore, rebalance: ClassicRebalance) -> None:
        self._groups = store.by_id
        self._clock = store.clock
        self._metrics = store.metrics
        self._rebalance = rebalance

    # SyncGroup.

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[SyncGroupResponse]:
        group_id = request.group_id
        assert group_id, "the service answers a missing or empty group id"
        member_id = request.member_id
        original = self._groups.get(group_id)
        if original is None or original.state is EMPTY:
            return CoordinatorResult(response=sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        error = self._validate_sync_group(original, request)
        if error is not None:
            return CoordinatorResult(response=sync_error(error))
        if original.state is PREPARING_REBALANCE:
            return CoordinatorResult(response=sync_error(ErrorCode.REBALANCE_IN_PROGRESS))

        fx = Effects()
        if original.state is COMPLETING_REBALANCE:
            member = original.member(member_id)
            if member.sync_handle is not None:
                fx.complete(
                    member.sync_handle,
                    NotCoordinatorError("superseded by a newer SyncGroup of the same member"),
                )
            group = original.update_member(replace(member, sync_handle=handle))
            group = self._rebalance.remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                group = self._complete_sync_with_assignment(group, request, fx)
            return group_result(group_id, original, group, fx, None, park=True)

        assert original.state is STABLE
        group = self._rebalance.remove_pending_sync_member(original, member_id)
        member = group.member(member_id)
        response = SyncGroupResponse(
            error_code=ErrorCode.NONE,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )
        return group_result(group_id, original, group, fx, response, park=False)

    def _validate_sync_group(
        self, group: ClassicGroup, request: SyncGroupRequest
    ) -> ErrorCode | None:
        if group.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error.code
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _is_protocol_inconsistent(
            request.protocol_type, group.protocol_type
        ) or _is_protocol_inconsistent(request.protocol_name, group.protocol_name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _complete_sync_with_assignment(
        self, group: ClassicGroup, request: SyncGroupRequest, fx: Effects
    ) -> ClassicGroup:
        """The leader's assignment: one GroupMetadata record with every member's assignment
        (missing ones empty), and every parked SyncGroup answered with its own assignment.
        The runtime delivers those answers only once the record is committed and fails them
        with the append's error otherwise; a failed append then starts a new rebalance."""
        group_id = group.group_id
        assignments = {a.member_id: a.assignment for a in request.assignments}
        group = group.update_members(
            lambda member: replace(member, assignment=assignments.get(member.member_id, b""))
        )
        fx.records.append(new_group_metadata_record(group_id, group.to_record_value()))
        answered: list[ResponseHandle] = []
        for member in group.members.values():
            if member.sync_handle is not None:
                answered.append(member.sync_handle)
                fx.complete(
                    member.sync_handle,
                    SyncGroupResponse(
                        error_code=ErrorCode.NONE,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        assignment=member.assignment,
                    ),
                )
                # Expirations were ignored while the member waited: expect heartbeats again.
                self._rebalance.reschedule_heartbeat(
                    group_id, member.member_id, member.session_timeout_ms
                )
        group = group.update_members(lambda member: replace(member, sync_handle=None))
        now_ms = self._clock.now_ms()
        if group.rebalance_started_ms is not None:
            self._metrics.rebalance_completed(now_ms - group.rebalance_started_ms)
        group = group.transition_to(STABLE, now_ms)
        generation_id = group.generation_id
        handles = frozenset(answered)
        fx.on_append_failure = lambda: self._on_assignment_append_failure(
            group_id, generation_id, handles
        )
        return group

    def _on_assignment_append_failure(
        self, group_id: str, generation_id: int, failed: frozenset[ResponseHandle]
    ) -> CoordinatorResult[None]:
        """The leader's assignment was not persisted: the state is back in
        CompletingRebalance, the SyncGroups it answered have had the append's error; every
        other parked SyncGroup gets REBALANCE_IN_PROGRESS and the group rebalances."""
        original = self._groups.get(group_id)
        if (
            original is None
            or original.state is not COMPLETING_REBALANCE
            or original.generation_id != generation_id
        ):
            return CoordinatorResult()
        fx = Effects()
        group = original.update_members(
            lambda member: (
                replace(member, sync_handle=None) if member.sync_handle in failed else member
            )
        )
        group = self._rebalance.maybe_prepare_rebalance_or_complete_join(group, fx)
        return group_result(group_id, original, group, fx, None, park=False)

    # Heartbeat.

    def heartbeat(
        self, ctx: RequestContext, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]:
        group_id = request.group_id
        assert group_id, "the service answers a missing or empty group id"
        group = self._groups.get(group_id)
        if group is None:
            return _heartbeat(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is DEAD:
            return _heartbeat(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        # A dynamic member of the group (nearly every heartbeat) needs no more checking here.
        member = group.members.get(request.member_id) if request.group_instance_id is None else None
        if member is None:
            error = group.validate_member(request.member_id, request.group_instance_id)
            if error is not None:
                return _heartbeat(error.code)
            member = group.member(request.member_id)
        if request.generation_id != group.generation_id:
            return _heartbeat(ErrorCode.ILLEGAL_GENERATION)
        if group.state is EMPTY:
            return _heartbeat(ErrorCode.UNKNOWN_MEMBER_ID)
        self._rebalance.reschedule_heartbeat(group_id, member.member_id, member.session_timeout_ms)
        if group.state is PREPARING_REBALANCE:
            return _heartbeat(ErrorCode.REBALANCE_IN_PROGRESS)
        # CompletingRebalance too: a member may heartbeat as soon as it has its JoinGroup
        # answer, before the leader's assignment arrives.
        return _HEARTBEAT_ANSWERED

    # LeaveGroup.

    def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]:
        group_id = request.group_id
        assert group_id, "the service answers a missing or empty group id"
        original = self._groups.get(group_id)
        if original is None:
            return CoordinatorResult(
                response=LeaveGroupResponse(
                    error_code=ErrorCode.NONE,
                    members=[
                        LeaveGroupResponseMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            error_code=ErrorCode.UNKNOWN_MEMBER_ID,
                        )
                        for m in request.members
                    ],
                )
            )
        if original.state is DEAD:
            return CoordinatorResult(
                response=LeaveGroupResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
            )

        fx = Effects()
        # Every leaving member is taken out at once at the end: one at a time would copy the
        # group once per member, and a request naming every member of a large group would
        # cost the group's size squared. Until then `removed` says who has left.
        removed: set[str] = set()
        static_members = original.static_members
        responses: list[LeaveGroupResponseMember] = []
        for identity in request.members:
            code = ErrorCode.NONE
            member_id = identity.member_id
            instance_id = identity.group_instance_id
            if member_id == "":
                # Removal by instance id alone (an admin removing a static member).
                static_member_id = None if instance_id is None else static_members.get(instance_id)
                if static_member_id is None or static_member_id in removed:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._rebalance.leave_current_member(original, static_member_id, fx)
                    removed.add(static_member_id)
            elif member_id in removed or (
                instance_id is not None and static_members.get(instance_id) in removed
            ):
                # Named again after it left (Kafka removes members one by one: the second
                # time the member is unknown).
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif original.is_pending_member(member_id):
                self._rebalance.cancel_heartbeat(group_id, member_id)
                removed.add(member_id)
            else:
                error = original.validate_member(member_id, instance_id)
                if error is not None:
                    code = error.code
                else:
                    self._rebalance.leave_current_member(original, member_id, fx)
                    removed.add(member_id)
            responses.append(
                LeaveGroupResponseMember(
                    member_id=member_id, group_instance_id=instance_id, error_code=code
                )
            )
        group = original.remove_members(removed)
        if removed:
            if group.state is STABLE or group.state is COMPLETING_REBALANCE:
                group = self._rebalance.maybe_prepare_rebalance_or_complete_join(group, fx)
            elif group.state is PREPARING_REBALANCE:
                group = self._rebalance.maybe_complete_join_phase(group, fx)
        response = LeaveGroupResponse(error_code=ErrorCode.NONE, members=responses)
        return group_result(group_id, original, group, fx, response, park=False)


# A heartbeat's result is one of a few values, each the same every time: made once, shared
# (nothing changes a result or a response once made).
_heartbeat_results: dict[ErrorCode, CoordinatorResult[HeartbeatResponse]] = {}


def _heartbeat(code: ErrorCode) -> CoordinatorResult[HeartbeatResponse]:
    result = _heartbeat_results.get(code)
    if result is None:
        result = _heartbeat_results[code] = CoordinatorResult(
            response=HeartbeatResponse(error_code=code)
        )
    return result


_HEARTBEAT_ANSWERED = _heartbeat(ErrorCode.NONE)
