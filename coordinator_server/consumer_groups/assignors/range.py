"""Kafka's `range` server-side assignor (RangeServerAssignor): each topic's partitions cut into
contiguous ranges, one per subscriber, in the order of the subscribers.

Subscribers are ordered static members first (by instance id), then the others by member id,
so a static member that restarts under a new member id keeps its ranges. A topic of P
partitions and S subscribers gives each P//S partitions and the first P%S one more. Topics
with the same partition count and the same subscribers get the same ranges (co-partitioned
topics line up, what range is chosen for). The assignment depends on the members and
partition counts only, not on the current one: it is not sticky (Kafka's is not either).

Racks (KIP-881, as Kafka's client-side RangeAssignor; Kafka's server-side one ignores them):
when members give racks and the partitions' replicas are in racks that make a difference
(`racks.racks_matter`), each member first takes, within its share of the topic, the first
still unassigned partitions with a replica in its rack (a member without a rack takes the
first ones), then the rest is handed out as without racks, each member up to its share.
Topics with the same subscribers and partition count are matched together: a partition
index goes to one member for all of them when that member is rack-local to it in each, so
co-partitioned topics still line up. The shares are those of the plain assignment (P//S
each, P%S members one more, whoever takes it first), so racks never cost balance; a member's
partitions are then a set rather than one range.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from coordinator_server.consumer_groups.assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    PartitionAssignorError,
    PartitionRange,
    Partitions,
    SubscribedTopicDescriber,
    without_cycle_collection,
)
from coordinator_server.consumer_groups.assignors.racks import (
    PartitionRacks,
    member_racks,
    racks_matter,
    topic_racks,
)
from coordinator_server.consumer_groups.topics import TopicId

NAME = "range"


class RangeServerAssignor:
    """Kafka's server-side RangeAssignor."""

    @property
    def name(self) -> str:
        return NAME

    @without_cycle_collection
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
        # Each topic's partition count and subscribers (their positions in `ordered`,
        # ascending). Members share a few subscriptions (all the same one, or a handful): each
        # distinct one is walked once, its members' positions added to each of its topics.
        members_of: dict[AbstractSet[TopicId], list[int]] = {}
        for position, member_id in enumerate(ordered):
            members_of.setdefault(members[member_id].subscribed_topic_ids, []).append(position)
        counts: dict[TopicId, int] = {}
        subscribers: dict[TopicId, list[int]] = {}
        several: set[TopicId] = set()
        for subscribed, positions in members_of.items():
            for topic_id in subscribed:
                known = subscribers.get(topic_id)
                if known is None:
                    count = topics.partition_count(topic_id)
                    if count is None:
                        raise PartitionAssignorError(
                            f"Member is subscribed to a non-existent topic {topic_id.hex()}"
                        )
                    counts[topic_id] = count
                    subscribers[topic_id] = positions
                else:
                    if topic_id not in several:
                        known = subscribers[topic_id] = list(known)
                        several.add(topic_id)
                    known.extend(positions)
        for topic_id in several:
            subscribers[topic_id].sort()

        if member_racks(group_spec):
            by_racks = _assign_with_racks(group_spec, topics, ordered, counts)
            if by_racks is not None:
                return by_racks

        # A topic of P partitions and S subscribers: the k-th subscriber takes
        # [k * (P // S) + min(k, P % S), ... + P // S + (1 if k < P % S)), so only the first
        # min(S, P) take anything: the work is per partition handed out, not per member and
        # topic.
        assigned: list[dict[TopicId, PartitionRange]] = [{} for _ in ordered]
        for topic_id, positions in subscribers.items():
            count = counts[topic_id]
            quota, extra = divmod(count, len(positions))
            start = 0
            for k, position in enumerate(positions[: min(len(positions), count)]):
                end = start + quota + (1 if k < extra else 0)
                assigned[position][topic_id] = PartitionRange(start, end)
                start = end
        target: dict[str, MemberAssignment] = {}
        for member_id, partitions in zip(ordered, assigned, strict=True):
            member_partitions: Partitions = partitions
            target[member_id] = MemberAssignment(member_partitions)
        return GroupAssignment(target)


class _RackTopic:
    """One topic's partitions still to hand out with racks: each subscriber's share (the
    plain assignment's: `quota`, and one more for the first `extra` to go past it), the
    partitions taken, and cursors past which every partition is taken, over all of them and
    over those with a replica in each rack."""

    __slots__ = (
        "assigned",
        "cursor",
        "extra",
        "left",
        "pool_cursors",
        "pools",
        "quota",
        "racks",
        "subscribers",
        "taken",
        "topic_id",
    )

    def __init__(
        self, topic_id: TopicId, count: int, subscribers: list[str], racks: PartitionRacks
    ) -> None:
        self.topic_id = topic_id
        self.subscribers = subscribers
        self.racks = racks
        self.quota, self.extra = divmod(count, len(subscribers))
        self.assigned = dict.fromkeys(subscribers, 0)
        self.taken = bytearray(count)
        self.left = count
        self.cursor = 0
        pools: dict[str, list[int]] = {}
        for partition, replica_racks in enumerate(racks):
            for rack in replica_racks:
                pool = pools.get(rack)
                if pool is None:
                    pools[rack] = [partition]
                else:
                    pool.append(partition)
        self.pools = pools
        self.pool_cursors = dict.fromkeys(pools, 0)

    def max_assignable(self, member_id: str) -> int:
        share = self.quota + (1 if self.extra > 0 else 0)
        return max(0, share - self.assigned[member_id])

    def take(self, member_id: str, partitions: list[int], out: dict[TopicId, set[int]]) -> None:
        before = self.assigned[member_id]
        self.assigned[member_id] = before + len(partitions)
        if before + len(partitions) > self.quota:
            self.extra -= 1
        taken = self.taken
        for partition in partitions:
            taken[partition] = 1
        self.left -= len(partitions)
        owned = out.get(self.topic_id)
        if owned is None:
            out[self.topic_id] = set(partitions)
        else:
            owned.update(partitions)

    def first_free(self, limit: int, rack: str | None = None) -> list[int]:
        """Up to `limit` untaken partitions, the first ones (with a replica in `rack` when
        given); moves the cursor past them."""
        if rack is None:
            pool: Sequence[int] = range(len(self.taken))
            position = self.cursor
        else:
            pool = self.pools.get(rack, ())
            position = self.pool_cursors.get(rack, 0)
        taken = self.taken
        found: list[int] = []
        while position < len(pool) and len(found) < limit:
            partition = pool[position]
            if not taken[partition]:
                found.append(partition)
            position += 1
        if rack is None:
            self.cursor = position
        elif rack in self.pool_cursors:
            self.pool_cursors[rack] = position
        return found


def _assign_with_racks(
    spec: GroupSpec,
    topics: SubscribedTopicDescriber,
    ordered: list[str],
    counts: dict[TopicId, int],
) -> GroupAssignment | None:
    """KIP-881's rack-aware range assignment; None when racks make no difference to any
    topic (the plain assignment then stands)."""
    members = spec.members
    rack_of = {m: members[m].rack_id or None for m in ordered}
    subscribers: dict[TopicId, list[str]] = {topic_id: [] for topic_id in counts}
    for member_id in ordered:
        for topic_id in members[member_id].subscribed_topic_ids:
            subscribers[topic_id].append(member_id)
    states: dict[TopicId, _RackTopic] = {}
    needing: set[TopicId] = set()
    for topic_id in sorted(counts):
        count = counts[topic_id]
        if count == 0:
            continue
        racks = topic_racks(topics, topic_id, count)
        states[topic_id] = state = _RackTopic(topic_id, count, subscribers[topic_id], racks)
        consumer_racks = {rack for m in state.subscribers if (rack := rack_of[m]) is not None}
        if racks and racks_matter(consumer_racks, (racks,)):
            needing.add(topic_id)
    if not needing:
        return None

    out: dict[str, dict[TopicId, set[int]]] = {member_id: {} for member_id in ordered}
    # Topics with the same subscribers and partition count are matched together.
    alike: dict[tuple[tuple[str, ...], int], list[_RackTopic]] = {}
    for state in states.values():
        alike.setdefault((tuple(state.subscribers), len(state.taken)), []).append(state)
    for group in alike.values():
        if len(group) > 1:
            _assign_copartitioned(group, rack_of, out)
        elif group[0].topic_id in needing:
            _assign_ranges(group[0], rack_of, out, by_rack=True)
    for state in states.values():
        _assign_ranges(state, rack_of, out, by_rack=False)
        if state.left:
            raise PartitionAssignorError("Partitions were left unassigned")
    return GroupAssignment({member_id: MemberAssignment(out[member_id]) for member_id in ordered})


def _assign_ranges(
    state: _RackTopic,
    rack_of: dict[str, str | None],
    out: dict[str, dict[TopicId, set[int]]],
    *,
    by_rack: bool,
) -> None:
    """Each subscriber in order takes the first untaken partitions up to its share: with a
    replica in its rack when `by_rack` (any when it has no rack)."""
    for member_id in state.subscribers:
        if not state.left:
            return
        limit = state.max_assignable(member_id)
        if limit == 0:
            continue
        found = state.first_free(limit, rack_of[member_id] if by_rack else None)
        if found:
            state.take(member_id, found, out[member_id])


def _assign_copartitioned(
    group: list[_RackTopic],
    rack_of: dict[str, str | None],
    out: dict[str, dict[TopicId, set[int]]],
) -> None:
    """Partition by partition index, the first subscriber with room that is rack-local to
    that partition of every topic of the group (a subscriber without a rack is local to
    all) takes it in every topic. The topics' states move in step (same subscribers, same
    counts, the same takes), so the first topic's room is every topic's."""
    first = group[0]
    position = {member_id: index for index, member_id in enumerate(first.subscribers)}
    # Subscribers by rack (None: without one), in order, with a cursor past those whose
    # room is gone (room only shrinks).
    by_rack: dict[str | None, list[str]] = {}
    for member_id in first.subscribers:
        by_rack.setdefault(rack_of[member_id], []).append(member_id)
    cursors = dict.fromkeys(by_rack, 0)

    def first_with_room(rack: str | None) -> str | None:
        candidates = by_rack.get(rack)
        if candidates is None:
            return None
        index = cursors[rack]
        while index < len(candidates) and first.max_assignable(candidates[index]) == 0:
            index += 1
        cursors[rack] = index
        return candidates[index] if index < len(candidates) else None

    for partition in range(len(first.taken)):
        common: set[str] | None = None
        for state in group:
            racks = state.racks[partition] if state.racks else ()
            common = set(racks) if common is None else common.intersection(racks)
        best: str | None = first_with_room(None)
        for rack in common or ():
            candidate = first_with_room(rack)
            if candidate is not None and (best is None or position[candidate] < position[best]):
                best = candidate
        if best is None:
            continue
        for state in group:
            state.take(best, [partition], out[best])
