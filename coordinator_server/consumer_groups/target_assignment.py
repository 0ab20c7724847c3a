"""A consumer group's new target assignment and the records that persist it: Kafka's
`TargetAssignmentBuilder`.

When the group's epoch moves (a member joins, leaves or changes its subscription, a topic
changes), the coordinator asks the group's assignor for a new target: the partitions each
member should end up with. Members then reconcile toward it one heartbeat at a time
(`current_assignment`). The builder hands the assignor the group as it stands after the
request being handled (its members with the request's member added, updated or removed),
each member with its current target so that a sticky assignor can keep it, and turns the
answer into records: one target assignment member record for each member whose target
changed or who had none, then the target assignment metadata record at the new epoch, last,
so that replay never sees the new epoch before the targets it stands for.

A removed member gets no record here, as in Kafka: its target's tombstone is written with
the rest of its removal, by whoever removes it.

A static member that rejoins under a new member id takes over the departed one's target, so
that a restart of a static member moves no partition.

Pure: the caller resolves each member's subscription to topic ids (`resolve_subscription`
does it as Kafka does) and says when the assignment was computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from coordinator_server.consumer_groups.assignors.api import (
    EMPTY_ASSIGNMENT,
    EMPTY_PARTITIONS,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignor,
    Partitions,
    SubscribedTopicDescriber,
    SubscriptionType,
)
from coordinator_server.consumer_groups.member import ConsumerGroupMember, topic_partitions
from coordinator_server.consumer_groups.topics import TopicId
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_target_assignment_member_record,
    new_consumer_group_target_assignment_metadata_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicIdPartitions,
)


def resolve_subscription(
    member: ConsumerGroupMember,
    topic_ids_by_name: Mapping[str, TopicId],
    resolved_regular_expressions: Mapping[str, AbstractSet[str]],
) -> frozenset[TopicId]:
    """The ids of the topics `member` subscribes to, by name or through its regular
    expression (the union when it has both, which the protocol allows). A name the metadata
    does not know is left out: the member is assigned nothing of a topic that does not exist
    yet, and gets it once it does."""
    names: AbstractSet[str] = member.subscribed_topic_names
    regex = member.subscribed_topic_regex
    if regex:
        matched = resolved_regular_expressions.get(regex)
        if matched:
            names = names | matched if names else matched
    return frozenset(topic_ids_by_name[name] for name in names if name in topic_ids_by_name)


def member_subscription(
    member: ConsumerGroupMember,
    target: Partitions,
    subscribed_topic_ids: AbstractSet[TopicId],
) -> MemberSubscription:
    """The member as the assignor sees it: its topics, its current target, its rack and
    static instance id."""
    return MemberSubscription(
        subscribed_topic_ids=subscribed_topic_ids,
        assignment=MemberAssignment(target) if target else EMPTY_ASSIGNMENT,
        rack_id=member.rack_id,
        instance_id=member.instance_id,
    )


@dataclass(frozen=True, slots=True)
class TargetAssignmentResult:
    """The records to write, in order, and the new target of every member the assignor
    answered for."""

    records: list[CoordinatorRecord]
    target_assignment: Mapping[str, MemberAssignment]


@dataclass(frozen=True)
class TargetAssignmentBuilder:
    """The group's new target assignment at `group_epoch`.

    `members` are the group's members before the request; `updated_members` what the request
    changes, by member id: the new member, or None for a removed one. `target_assignment` is
    the current target by member id, `static_members` the member id of each static instance
    id. `subscribed_topic_ids` holds each member's subscription resolved to topic ids
    (updated members included; a member missing from it subscribes to nothing) and `topics`
    the subscribed topics' partitions. `subscription_type`, when the group already knows it,
    spares computing it from the subscriptions.
    """

    group_id: str
    group_epoch: int
    assignor: PartitionAssignor
    members: Mapping[str, ConsumerGroupMember]
    target_assignment: Mapping[str, Partitions]
    subscribed_topic_ids: Mapping[str, AbstractSet[TopicId]]
    topics: SubscribedTopicDescriber
    updated_members: Mapping[str, ConsumerGroupMember | None] = field(default_factory=dict)
    static_members: Mapping[str, str] = field(default_factory=dict)
    subscription_type: SubscriptionType | None = None
    assignment_timestamp_ms: int = 0

    def build(self) -> TargetAssignmentResult:
        """The new target and its records. Raises PartitionAssignorError when the assignor
        cannot assign the group; the group then keeps its previous target."""
        targets = self.target_assignment
        specs: dict[str, MemberSubscription] = {
            member_id: self._subscription(member_id, member, targets.get(member_id))
            for member_id, member in self.members.items()
        }
        for member_id, updated in self.updated_members.items():
            if updated is None:
                specs.pop(member_id, None)
                continue
            target = targets.get(member_id)
            if updated.instance_id is not None:
                previous_member_id = self.static_members.get(updated.instance_id)
                if previous_member_id is not None and previous_member_id != member_id:
                    target = targets.get(previous_member_id)
            specs[member_id] = self._subscription(member_id, updated, target)

        assignment = self.assignor.assign(GroupSpec(specs, self.subscription_type), self.topics)

        new_members = assignment.members
        records: list[CoordinatorRecord] = []
        for member_id in specs:
            new_assignment = new_members.get(member_id, EMPTY_ASSIGNMENT)
            old_target = targets.get(member_id)
            if old_target is None or not _same_partitions(new_assignment.partitions, old_target):
                records.append(
                    new_consumer_group_target_assignment_member_record(
                        self.group_id,
                        member_id,
                        ConsumerGroupTargetAssignmentMemberValue(
                            record_partitions(new_assignment.partitions)
                        ),
                    )
                )
        records.append(
            new_consumer_group_target_assignment_metadata_record(
                self.group_id,
                ConsumerGroupTargetAssignmentMetadataValue(
                    self.group_epoch, self.assignment_timestamp_ms
                ),
            )
        )
        return TargetAssignmentResult(records, new_members)

    def _subscription(
        self, member_id: str, member: ConsumerGroupMember, target: Partitions | None
    ) -> MemberSubscription:
        return member_subscription(
            member,
            EMPTY_PARTITIONS if target is None else target,
            self.subscribed_topic_ids.get(member_id, frozenset()),
        )


def record_partitions(partitions: Partitions) -> TopicIdPartitions:
    """`partitions` as a record holds them: sorted, topics without partitions left out, so
    that one assignment always encodes to the same bytes."""
    return tuple(
        (topic_id, tuple(sorted(indexes)))
        for topic_id, indexes in sorted(partitions.items())
        if indexes
    )


def _same_partitions(new: Partitions, old: Partitions) -> bool:
    # An assignor hands back the current target object itself when it keeps it: no need to
    # look inside. Otherwise compared in normal form, so that a topic listed with no
    # partition is no change.
    return new is old or topic_partitions(new) == topic_partitions(old)
