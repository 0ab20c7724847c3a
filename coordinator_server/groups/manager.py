"""GroupMetadataManager: the classic group protocol's state machine for one partition.

Pure, like Kafka's class of the same name, with one difference of style: Kafka's handlers
change the group in place (and write their GroupMetadata records with `replayRecords`
false, since the group has changed already), here they build the group's next immutable
snapshot and return it as a `ClassicGroupUpdate` in the CoordinatorResult, with the
GroupMetadata record where Kafka writes one. The runtime replays the record like any other
and then applies the update, which carries what the record does not (see `group_result`);
a failed append reverts both.

Kafka keeps every phase of the protocol in this one class; here the manager is the
partition's groups (a GroupStore) with the handlers of each phase, bound under Kafka's
names:
- `join`: JoinGroup;
- `rebalance`: the join phase and its end, the sync phase's deadline and the members'
  sessions, with every timer of the protocol;
- `membership`: SyncGroup, Heartbeat and LeaveGroup;
- `admin_views`: DescribeGroups, ListGroups and DeleteGroups.
What spans them stays here: the partition's life cycle and the offsets' view of the groups.

JoinGroup and SyncGroup park their caller: the handle goes into the member of the new
snapshot, and whichever later operation ends the wait puts the caller's answer into its
result's `completions`.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator_protocol.errors import (
    ApiError,
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
    IllegalGenerationError,
    PolicyViolationError,
)
from coordinator_server.groups.admin_views import ClassicGroupAdmin
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.groups.join import ClassicGroupJoin
from coordinator_server.groups.membership import ClassicGroupMembership
from coordinator_server.groups.migration import ClassicGroupMigration
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
from coordinator_server.runtime.api import Clock, CoordinatorTimer, ResponseHandle
from coordinator_server.timeline import SnapshotRegistry

PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


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
        admin = ClassicGroupAdmin(self, rebalance)
        # The phases' handlers, bound once: a call through the manager (or the shard) costs
        # what a call to the phase does.
        self.join_group = join.join_group
        self.sync_group = membership.sync_group
        self.heartbeat = membership.heartbeat
        self.leave_group = membership.leave_group
        self.describe_groups = admin.describe_groups
        self.list_groups = admin.list_groups
        self.validate_delete_group = admin.validate_delete_group
        self.create_group_tombstone_records = admin.create_group_tombstone_records
        self.maybe_delete_group = admin.maybe_delete_group
        # The classic side of an online migration to and from a consumer group.
        self.migration = ClassicGroupMigration(self, rebalance)

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

    def validate_transactional_offset_commit(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
    ) -> ApiError | None:
        """Kafka's checks of a TxnOffsetCommit: an OffsetCommit's, except that an unknown
        group with a non-negative generation is ILLEGAL_GENERATION, and that the group's
        state is not enforced."""
        group = self.by_id.get(group_id)
        if group is None:
            if generation_id < 0:
                refusal = self.new_group_refusal()
                return None if refusal is None else PolicyViolationError(refusal)
            return IllegalGenerationError(f"group {group_id} does not exist")
        # ClassicGroup.validate_offset_commit without its two checks of the group's state: a
        # commit without member id is accepted from a group with members (TxnOffsetCommit's
        # older versions carry none), and one during CompletingRebalance too.
        if group.state is ClassicGroupState.DEAD:
            return CoordinatorNotAvailableError(f"group {group_id} is dead")
        if generation_id < 0 and group.state is ClassicGroupState.EMPTY:
            return None
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return IllegalGenerationError(
                    f"generation {generation_id} is not group {group_id}'s "
                    f"generation {group.generation_id}"
                )
        return None

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
