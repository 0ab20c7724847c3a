"""Kafka's `range` server-side assignor (RangeServerAssignor): each topic's partitions cut into
contiguous ranges, one per subscriber, in the order of the subscribers.

Subscribers are ordered static members first (by instance id), then the others by member id,
so a static member that restarts under a new member id keeps its ranges. A topic of P
partitions and S subscribers gives each P//S partitions and the first P%S one more. Topics
with the same partition count and the same subscribers get the same ranges (co-partitioned
topics line up, what range is chosen for). The assignment depends on the members and
partition counts only, not on the current one: it is not sticky (Kafka's is not either).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_server.consumer_groups.assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    PartitionAssignorError,
    PartitionRange,
    Partitions,
    SubscribedTopicDescriber,
)
from coordinator_server.consumer_groups.topics import TopicId

NAME = "range"


@dataclass(slots=True)
class _TopicRanges:
    """The ranges of one topic still to hand out."""

    partition_count: int
    subscribers: int
    next_start: int = 0
    handed_out: int = 0

    def next_range(self) -> PartitionRange | None:
        quota, extra = divmod(self.partition_count, self.subscribers)
        if self.handed_out < extra:
            quota += 1
        self.handed_out += 1
        start = self.next_start
        end = min(start + quota, self.partition_count)
        self.next_start = end
        return PartitionRange(start, end) if start < end else None


class RangeServerAssignor:
    """Kafka's server-side RangeAssignor."""

    @property
    def name(self) -> str:
        return NAME

    def assign(self, group_spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        members = group_spec.members
        ordered = sorted(
            members,
            key=lambda member_id: (
                (0, instance_id, "")
                if (instance_id := members[member_id].instance_id) is not None
                else (1, "", member_id)
            ),
        )
        ranges: dict[TopicId, _TopicRanges] = {}
        for member_id in ordered:
            for topic_id in members[member_id].subscribed_topic_ids:
                topic = ranges.get(topic_id)
                if topic is None:
                    count = topics.partition_count(topic_id)
                    if count is None:
                        raise PartitionAssignorError(
                            f"Member is subscribed to a non-existent topic {topic_id.hex()}"
                        )
                    topic = ranges[topic_id] = _TopicRanges(count, 0)
                topic.subscribers += 1

        target: dict[str, MemberAssignment] = {}
        for member_id in ordered:
            partitions: dict[TopicId, PartitionRange] = {}
            for topic_id in members[member_id].subscribed_topic_ids:
                cut = ranges[topic_id].next_range()
                if cut is not None:
                    partitions[topic_id] = cut
            assigned: Partitions = partitions
            target[member_id] = MemberAssignment(assigned)
        return GroupAssignment(target)
