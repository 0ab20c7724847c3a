"""Online migration between classic and consumer groups, the consumer group's half (Kafka's
`GroupMetadataManager.validateOnlineUpgrade`, `ConsumerGroup.fromClassicGroup` and
`createConsumerGroupRecords`, `validateOnlineDowngradeWithFencedMembers`, and the consumer
group's part of `ClassicGroup.fromConsumerGroup`).

Upgrade: a member joining a classic group with ConsumerGroupHeartbeat converts it, under
`group.consumer.migration.policy`, when its protocol type is "consumer" and it is no larger
than a consumer group may be. Each classic member becomes a member of the consumer group
that keeps its JoinGroup (`classic_member_metadata`), owning what its last classic
assignment gave it, at the classic generation as its epoch: the group's epoch and target
are the generation, the target is what the members own, every member is Stable. The
conversion's records come after the classic group's tombstone; the joining member's own
records follow them, so that the group it joins is the converted one.

Downgrade: when the members that leave (or are fenced) are the last on the consumer
protocol and classic members remain, no more than a classic group may hold, the group is
converted back: its records' tombstones, then a classic group's GroupMetadata record whose
members are the remaining ones, each given its target assignment in the "consumer" embedded
protocol (`DowngradedMember`); the classic side (groups/migration.py) then rebalances it.

The classic group is read through `ClassicGroupView`, its shape and no more: the two kinds
of group are separate packages, and only the shard, above both, joins them. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    InvalidConsumerProtocolError,
    TopicPartitions,
)
from coordinator_server.consumer_groups.group import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerGroup,
    ConsumerGroupReplayError,
)
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopics,
    current_assignment_record,
    member_metadata_record,
)
from coordinator_server.consumer_groups.member import (
    ConsumerGroupMember,
    ReconciliationState,
    topic_partitions,
)
from coordinator_server.consumer_groups.metadata_hash import subscribed_topics_hash
from coordinator_server.consumer_groups.migration_policy import ConsumerGroupMigrationPolicy
from coordinator_server.consumer_groups.replay import ConsumerGroupRecords
from coordinator_server.consumer_groups.target_assignment import record_partitions
from coordinator_server.consumer_groups.tombstones import group_tombstone_records
from coordinator_server.consumer_groups.topics import TopicId
from coordinator_server.consumer_groups.topics import TopicPartitions as TopicIdPartitions
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_metadata_record,
    new_consumer_group_target_assignment_member_record,
    new_consumer_group_target_assignment_metadata_record,
)
from coordinator_server.records.consumer_groups import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecordKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

Downgrade = Callable[[ConsumerGroup, Sequence[ConsumerGroupMember], int], CoordinatorResult[None]]
"""What converts a consumer group back into a classic group as `leaving` members go, at a
time (ms): the records and the classic group's update. The shard gives it, as only the
shard sees both kinds of group."""


ReplacementDowngrade = Callable[
    [ConsumerGroup, ConsumerGroupMember, ConsumerGroupMember, int], CoordinatorResult[None]
]
"""What converts a consumer group back into a classic group as a classic static member (the
second) takes the place of its last consumer-protocol member (the first), at a time (ms):
the records that follow the join's own, and the classic group's update. The shard gives it."""


class MigrationError(ValueError):
    """A classic group that cannot become a consumer group (or the other way round): its
    members' embedded protocol does not parse, or says what the other kind cannot hold."""


class ClassicMemberView(Protocol):
    """What the upgrade reads of a classic group's member (groups.classic's member)."""

    @property
    def member_id(self) -> str: ...

    @property
    def group_instance_id(self) -> str | None: ...

    @property
    def client_id(self) -> str: ...

    @property
    def client_host(self) -> str: ...

    @property
    def rebalance_timeout_ms(self) -> int: ...

    @property
    def session_timeout_ms(self) -> int: ...

    @property
    def protocols(self) -> Sequence[tuple[str, bytes]]: ...

    @property
    def assignment(self) -> bytes: ...


class ClassicGroupView(Protocol):
    """What the upgrade reads of a classic group (groups.classic's group)."""

    @property
    def group_id(self) -> str: ...

    @property
    def generation_id(self) -> int: ...

    @property
    def protocol_type(self) -> str | None: ...

    @property
    def protocol_name(self) -> str | None: ...

    @property
    def members(self) -> Mapping[str, ClassicMemberView]: ...


@dataclass(frozen=True, slots=True)
class DowngradedMember:
    """A classic member of a consumer group as the classic group it downgrades to holds it:
    its JoinGroup's fields, and its target assignment in the embedded protocol."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


# Upgrade.


def upgrade_refusal(
    group: ClassicGroupView, policy: ConsumerGroupMigrationPolicy, max_size: int
) -> str | None:
    """Why the classic group may not become a consumer group now, or None (Kafka's
    `validateOnlineUpgrade`, whose messages these are)."""
    group_id = group.group_id
    if not policy.upgrade_enabled:
        return (
            f"Cannot upgrade classic group {group_id} to consumer group because online "
            "upgrade is disabled."
        )
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return (
            f"Cannot upgrade classic group {group_id} to consumer group because the group "
            "does not use the consumer embedded protocol."
        )
    if len(group.members) > max_size:
        return (
            f"Cannot upgrade classic group {group_id} to consumer group because the group "
            "size exceeds the consumer group maximum size."
        )
    return None


def upgrade_records(group: ClassicGroupView, topics: ClusterTopics) -> list[CoordinatorRecord]:
    """The records that make the consumer group of the classic group, in Kafka's order
    (`createConsumerGroupRecords`): every member's metadata, the group's epoch, every
    member's target, the target's epoch, every member's current assignment. Raises
    MigrationError when a member's subscription or assignment does not parse, or when an
    assignment carries user data, which the consumer group would lose (Kafka refuses an
    upgrade from a custom assignor for it)."""
    group_id = group.group_id
    generation = group.generation_id
    members: list[ConsumerGroupMember] = []
    names: set[str] = set()
    for classic in group.members.values():
        subscription = _subscription(classic, group.protocol_name)
        assigned = _assigned_partitions(classic, topics)
        member = ConsumerGroupMember(
            classic.member_id,
            member_epoch=generation,
            previous_member_epoch=generation,
            state=ReconciliationState.STABLE,
            instance_id=classic.group_instance_id,
            rebalance_timeout_ms=classic.rebalance_timeout_ms,
            client_id=classic.client_id,
            client_host=classic.client_host,
            subscribed_topic_names=frozenset(subscription.topics),
            assigned_partitions=assigned,
            classic_member_metadata=classic_member_metadata(
                classic.session_timeout_ms, classic.protocols
            ),
        )
        members.append(member)
        names.update(subscription.topics)
    records = [member_metadata_record(group_id, member) for member in members]
    records.append(
        new_consumer_group_metadata_record(
            group_id, ConsumerGroupMetadataValue(generation, subscribed_topics_hash(names, topics))
        )
    )
    records.extend(
        new_consumer_group_target_assignment_member_record(
            group_id,
            member.member_id,
            ConsumerGroupTargetAssignmentMemberValue(record_partitions(member.assigned_partitions)),
        )
        for member in members
    )
    # No computation of this group's assignor made this target: the first one is not held
    # back by the assignment interval (timestamp 0).
    records.append(
        new_consumer_group_target_assignment_metadata_record(
            group_id, ConsumerGroupTargetAssignmentMetadataValue(generation, 0)
        )
    )
    records.extend(current_assignment_record(group_id, member) for member in members)
    return records


def converted_group(group_id: str, records: Sequence[CoordinatorRecord]) -> ConsumerGroup:
    """The consumer group `records` make, replayed on a registry of their own: what a
    heartbeat that joins it reads, before the records are written. Raises MigrationError
    when replay refuses them (two members owning one partition: a classic assignor may have
    given it twice), which would otherwise stop the log's replay."""
    registry = SnapshotRegistry()
    groups: TimelineDict[str, ConsumerGroup] = TimelineDict(registry)
    replayer = ConsumerGroupRecords(registry, groups)
    try:
        for record in records:
            key = record.key
            assert isinstance(key, ConsumerGroupRecordKey)
            replayer.replay(key, record.value)
    except ConsumerGroupReplayError as error:
        raise MigrationError(str(error)) from error
    group = groups.get(group_id)
    assert group is not None, "the records make the group"
    return group


def classic_member_metadata(
    session_timeout_ms: int, protocols: Sequence[tuple[str, bytes]]
) -> ClassicMemberMetadata:
    """What a member's record keeps of its JoinGroup."""
    return ClassicMemberMetadata(
        session_timeout_ms, tuple(ClassicProtocol(name, metadata) for name, metadata in protocols)
    )


def parse_subscription(protocols: Sequence[tuple[str, bytes]]) -> ConsumerProtocolSubscription:
    """The subscription a classic member's protocols carry (each carries the same one, for
    another assignor: the first is read, as Kafka reads it). Raises MigrationError."""
    if not protocols:
        raise MigrationError("a classic member without protocols has no subscription")
    try:
        return ConsumerProtocolSubscription.decode(protocols[0][1])
    except InvalidConsumerProtocolError as error:
        raise MigrationError(f"malformed embedded consumer protocol: {error}") from error


def partitions_by_id(
    partitions: Sequence[TopicPartitions], topics: ClusterTopics
) -> dict[TopicId, frozenset[int]]:
    """Partitions named by topic as the members' records hold them, by topic id; a topic the
    cluster does not have is left out (Kafka's `toTopicPartitionMap`)."""
    by_id: dict[TopicId, frozenset[int]] = {}
    for named in partitions:
        topic = topics.topic(named.topic)
        if topic is not None:
            by_id[topic.topic_id] = by_id.get(topic.topic_id, frozenset()) | set(named.partitions)
    return by_id


def assignment_bytes(partitions: TopicIdPartitions, topics: ClusterTopics) -> bytes:
    """Partitions by topic id as a classic member receives them (the "consumer" embedded
    protocol's assignment, topics by name, sorted); a topic the cluster no longer has is
    left out (Kafka's `toConsumerProtocolAssignment`)."""
    named = []
    for topic_id, indexes in partitions.items():
        name = topics.topic_name(topic_id)
        if name is not None:
            named.append(TopicPartitions(name, sorted(indexes)))
    named.sort(key=lambda topic: topic.topic)
    return ConsumerProtocolAssignment(partitions=named).encode()


def _subscription(
    member: ClassicMemberView, protocol_name: str | None
) -> ConsumerProtocolSubscription:
    protocols = list(member.protocols)
    if protocol_name is not None:
        # The selected protocol's metadata first, as Kafka reads it.
        protocols.sort(key=lambda protocol: protocol[0] != protocol_name)
    return parse_subscription(protocols)


def _assigned_partitions(member: ClassicMemberView, topics: ClusterTopics) -> TopicIdPartitions:
    # A member that joined and never synced has no assignment: it owns nothing.
    if not member.assignment:
        return topic_partitions({})
    try:
        assignment = ConsumerProtocolAssignment.decode(member.assignment)
    except InvalidConsumerProtocolError as error:
        raise MigrationError(f"malformed embedded consumer protocol: {error}") from error
    if assignment.user_data:
        raise MigrationError("an assignment's user data (a custom assignor's) would be lost")
    return topic_partitions(partitions_by_id(assignment.partitions, topics))


# Downgrade.


def downgrade_allowed(
    group: ConsumerGroup,
    leaving: Collection[ConsumerGroupMember],
    policy: ConsumerGroupMigrationPolicy,
    classic_max_size: int,
) -> bool:
    """Whether the group converts to a classic group as `leaving` (members of it) go
    (Kafka's `validateOnlineDowngradeWithFencedMembers`): every member left speaks the
    classic protocol, at least one is left, the policy allows a downgrade, and those left
    fit in a classic group."""
    remaining = group.num_members() - len(leaving)
    classic_leaving = sum(1 for member in leaving if member.use_classic_protocol)
    return (
        group.num_classic_members() - classic_leaving == remaining
        and remaining > 0
        and policy.downgrade_enabled
        and remaining <= classic_max_size
    )


def downgrade_allowed_with_replaced_member(
    group: ConsumerGroup,
    replaced: ConsumerGroupMember,
    policy: ConsumerGroupMigrationPolicy,
    classic_max_size: int,
) -> bool:
    """Whether the group converts to a classic group as a classic static member takes the
    instance of `replaced` (Kafka's `validateOnlineDowngradeWithReplacedMember`): `replaced`
    is the group's only member on the consumer protocol, the policy allows a downgrade, and
    the group (its size unchanged by the swap) fits in a classic group."""
    return (
        not replaced.use_classic_protocol
        and group.num_classic_members() == group.num_members() - 1
        and policy.downgrade_enabled
        and group.num_members() <= classic_max_size
    )


def downgraded_members(
    group: ConsumerGroup,
    leaving: Collection[str],
    topics: ClusterTopics,
    joining: ConsumerGroupMember | None = None,
) -> list[DowngradedMember]:
    """The members the classic group keeps, by member id (the first its leader, as Kafka's
    first added): every member but `leaving`, each with its target assignment; and
    `joining`, a classic static member that took the instance of a member of `leaving`,
    with that member's target (what the group would have reconciled it with)."""
    kept = [
        _downgraded(member, group.target_assignment(member_id), topics)
        for member_id, member in group.members().items()
        if member_id not in leaving
    ]
    if joining is not None:
        assert joining.instance_id is not None, "only a static member takes a member's place"
        replaced_member_id = group.static_member_id(joining.instance_id)
        assert replaced_member_id is not None and replaced_member_id in leaving, (
            "the member it replaces leaves"
        )
        kept.append(_downgraded(joining, group.target_assignment(replaced_member_id), topics))
    kept.sort(key=lambda member: member.member_id)
    return kept


def replacement_tombstone_records(
    group: ConsumerGroup, replaced_member_id: str, joining_member_id: str
) -> list[CoordinatorRecord]:
    """The group's tombstones once `joining_member_id` has taken the place of
    `replaced_member_id` in records written before them (Kafka's
    `createGroupTombstoneRecordsWithReplacedMember`): the replaced member's records are
    already deleted, the joining member's are the ones to delete."""
    records = []
    for record in group_tombstone_records(group):
        key = record.key
        if isinstance(key, ConsumerGroupMemberKey) and key.member_id == replaced_member_id:
            record = CoordinatorRecord(dataclasses.replace(key, member_id=joining_member_id), None)
        records.append(record)
    return records


def _downgraded(
    member: ConsumerGroupMember, target: TopicIdPartitions, topics: ClusterTopics
) -> DowngradedMember:
    classic = member.classic_member_metadata
    assert classic is not None, "only classic members are left in a downgrade"
    return DowngradedMember(
        member_id=member.member_id,
        group_instance_id=member.instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        session_timeout_ms=classic.session_timeout_ms,
        protocols=tuple(
            (protocol.name, protocol.metadata) for protocol in classic.supported_protocols
        ),
        assignment=assignment_bytes(target, topics),
    )


__all__ = [
    "ClassicGroupView",
    "ClassicMemberView",
    "Downgrade",
    "DowngradedMember",
    "MigrationError",
    "ReplacementDowngrade",
    "assignment_bytes",
    "classic_member_metadata",
    "converted_group",
    "downgrade_allowed",
    "downgrade_allowed_with_replaced_member",
    "downgraded_members",
    "parse_subscription",
    "partitions_by_id",
    "replacement_tombstone_records",
    "upgrade_records",
    "upgrade_refusal",
]
