"""JoinGroup: who may join a classic group, and how.

A new dynamic member first gets its member id (KIP-394) and joins with it; a static member
joins at once, or replaces the member of the same instance id; a member of the group joins
again to rebalance or to change its metadata. Each path ends in a step of the rebalance
(`rebalance`): a join phase starts, or ends once every member has rejoined. The JoinGroup
parks its caller: the handle goes into the member of the new snapshot, and whichever later
operation ends the join phase puts the caller's answer into its result's `completions`.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from coordinator_protocol.errors import ErrorCode, NotCoordinatorError
from coordinator_protocol.messages import JoinGroupRequest, JoinGroupResponse
from coordinator_server.groups.classic import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    ProtocolMetadata,
)
from coordinator_server.groups.limits import join_answer_refusal
from coordinator_server.groups.rebalance import ClassicRebalance
from coordinator_server.groups.store import (
    Effects,
    GroupStore,
    group_result,
    join_error,
    sync_error,
)
from coordinator_server.records import GroupMetadataValue, new_group_metadata_record
from coordinator_server.runtime.api import CoordinatorResult, RequestContext, ResponseHandle

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


def _protocols_of(request: JoinGroupRequest) -> tuple[ProtocolMetadata, ...]:
    return tuple((protocol.name, protocol.metadata) for protocol in request.protocols)


class ClassicGroupJoin:
    def __init__(self, store: GroupStore, rebalance: ClassicRebalance) -> None:
        self._groups = store.by_id
        self._clock = store.clock
        self._config = store.config
        self._new_group_refusal = store.new_group_refusal
        self._rebalance = rebalance

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[JoinGroupResponse]:
        group_id = request.group_id
        assert group_id, "the service answers a missing or empty group id"
        member_id = request.member_id
        config = self._config
        if not (
            config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.max_session_timeout_ms
        ):
            return CoordinatorResult(
                response=join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
            )
        if request.rebalance_timeout_ms == -1:
            # JoinGroup v0's rule: the rebalance timeout is the session timeout.
            request = request.replace(rebalance_timeout_ms=request.session_timeout_ms)

        original = self._groups.get(group_id)
        is_unknown_member = member_id == ""
        if original is None:
            if not is_unknown_member:
                return CoordinatorResult(
                    response=join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
                )
            refusal = self._new_group_refusal()
            if refusal is not None:
                return CoordinatorResult(
                    response=JoinGroupResponse(
                        error_code=ErrorCode.POLICY_VIOLATION,
                        error_message=refusal,
                        member_id=member_id,
                    )
                )
            group = ClassicGroup.create(group_id, self._clock.now_ms())
        else:
            group = original

        fx = Effects()
        response: JoinGroupResponse | None
        if not self._accept_joining_member(group, member_id):
            # Removing the member lets the last ones to rejoin be the ones left out when
            # the limit was lowered; if every member left has rejoined, the join phase ends
            # now rather than at the rebalance timeout.
            group = self._rebalance.remove_member_with_parked(group, member_id, fx)
            group = self._rebalance.maybe_complete_join_phase(group, fx)
            response = JoinGroupResponse(
                error_code=ErrorCode.GROUP_MAX_SIZE_REACHED,
                error_message=f"group {group_id} has reached its maximum size "
                f"(group.max.size {config.max_size})",
            )
        elif (
            refusal := join_answer_refusal(group, request, config.max_response_bytes)
        ) is not None:
            # Nothing changes (not even a new group is made): a member already in the
            # group keeps what it had.
            return CoordinatorResult(
                response=JoinGroupResponse(
                    error_code=ErrorCode.GROUP_MAX_SIZE_REACHED,
                    error_message=refusal,
                    member_id=member_id,
                )
            )
        elif is_unknown_member:
            group, response = self._join_new_member(ctx, request, group, handle, fx)
        else:
            group, response = self._join_existing_member(ctx, request, group, handle, fx)

        if original is None and not fx.records:
            # A new group needs a record of its own to exist in the log (and for readers).
            fx.records.append(
                new_group_metadata_record(
                    group_id,
                    GroupMetadataValue(
                        protocol_type="",
                        generation=0,
                        protocol_name=None,
                        leader=None,
                        current_state_timestamp_ms=group.current_state_timestamp_or_default(),
                    ),
                )
            )
        return group_result(group_id, original, group, fx, response, park=response is None)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        state = group.state
        if state is EMPTY or state is DEAD:
            return True
        if state is PREPARING_REBALANCE:
            # Counting members awaiting a join answer (not all members) keeps working when
            # the group is already above a lowered limit.
            member = group.members.get(member_id)
            return (
                member is not None and member.is_awaiting_join
            ) or group.num_awaiting_join_response() < self._config.max_size
        return group.has_member(member_id) or group.num_members() < self._config.max_size

    def _join_new_member(
        self,
        ctx: RequestContext,
        request: JoinGroupRequest,
        group: ClassicGroup,
        handle: ResponseHandle,
        fx: Effects,
    ) -> tuple[ClassicGroup, JoinGroupResponse | None]:
        if group.state is DEAD:
            return group, join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
        if not group.supports_protocols(request.protocol_type, {p.name for p in request.protocols}):
            return group, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        instance_id = request.group_instance_id
        new_member_id = f"{ctx.client_id if instance_id is None else instance_id}-{uuid.uuid4()}"
        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is not None:
                return self._update_static_member_then_rebalance_or_complete_join(
                    request, group, existing, new_member_id, handle, fx
                )
            return self._add_member_then_rebalance_or_complete_join(
                ctx, request, group, new_member_id, handle, fx
            ), None
        # KIP-394: the member must come back with the id it is given, so that a client
        # retrying a timed-out JoinGroup does not leave a defunct member behind.
        group = group.add_pending_member(new_member_id)
        self._rebalance.schedule_heartbeat(
            group.group_id, new_member_id, request.session_timeout_ms
        )
        return group, join_error(ErrorCode.MEMBER_ID_REQUIRED, new_member_id)

    def _join_existing_member(
        self,
        ctx: RequestContext,
        request: JoinGroupRequest,
        group: ClassicGroup,
        handle: ResponseHandle,
        fx: Effects,
    ) -> tuple[ClassicGroup, JoinGroupResponse | None]:
        member_id = request.member_id
        instance_id = request.group_instance_id
        if group.state is DEAD:
            return group, join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(request.protocol_type, {p.name for p in request.protocols}):
            return group, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if group.is_pending_member(member_id):
            if instance_id is not None:
                # Pending members are dynamic by construction; Kafka fails such a request.
                return group, join_error(ErrorCode.UNKNOWN_SERVER_ERROR, member_id)
            return self._add_member_then_rebalance_or_complete_join(
                ctx, request, group, member_id, handle, fx
            ), None
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return group, join_error(error.code, member_id)

        member = group.member(member_id)
        protocols = _protocols_of(request)
        state = group.state
        if state is PREPARING_REBALANCE:
            return self._update_member_then_rebalance_or_complete_join(
                request, group, member, handle, fx
            ), None
        if state is COMPLETING_REBALANCE:
            if member.matches(protocols):
                # Same metadata (it probably missed the JoinGroup answer): the current
                # generation again.
                return group, self._current_generation_join_response(
                    group, member_id, with_members=group.is_leader(member_id)
                )
            return self._update_member_then_rebalance_or_complete_join(
                request, group, member, handle, fx
            ), None
        if state is STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # A leader's JoinGroup always rebalances: it is how the leader asks for a
                # new assignment when something outside the metadata changed.
                return self._update_member_then_rebalance_or_complete_join(
                    request, group, member, handle, fx
                ), None
            return group, self._current_generation_join_response(
                group, member_id, with_members=False
            )
        return group, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    def _current_generation_join_response(
        self, group: ClassicGroup, member_id: str, *, with_members: bool, skip: bool = False
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip,
            member_id=member_id,
            members=group.current_members_for_join() if with_members else [],
        )

    def _add_member_then_rebalance_or_complete_join(
        self,
        ctx: RequestContext,
        request: JoinGroupRequest,
        group: ClassicGroup,
        member_id: str,
        handle: ResponseHandle,
        fx: Effects,
    ) -> ClassicGroup:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=_protocols_of(request),
            join_handle=handle,
            is_new=True,
        )
        if group.state is PREPARING_REBALANCE and group.previous_state is EMPTY:
            group = group.with_new_member_added(True)
        group = group.add_member(member)
        # A new member cannot heartbeat while its JoinGroup is parked, and a client that
        # timed out and retried would leave it behind: its JoinGroup gets a bounded wait.
        self._rebalance.reschedule_heartbeat(
            group.group_id, member_id, self._config.new_member_join_timeout_ms
        )
        return self._rebalance.maybe_prepare_rebalance_or_complete_join(group, fx)

    def _update_member_then_rebalance_or_complete_join(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        member: ClassicGroupMember,
        handle: ResponseHandle,
        fx: Effects,
    ) -> ClassicGroup:
        if member.join_handle is not None:
            # The member sent JoinGroup again: answer the older one rather than orphan it.
            fx.complete(
                member.join_handle,
                NotCoordinatorError("superseded by a newer JoinGroup of the same member"),
            )
        group = group.update_member(
            replace(
                member,
                protocols=_protocols_of(request),
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                session_timeout_ms=request.session_timeout_ms,
                join_handle=handle,
            )
        )
        return self._rebalance.maybe_prepare_rebalance_or_complete_join(group, fx)

    def _update_static_member_then_rebalance_or_complete_join(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        handle: ResponseHandle,
        fx: Effects,
    ) -> tuple[ClassicGroup, JoinGroupResponse | None]:
        instance_id = request.group_instance_id
        assert instance_id is not None
        old_member = group.member(old_member_id)
        self._fence_replaced_member(old_member, fx)
        replacement = replace(
            old_member, member_id=new_member_id, join_handle=None, sync_handle=None, is_new=False
        )
        group = group.replace_static_member(instance_id, old_member_id, replacement)
        # The old id's heartbeat expires harmlessly: no member has that id any more.
        self._rebalance.reschedule_heartbeat(
            group.group_id, new_member_id, replacement.session_timeout_ms
        )
        updated = replace(
            replacement,
            protocols=_protocols_of(request),
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
        )

        if group.state is STABLE:
            candidate = group.update_member(updated)
            if group.protocol_name == candidate.select_protocol():
                # Nothing the assignment depends on changed: persist the new member id and
                # answer with the current generation once it is committed. A replaced leader
                # gets the members but must not reassign (skip_assignment).
                is_leader = candidate.is_leader(new_member_id)
                fx.records.append(
                    new_group_metadata_record(candidate.group_id, candidate.to_record_value())
                )
                fx.complete(
                    handle,
                    self._current_generation_join_response(
                        candidate, new_member_id, with_members=is_leader, skip=is_leader
                    ),
                )
                return candidate, None
            group = group.update_member(replace(updated, join_handle=handle))
            return self._rebalance.maybe_prepare_rebalance_or_complete_join(group, fx), None

        group = group.update_member(replace(updated, join_handle=handle))
        if group.state is COMPLETING_REBALANCE:
            # The leader may already be assigning with the old member id: start over.
            return self._rebalance.prepare_rebalance(group, fx), None
        assert group.state is PREPARING_REBALANCE, f"a static member in a {group.state} group"
        return self._rebalance.maybe_complete_join_phase(group, fx), None

    def _fence_replaced_member(self, member: ClassicGroupMember, fx: Effects) -> None:
        if member.join_handle is not None:
            fx.complete(
                member.join_handle,
                JoinGroupResponse(
                    error_code=ErrorCode.FENCED_INSTANCE_ID,
                    member_id=member.member_id,
                    leader="",
                ),
            )
        if member.sync_handle is not None:
            fx.complete(member.sync_handle, sync_error(ErrorCode.FENCED_INSTANCE_ID))
