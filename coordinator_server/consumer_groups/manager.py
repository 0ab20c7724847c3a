"""The consumer groups of one log partition: Kafka's GroupMetadataManager for consumer groups
(KIP-848). The shard hands every consumer group record to `replay`, live and on load, which
`ConsumerGroupRecords` (replay.py) applies.

`heartbeat` is the write half for ConsumerGroupHeartbeat (Kafka's `consumerGroupHeartbeat`):
it changes nothing itself and answers the records that `replay` turns into the group's next
state, with the response to give once they are committed. It arms the member's timers
(`ConsumerGroupTimeouts`): its session, its rebalance timeout while it must revoke, and the
group's deferred target assignment when one was computed less than
`group.consumer.assignment.interval.ms` ago (Kafka's batching of assignments for busy groups:
joins and leaves within an interval share one computation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence, Set
from typing import TypeVar

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
from coordinator_server.consumer_groups.assignors import preferred_assignor
from coordinator_server.consumer_groups.assignors.api import PartitionAssignorError
from coordinator_server.consumer_groups.current_assignment import CurrentAssignmentBuilder
from coordinator_server.consumer_groups.group import (
    ConsumerGroup,
    ConsumerGroupState,
)
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopics,
    ConsumerGroupConfig,
    check_member_epoch,
    current_assignment_record,
    is_leave_epoch,
    member_metadata_record,
    member_removal_records,
    no_cluster_topics,
    owned_partitions,
    replace_member,
    response_assignment,
    subscribed_topic_metadata,
    validate_heartbeat,
)
from coordinator_server.consumer_groups.intervals import heartbeat_interval_ms
from coordinator_server.consumer_groups.member import (
    EMPTY_TOPIC_PARTITIONS,
    ConsumerGroupMember,
    ReconciliationState,
    topic_partitions,
)
from coordinator_server.consumer_groups.metadata_hash import subscribed_topics_hash
from coordinator_server.consumer_groups.migration import Downgrade, downgrade_allowed
from coordinator_server.consumer_groups.regex import (
    NO_REGEX_UPDATE,
    DeniedTopics,
    RegexUpdate,
    TopicRegexMatcher,
    nothing_denied,
    unused_regex_tombstones,
    update_regular_expressions,
)
from coordinator_server.consumer_groups.replay import ConsumerGroupRecords
from coordinator_server.consumer_groups.subscriptions import (
    subscribed_names_after as _subscribed_names_after,
)
from coordinator_server.consumer_groups.target_assignment import (
    TargetAssignmentBuilder,
    resolve_subscription,
)
from coordinator_server.consumer_groups.timeouts import ConsumerGroupTimeouts
from coordinator_server.consumer_groups.tombstones import group_tombstone_records
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_metadata_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupMetadataValue,
    ConsumerGroupRecordKey,
)
from coordinator_server.runtime.api import Clock, CoordinatorResult, CoordinatorTimer
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

HeartbeatResult = CoordinatorResult[ConsumerGroupHeartbeatResponse]

R = TypeVar("R")


_NOTHING: CoordinatorResult[None] = CoordinatorResult()


class ConsumerGroupManager:
    """The partition's consumer groups by id, in a TimelineDict: a group created or
    removed by a failed write's replay comes back as it was."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        max_size: int,
        config: ConsumerGroupConfig | None = None,
        *,
        timer: CoordinatorTimer | None = None,
        clock: Clock | None = None,
        topics: Callable[[], ClusterTopics] | None = None,
        downgrade: Downgrade | None = None,
    ) -> None:
        """`timer` arms sessions, rebalance timeouts and deferred assignments (None: none
        is armed, for tests of one heartbeat); `clock` is what the timers' operations read
        the time from; `topics` gives the data cluster's topics as they are now, for the
        operations no request carries them to; `downgrade` converts a group back into a
        classic group (None: no group is, whatever the migration policy)."""
        self._downgrade = downgrade
        self._registry = registry
        # The group limits' largest group, for the requests that add members.
        self.max_size = max_size
        self.config = config = config if config is not None else ConsumerGroupConfig()
        self._groups: TimelineDict[str, ConsumerGroup] = TimelineDict(registry)
        self._records = ConsumerGroupRecords(registry, self._groups)
        self._clock = clock
        self._topics = topics or no_cluster_topics
        self._regex_matcher = TopicRegexMatcher(
            config.regex_cache_max_patterns, config.regex_max_memory_bytes
        )
        self._timeouts = ConsumerGroupTimeouts(
            timer,
            session_timeout_ms=config.session_timeout_ms,
            expire_session=self._expire_session,
            expire_rebalance=self._expire_rebalance,
            assign=self._assign_deferred,
        )

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

    def delete_group_records(self, group_id: str) -> list[CoordinatorRecord]:
        """The tombstones that delete the group (`group_tombstone_records`); none when the
        group does not exist. Whether it may be deleted is the caller's to check
        (DeleteGroups and the offset expiration delete only a group without members)."""
        group = self._groups.get(group_id)
        return [] if group is None else group_tombstone_records(group)

    # ConsumerGroupHeartbeat (Kafka's consumerGroupHeartbeat and its helpers).

    def heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        *,
        client_id: str,
        client_host: str,
        topics: ClusterTopics,
        now_ms: int,
        converted: ConsumerGroup | None = None,
        denied_topics: DeniedTopics = nothing_denied,
    ) -> HeartbeatResult:
        """One heartbeat: a join (epoch 0), a leave (-1, or -2 for a static member that
        comes back), or a member's regular heartbeat. Returns the records that make the
        change and the answer; an error is an answer with no record, the group unchanged.
        `converted`: the group an online upgrade makes of a classic group (migration.py),
        which a join joins before its records are written. `denied_topics`: the topics the
        request's principal may not describe, which its resolutions of the group's regular
        expressions leave out (the default: an authorizer is not set)."""
        try:
            steady = self._steady_heartbeat(request, client_id, client_host, topics)
            if steady is not None:
                return steady
            validate_heartbeat(request, self.config)
            if is_leave_epoch(request.member_epoch):
                return self._leave(request, now_ms)
            return self._heartbeat(
                request, client_id, client_host, topics, now_ms, converted, denied_topics
            )
        except ApiError as error:
            return CoordinatorResult(
                response=ConsumerGroupHeartbeatResponse(
                    error_code=error.code, error_message=error.message
                )
            )

    def _steady_heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        client_id: str,
        client_host: str,
        topics: ClusterTopics,
    ) -> HeartbeatResult | None:
        """The answer to the heartbeat of a member that has reached its group's target and
        says nothing new, None for any other heartbeat. Most heartbeats are this one: it
        writes nothing and answers nothing but the epoch, so it is answered without building
        the member again (what the full path would conclude, at a tenth of its cost). A
        member subscribed by regular expression takes the full path, which keeps the
        resolution of its expression current."""
        group_id = request.group_id
        group = None if group_id is None else self._groups.get(group_id)
        if group is None or group.checked_topics is not topics:
            return None
        member_id = request.member_id
        member = group.member(member_id)
        if (
            member is None
            or request.member_epoch != member.member_epoch
            or member.state is not ReconciliationState.STABLE
            or member.subscribed_topic_regex
            or member.use_classic_protocol
            or request.topic_partitions is not None
            or request.subscribed_topic_names is not None
            or request.subscribed_topic_regex is not None
            or request.instance_id is not None
            or request.rack_id is not None
            or request.server_assignor is not None
            or request.rebalance_timeout_ms != -1
            or member.client_id != client_id
            or member.client_host != client_host
        ):
            return None
        epoch = member.member_epoch
        if epoch != group.target_assignment_epoch() or epoch != group.group_epoch():
            return None
        assert group_id is not None
        self._timeouts.session(group_id, member_id)
        return CoordinatorResult(
            response=ConsumerGroupHeartbeatResponse(
                member_id=member_id,
                member_epoch=epoch,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            )
        )

    def _heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        client_id: str,
        client_host: str,
        topics: ClusterTopics,
        now_ms: int,
        converted: ConsumerGroup | None,
        denied_topics: DeniedTopics,
    ) -> HeartbeatResult:
        group_id = request.group_id
        assert group_id, "validated"
        member_id = request.member_id
        epoch = request.member_epoch
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        records: list[CoordinatorRecord] = []

        found = self._groups.get(group_id) or converted
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
            # A classic member that heartbeats with this protocol speaks it from now on.
        ).replace(client_id=client_id, client_host=client_host, classic_member_metadata=None)

        reconciled, assignment_deferred = self.apply_member(
            group,
            member,
            updated,
            replaced_member_id,
            owned,
            topics,
            now_ms,
            records,
            denied_topics,
        )
        if replaced_member_id is not None:
            self._timeouts.cancel(group_id, replaced_member_id)
        self._timeouts.session(group_id, reconciled.member_id)

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
                heartbeat_interval_ms=heartbeat_interval_ms(
                    group, reconciled, assignment_deferred, now_ms, self.config
                ),
                assignment=(
                    response_assignment(reconciled.assigned_partitions, topics)
                    if full_request or changed
                    else None
                ),
            ),
        )

    def apply_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        replaced_member_id: str | None,
        owned: dict[TopicId, frozenset[int]] | None,
        topics: ClusterTopics,
        now_ms: int,
        records: list[CoordinatorRecord],
        denied_topics: DeniedTopics | None,
    ) -> tuple[ConsumerGroupMember, bool]:
        """The records that take `member` (new, or of the group) to `updated`, appended to
        `records`: its metadata, the group's epoch bumped for a new subscription or metadata
        hash, the group's target recomputed (or deferred), and the member reconciled with
        it, given the partitions it says it owns (`owned`). Returns the reconciled member,
        and whether the group's target waits for its deferred computation. Shared by the
        heartbeat and by a classic member's JoinGroup (classic_members.py), which passes no
        `denied_topics` and so resolves no regular expression (`update_regular_expressions`)."""
        group_id = group.group_id

        # A new group must move away from epoch 0, whatever its first member subscribes to.
        bump_group_epoch = group.group_epoch() == 0
        subscription_changed = False
        if updated != member:
            records.append(member_metadata_record(group_id, updated))
            if updated.subscribed_topic_names != member.subscribed_topic_names:
                bump_group_epoch = subscription_changed = True
        # The member's regex checked, dropped or resolved, and the group's resolutions
        # refreshed when due: their records replay before the group's epoch record.
        regexes = update_regular_expressions(
            group, member, updated, topics, now_ms, self.config, self._regex_matcher, denied_topics
        )
        records.extend(regexes.records)
        subscription_changed = subscription_changed or regexes.regex_changed
        bump_group_epoch = bump_group_epoch or regexes.bump_group_epoch

        # The topics the group subscribes to changed in the cluster (created, deleted,
        # grown), or the subscription did: a new metadata hash moves the group on, so that
        # its target is computed for what the cluster has now (KIP-1101). A group checks
        # once per snapshot of the cluster's topics, not at every heartbeat.
        metadata_hash = group.metadata_hash()
        if subscription_changed or regexes.changes or group.checked_topics is not topics:
            # A static member that comes back replaces its departed self, in the group under
            # its old member id.
            before = group.member(
                member.member_id if replaced_member_id is None else replaced_member_id
            )
            new_hash = subscribed_topics_hash(
                _subscribed_names_after(group, before, updated, regexes), topics
            )
            if new_hash != metadata_hash:
                metadata_hash = new_hash
                bump_group_epoch = True
            elif not subscription_changed:
                # Only a check that changes nothing is remembered: one whose bump is lost
                # with a failed write is made again at the next heartbeat.
                group.checked_topics = topics

        group_epoch = group.group_epoch()
        if bump_group_epoch:
            group_epoch += 1
            records.append(
                new_consumer_group_metadata_record(
                    group_id, ConsumerGroupMetadataValue(group_epoch, metadata_hash)
                )
            )

        target_epoch = group.target_assignment_epoch()
        if group_epoch > target_epoch and self._may_assign(group, now_ms):
            target = self._update_target_assignment(
                group, group_epoch, updated, replaced_member_id, topics, now_ms, records, regexes
            )
            target_epoch = group_epoch
        else:
            if group_epoch > target_epoch:
                # Computed less than an interval ago: this change waits for the next
                # computation, with every other change until then, and the member
                # reconciles toward the target in force meanwhile.
                self._timeouts.assignment(
                    group_id,
                    group.assignment_timestamp_ms() + self.config.assignment_interval_ms - now_ms,
                )
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
                subscribed_topic_ids=self._subscribed_topic_ids(
                    group, updated, topics, regexes=regexes
                ),
                owned_topic_partitions=owned,
                has_subscription_changed=subscription_changed,
            ).build()
            if reconciled != updated:
                records.append(current_assignment_record(group_id, reconciled))
                # A classic member is held to its join and sync timeouts instead.
                if reconciled.use_classic_protocol:
                    pass
                elif reconciled.state is ReconciliationState.UNREVOKED_PARTITIONS:
                    self._timeouts.rebalance(
                        group_id,
                        reconciled.member_id,
                        reconciled.member_epoch,
                        reconciled.rebalance_timeout_ms,
                    )
                else:
                    self._timeouts.cancel_rebalance(group_id, reconciled.member_id)
        return reconciled, group_epoch > target_epoch

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
        # A classic member's instance is taken over at once (Kafka checks the release only
        # between two members on this protocol).
        if (
            static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
            and not static.use_classic_protocol
        ):
            raise UnreleasedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} cannot join the "
                f"group because the instance id is owned by {static.member_id} member."
            )
        # The instance comes back under the new member id, in its departed self's place.
        member = replace_member(
            group.group_id,
            static,
            member_id,
            group.target_assignment(static.member_id),
            records,
        )
        return member, static.member_id

    def _update_target_assignment(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        updated: ConsumerGroupMember | None,
        replaced_member_id: str | None,
        topics: ClusterTopics,
        now_ms: int,
        records: list[CoordinatorRecord],
        regexes: RegexUpdate = NO_REGEX_UPDATE,
    ) -> TopicPartitions:
        """The group's new target at `group_epoch`, its records appended to `records`, and
        the updated member's part of it (Kafka's `updateTargetAssignment`). `regexes`: the
        resolutions the same write changes."""
        members = group.members()
        updated_members: dict[str, ConsumerGroupMember | None] = {}
        if updated is not None:
            updated_members[updated.member_id] = updated
        if replaced_member_id is not None and (
            updated is None or replaced_member_id != updated.member_id
        ):
            updated_members[replaced_member_id] = None
        after = {**members, **updated_members}
        subscribed: dict[str, Set[TopicId]] = {}
        partition_counts: dict[TopicId, int] = {}
        for member_id, member in after.items():
            if member is None:
                continue
            topic_ids = self._subscribed_topic_ids(group, member, topics, partition_counts, regexes)
            subscribed[member_id] = topic_ids
        # A member's assignor no longer configured (the log may be older than the
        # configuration) counts for none.
        assignor_name = preferred_assignor(
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
            topics=subscribed_topic_metadata(topics, partition_counts),
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
        if updated is None:
            return EMPTY_TOPIC_PARTITIONS
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
        regexes: RegexUpdate = NO_REGEX_UPDATE,
    ) -> frozenset[TopicId]:
        """The ids of the cluster's topics `member` subscribes to, by name or through a
        regular expression the group has resolved (or `regexes` resolves); their partition
        counts are added to `partition_counts` when given."""
        names: set[str] = set(member.subscribed_topic_names)
        resolved_regexes: dict[str, frozenset[str]] = {}
        if member.subscribed_topic_regex:
            matched = regexes.topics(group, member.subscribed_topic_regex)
            if matched is not None:
                resolved_regexes[member.subscribed_topic_regex] = matched
                names |= matched
        topic_ids: dict[str, TopicId] = {}
        for name in names:
            topic = topics.topic(name)
            if topic is not None:
                topic_ids[name] = topic.topic_id
                if partition_counts is not None:
                    partition_counts[topic.topic_id] = topic.partition_count
        return resolve_subscription(member, topic_ids, resolved_regexes)

    def _leave(self, request: ConsumerGroupHeartbeatRequest, now_ms: int) -> HeartbeatResult:
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
            return self._fenced(group, member, now_ms, response)
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
            return self._fenced(group, static, now_ms, response)
        # The static member keeps its partitions and its target while it is away, so that
        # its return moves nothing; the group's epoch stays.
        away = static.replace(
            member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            partitions_pending_revocation=EMPTY_TOPIC_PARTITIONS,
        )
        return CoordinatorResult(
            records=[current_assignment_record(group_id, away)], response=response
        )

    def _fenced(
        self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int, response: R
    ) -> CoordinatorResult[R]:
        """The member fenced, or the group downgraded to a classic group as it goes."""
        downgraded = self.maybe_downgrade(group, (member,), now_ms)
        if downgraded is None:
            return CoordinatorResult(self._fence_records(group, member, now_ms), response)
        return CoordinatorResult(downgraded.records, response, updates=downgraded.updates)

    def maybe_downgrade(
        self, group: ConsumerGroup, leaving: Sequence[ConsumerGroupMember], now_ms: int
    ) -> CoordinatorResult[None] | None:
        """The group converted to a classic group as the `leaving` members go, when the
        migration policy allows it and only classic members stay (Kafka's
        `validateOnlineDowngradeWithFencedMembers`, then `convertToClassicGroup`); None
        when it stays a consumer group."""
        downgrade = self._downgrade
        if downgrade is None or not downgrade_allowed(
            group, leaving, self.config.migration_policy, self.max_size
        ):
            return None
        return downgrade(group, leaving, now_ms)

    @property
    def timeouts(self) -> ConsumerGroupTimeouts:
        """The consumer groups' timers, for the requests of classic members."""
        return self._timeouts

    def _fence_records(
        self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int
    ) -> list[CoordinatorRecord]:
        """The member's removal and the group's epoch bumped, so that the group's next
        target leaves it out (Kafka's `consumerGroupFenceMember`): computed now if the
        interval allows, else by the deferred assignment. Its timers are cancelled."""
        group_id = group.group_id
        records = member_removal_records(group_id, member.member_id)
        records.extend(unused_regex_tombstones(group, (member,)))
        group_epoch = group.group_epoch() + 1
        topics = self._topics()
        records.append(
            new_consumer_group_metadata_record(
                group_id,
                ConsumerGroupMetadataValue(
                    group_epoch,
                    subscribed_topics_hash(_subscribed_names_after(group, member, None), topics),
                ),
            )
        )
        self._timeouts.cancel(group_id, member.member_id)
        if group.num_members() > 1 and self._may_assign(group, now_ms):
            self._update_target_assignment(
                group, group_epoch, None, member.member_id, topics, now_ms, records
            )
        elif group.num_members() > 1:
            self._timeouts.assignment(
                group_id,
                group.assignment_timestamp_ms() + self.config.assignment_interval_ms - now_ms,
            )
        return records

    # Timers (Kafka's scheduleConsumerGroupSessionTimeout, ...RebalanceTimeout, and the
    # assignment batching of KIP-1263).

    def _now_ms(self) -> int:
        clock = self._clock
        return 0 if clock is None else clock.now_ms()

    def _may_assign(self, group: ConsumerGroup, now_ms: int) -> bool:
        """Whether the group's target may be computed now: its last computation is at least
        `assignment_interval_ms` old (a new group's never was)."""
        interval_ms = self.config.assignment_interval_ms
        return interval_ms <= 0 or now_ms - group.assignment_timestamp_ms() >= interval_ms

    def _expire_session(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        """No heartbeat within the session timeout: the member is fenced."""
        group = self._groups.get(group_id)
        member = None if group is None else group.member(member_id)
        if group is None or member is None:
            return _NOTHING
        return self._fenced(group, member, self._now_ms(), None)

    def _expire_rebalance(
        self, group_id: str, member_id: str, member_epoch: int
    ) -> CoordinatorResult[None]:
        """The member did not revoke within its rebalance timeout: fenced, unless it has
        moved on since the timer was armed."""
        group = self._groups.get(group_id)
        member = None if group is None else group.member(member_id)
        if group is None or member is None or member.member_epoch != member_epoch:
            return _NOTHING
        return self._fenced(group, member, self._now_ms(), None)

    def _assign_deferred(self, group_id: str) -> CoordinatorResult[None]:
        """The deferred computation of a group's target, for every change since the last."""
        group = self._groups.get(group_id)
        if group is None or group.group_epoch() <= group.target_assignment_epoch():
            return _NOTHING
        records: list[CoordinatorRecord] = []
        self._update_target_assignment(
            group, group.group_epoch(), None, None, self._topics(), self._now_ms(), records
        )
        return CoordinatorResult(records)

    def on_loaded(self) -> None:
        """The partition is this node's: every member's session starts now, a member that
        must revoke gets its rebalance timeout again, and a group whose target is behind its
        epoch gets its deferred computation (Kafka's `onLoaded`)."""
        timeouts = self._timeouts
        for group_id, group in list(self._groups.items()):
            for member in group.members().values():
                timeouts.session(group_id, member.member_id)
                if member.state is ReconciliationState.UNREVOKED_PARTITIONS:
                    timeouts.rebalance(
                        group_id, member.member_id, member.member_epoch, member.rebalance_timeout_ms
                    )
            if group.group_epoch() > group.target_assignment_epoch():
                timeouts.assignment(group_id, 0)

    def replay(self, key: ConsumerGroupRecordKey, value: object | None) -> None:
        """One consumer group record, `value` None for a tombstone."""
        self._records.replay(key, value)

    def groups_at(self, committed_offset: int) -> Iterator[tuple[str, ConsumerGroup]]:
        """The groups as of `committed_offset`, a group deleted since included."""
        return self._groups.items_at(committed_offset)


__all__ = ["ConsumerGroupManager", "ConsumerGroupState", "HeartbeatResult"]
