"""A consumer group (KIP-848) as its records rebuild it: Kafka's `ConsumerGroup`.

The group's epoch, its target assignment (the epoch it was computed at and each member's
partitions), its members, and what is derived from them and kept current on every change
so that a heartbeat never scans the group: who owns each partition at which epoch, who is
given each partition by the target, the static members by instance id, how many members
subscribe to each topic name, and the group's state.

Everything sits in timeline collections on the shard's snapshot registry, so that a
failed write's records, replayed before the append, are undone with the rest of the
shard's state, and so that reads as of the committed offset see committed state only.

Replay follows Kafka's checks: a partition is owned by one member at a time, a member's
metadata tombstone comes after its current assignment's and target assignment's, and a
violation raises ConsumerGroupReplayError (the log does not describe a state Kafka's
coordinator could have written).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from coordinator_server.consumer_groups.current_assignment import NO_OWNER_EPOCH
from coordinator_server.consumer_groups.member import (
    EMPTY_TOPIC_PARTITIONS,
    ConsumerGroupMember,
    ReconciliationState,
    topic_partitions,
)
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    TopicIdPartitions,
)
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

V = TypeVar("V")

CONSUMER_PROTOCOL_TYPE = "consumer"
"""The classic protocol type of Kafka's consumers (`ConsumerProtocol.PROTOCOL_TYPE`): the one
type a classic member of a consumer group may have."""

LEAVE_GROUP_MEMBER_EPOCH = -1
"""The epoch of a member that has left: what its current assignment's tombstone sets."""

NO_ASSIGNMENT_EPOCH = -1
"""The target assignment epoch once its metadata's tombstone is replayed."""


class ConsumerGroupReplayError(ValueError):
    """A record that the group's state contradicts (Kafka's IllegalStateException)."""


class ConsumerGroupState(enum.Enum):
    """Kafka's ConsumerGroupState, by the names the admin APIs show."""

    EMPTY = "Empty"
    """No member."""

    ASSIGNING = "Assigning"
    """The group's epoch is ahead of its target assignment's: one must be computed."""

    RECONCILING = "Reconciling"
    """Some member has not reached its target assignment at the target's epoch."""

    STABLE = "Stable"
    """Every member holds its target assignment at the target's epoch."""

    DEAD = "Dead"
    """The group was deleted."""


@dataclass(frozen=True, slots=True)
class ResolvedRegularExpression:
    """The topics a subscription's regular expression matched, at which version of the
    cluster's metadata, and when (ms)."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


class _TimelineValue(Generic[V]):
    """One value on the timeline (Kafka's TimelineObject): a TimelineDict of one key."""

    __slots__ = ("_cell",)

    def __init__(self, registry: SnapshotRegistry, value: V) -> None:
        self._cell: TimelineDict[int, V] = TimelineDict(registry)
        self._cell[0] = value

    def get(self) -> V:
        return self._cell[0]

    def get_at(self, offset: int) -> V:
        value = self._cell.get_at(0, offset)
        assert value is not None, "a timeline value is set from its creation on"
        return value

    def set(self, value: V) -> None:
        if self._cell[0] != value:
            self._cell[0] = value


def partitions_from_record(partitions: TopicIdPartitions) -> TopicPartitions:
    """A record's partitions in the members' normal form."""
    return topic_partitions(dict(partitions))


def member_with_metadata(
    member: ConsumerGroupMember, value: ConsumerGroupMemberMetadataValue
) -> ConsumerGroupMember:
    """`member` with what its metadata record says (Kafka's `updateWith`)."""
    return member.replace(
        instance_id=value.instance_id,
        rack_id=value.rack_id,
        client_id=value.client_id,
        client_host=value.client_host,
        subscribed_topic_names=frozenset(value.subscribed_topic_names),
        subscribed_topic_regex=value.subscribed_topic_regex or "",
        rebalance_timeout_ms=value.rebalance_timeout_ms,
        server_assignor=value.server_assignor,
        classic_member_metadata=value.classic_member_metadata,
    )


def member_with_assignment(
    member: ConsumerGroupMember, value: ConsumerGroupCurrentMemberAssignmentValue
) -> ConsumerGroupMember:
    """`member` with what its current assignment record says (Kafka's `updateWith`)."""
    return member.replace(
        member_epoch=value.member_epoch,
        previous_member_epoch=value.previous_member_epoch,
        state=ReconciliationState.from_value(value.state),
        assigned_partitions=partitions_from_record(value.assigned_partitions),
        partitions_pending_revocation=partitions_from_record(value.partitions_pending_revocation),
    )


class ConsumerGroup:
    """One consumer group's state, changed only through its update methods, which keep
    the derived maps and the state current (Kafka's `ConsumerGroup`)."""

    def __init__(self, registry: SnapshotRegistry, group_id: str) -> None:
        self.group_id = group_id
        self._group_epoch = _TimelineValue(registry, 0)
        self._target_assignment_epoch = _TimelineValue(registry, 0)
        # The hash of the subscribed topics' metadata the group epoch was last bumped for
        # (KIP-1101), and when the target assignment was last computed (KIP-1263).
        self._metadata_hash = _TimelineValue(registry, 0)
        self._assignment_timestamp_ms = _TimelineValue(registry, 0)
        self._state = _TimelineValue(registry, ConsumerGroupState.EMPTY)
        self._members: TimelineDict[str, ConsumerGroupMember] = TimelineDict(registry)
        self._target_assignment: TimelineDict[str, TopicPartitions] = TimelineDict(registry)
        # Kafka's invertedTargetAssignment: the member each partition is given to.
        self._target_owners: TimelineDict[tuple[TopicId, int], str] = TimelineDict(registry)
        # Kafka's currentPartitionEpoch: the epoch of the member that holds each partition,
        # assigned or pending revocation.
        self._partition_epochs: TimelineDict[tuple[TopicId, int], int] = TimelineDict(registry)
        self._static_members: TimelineDict[str, str] = TimelineDict(registry)
        self._subscribed_topic_names: TimelineDict[str, int] = TimelineDict(registry)
        self._regex_subscribers: TimelineDict[str, int] = TimelineDict(registry)
        self._resolved_regexes: TimelineDict[str, ResolvedRegularExpression] = TimelineDict(
            registry
        )
        # The members on the classic protocol, and how many of them support each of its
        # protocols (Kafka's numClassicProtocolMembers and
        # classicProtocolMembersSupportedProtocols): what a classic member's JoinGroup and a
        # downgrade ask, without a scan of the members.
        self._classic_members = _TimelineValue(registry, 0)
        self._classic_protocols: TimelineDict[str, int] = TimelineDict(registry)
        # The snapshot of the cluster's topics the metadata hash was last found current
        # for: a cache of a check, not state (a new owner checks again).
        self.checked_topics: object | None = None

    # Reads (the latest state, or as of a committed offset where a read API needs it).

    def group_epoch(self, committed_offset: int | None = None) -> int:
        epoch = self._group_epoch
        return epoch.get() if committed_offset is None else epoch.get_at(committed_offset)

    def target_assignment_epoch(self, committed_offset: int | None = None) -> int:
        epoch = self._target_assignment_epoch
        return epoch.get() if committed_offset is None else epoch.get_at(committed_offset)

    def metadata_hash(self) -> int:
        return self._metadata_hash.get()

    def assignment_timestamp_ms(self) -> int:
        return self._assignment_timestamp_ms.get()

    def state(self, committed_offset: int | None = None) -> ConsumerGroupState:
        state = self._state
        return state.get() if committed_offset is None else state.get_at(committed_offset)

    def member(self, member_id: str) -> ConsumerGroupMember | None:
        return self._members.get(member_id)

    def members(self, committed_offset: int | None = None) -> dict[str, ConsumerGroupMember]:
        if committed_offset is None:
            return dict(self._members.items())
        return dict(self._members.items_at(committed_offset))

    def num_members(self) -> int:
        return len(self._members)

    def target_assignment(
        self, member_id: str, committed_offset: int | None = None
    ) -> TopicPartitions:
        """The member's partitions in the target assignment (now, or as of
        `committed_offset`); none when it has no target."""
        if committed_offset is None:
            partitions = self._target_assignment.get(member_id)
        else:
            partitions = self._target_assignment.get_at(member_id, committed_offset)
        return partitions or EMPTY_TOPIC_PARTITIONS

    def target_assignments(self) -> dict[str, TopicPartitions]:
        return dict(self._target_assignment.items())

    def target_owner(self, topic_id: TopicId, partition: int) -> str | None:
        """The member the target assignment gives the partition to (Kafka's
        invertedTargetAssignment), None when it gives it to none."""
        return self._target_owners.get((topic_id, partition))

    def current_partition_epoch(self, topic_id: TopicId, partition: int) -> int:
        """The epoch of the member that holds the partition, NO_OWNER_EPOCH when none does:
        what `CurrentAssignmentBuilder.current_partition_epoch` reads."""
        epoch = self._partition_epochs.get((topic_id, partition))
        return NO_OWNER_EPOCH if epoch is None else epoch

    def static_member_id(self, instance_id: str) -> str | None:
        return self._static_members.get(instance_id)

    def static_members(self) -> dict[str, str]:
        """Member id by instance id."""
        return dict(self._static_members.items())

    def subscribed_topic_names(self) -> dict[str, int]:
        """How many members subscribe to each topic, by name or through a resolved regex."""
        return dict(self._subscribed_topic_names.items())

    def resolved_regular_expression(self, regex: str) -> ResolvedRegularExpression | None:
        return self._resolved_regexes.get(regex)

    def resolved_regular_expressions(self) -> list[str]:
        """The regular expressions the group has a resolution of."""
        return list(self._resolved_regexes.keys())

    def num_classic_members(self) -> int:
        """How many members speak the classic protocol."""
        return self._classic_members.get()

    def supports_classic_protocols(self, protocol_type: str, names: Collection[str]) -> bool:
        """Whether a classic member of these protocols may be in the group (Kafka's
        `supportsClassicProtocols`): the "consumer" type, and, unless the group is empty,
        one of the protocols supported by every classic member."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        if not self._members:
            return bool(names)
        classic_members = self._classic_members.get()
        protocols = self._classic_protocols
        return any((protocols.get(name) or 0) == classic_members for name in names)

    def is_empty_of_records(self) -> bool:
        """No member and no target assignment: what a group's tombstone requires."""
        return not self._members and not self._target_assignment

    def member_count_refusal(self, max_size: int) -> str | None:
        """Why a new member may not join now (the group limits' `max_size`), or None. Checked
        on new requests only: replaying a log written under other limits never fails."""
        if len(self._members) < max_size:
            return None
        return (
            f"group {self.group_id} has {len(self._members)} members, its limit "
            f"(max_size {max_size})"
        )

    # Changes (each a record's replay, or a part of one).

    def set_group_epoch(self, epoch: int, metadata_hash: int = 0) -> None:
        self._group_epoch.set(epoch)
        self._metadata_hash.set(metadata_hash)
        self._update_state()

    def set_target_assignment_epoch(self, epoch: int, timestamp_ms: int = 0) -> None:
        self._target_assignment_epoch.set(epoch)
        self._assignment_timestamp_ms.set(timestamp_ms)
        self._update_state()

    def update_target_assignment(self, member_id: str, partitions: TopicPartitions) -> None:
        old = self.target_assignment(member_id)
        owners = self._target_owners
        for topic_id, indexes in old.items():
            kept = partitions.get(topic_id, frozenset())
            for partition in indexes - kept:
                # Another member's target may have taken the partition already, when its
                # record came first: that member's claim stays.
                if owners.get((topic_id, partition)) == member_id:
                    owners.pop((topic_id, partition))
        for topic_id, indexes in partitions.items():
            had = old.get(topic_id, frozenset())
            for partition in indexes - had:
                owners[(topic_id, partition)] = member_id
        self._target_assignment[member_id] = partitions

    def remove_target_assignment(self, member_id: str) -> None:
        self.update_target_assignment(member_id, EMPTY_TOPIC_PARTITIONS)
        self._target_assignment.pop(member_id)

    def update_member(self, member: ConsumerGroupMember) -> None:
        old = self._members.get(member.member_id)
        if old is not None:
            self._count_subscriptions(old, -1)
            self._remove_partition_epochs(old)
        self._members[member.member_id] = member
        self._count_subscriptions(member, 1)
        self._add_partition_epochs(member)
        if member.instance_id is not None:
            self._static_members[member.instance_id] = member.member_id
        self._update_state()

    def remove_member(self, member_id: str) -> None:
        old = self._members.pop(member_id)
        if old is None:
            return
        self._count_subscriptions(old, -1)
        self._remove_partition_epochs(old)
        if old.instance_id is not None:
            self._static_members.pop(old.instance_id)
        self._update_state()

    def update_resolved_regular_expression(
        self, regex: str, resolved: ResolvedRegularExpression | None
    ) -> None:
        """The regex's topics (None: forgotten); its subscribers' counts follow."""
        subscribers = self._regex_subscribers.get(regex) or 0
        old = self._resolved_regexes.get(regex)
        if old is not None:
            self._count_topics(old.topics, -subscribers)
        if resolved is None:
            self._resolved_regexes.pop(regex)
        else:
            self._resolved_regexes[regex] = resolved
            self._count_topics(resolved.topics, subscribers)

    def mark_dead(self) -> None:
        """The group is deleted: whoever still holds it sees it Dead."""
        self._state.set(ConsumerGroupState.DEAD)

    # Derived state.

    def _update_state(self) -> None:
        # Kafka's maybeUpdateGroupState.
        target_epoch = self._target_assignment_epoch.get()
        if not self._members:
            state = ConsumerGroupState.EMPTY
        elif self._group_epoch.get() > target_epoch:
            state = ConsumerGroupState.ASSIGNING
        elif all(
            member.state is ReconciliationState.STABLE and member.member_epoch == target_epoch
            for member in self._members.values()
        ):
            state = ConsumerGroupState.STABLE
        else:
            state = ConsumerGroupState.RECONCILING
        self._state.set(state)

    def _count_subscriptions(self, member: ConsumerGroupMember, delta: int) -> None:
        self._count_topics(member.subscribed_topic_names, delta)
        classic = member.classic_member_metadata
        if classic is not None:
            self._classic_members.set(self._classic_members.get() + delta)
            for name in {protocol.name for protocol in classic.supported_protocols}:
                _add_count(self._classic_protocols, name, delta)
        regex = member.subscribed_topic_regex
        if regex:
            _add_count(self._regex_subscribers, regex, delta)
            resolved = self._resolved_regexes.get(regex)
            if resolved is not None:
                self._count_topics(resolved.topics, delta)

    def _count_topics(self, topics: frozenset[str], delta: int) -> None:
        if delta:
            for topic in topics:
                _add_count(self._subscribed_topic_names, topic, delta)

    def _add_partition_epochs(self, member: ConsumerGroupMember) -> None:
        epochs = self._partition_epochs
        epoch = member.member_epoch
        for partitions in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, indexes in partitions.items():
                for partition in indexes:
                    held = epochs.get((topic_id, partition))
                    if held is not None:
                        raise ConsumerGroupReplayError(
                            f"group {self.group_id}: cannot give {topic_id.hex()}-{partition} "
                            f"to member {member.member_id} at epoch {epoch}: it is still "
                            f"owned at epoch {held}"
                        )
                    epochs[(topic_id, partition)] = epoch

    def _remove_partition_epochs(self, member: ConsumerGroupMember) -> None:
        epochs = self._partition_epochs
        epoch = member.member_epoch
        for partitions in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, indexes in partitions.items():
                for partition in indexes:
                    held = epochs.pop((topic_id, partition))
                    if held != epoch:
                        raise ConsumerGroupReplayError(
                            f"group {self.group_id}: cannot take {topic_id.hex()}-{partition} "
                            f"from member {member.member_id} at epoch {epoch}: it is owned "
                            f"at epoch {held}"
                        )

    def partition_epochs(self) -> Iterator[tuple[tuple[TopicId, int], int]]:
        """Every held partition with its owner's epoch (for tests and a debugger)."""
        return self._partition_epochs.items()


def _add_count(counts: TimelineDict[str, int], key: str, delta: int) -> None:
    count = (counts.get(key) or 0) + delta
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key)


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "NO_ASSIGNMENT_EPOCH",
    "ConsumerGroup",
    "ConsumerGroupReplayError",
    "ConsumerGroupState",
    "ResolvedRegularExpression",
    "member_with_assignment",
    "member_with_metadata",
    "partitions_from_record",
]
