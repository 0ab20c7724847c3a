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
protocol); `membership` (SyncGroup, Heartbeat and LeaveGroup). Still here: the admin views
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
from coordinator_server.groups.membership import ClassicGroupMembership
from coordinator_server.groups.rebalance import ClassicRebalance
from coordinator_server.groups.store import (
    ClassicGroupUpdate,
    Effects,
    GroupCoordinatorMetricsShard,
    GroupCount,
    GroupsConfig,
    GroupStore,
    join_error,
    sync_error,
)
from coordinator_server.records import CoordinatorRecord, new_group_metadata_tombstone_record
from coordinator_server.runtime.api import Clock, CoordinatorTimer, ResponseHandle
from coordinator_server.timeline import SnapshotRegistry
from protocol.errors import (
    ApiError,
    ErrorCode,
    GroupIdNotFoundError,
    PolicyViolationError,
)
from protocol.messages import (
    DescribeGroupsResponseGroup,
    DescribeGroupsResponseMember,
    ListGroupsResponseGroup,
)

EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


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
        join = ClassicGroupJoin(self, rebalance)
        membership = ClassicGroupMembership(self, rebalance)
        # The phases' handlers, bound once: a call through the manager (or the shard) costs
        # what a call to the phase does.
        self.join_group = join.join_group
        self.sync_group = membership.sync_group
        self.heartbeat = membership.heartbeat
        self.leave_group = membership.leave_group

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
