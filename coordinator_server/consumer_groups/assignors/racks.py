"""Rack awareness for the server-side assignors: KIP-881's rule, which Kafka applies in its
client-side assignors (RangeAssignor, the sticky ones) and which Kafka's own server-side
assignors leave out.

A member's rack is the `rack_id` it sends (a consumer's `client.rack`); a partition's racks
are the racks of the brokers holding its replicas. A partition is rack-local to a member
whose rack is one of them: reading from a replica in its own rack (KIP-392) costs the member
no traffic across racks. The assignors prefer to hand a partition to a member in one of its
racks, but never at the price of the balance they promise.

Racks are used only where they can change something: some member has a rack, some
partition's replicas are in one of the members' racks, and the partitions are not all in
the same racks (then every member is as close to every partition as to any other). Without
that, the assignors take their plain path, the same assignment as without racks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet

from coordinator_server.consumer_groups.assignors.api import (
    GroupSpec,
    SubscribedTopicDescriber,
)
from coordinator_server.consumer_groups.topics import TopicId

PartitionRacks = Sequence[AbstractSet[str]]
"""Partition index -> the racks of its replicas (empty when unknown)."""


def member_racks(spec: GroupSpec) -> frozenset[str]:
    """The racks the group's members give (an empty rack id counts as none)."""
    return frozenset(member.rack_id for member in spec.members.values() if member.rack_id)


def topic_racks(
    topics: SubscribedTopicDescriber, topic_id: TopicId, partition_count: int
) -> PartitionRacks:
    """The racks of each of the topic's `partition_count` partitions; an empty sequence when
    none is known, or when the metadata describes another number of partitions (then the
    racks belong to another read of the topic and say nothing reliable)."""
    racks = topics.topic_racks(topic_id)
    if len(racks) != partition_count or not any(racks):
        return ()
    return racks


def racks_matter(
    consumer_racks: AbstractSet[str], partition_racks: Iterable[PartitionRacks]
) -> bool:
    """Whether preferring rack-local members can change an assignment (KIP-881's rule):
    some member has a rack, some partition has a replica in a member's rack, and not every
    partition has replicas in the same racks."""
    if not consumer_racks:
        return False
    every: set[str] = set()
    distinct: set[AbstractSet[str]] = set()
    for racks in partition_racks:
        for partition in racks:
            if partition not in distinct:
                distinct.add(frozenset(partition))
                every.update(partition)
    if every.isdisjoint(consumer_racks):
        return False
    return any(partition != every for partition in distinct)


def rack_matches(rack: str | None, racks: Collection[str]) -> bool:
    """A member with a rack matches the partitions with a replica there."""
    return rack is not None and rack in racks
