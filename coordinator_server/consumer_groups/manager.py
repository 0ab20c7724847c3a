"""The consumer groups of one log partition, as the log rebuilds them: the replay half of
Kafka's GroupMetadataManager for the consumer group records (types 9 to 14).

The shard hands every consumer group record to `replay`, live and on load. A record of a
group that does not exist creates it, a tombstone of one that does not exist is ignored,
and the group's metadata tombstone removes it once its members and target assignment are
gone (Kafka's order of a deletion's tombstones); a log that breaks Kafka's order raises
ConsumerGroupReplayError.

`heartbeat` is the write half for ConsumerGroupHeartbeat (Kafka's `consumerGroupHeartbeat`):
it changes nothing itself and answers the records that `replay` turns into the group's next
state, with the response to give once they are committed. Session and rebalance timeouts
are not armed by it: those timers are a later step.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from coordinator_protocol.consumer_groups import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import (
    ApiError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    UnknownMemberIdError,
    UnknownServerError,
    UnreleasedInstanceIdError,
)
from coordinator_server.consumer_groups.assignors.api import (
    PartitionAssignorError,
    SubscribedTopicMetadata,
)
from coordinator_server.consumer_groups.current_assignment import CurrentAssignmentBuilder
from coordinator_server.consumer_groups.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    NO_ASSIGNMENT_EPOCH,
    ConsumerGroup,
    ConsumerGroupReplayError,
    ConsumerGroupState,
    ResolvedRegularExpression,
    member_with_assignment,
    member_with_metadata,
    partitions_from_record,
)
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopics,
    ConsumerGroupConfig,
    check_member_epoch,
    current_assignment_record,
    is_leave_epoch,
    member_metadata_record,
    member_removal_records,
    owned_partitions,
    response_assignment,
    validate_heartbeat,
)
from coordinator_server.consumer_groups.member import (
    EMPTY_TOPIC_PARTITIONS,
    ConsumerGroupMember,
    ReconciliationState,
    topic_partitions,
)
from coordinator_server.consumer_groups.target_assignment import (
    TargetAssignmentBuilder,
    record_partitions,
    resolve_subscription,
)
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_metadata_record,
    new_consumer_group_target_assignment_member_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecordKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

HeartbeatResult = CoordinatorResult[ConsumerGroupHeartbeatResponse]


class ConsumerGroupManager:
    """The partition's consumer groups by id, in a TimelineDict: a group created or
    removed by a failed write's replay comes back as it was."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        max_size: int,
        config: ConsumerGroupConfig | None = None,
    ) -> None:
        self._registry = registry
        # The group limits' largest group, for the requests that add members.
        self.max_size = max_size
        self.config = config if config is not None else ConsumerGroupConfig()
        self._groups: TimelineDict[str, ConsumerGroup] = TimelineDict(registry)

    def group(self, group_id: str, committed_offset: int | None = None) -> ConsumerGroup | None:
        if committed_offset is None:
            return self._groups.get(group_id)
        return self._groups.get_at(group_id, committed_offset)

    def group_ids(self) -> list[str]:
        return list(self._groups.keys())

    def num_groups(self) -> int:
        return len(self._groups)

    def num_members(self) -> int:
        return sum(group.num_members() for group in self._groups.values())

    def count_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for group in self._groups.values():
            name = group.state().value
            counts[name] = counts.get(name, 0) + 1
        return counts

    # ConsumerGroupHeartbeat (Kafka's consumerGroupHeartbeat and its helpers).

    def heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        *,
        client_id: str,
        client_host: str,
        topics: ClusterTopics,
        now_ms: int,
    ) -> HeartbeatResult:
        """One heartbeat: a join (epoch 0), a leave (-1, or -2 for a static member that
        comes back), or a member's regular heartbeat. Returns the records that make the
        change and the answer; an error is an answer with no record, the group unchanged."""
        try:
            validate_heartbeat(request, self.config)
            if is_leave_epoch(request.member_epoch):
                return self._leave(request)
            return self._heartbeat(request, client_id, client_host, topics, now_ms)
        except ApiError as error:
            return CoordinatorResult(
                response=ConsumerGroupHeartbeatResponse(
                    error_code=error.code, error_message=error.message
                )
            )

    def _heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        client_id: str,
        client_host: str,
        topics: ClusterTopics,
        now_ms: int,
    ) -> HeartbeatResult:
        group_id = request.group_id
        assert group_id, "validated"
        member_id = request.member_id
        epoch = request.member_epoch
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        records: list[CoordinatorRecord] = []

        found = self._groups.get(group_id)
        if found is None and not joining:
            raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
        # A group that does not exist yet is read as an empty one, on a registry of its own:
        # only the replay of this heartbeat's records creates it.
        group = found if found is not None else ConsumerGroup(SnapshotRegistry(), group_id)
        max_size = min(self.max_size, self.config.max_size)
        if group.num_members() >= max_size and group.member(member_id) is None:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {max_size} members."
            )

        owned = (
            None if request.topic_partitions is None else owned_partitions(request.topic_partitions)
        )
        member, replaced_member_id = self._member_of_heartbeat(
            group, request, owned, joining, records
        )

        updated = member.maybe_update(
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=(
                None if request.rebalance_timeout_ms == -1 else request.rebalance_timeout_ms
            ),
            subscribed_topic_names=request.subscribed_topic_names,
            subscribed_topic_regex=request.subscribed_topic_regex,
            server_assignor=request.server_assignor,
        ).replace(client_id=client_id, client_host=client_host)

        # A new group must move away from epoch 0, whatever its first member subscribes to.
        bump_group_epoch = group.group_epoch() == 0
        subscription_changed = False
        if updated != member:
            records.append(member_metadata_record(group_id, updated))
            if updated.subscribed_topic_names != member.subscribed_topic_names:
                bump_group_epoch = subscription_changed = True
        regex = updated.subscribed_topic_regex
        if regex != member.subscribed_topic_regex:
            subscription_changed = True
            # A regex the group has already resolved moves the target at once; one it has
            # not is left to the resolution of regular expressions.
            if regex and group.resolved_regular_expression(regex) is not None:
                bump_group_epoch = True

        group_epoch = group.group_epoch()
        if bump_group_epoch:
            group_epoch += 1
            records.append(
                new_consumer_group_metadata_record(
                    group_id, ConsumerGroupMetadataValue(group_epoch)
                )
            )

        if group_epoch > group.target_assignment_epoch():
            target = self._update_target_assignment(
                group, group_epoch, updated, replaced_member_id, topics, now_ms, records
            )
            target_epoch = group_epoch
        else:
            target_epoch = group.target_assignment_epoch()
            target = group.target_assignment(updated.member_id)
            if not target and replaced_member_id is not None:
                target = group.target_assignment(replaced_member_id)

        reconciled = updated
        if subscription_changed or not (
            updated.state is ReconciliationState.STABLE and updated.member_epoch == target_epoch
        ):
            reconciled = CurrentAssignmentBuilder(
                member=updated,
                target_assignment_epoch=target_epoch,
                target_assignment=target,
                current_partition_epoch=group.current_partition_epoch,
                subscribed_topic_ids=self._subscribed_topic_ids(group, updated, topics),
                owned_topic_partitions=owned,
                has_subscription_changed=subscription_changed,
            ).build()
            if reconciled != updated:
                records.append(current_assignment_record(group_id, reconciled))

        # The assignment is sent to a full request (a join, or a member that lost track and
        # sends every field) and whenever it changed.
        full_request = joining or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.topic_partitions is not None
        )
        changed = reconciled.assigned_partitions != member.assigned_partitions
        return CoordinatorResult(
            records=records,
            response=ConsumerGroupHeartbeatResponse(
                member_id=reconciled.member_id,
                member_epoch=reconciled.member_epoch,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
                assignment=(
                    response_assignment(reconciled.assigned_partitions, topics)
                    if full_request or changed
                    else None
                ),
            ),
        )

    def _member_of_heartbeat(
        self,
        group: ConsumerGroup,
        request: ConsumerGroupHeartbeatRequest,
        owned: dict[TopicId, frozenset[int]] | None,
        joining: bool,
        records: list[CoordinatorRecord],
    ) -> tuple[ConsumerGroupMember, str | None]:
        """The member the heartbeat is from, created when it joins, and the member id of
        the static member it replaces, if any (Kafka's
        `getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember`)."""
        group_id = group.group_id
        member_id = request.member_id
        instance_id = request.instance_id
        if instance_id is None:
            member = group.member(member_id)
            if member is None:
                if not joining:
                    raise UnknownMemberIdError(
                        f"Member {member_id} is not a member of group {group_id}."
                    )
                return ConsumerGroupMember(member_id), None
            check_member_epoch(member, request.member_epoch, owned)
            return member, None

        static_member_id = group.static_member_id(instance_id)
        static = None if static_member_id is None else group.member(static_member_id)
        if not joining:
            if static is None:
                raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
            if static.member_id != member_id:
                raise FencedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} was fenced by "
                    f"member {static.member_id}."
                )
            check_member_epoch(static, request.member_epoch, owned)
            return static, None
        if static is None:
            return group.member(member_id) or ConsumerGroupMember(member_id), None
        if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise UnreleasedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} cannot join the "
                f"group because the instance id is owned by {static.member_id} member."
            )
        # The instance comes back: a copy of the departed member under the new member id,
        # keeping its partitions and its target, so that nothing moves (Kafka's
        # `replaceMember`).
        member = static.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
        records.extend(member_removal_records(group_id, static.member_id))
        records.append(member_metadata_record(group_id, member))
        records.append(
            new_consumer_group_target_assignment_member_record(
                group_id,
                member_id,
                ConsumerGroupTargetAssignmentMemberValue(
                    record_partitions(group.target_assignment(static.member_id))
                ),
            )
        )
        records.append(current_assignment_record(group_id, member))
        return member, static.member_id

    def _update_target_assignment(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        updated: ConsumerGroupMember,
        replaced_member_id: str | None,
        topics: ClusterTopics,
        now_ms: int,
        records: list[CoordinatorRecord],
    ) -> TopicPartitions:
        """The group's new target at `group_epoch`, its records appended to `records`, and
        the updated member's part of it (Kafka's `updateTargetAssignment`)."""
        members = group.members()
        updated_members: dict[str, ConsumerGroupMember | None] = {updated.member_id: updated}
        if replaced_member_id is not None and replaced_member_id != updated.member_id:
            updated_members[replaced_member_id] = None
        after = {**members, **updated_members}
        subscribed: dict[str, Set[TopicId]] = {}
        partition_counts: dict[TopicId, int] = {}
        for member_id, member in after.items():
            if member is None:
                continue
            topic_ids = self._subscribed_topic_ids(group, member, topics, partition_counts)
            subscribed[member_id] = topic_ids
        # A member's assignor no longer configured (the log may be older than the
        # configuration) counts for none.
        assignor_name = _preferred_assignor(
            (
                member
                for member in after.values()
                if member is not None and member.server_assignor in self.config.assignors
            ),
            self.config.default_assignor,
        )
        builder = TargetAssignmentBuilder(
            group_id=group.group_id,
            group_epoch=group_epoch,
            assignor=self.config.assignors[assignor_name],
            members=members,
            target_assignment=group.target_assignments(),
            subscribed_topic_ids=subscribed,
            topics=SubscribedTopicMetadata(partition_counts),
            updated_members=updated_members,
            static_members=group.static_members(),
            assignment_timestamp_ms=now_ms,
        )
        try:
            result = builder.build()
        except PartitionAssignorError as error:
            raise UnknownServerError(
                f"Failed to compute a new target assignment for epoch {group_epoch}: {error}."
            ) from error
        records.extend(result.records)
        assignment = result.target_assignment.get(updated.member_id)
        return (
            EMPTY_TOPIC_PARTITIONS
            if assignment is None
            else topic_partitions(assignment.partitions)
        )

    def _subscribed_topic_ids(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        topics: ClusterTopics,
        partition_counts: dict[TopicId, int] | None = None,
    ) -> frozenset[TopicId]:
        """The ids of the cluster's topics `member` subscribes to, by name or through a
        regular expression the group has resolved; their partition counts are added to
        `partition_counts` when given."""
        names: set[str] = set(member.subscribed_topic_names)
        regexes: dict[str, frozenset[str]] = {}
        if member.subscribed_topic_regex:
            resolved = group.resolved_regular_expression(member.subscribed_topic_regex)
            if resolved is not None:
                regexes[member.subscribed_topic_regex] = resolved.topics
                names |= resolved.topics
        topic_ids: dict[str, TopicId] = {}
        for name in names:
            topic = topics.topic(name)
            if topic is not None:
                topic_ids[name] = topic.topic_id
                if partition_counts is not None:
                    partition_counts[topic.topic_id] = topic.partition_count
        return resolve_subscription(member, topic_ids, regexes)

    def _leave(self, request: ConsumerGroupHeartbeatRequest) -> HeartbeatResult:
        """A member leaves for good (-1), or a static member for a while (-2) (Kafka's
        `consumerGroupLeave`)."""
        group_id = request.group_id
        assert group_id, "validated"
        member_id = request.member_id
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
        response = ConsumerGroupHeartbeatResponse(
            member_id=member_id, member_epoch=request.member_epoch
        )
        instance_id = request.instance_id
        if instance_id is None:
            member = group.member(member_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"Member {member_id} is not a member of group {group_id}."
                )
            return self._fence_member(group, member, response)
        static_member_id = group.static_member_id(instance_id)
        static = None if static_member_id is None else group.member(static_member_id)
        if static is None:
            raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
        if static.member_id != member_id:
            raise FencedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {static.member_id}."
            )
        if request.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return self._fence_member(group, static, response)
        # The static member keeps its partitions and its target while it is away, so that
        # its return moves nothing; the group's epoch stays.
        away = static.replace(
            member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            partitions_pending_revocation=EMPTY_TOPIC_PARTITIONS,
        )
        return CoordinatorResult(
            records=[current_assignment_record(group_id, away)], response=response
        )

    def _fence_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        response: ConsumerGroupHeartbeatResponse,
    ) -> HeartbeatResult:
        """The member's removal and the group's epoch bumped, so that the next heartbeat
        computes a target without it (Kafka's `consumerGroupFenceMember`)."""
        records = member_removal_records(group.group_id, member.member_id)
        records.append(
            new_consumer_group_metadata_record(
                group.group_id, ConsumerGroupMetadataValue(group.group_epoch() + 1)
            )
        )
        return CoordinatorResult(records=records, response=response)

    def replay(self, key: ConsumerGroupRecordKey, value: object | None) -> None:
        """One consumer group record, `value` None for a tombstone."""
        if type(key) is ConsumerGroupMetadataKey:
            assert value is None or type(value) is ConsumerGroupMetadataValue
            self._replay_group_metadata(key, value)
        elif type(key) is ConsumerGroupMemberMetadataKey:
            assert value is None or type(value) is ConsumerGroupMemberMetadataValue
            self._replay_member_metadata(key, value)
        elif type(key) is ConsumerGroupTargetAssignmentMetadataKey:
            assert value is None or type(value) is ConsumerGroupTargetAssignmentMetadataValue
            self._replay_target_assignment_metadata(key, value)
        elif type(key) is ConsumerGroupTargetAssignmentMemberKey:
            assert value is None or type(value) is ConsumerGroupTargetAssignmentMemberValue
            self._replay_target_assignment_member(key, value)
        elif type(key) is ConsumerGroupCurrentMemberAssignmentKey:
            assert value is None or type(value) is ConsumerGroupCurrentMemberAssignmentValue
            self._replay_current_assignment(key, value)
        elif type(key) is ConsumerGroupRegularExpressionKey:
            assert value is None or type(value) is ConsumerGroupRegularExpressionValue
            self._replay_regular_expression(key, value)
        else:
            raise ValueError(f"not a consumer group record key: {key!r}")

    def _group_or_create(self, group_id: str) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if group is None:
            group = ConsumerGroup(self._registry, group_id)
            self._groups[group_id] = group
        return group

    def _replay_group_metadata(
        self, key: ConsumerGroupMetadataKey, value: ConsumerGroupMetadataValue | None
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).set_group_epoch(value.epoch)
            return
        group = self._groups.get(key.group)
        if group is None:
            return
        if group.num_members():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes group {key.group}, which still has "
                f"{group.num_members()} members"
            )
        if group.target_assignments():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes group {key.group}, whose target assignment still has "
                f"{len(group.target_assignments())} members"
            )
        if group.target_assignment_epoch() != NO_ASSIGNMENT_EPOCH:
            raise ConsumerGroupReplayError(
                f"a tombstone deletes group {key.group} before its target assignment "
                "metadata's tombstone"
            )
        group.mark_dead()
        self._groups.pop(key.group)

    def _replay_member_metadata(
        self, key: ConsumerGroupMemberMetadataKey, value: ConsumerGroupMemberMetadataValue | None
    ) -> None:
        if value is not None:
            group = self._group_or_create(key.group)
            member = group.member(key.member_id) or ConsumerGroupMember(key.member_id)
            group.update_member(member_with_metadata(member, value))
            return
        found = self._groups.get(key.group)
        leaving = None if found is None else found.member(key.member_id)
        if found is None or leaving is None:
            return
        if leaving.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
            raise ConsumerGroupReplayError(
                f"a tombstone deletes member {key.member_id} of group {key.group} before its "
                "current assignment's tombstone"
            )
        if key.member_id in found.target_assignments():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes member {key.member_id} of group {key.group} before its "
                "target assignment's tombstone"
            )
        found.remove_member(key.member_id)

    def _replay_target_assignment_metadata(
        self,
        key: ConsumerGroupTargetAssignmentMetadataKey,
        value: ConsumerGroupTargetAssignmentMetadataValue | None,
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).set_target_assignment_epoch(value.assignment_epoch)
            return
        group = self._groups.get(key.group)
        if group is None:
            return
        if group.target_assignments():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes the target assignment of group {key.group}, which still "
                f"has {len(group.target_assignments())} members"
            )
        group.set_target_assignment_epoch(NO_ASSIGNMENT_EPOCH)

    def _replay_target_assignment_member(
        self,
        key: ConsumerGroupTargetAssignmentMemberKey,
        value: ConsumerGroupTargetAssignmentMemberValue | None,
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).update_target_assignment(
                key.member_id, partitions_from_record(value.partitions)
            )
            return
        group = self._groups.get(key.group)
        if group is not None:
            group.remove_target_assignment(key.member_id)

    def _replay_current_assignment(
        self,
        key: ConsumerGroupCurrentMemberAssignmentKey,
        value: ConsumerGroupCurrentMemberAssignmentValue | None,
    ) -> None:
        if value is not None:
            # Kafka creates the member here too: compaction may have kept this record of a
            # member whose metadata record is later in the log.
            group = self._group_or_create(key.group)
            member = group.member(key.member_id) or ConsumerGroupMember(key.member_id)
            group.update_member(member_with_assignment(member, value))
            return
        found = self._groups.get(key.group)
        leaving = None if found is None else found.member(key.member_id)
        if found is None or leaving is None:
            return
        # The member has left: it holds nothing, and its metadata's tombstone may follow.
        found.update_member(
            leaving.replace(
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned_partitions=EMPTY_TOPIC_PARTITIONS,
                partitions_pending_revocation=EMPTY_TOPIC_PARTITIONS,
            )
        )

    def _replay_regular_expression(
        self,
        key: ConsumerGroupRegularExpressionKey,
        value: ConsumerGroupRegularExpressionValue | None,
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).update_resolved_regular_expression(
                key.regular_expression,
                ResolvedRegularExpression(
                    frozenset(value.topics), value.version, value.timestamp_ms
                ),
            )
            return
        group = self._groups.get(key.group)
        if group is not None:
            group.update_resolved_regular_expression(key.regular_expression, None)


def _preferred_assignor(members: Iterable[ConsumerGroupMember], default: str) -> str:
    """The assignor most members name, the default when none names one (Kafka's
    `computePreferredServerAssignor`); a tie goes to the first name in order, so that
    every replica of the group picks the same."""
    counts: dict[str, int] = {}
    for member in members:
        if member.server_assignor is not None:
            counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
    if not counts:
        return default
    return min(counts, key=lambda name: (-counts[name], name))


__all__ = ["ConsumerGroupManager", "ConsumerGroupState", "HeartbeatResult"]
