"""GroupMetadataManager: the classic group protocol's state machine for one partition.

Pure, like Kafka's class of the same name, with one difference of style: Kafka's handlers
change the group in place, here they build the group's next immutable snapshot and return
it as a `ClassicGroupUpdate` in the CoordinatorResult (with the GroupMetadata record where
Kafka writes one, not replayed since the update carries the state). The shard applies the
update; a failed append reverts it with the records.

Kafka keeps every phase of the protocol in one class; here the manager is the partition's
groups (a GroupStore), and these phases have a module of their own (the request handlers
among them bound here under Kafka's names): `join` (JoinGroup); `rebalance` (the join phase
and its end, the sync phase's deadline and the members' sessions, with every timer of the
protocol). Still here: SyncGroup, Heartbeat and LeaveGroup, the admin views
(DescribeGroups, ListGroups, DeleteGroups); and what spans the phases, the partition's life
cycle and the offsets' view of the groups.

JoinGroup and SyncGroup park their caller: the handle goes into the member of the new
snapshot, and whichever later operation ends the wait puts the caller's answer into its
result's `completions`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from coordinator_server.groups.answer_sizes import listed_group_bytes
from coordinator_server.groups.classic import ClassicGroup, ClassicGroupState
from coordinator_server.groups.join import ClassicGroupJoin
from coordinator_server.groups.rebalance import ClassicRebalance
from coordinator_server.groups.store import (
    ClassicGroupUpdate,
    Effects,
    GroupCoordinatorMetricsShard,
    GroupCount,
    GroupsConfig,
    GroupStore,
    RequestContext,
    group_result,
    join_error,
    sync_error,
)
from coordinator_server.records import (
    CoordinatorRecord,
    new_group_metadata_record,
    new_group_metadata_tombstone_record,
)
from coordinator_server.runtime.api import (
    Clock,
    CoordinatorResult,
    CoordinatorTimer,
    ResponseHandle,
)
from coordinator_server.timeline import SnapshotRegistry
from protocol.errors import (
    ApiError,
    ErrorCode,
    GroupIdNotFoundError,
    NotCoordinatorError,
    PolicyViolationError,
)
from protocol.messages import (
    DescribeGroupsResponseGroup,
    DescribeGroupsResponseMember,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveGroupResponseMember,
    ListGroupsResponseGroup,
    SyncGroupRequest,
    SyncGroupResponse,
)

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


def _is_protocol_inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and requested != current


CLASSIC_GROUP_TYPE = "classic"


def list_filter(values: list[str]) -> frozenset[str]:
    """A ListGroups filter as Kafka compares it (trimmed, lower case), each distinct value
    once, made once per request rather than once per partition."""
    return frozenset(value.strip().lower() for value in set(values))


class GroupMetadataManager(GroupStore):
    def __init__(
        self,
        registry: SnapshotRegistry,
        clock: Clock,
        timer: CoordinatorTimer,
        config: GroupsConfig,
        metrics: GroupCoordinatorMetricsShard | None = None,
        group_count: GroupCount | None = None,
    ) -> None:
        super().__init__(registry, clock, timer, config, metrics, group_count)
        self._rebalance = rebalance = ClassicRebalance(self)
        # Bound once: a heartbeat calls it every time.
        self._reschedule_heartbeat = rebalance.reschedule_heartbeat
        join = ClassicGroupJoin(self, rebalance)
        # The phases' handlers, bound once: a call through the manager (or the shard) costs
        # what a call to the phase does.
        self.join_group = join.join_group

    # SyncGroup.

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, handle: ResponseHandle
    ) -> CoordinatorResult[SyncGroupResponse]:
        group_id = request.group_id
        assert group_id, "the service answers a missing or empty group id"
        member_id = request.member_id
        original = self.by_id.get(group_id)
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
                self._reschedule_heartbeat(group_id, member.member_id, member.session_timeout_ms)
        group = group.update_members(lambda member: replace(member, sync_handle=None))
        now_ms = self.clock.now_ms()
        if group.rebalance_started_ms is not None:
            self.metrics.rebalance_completed(now_ms - group.rebalance_started_ms)
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
        original = self.by_id.get(group_id)
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
        group = self.by_id.get(group_id)
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
        self._reschedule_heartbeat(group_id, member.member_id, member.session_timeout_ms)
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
        original = self.by_id.get(group_id)
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

    # DescribeGroups and ListGroups.

    def describe_groups(
        self, group_ids: list[str], committed_offset: int
    ) -> list[DescribeGroupsResponseGroup]:
        """Groups that exist as of `committed_offset`, with their latest content."""
        described: list[DescribeGroupsResponseGroup] = []
        for group_id in group_ids:
            group = self._visible_group(group_id, committed_offset)
            if group is None:
                described.append(
                    DescribeGroupsResponseGroup(
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        group_id=group_id,
                        group_state=DEAD.value,
                    )
                )
                continue
            protocol_name = group.protocol_name
            stable = group.state is STABLE and protocol_name is not None
            described.append(
                DescribeGroupsResponseGroup(
                    error_code=ErrorCode.NONE,
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol_name if stable and protocol_name is not None else "",
                    members=[
                        DescribeGroupsResponseMember(
                            member_id=member.member_id,
                            group_instance_id=member.group_instance_id,
                            client_id=member.client_id,
                            client_host=member.client_host,
                            member_metadata=(
                                member.metadata(protocol_name)
                                if stable and protocol_name is not None
                                else b""
                            ),
                            member_assignment=member.assignment,
                        )
                        for member in group.members.values()
                    ],
                )
            )
        return described

    def list_groups(
        self,
        states: Collection[str],
        types: Collection[str],
        committed_offset: int,
        max_bytes: int | None = None,
    ) -> tuple[list[ListGroupsResponseGroup], int] | None:
        """The groups as of `committed_offset` in one of `states` and of one of `types`
        (filters as `list_filter` makes them; empty: any), and the bytes they take in the
        answer; None once they would take more than `max_bytes`."""
        if types and CLASSIC_GROUP_TYPE not in types:
            return [], 0
        listed: list[ListGroupsResponseGroup] = []
        size = 0
        for group_id, committed in self.by_id.items_at(committed_offset):
            group = self.by_id.get(group_id) or committed
            if states and group.state.lower_name not in states:
                continue
            protocol_type = group.protocol_type or ""
            state = group.state.value
            if max_bytes is not None:
                size += listed_group_bytes(group_id, protocol_type, state)
                if size > max_bytes:
                    return None
            listed.append(
                ListGroupsResponseGroup(
                    group_id=group_id,
                    protocol_type=protocol_type,
                    group_state=state,
                    group_type=CLASSIC_GROUP_TYPE,
                )
            )
        return listed, size

    def _visible_group(self, group_id: str, committed_offset: int) -> ClassicGroup | None:
        committed = self.by_id.get_at(group_id, committed_offset)
        if committed is None:
            return None
        return self.by_id.get(group_id) or committed

    # DeleteGroups.

    def validate_delete_group(self, group_id: str) -> ApiError | None:
        group = self.by_id.get(group_id)
        if group is None:
            return GroupIdNotFoundError(f"group {group_id} does not exist")
        return group.validate_delete_group()

    def create_group_tombstone_records(
        self, group_id: str, records: list[CoordinatorRecord]
    ) -> None:
        """Delete the group: its tombstone, and its timers."""
        records.append(new_group_metadata_tombstone_record(group_id))
        self._rebalance.cancel_timers(group_id)

    def maybe_delete_group(self, group_id: str, records: list[CoordinatorRecord]) -> None:
        """Delete the group if it is Empty (the offset expiration job)."""
        group = self.by_id.get(group_id)
        if group is not None and group.state is EMPTY:
            self.create_group_tombstone_records(group_id, records)

    # The offsets' view of the groups.

    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
    ) -> ApiError | None:
        """Kafka's checks of an OffsetCommit (v9+ semantics). A commit to an unknown group
        with a negative generation is accepted, unless the node holds `max_groups` already:
        replaying its records creates the group."""
        group = self.by_id.get(group_id)
        if group is None:
            if generation_id < 0:
                refusal = self.new_group_refusal()
                return None if refusal is None else PolicyViolationError(refusal)
            return GroupIdNotFoundError(f"group {group_id} does not exist")
        return group.validate_offset_commit(member_id, group_instance_id, generation_id)

    def rearm_heartbeat_on_commit(self, group_id: str, member_id: str) -> None:
        """A member's accepted commit keeps its session alive (Stable or PreparingRebalance)."""
        group = self.by_id.get(group_id)
        if group is not None and (group.state is STABLE or group.state is PREPARING_REBALANCE):
            self._rebalance.reschedule_member_heartbeat(group_id, member_id)

    # The partition's life cycle.

    def on_loaded(self) -> None:
        """Every loaded member's session timer starts now; a group above the maximum size
        (lowered since it was written) rebalances, so the members that rejoin last are the
        ones left out."""
        rebalance = self._rebalance
        for group_id, group in list(self.by_id.items()):
            for member in group.members.values():
                rebalance.reschedule_heartbeat(
                    group_id, member.member_id, member.session_timeout_ms
                )
            if group.num_members() > self.config.max_size:
                fx = Effects()
                rebalancing = rebalance.prepare_rebalance(group, fx)
                # Loaded groups have no parked callers, and a rebalance from Stable
                # writes nothing until its join phase ends.
                assert not fx.records and not fx.completions
                self.apply(ClassicGroupUpdate(group_id, rebalancing))

    def on_unloaded(self) -> list[tuple[ResponseHandle, object]]:
        """Every group goes Dead. Returns what Kafka answers the parked callers with
        (NOT_COORDINATOR); the runtime fails every parked caller of the partition itself."""
        completions: list[tuple[ResponseHandle, object]] = []
        now_ms = self.clock.now_ms()
        for group_id, group in list(self.by_id.items()):
            for member in group.members.values():
                if group.state is PREPARING_REBALANCE and member.join_handle is not None:
                    completions.append(
                        (
                            member.join_handle,
                            join_error(ErrorCode.NOT_COORDINATOR, member.member_id),
                        )
                    )
                if member.sync_handle is not None:
                    completions.append((member.sync_handle, sync_error(ErrorCode.NOT_COORDINATOR)))
            dead = group.update_members(
                lambda member: replace(member, join_handle=None, sync_handle=None)
            ).transition_to(DEAD, now_ms)
            self.by_id[group_id] = dead
        return completions


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
