"""Partition assignors: how the group leader splits partitions among the members.

An assignor is anything with the `Assignor` shape (Kafka's `ConsumerPartitionAssignor`):
a `name` (the JoinGroup protocol name), `assign()` over every member's subscription, and
two hooks through which it can carry state from one generation to the next in the
subscription's `user_data` (the sticky assignor's previous assignment).

The leader runs `assign()` with the partition count of each subscribed topic; each member
gets the partitions of its topics only. Members are ordered as Kafka orders them: static
members (with a group_instance_id) first, by instance id, then the others by member id, so
a restarted static member gets the same partitions back.

`RangeAssignor` and `RoundRobinAssignor` follow Kafka's classes of the same name;
`StickyAssignor` is in `coordinator_client.sticky`.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from aiokafka.structs import TopicPartition

from coordinator_protocol.consumer import ConsumerProtocolAssignment, TopicPartitions

__all__ = [
    "AbstractAssignor",
    "Assignment",
    "Assignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "Subscription",
    "from_topic_partitions",
    "sorted_members",
    "to_topic_partitions",
]


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's subscription as the leader sees it (decoded JoinGroup metadata)."""

    topics: Sequence[str]
    user_data: bytes | None = None
    owned_partitions: Sequence[TopicPartition] = ()
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one member is given: its partitions and the assignor's opaque user data."""

    partitions: Sequence[TopicPartition] = ()
    user_data: bytes | None = None

    def encode(self) -> bytes:
        """The SyncGroup assignment bytes of the "consumer" protocol."""
        return ConsumerProtocolAssignment(
            to_topic_partitions(self.partitions), self.user_data
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        """Parse SyncGroup assignment bytes (empty bytes: no partitions).

        Raises:
            InvalidConsumerProtocolError: not an assignment of the "consumer" protocol.
        """
        decoded = ConsumerProtocolAssignment.decode(data)
        return cls(tuple(from_topic_partitions(decoded.partitions)), decoded.user_data)


@runtime_checkable
class Assignor(Protocol):
    """What the group member needs of an assignor."""

    @property
    def name(self) -> str:
        """The protocol name sent in JoinGroup ("range", "roundrobin", "sticky", ...)."""
        ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Assign the partitions to the members (keyed by member id).

        Args:
            partitions_per_topic: the partition count of every subscribed topic that
                exists; a topic missing here has no partitions to give.
            subscriptions: every member's subscription, by member id.

        Returns:
            An assignment for every member of `subscriptions` (maybe empty).
        """
        ...

    def subscription_user_data(self, topics: Set[str]) -> bytes | None:
        """The user_data this member sends with its subscription."""
        ...

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """This member received `assignment` in generation `generation_id`."""
        ...


class AbstractAssignor(ABC):
    """Base for assignors that only map partitions (Kafka's AbstractPartitionAssignor):
    subclasses implement `assign_partitions`; no user data."""

    name = ""

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        assigned = self.assign_partitions(partitions_per_topic, subscriptions)
        return {
            member_id: Assignment(tuple(assigned.get(member_id, ()))) for member_id in subscriptions
        }

    @abstractmethod
    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        """Each member's partitions."""

    def subscription_user_data(self, topics: Set[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        return None


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Member ids in Kafka's `MemberInfo` order: static members first, by
    group_instance_id, then dynamic members by member id."""

    def key(member_id: str) -> tuple[int, str, str]:
        instance_id = subscriptions[member_id].group_instance_id
        if instance_id is not None:
            return (0, instance_id, member_id)
        return (1, member_id, "")

    return sorted(subscriptions, key=key)


def to_topic_partitions(partitions: Sequence[TopicPartition]) -> list[TopicPartitions]:
    """Group partitions by topic, in first-seen topic order, for the wire."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [TopicPartitions(topic, indexes) for topic, indexes in by_topic.items()]


def from_topic_partitions(items: Sequence[TopicPartitions]) -> list[TopicPartition]:
    return [TopicPartition(item.topic, index) for item in items for index in item.partitions]


class RangeAssignor(AbstractAssignor):
    """Kafka's RangeAssignor: per topic, the members subscribed to it (in member order)
    get consecutive ranges; the first `partitions % members` get one more.

    Example (Kafka's): members C0 and C1 both subscribed to t0 and t1 of 3 partitions each
    get C0: [t0p0, t0p1, t1p0, t1p1] and C1: [t0p2, t1p2].
    """

    name = "range"

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        order = sorted_members(subscriptions)
        assignment: dict[str, list[TopicPartition]] = {member: [] for member in order}
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            count = partitions_per_topic.get(topic)
            if not count:
                continue
            members = [m for m in order if topic in subscriptions[m].topics]
            per_member, extra = divmod(count, len(members))
            for index, member in enumerate(members):
                start = per_member * index + min(index, extra)
                length = per_member + (1 if index < extra else 0)
                assignment[member].extend(
                    TopicPartition(topic, partition) for partition in range(start, start + length)
                )
        return assignment


class RoundRobinAssignor(AbstractAssignor):
    """Kafka's RoundRobinAssignor: every partition of every subscribed topic, sorted by
    topic and partition, goes to the next member (circling in member order) that
    subscribes to its topic.

    Example (Kafka's): C0 subscribed to t0; C1 to t0, t1; C2 to t0, t1, t2, where t0, t1, t2
    have 1, 2, 3 partitions: C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
    """

    name = "roundrobin"

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        order = sorted_members(subscriptions)
        assignment: dict[str, list[TopicPartition]] = {member: [] for member in order}
        if not order:
            return assignment
        topics = {member: set(subscriptions[member].topics) for member in order}
        circle = itertools.cycle(order)
        current = next(circle)
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            for partition in range(partitions_per_topic.get(topic, 0)):
                # Someone subscribes to this topic, so this stops within one turn.
                while topic not in topics[current]:
                    current = next(circle)
                assignment[current].append(TopicPartition(topic, partition))
                current = next(circle)
        return assignment
