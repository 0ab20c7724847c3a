"""What a ConsumerGroupHeartbeat needs besides the group: the coordinator's settings for
consumer groups, the data cluster's topics as the heartbeat reads them, the request's
validation and the records and answers it builds (Kafka's helpers around
`GroupMetadataManager.consumerGroupHeartbeat`).

Kept apart from the manager so that the manager reads as Kafka's steps (validate, get or
create the member, bump the group epoch, recompute the target, reconcile, answer) while
the shapes of records and answers live here. Pure: the time and the topics come in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from coordinator_protocol.consumer_groups import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from coordinator_protocol.errors import (
    FencedMemberEpochError,
    InvalidRequestError,
    UnsupportedAssignorError,
)
from coordinator_server.consumer_groups.assignors import ASSIGNORS
from coordinator_server.consumer_groups.assignors.api import (
    PartitionAssignor,
    SubscribedTopicMetadata,
)
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.migration_policy import ConsumerGroupMigrationPolicy
from coordinator_server.consumer_groups.target_assignment import record_partitions
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_current_member_assignment_record,
    new_consumer_group_current_member_assignment_tombstone_record,
    new_consumer_group_member_metadata_record,
    new_consumer_group_member_metadata_tombstone_record,
    new_consumer_group_target_assignment_member_record,
    new_consumer_group_target_assignment_member_tombstone_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMemberValue,
)

KAFKA_MAX_GROUP_SIZE = 2**31 - 1
"""Kafka's default `group.consumer.max.size` (Integer.MAX_VALUE): no limit of its own."""


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's `group.consumer.*` settings that a heartbeat reads, with Kafka's defaults.

    `assignors` are the server-side assignors by name, in the configured order: the first
    is the default of a group whose members name none.
    """

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    # The least time between two computations of a group's target (KIP-1263); 0 computes
    # at every change, as Kafka before 4.3. The server's setting defaults to Kafka's 1000.
    assignment_interval_ms: int = 0
    assignors: Mapping[str, PartitionAssignor] = field(default_factory=lambda: dict(ASSIGNORS))
    max_size: int = KAFKA_MAX_GROUP_SIZE
    # Subscriptions by regular expression (consumer_groups/regex.py): the least time between
    # two refreshes of a group's resolutions (Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS),
    # the age at which one is made again even if the topics did not change
    # (`group.consumer.regex.refresh.interval.ms`), and the bounds of the compiled patterns
    # kept: how many, and RE2's memory for each.
    regex_refresh_min_interval_ms: int = 10_000
    regex_refresh_interval_ms: int = 600_000
    regex_cache_max_patterns: int = 128
    regex_max_memory_bytes: int = 1 << 20
    # Whether classic groups upgrade to consumer groups online, and back (migration.py).
    migration_policy: ConsumerGroupMigrationPolicy = ConsumerGroupMigrationPolicy.BIDIRECTIONAL

    def __post_init__(self) -> None:
        if not self.assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        for name, value in (
            ("regex_refresh_min_interval_ms", self.regex_refresh_min_interval_ms),
            ("regex_refresh_interval_ms", self.regex_refresh_interval_ms),
        ):
            if value < 0:
                raise ValueError(f"{name} must be at least 0, got {value}")

    @property
    def default_assignor(self) -> str:
        return next(iter(self.assignors))


@dataclass(frozen=True, slots=True)
class ClusterTopic:
    """A topic of the data cluster: its id and its number of partitions. `internal`: one of
    the cluster's own topics (Kafka's `__consumer_offsets`, `__transaction_state`,
    `__share_group_state`, this coordinator's log topic), kept so that a subscription that
    names it finds it, and flagged so that what a regular expression is matched against may
    leave it out (as a Kafka consumer's `exclude.internal.topics`, true by default, leaves
    internal topics out of its pattern subscriptions). `partition_racks`: the racks of each
    partition's replicas by partition index, for rack-aware assignment; empty when the
    source knows none."""

    topic_id: TopicId
    partition_count: int
    internal: bool = False
    partition_racks: tuple[frozenset[str], ...] = ()


class TopicDescription(Protocol):
    """What a source of the cluster's topics says of one topic (`ClusterTopic` is one)."""

    @property
    def topic_id(self) -> TopicId: ...

    @property
    def partition_count(self) -> int: ...

    @property
    def internal(self) -> bool: ...

    @property
    def partition_racks(self) -> tuple[frozenset[str], ...]: ...


class ClusterTopics(Protocol):
    """The data cluster's topics as a heartbeat reads them: by name to subscribe, by id to
    name the partitions of an answer."""

    def topic(self, name: str) -> ClusterTopic | None:
        """The topic of that name, None when the cluster has none."""
        ...

    def topic_name(self, topic_id: TopicId) -> str | None:
        """The name of the topic of that id, None when the cluster has none."""
        ...

    @property
    def version(self) -> int:
        """What orders the reads of one source: a read whose topics differ has another."""
        ...

    def topic_names(self, *, include_internal: bool = True) -> list[str]:
        """The names of the cluster's topics (what a regular expression is matched
        against, without the internal ones)."""
        ...


class ClusterTopicsSnapshot:
    """`ClusterTopics` over a plain map of the cluster's topics by name, as read at one time.

    `version` orders the snapshots of one source: a snapshot whose topics differ from the
    previous one's has a larger version, so a reader may tell "nothing changed" from the
    version alone. Immutable: a source replaces its snapshot, never changes it."""

    __slots__ = ("_by_name", "_names", "_sorted_names", "_version")

    def __init__(self, topics: Mapping[str, ClusterTopic], version: int = 0) -> None:
        self._by_name = dict(topics)
        self._names = {topic.topic_id: name for name, topic in self._by_name.items()}
        self._version = version
        # Built on first use: most snapshots are read by name and id only.
        self._sorted_names: tuple[str, ...] | None = None

    @classmethod
    def of(cls, topics: Mapping[str, TopicDescription], version: int = 0) -> ClusterTopicsSnapshot:
        """The snapshot of what a source describes (its own value per topic)."""
        return cls(
            {
                name: ClusterTopic(
                    topic.topic_id, topic.partition_count, topic.internal, topic.partition_racks
                )
                for name, topic in topics.items()
            },
            version,
        )

    @property
    def version(self) -> int:
        return self._version

    def topic(self, name: str) -> ClusterTopic | None:
        return self._by_name.get(name)

    def topic_name(self, topic_id: TopicId) -> str | None:
        return self._names.get(topic_id)

    def topic_names(self, *, include_internal: bool = True) -> list[str]:
        """The names of the cluster's topics, sorted; without the internal ones when
        `include_internal` is false (what a regular expression is matched against)."""
        names = self._sorted_names
        if names is None:
            names = self._sorted_names = tuple(sorted(self._by_name))
        if include_internal:
            return list(names)
        by_name = self._by_name
        return [name for name in names if not by_name[name].internal]

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"ClusterTopicsSnapshot(version={self._version}, topics={len(self._by_name)})"


def subscribed_topic_metadata(
    topics: ClusterTopics, partition_counts: Mapping[TopicId, int]
) -> SubscribedTopicMetadata:
    """What the assignor is told of the subscribed topics (`partition_counts`, by topic id):
    their partition counts, and the racks of their partitions' replicas where `topics`
    knows them for as many partitions."""
    racks: dict[TopicId, tuple[frozenset[str], ...]] = {}
    for topic_id, count in partition_counts.items():
        name = topics.topic_name(topic_id)
        topic = topics.topic(name) if name is not None else None
        if topic is not None and len(topic.partition_racks) == count:
            racks[topic_id] = topic.partition_racks
    return SubscribedTopicMetadata(partition_counts, racks)


NO_CLUSTER_TOPICS = ClusterTopicsSnapshot({})
"""The topics of a node that knows no data cluster (and of a source before its first read)."""


def no_cluster_topics() -> ClusterTopics:
    return NO_CLUSTER_TOPICS


class ClusterTopicsSource(Protocol):
    """Where a node reads the data cluster's topics from (a Kafka cluster's metadata, or a
    file for a node without one), kept current in the background.

    `snapshot()` answers at once, never waiting on I/O: the latest snapshot read (an empty
    one at version 0 before the first). `refresh_now()` reads again now, for a heartbeat that
    names a topic the snapshot lacks; the source bounds how often that reaches the cluster,
    and a failure keeps the last snapshot (it is logged, not raised). `wait_ready(timeout_s)`
    returns once the first snapshot is read (raises TimeoutError otherwise). `start()` once
    before use, `stop()` at the end."""

    def snapshot(self) -> ClusterTopicsSnapshot: ...

    async def refresh_now(self) -> None: ...

    async def wait_ready(self, timeout_s: float) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def validate_heartbeat(request: ConsumerGroupHeartbeatRequest, config: ConsumerGroupConfig) -> None:
    """Raise Kafka's INVALID_REQUEST or UNSUPPORTED_ASSIGNOR for a request no group state
    can make valid (Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`).

    The member id is required at every epoch, joining included: the bodies are Kafka's
    version 1, from which the member generates its id (KIP-1082).
    """
    if not request.member_id:
        raise InvalidRequestError("MemberId can't be empty.")
    if not request.group_id:
        raise InvalidRequestError("GroupId can't be empty.")
    if request.instance_id == "":
        raise InvalidRequestError("InstanceId can't be empty.")
    if request.rack_id == "":
        raise InvalidRequestError("RackId can't be empty.")
    epoch = request.member_epoch
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
        # An empty list or an empty regex is accepted: a member subscribed to nothing.
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise InvalidRequestError(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise InvalidRequestError("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise InvalidRequestError("MemberEpoch is invalid.")
    assignor = request.server_assignor
    if assignor is not None and assignor not in config.assignors:
        raise UnsupportedAssignorError(
            f"ServerAssignor {assignor} is not supported. Supported assignors: "
            f"{', '.join(config.assignors)}."
        )


def owned_partitions(
    topic_partitions: Iterable[ConsumerGroupHeartbeatRequestTopicPartitions],
) -> dict[TopicId, frozenset[int]]:
    """The partitions a heartbeat says the member owns, by topic id."""
    owned: dict[TopicId, frozenset[int]] = {}
    for topic in topic_partitions:
        owned[topic.topic_id] = owned.get(topic.topic_id, frozenset()) | set(topic.partitions)
    return owned


def check_member_epoch(
    member: ConsumerGroupMember,
    received_epoch: int,
    owned: Mapping[TopicId, frozenset[int]] | None,
) -> None:
    """Raise FENCED_MEMBER_EPOCH for an epoch the member may not heartbeat with (Kafka's
    `throwIfConsumerGroupMemberEpochIsInvalid`). The previous epoch is accepted while the
    member owns only partitions it is assigned: the answer that moved it on may be lost."""
    if received_epoch > member.member_epoch:
        raise FencedMemberEpochError(
            f"The consumer group member has a greater member epoch ({received_epoch}) than "
            f"the one known by the group coordinator ({member.member_epoch}). The member "
            "must abandon all its partitions and rejoin."
        )
    if received_epoch < member.member_epoch and (
        received_epoch != member.previous_member_epoch
        or not _is_subset(owned, member.assigned_partitions)
    ):
        raise FencedMemberEpochError(
            f"The consumer group member has a smaller member epoch ({received_epoch}) than "
            f"the one known by the group coordinator ({member.member_epoch}). The member "
            "must abandon all its partitions and rejoin."
        )


def _is_subset(owned: Mapping[TopicId, frozenset[int]] | None, assigned: TopicPartitions) -> bool:
    # As Kafka: a heartbeat that does not say what it owns is not a subset.
    if owned is None:
        return False
    return all(
        topic_id in assigned and partitions <= assigned[topic_id]
        for topic_id, partitions in owned.items()
    )


def is_leave_epoch(epoch: int) -> bool:
    return epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH)


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    """The member's metadata record (Kafka's `newConsumerGroupMemberSubscriptionRecord`)."""
    return new_consumer_group_member_metadata_record(
        group_id,
        member.member_id,
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
            subscribed_topic_regex=member.subscribed_topic_regex or None,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor,
            classic_member_metadata=member.classic_member_metadata,
        ),
    )


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    """The member's current assignment record (Kafka's
    `newConsumerGroupCurrentAssignmentRecord`)."""
    return new_consumer_group_current_member_assignment_record(
        group_id,
        member.member_id,
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=member.state.value,
            assigned_partitions=record_partitions(member.assigned_partitions),
            partitions_pending_revocation=record_partitions(member.partitions_pending_revocation),
        ),
    )


def member_removal_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """A departed member's tombstones, in the order replay requires (Kafka's
    `removeMember`): current assignment, target assignment, then metadata."""
    return [
        new_consumer_group_current_member_assignment_tombstone_record(group_id, member_id),
        new_consumer_group_target_assignment_member_tombstone_record(group_id, member_id),
        new_consumer_group_member_metadata_tombstone_record(group_id, member_id),
    ]


def replace_member(
    group_id: str,
    static: ConsumerGroupMember,
    member_id: str,
    target: TopicPartitions,
    records: list[CoordinatorRecord],
) -> ConsumerGroupMember:
    """A static member that comes back under the new `member_id`: a copy of the departed
    `static`, keeping its partitions and its target (`target`), so that nothing moves
    (Kafka's `replaceMember`). Its records are appended to `records`: the departed member's
    tombstones, then the copy's metadata, target and current assignment."""
    member = static.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
    records.extend(member_removal_records(group_id, static.member_id))
    records.append(member_metadata_record(group_id, member))
    records.append(
        new_consumer_group_target_assignment_member_record(
            group_id, member_id, ConsumerGroupTargetAssignmentMemberValue(record_partitions(target))
        )
    )
    records.append(current_assignment_record(group_id, member))
    return member


def response_assignment(
    partitions: TopicPartitions, topics: ClusterTopics
) -> ConsumerGroupHeartbeatResponseAssignment:
    """The member's whole assignment as an answer carries it: by topic id, with the topic's
    name beside it ("" for a topic the cluster no longer has), sorted so that one
    assignment always reads the same."""
    return ConsumerGroupHeartbeatResponseAssignment(
        topic_partitions=[
            ConsumerGroupHeartbeatResponseTopicPartitions(
                topic_id=topic_id,
                topic_name=topics.topic_name(topic_id) or "",
                partitions=sorted(indexes),
            )
            for topic_id, indexes in sorted(partitions.items())
        ]
    )


__all__ = [
    "KAFKA_MAX_GROUP_SIZE",
    "NO_CLUSTER_TOPICS",
    "ClusterTopic",
    "ClusterTopics",
    "ClusterTopicsSnapshot",
    "ClusterTopicsSource",
    "ConsumerGroupConfig",
    "TopicDescription",
    "check_member_epoch",
    "current_assignment_record",
    "is_leave_epoch",
    "member_metadata_record",
    "member_removal_records",
    "no_cluster_topics",
    "owned_partitions",
    "response_assignment",
    "subscribed_topic_metadata",
    "validate_heartbeat",
]
