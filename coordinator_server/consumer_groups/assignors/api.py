"""The server-side assignor's interface, as Kafka's (`ConsumerGroupPartitionAssignor` and the
types around it): what the group coordinator hands an assignor and what it gets back.

An assignor sees the group as a `GroupSpec` (each member's subscription, rack, static instance
id and current target assignment) and the subscribed topics through a
`SubscribedTopicDescriber` (partition counts and partition racks), and answers a
`GroupAssignment`: member id -> topic id -> partitions.

Topic ids are `topics.TopicId`, plain `bytes`, the 16 bytes of Kafka's Uuid: they hash and
compare fast (the assignors key every map by them, 50,000 partitions at a time) and need no
conversion from the records that carry them. They order bytewise; Kafka's Uuid orders by two
signed longs, so ties broken by topic id can differ from Kafka's when an id's first or ninth
byte is 0x80 or above.

Assignments are read-only by contract: an assignor returns a member's current assignment
object itself when it keeps it unchanged (as Kafka does), so callers never mutate what they
pass in or get back.
"""

from __future__ import annotations

import enum
import functools
import gc
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import ParamSpec, Protocol, TypeVar

from coordinator_server.consumer_groups.topics import TopicId

Partitions = Mapping[TopicId, AbstractSet[int]]
"""Topic id -> partition indexes: one member's assignment, read-only."""

EMPTY_PARTITIONS: Partitions = {}


class PartitionAssignorError(Exception):
    """Kafka's PartitionAssignorException: the group cannot be assigned as it is (a member is
    subscribed to a topic the metadata does not know). The group keeps its previous target."""


class SubscriptionType(enum.Enum):
    """HOMOGENEOUS when every member subscribes to the same topics: the assignors then take
    their faster path, which needs no per-topic bookkeeping."""

    HOMOGENEOUS = "Homogeneous"
    HETEROGENEOUS = "Heterogeneous"


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """A member's partitions, topic id -> partition indexes."""

    partitions: Partitions = field(default_factory=dict)


EMPTY_ASSIGNMENT = MemberAssignment(EMPTY_PARTITIONS)


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """The target assignment of every member, by member id."""

    members: Mapping[str, MemberAssignment]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What the assignor knows of a member: its rack and static instance id (None when not
    given), the topics it subscribes to and its current target assignment."""

    subscribed_topic_ids: AbstractSet[TopicId]
    assignment: MemberAssignment = EMPTY_ASSIGNMENT
    rack_id: str | None = None
    instance_id: str | None = None


class GroupSpec:
    """The group as an assignor sees it: members in a fixed order (the order given, which
    makes the assignments reproducible), the subscription type and who owns which partition
    in the current target assignment."""

    __slots__ = ("_owners", "members", "subscription_type")

    def __init__(
        self,
        members: Mapping[str, MemberSubscription],
        subscription_type: SubscriptionType | None = None,
    ) -> None:
        self.members = members
        self.subscription_type = (
            subscription_type
            if subscription_type is not None
            else subscription_type_of(members.values())
        )
        self._owners: dict[TopicId, dict[int, str]] | None = None

    @property
    def member_ids(self) -> Collection[str]:
        return self.members.keys()

    def member_subscription(self, member_id: str) -> MemberSubscription:
        return self.members[member_id]

    def member_assignment(self, member_id: str) -> MemberAssignment:
        return self.members[member_id].assignment

    def partition_owners(self, topic_id: TopicId) -> Mapping[int, str]:
        """Partition -> the member that owns it in the current target assignment."""
        return self._inverted().get(topic_id, {})

    def is_partition_assigned(self, topic_id: TopicId, partition: int) -> bool:
        return partition in self.partition_owners(topic_id)

    def _inverted(self) -> dict[TopicId, dict[int, str]]:
        # Built on first use: range never asks, and the uniform assignor asks for every
        # partition, so one pass over the assignments beats a scan per question.
        if self._owners is None:
            owners: dict[TopicId, dict[int, str]] = {}
            for member_id, member in self.members.items():
                for topic_id, partitions in member.assignment.partitions.items():
                    by_partition = owners.setdefault(topic_id, {})
                    for partition in partitions:
                        by_partition[partition] = member_id
            self._owners = owners
        return self._owners


def subscription_type_of(members: Collection[MemberSubscription]) -> SubscriptionType:
    """HOMOGENEOUS when every member subscribes to the same topics (an empty group too)."""
    first: AbstractSet[TopicId] | None = None
    for member in members:
        if first is None:
            first = member.subscribed_topic_ids
        elif member.subscribed_topic_ids != first:
            return SubscriptionType.HETEROGENEOUS
    return SubscriptionType.HOMOGENEOUS


class SubscribedTopicDescriber(Protocol):
    """The metadata of the topics the group subscribes to."""

    def partition_count(self, topic_id: TopicId) -> int | None:
        """The topic's number of partitions, None when the topic is unknown."""
        ...

    def racks_for_partition(self, topic_id: TopicId, partition: int) -> AbstractSet[str]:
        """The racks of the partition's replicas (empty when unknown)."""
        ...

    def topic_racks(self, topic_id: TopicId) -> Sequence[AbstractSet[str]]:
        """The racks of each partition's replicas by partition index; empty when none is
        known (what an assignor reads once per topic instead of once per partition)."""
        ...


@dataclass(frozen=True, slots=True)
class SubscribedTopicMetadata:
    """A `SubscribedTopicDescriber` over plain maps: partition counts by topic id, and the
    racks of each partition's replicas, by partition index, for the topics where they are
    known."""

    partition_counts: Mapping[TopicId, int]
    partition_racks: Mapping[TopicId, Sequence[AbstractSet[str]]] = field(default_factory=dict)

    def partition_count(self, topic_id: TopicId) -> int | None:
        return self.partition_counts.get(topic_id)

    def racks_for_partition(self, topic_id: TopicId, partition: int) -> AbstractSet[str]:
        racks = self.partition_racks.get(topic_id, ())
        return racks[partition] if 0 <= partition < len(racks) else _NO_RACKS

    def topic_racks(self, topic_id: TopicId) -> Sequence[AbstractSet[str]]:
        return self.partition_racks.get(topic_id, ())


_NO_RACKS: AbstractSet[str] = frozenset()


class PartitionAssignor(Protocol):
    """A server-side assignor, chosen by name (`group.consumer.assignors`)."""

    @property
    def name(self) -> str: ...

    def assign(self, group_spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        """The group's new target assignment; raises PartitionAssignorError when the group
        cannot be assigned."""
        ...


class PartitionRange(AbstractSet[int]):
    """The partitions start..end-1 as a set, without storing them: the range assignor's
    answer for a member of a topic with thousands of partitions."""

    __slots__ = ("end", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    def __contains__(self, partition: object) -> bool:
        return isinstance(partition, int) and self.start <= partition < self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end))

    def __len__(self) -> int:
        return max(0, self.end - self.start)

    def __repr__(self) -> str:
        return f"PartitionRange({self.start}, {self.end})"


_P = ParamSpec("_P")
_R = TypeVar("_R")


def without_cycle_collection(assign: Callable[_P, _R]) -> Callable[_P, _R]:
    """`assign` run with Python's cyclic garbage collector paused (and resumed after, if it
    ran before).

    Why: an assignment of 50,000 partitions allocates tens of thousands of sets and dicts,
    none of them in a reference cycle (reference counting frees every one), yet each 700
    allocations start a collection, and every so often one that walks the whole heap: the
    coordinator's groups, offsets and records. Measured with
    `tests/consumer_groups/bench_assignor.py` (1,000 members x 1,000 topics x 50,000
    partitions, heterogeneous, first assignment): 45 ms with the collector running, 21 ms
    paused, with only the benchmark's own objects on the heap; the larger the heap, the
    larger the difference."""

    @functools.wraps(assign)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not gc.isenabled():
            return assign(*args, **kwargs)
        gc.disable()
        try:
            return assign(*args, **kwargs)
        finally:
            gc.enable()

    return paused
