"""Kafka's `uniform` server-side assignor (UniformServerAssignor): partitions spread evenly over the
members, each member keeping what it owns wherever the balance allows.

Two builders, chosen by the group's subscription type, as Kafka's (the split of a
heterogeneous group into parts is ours; Kafka runs its heterogeneous builder over the whole):

- homogeneous (every member subscribes to the same topics): each member has a quota of
  total/members partitions, the first total%members members (in the group's order) one more;
  a member keeps its current partitions up to its quota, and the partitions nobody keeps go to
  the members under quota. Sizes differ by at most one.
- heterogeneous: the group is first cut into the parts its subscriptions make (members linked
  by the topics they share, `components.py`), each part assigned on its own, by the
  homogeneous builder when its members all subscribe to the same topics. Within a part that
  mixes subscriptions, a member keeps its current partitions of the topics it still
  subscribes to; unassigned partitions go, topic by topic, to the topic's least loaded
  subscribers; then partitions move from the most to the least loaded subscribers of each
  topic until no move improves the balance (or after 16 rounds over the topics, Kafka's
  bound on overlapping subscriptions that converge slowly).

Racks (KIP-881's rule, which Kafka's client-side sticky assignors follow and Kafka's
server-side UniformAssignor does not): when members give racks and the partitions' replicas
are in racks that make a difference (`racks.racks_matter`), a partition being handed out
goes preferably to a member with a replica of it in its rack, among the members the balance
lets take one: homogeneous, a member over its quota keeps its local partitions first, and
the members under quota first take the unowned partitions local to them, then the rest as
without racks; heterogeneous, each round of the round-robin gives
its members local partitions first, and a move while balancing takes, of the giver's
partitions, one local to the taker when it has one. Which members give and take, and how
many partitions, are those of the plain assignment: the sizes, the balance and the
partitions kept are the same; only which partition goes where changes. Without racks that
matter, the code path is the plain one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from coordinator_server.consumer_groups.assignors.api import (
    EMPTY_ASSIGNMENT,
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    PartitionAssignorError,
    SubscribedTopicDescriber,
    SubscriptionType,
    without_cycle_collection,
)
from coordinator_server.consumer_groups.assignors.components import independent_parts
from coordinator_server.consumer_groups.assignors.racks import (
    PartitionRacks,
    member_racks,
    racks_matter,
    topic_racks,
)
from coordinator_server.consumer_groups.topics import TopicId

NAME = "uniform"

MAX_BALANCE_ROUNDS = 16
"""Rounds over the topics of the heterogeneous balancing (Kafka's MAX_ITERATION_COUNT): a
round where every subscriber set is identical converges at once; overlapping ones roughly
halve the imbalance per round."""


class UniformServerAssignor:
    """Kafka's UniformAssignor."""

    @property
    def name(self) -> str:
        return NAME

    @without_cycle_collection
    def assign(self, group_spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        if not group_spec.members:
            return GroupAssignment({})
        if group_spec.subscription_type is SubscriptionType.HOMOGENEOUS:
            return _assign_homogeneous(group_spec, topics)
        parts = independent_parts(group_spec)
        if parts is None:
            return _HeterogeneousBuilder(group_spec, topics).build()
        # Each part on its own (`components` says why), homogeneous ones by the faster
        # builder; a member the builder leaves out (it subscribes to nothing) gets nothing.
        assigned: dict[str, MemberAssignment] = {}
        for part in parts:
            if part.subscription_type is SubscriptionType.HOMOGENEOUS:
                assigned.update(_assign_homogeneous(part, topics).members)
            else:
                assigned.update(_HeterogeneousBuilder(part, topics).build().members)
        return GroupAssignment(
            {
                member_id: assigned.get(member_id, EMPTY_ASSIGNMENT)
                for member_id in group_spec.members
            }
        )


def _missing_topic(topic_id: TopicId) -> PartitionAssignorError:
    return PartitionAssignorError(
        f"Members are subscribed to topic {topic_id.hex()} which doesn't exist in the topic "
        "metadata."
    )


def _copy(partitions: Iterable[tuple[TopicId, AbstractSet[int]]]) -> dict[TopicId, set[int]]:
    return {topic_id: set(owned) for topic_id, owned in partitions}


def _assign_homogeneous(spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
    first = next(iter(spec.members.values()))
    subscribed = first.subscribed_topic_ids
    if not subscribed:
        return GroupAssignment({})

    # Partitions nobody owns, topic by topic in topic id order (Kafka's order is its hash
    # set's; any fixed order serves).
    unassigned: list[tuple[TopicId, int]] = []
    total = 0
    for topic_id in sorted(subscribed):
        count = topics.partition_count(topic_id)
        if count is None:
            raise _missing_topic(topic_id)
        owners = spec.partition_owners(topic_id)
        if owners:
            unassigned.extend((topic_id, p) for p in range(count) if p not in owners)
        else:
            unassigned.extend((topic_id, p) for p in range(count))
        total += count

    members = len(spec.members)
    min_quota, extra = divmod(total, members)
    rack_of = _member_racks(spec)
    partition_racks = (
        None if rack_of is None else _racks_if_they_matter(rack_of.values(), topics, subscribed)
    )

    target: dict[str, MemberAssignment] = {}
    # Members with room left, with how much, in the group's order.
    unfilled: list[tuple[str, int]] = []
    for member_id, member in spec.members.items():
        quota = min_quota
        if extra > 0:
            quota += 1
            extra -= 1
        current = member.assignment.partitions
        changed: dict[TopicId, set[int]] | None = None
        for topic_id, owned in current.items():
            if topic_id not in subscribed:
                if changed is None:
                    changed = _copy(current.items())
                del changed[topic_id]
            elif len(owned) <= quota:
                quota -= len(owned)
            else:
                # Over quota: keep the first `quota`, give up the rest.
                if changed is None:
                    changed = _copy(current.items())
                kept = changed[topic_id]
                giving_order: Iterable[int] = owned
                if partition_racks is not None and topic_id in partition_racks:
                    # Its partitions local to it are the ones it keeps first.
                    giving_order = _local_first(owned, partition_racks[topic_id], member.rack_id)
                for partition in giving_order:
                    if quota > 0:
                        quota -= 1
                    else:
                        kept.discard(partition)
                        unassigned.append((topic_id, partition))
                if not kept:
                    del changed[topic_id]
        if quota > 0:
            unfilled.append((member_id, quota))
        # An unchanged assignment is handed back as it came, uncopied.
        target[member_id] = member.assignment if changed is None else MemberAssignment(changed)

    if rack_of is not None and partition_racks is not None:
        _fill_by_rack(target, unfilled, unassigned, rack_of, partition_racks)
        return GroupAssignment(target)

    next_unassigned = 0
    for member_id, room in unfilled:
        if next_unassigned >= len(unassigned):
            break
        grown = _copy(target[member_id].partitions.items())
        for topic_id, partition in unassigned[next_unassigned : next_unassigned + room]:
            growing = grown.get(topic_id)
            if growing is None:
                grown[topic_id] = {partition}
            else:
                growing.add(partition)
        next_unassigned += room
        target[member_id] = MemberAssignment(grown)
    if next_unassigned < len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")
    return GroupAssignment(target)


def _member_racks(spec: GroupSpec) -> dict[str, str | None] | None:
    """Each member's rack (None for none), or None when no member has one."""
    if not member_racks(spec):
        return None
    return {member_id: member.rack_id or None for member_id, member in spec.members.items()}


def _racks_if_they_matter(
    racks: Iterable[str | None],
    topics: SubscribedTopicDescriber,
    topic_ids: Iterable[TopicId],
) -> dict[TopicId, PartitionRacks] | None:
    """The partitions' racks of the topics that have them, when they make a difference to
    members in `racks` (None otherwise)."""
    by_topic: dict[TopicId, PartitionRacks] = {}
    for topic_id in topic_ids:
        count = topics.partition_count(topic_id)
        if count:
            partition_racks = topic_racks(topics, topic_id, count)
            if partition_racks:
                by_topic[topic_id] = partition_racks
    consumer_racks = {rack for rack in racks if rack is not None}
    if not by_topic or not racks_matter(consumer_racks, by_topic.values()):
        return None
    return by_topic


def _local_first(owned: Iterable[int], racks: PartitionRacks, rack: str | None) -> list[int]:
    """`owned`, those with a replica in `rack` first (each group in its order)."""
    if rack is None:
        return list(owned)
    local = [p for p in owned if rack in racks[p]]
    return local + [p for p in owned if rack not in racks[p]]


def _fill_by_rack(
    target: dict[str, MemberAssignment],
    unfilled: list[tuple[str, int]],
    unassigned: list[tuple[TopicId, int]],
    rack_of: dict[str, str | None],
    partition_racks: dict[TopicId, PartitionRacks],
) -> None:
    """The members under quota take the unassigned partitions with a replica in their rack
    first, each up to its room, then the rest in order: the rooms, hence the sizes, are
    those of the plain assignment."""
    # Rack -> positions in `unassigned` of the partitions with a replica there.
    pools: dict[str, list[int]] = {}
    for position, (topic_id, partition) in enumerate(unassigned):
        racks = partition_racks.get(topic_id)
        if racks:
            for replica_rack in racks[partition]:
                pool = pools.get(replica_rack)
                if pool is None:
                    pools[replica_rack] = [position]
                else:
                    pool.append(position)
    taken = bytearray(len(unassigned))
    cursors = dict.fromkeys(pools, 0)
    gained: dict[str, list[tuple[TopicId, int]]] = {}
    rooms: list[tuple[str, int]] = []
    for member_id, room in unfilled:
        rack = rack_of[member_id]
        got: list[tuple[TopicId, int]] = []
        pool = pools.get(rack) if rack is not None else None
        if rack is not None and pool is not None:
            index = cursors[rack]
            while index < len(pool) and len(got) < room:
                position = pool[index]
                if not taken[position]:
                    taken[position] = 1
                    got.append(unassigned[position])
                index += 1
            cursors[rack] = index
        gained[member_id] = got
        rooms.append((member_id, room - len(got)))
    cursor = 0
    for member_id, room in rooms:
        got = gained[member_id]
        while room > 0 and cursor < len(unassigned):
            if not taken[cursor]:
                taken[cursor] = 1
                got.append(unassigned[cursor])
                room -= 1
            cursor += 1
        if got:
            grown = _copy(target[member_id].partitions.items())
            for topic_id, partition in got:
                growing = grown.get(topic_id)
                if growing is None:
                    grown[topic_id] = {partition}
                else:
                    growing.add(partition)
            target[member_id] = MemberAssignment(grown)
    if not all(taken):
        raise PartitionAssignorError("Partitions were left unassigned")


class _HeterogeneousBuilder:
    """Kafka's UniformHeterogeneousAssignmentBuilder. Members are numbered 0..M-1 in the
    group's order; sizes and partition owners are lists indexed by member number."""

    def __init__(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> None:
        self.spec = spec
        self.member_ids = list(spec.members)
        self.sizes = [0] * len(self.member_ids)
        # Topic -> the numbers of its subscribers, ascending.
        self.subscribers: dict[TopicId, list[int]] = {}
        self.partition_counts: dict[TopicId, int] = {}
        # Members share a few subscriptions (the same topics, or a handful of sets): each
        # distinct one is walked once, its members' numbers added to each of its topics.
        members_of: dict[AbstractSet[TopicId], list[int]] = {}
        for index, member in enumerate(spec.members.values()):
            members_of.setdefault(member.subscribed_topic_ids, []).append(index)
        # The topics of one subscription share its list of members (read-only), so that
        # the balancing knows them for one set of subscribers; a topic of several gets its
        # own list.
        unsorted: set[TopicId] = set()
        for subscribed, indexes in members_of.items():
            for topic_id in subscribed:
                subscribers = self.subscribers.get(topic_id)
                if subscribers is None:
                    count = topics.partition_count(topic_id)
                    if count is None:
                        raise _missing_topic(topic_id)
                    self.partition_counts[topic_id] = count
                    self.subscribers[topic_id] = indexes
                else:
                    if topic_id not in unsorted:
                        subscribers = self.subscribers[topic_id] = list(subscribers)
                        unsorted.add(topic_id)
                    subscribers.extend(indexes)
        for topic_id in unsorted:
            self.subscribers[topic_id].sort()
        # Moves made while balancing, and for each list of subscribers (by identity) the
        # count of moves when its sizes were last found within one of each other: sizes
        # change only by a move, so with no move since, they still are.
        self.moves = 0
        self.balanced_at: dict[int, int] = {}
        # Topic -> partition -> owner's number in the target, -1 when unassigned.
        self.owners = {t: [-1] * n for t, n in self.partition_counts.items()}
        # Member number -> its rack, and the racks of the topics that have them: both None
        # unless racks make a difference (then the rack-aware variants run).
        self.rack_of: list[str | None] | None = None
        self.racks: dict[TopicId, PartitionRacks] | None = None
        if member_racks(spec):
            rack_of = [member.rack_id or None for member in spec.members.values()]
            self.racks = _racks_if_they_matter(rack_of, topics, self.partition_counts)
            if self.racks is not None:
                self.rack_of = rack_of
        # Member number -> its target, copied from the current assignment on first change.
        self.target: list[dict[TopicId, set[int]] | None] = [None] * len(self.member_ids)

    def build(self) -> GroupAssignment:
        if not self.partition_counts:
            return GroupAssignment({})
        self._keep_subscribed()
        self._assign_unassigned()
        self._balance()
        return GroupAssignment(
            {
                member_id: (
                    self.spec.members[member_id].assignment
                    if partitions is None
                    else MemberAssignment(partitions)
                )
                for member_id, partitions in zip(self.member_ids, self.target, strict=True)
            }
        )

    def _topic_order_key(self, topic_id: TopicId) -> tuple[float, int, TopicId]:
        # Most partitions per subscriber first (they are the hardest to balance), then fewest
        # subscribers, then topic id for a reproducible order.
        subscribers = len(self.subscribers[topic_id])
        return (-self.partition_counts[topic_id] / subscribers, subscribers, topic_id)

    def _sorted_topics(self, topic_ids: Iterable[TopicId]) -> list[TopicId]:
        return sorted(topic_ids, key=self._topic_order_key)

    def _keep_subscribed(self) -> None:
        """Members keep their current partitions of the topics they still subscribe to."""
        sizes, all_owners = self.sizes, self.owners
        for index, member in enumerate(self.spec.members.values()):
            current = member.assignment.partitions
            if not current:
                continue
            subscribed = member.subscribed_topic_ids
            kept = 0
            if current.keys() <= subscribed:
                # The usual case, every topic still subscribed: no check per topic.
                for topic_id, partitions in current.items():
                    kept += len(partitions)
                    owners = all_owners[topic_id]
                    for partition in partitions:
                        owners[partition] = index
                sizes[index] += kept
                continue
            for topic_id, partitions in current.items():
                if topic_id in subscribed:
                    kept += len(partitions)
                    owners = all_owners[topic_id]
                    for partition in partitions:
                        owners[partition] = index
                else:
                    changed = self.target[index]
                    if changed is None:
                        changed = self.target[index] = _copy(current.items())
                    del changed[topic_id]
            sizes[index] += kept

    def _assign_unassigned(self) -> None:
        unassigned: dict[TopicId, list[int]] = {}
        for topic_id, owners in self.owners.items():
            free_count = owners.count(-1)
            if free_count == len(owners):
                unassigned[topic_id] = list(range(free_count))
            elif free_count:
                unassigned[topic_id] = [p for p, owner in enumerate(owners) if owner == -1]
        sizes = self.sizes
        size_of = sizes.__getitem__
        targets = self.target
        for topic_id in self._sorted_topics(unassigned):
            free = unassigned[topic_id]
            owners = self.owners[topic_id]
            if self.racks is not None and topic_id in self.racks:
                self._assign_unassigned_by_rack(topic_id, free, self.racks[topic_id])
                continue
            # Kafka's round-robin over the least loaded subscribers, a round at a time: the
            # subscribers by size (ties by number), each round one partition to every one
            # at the lowest level, the level rising and the next members joining it.
            members = sorted(self.subscribers[topic_id], key=size_of)
            level = size_of(members[0])
            in_range = 0
            given = 0
            rounds: list[tuple[int, int]] = []
            while given < len(free):
                # The members at or under the level: sorted by size, found by bisection.
                in_range = bisect_right(members, level, lo=in_range, key=size_of)
                taking = min(in_range, len(free) - given)
                rounds.append((given, taking))
                given += taking
                level += 1
            if len(rounds) == 1:
                # One round (fewer partitions than members at the lowest level, the usual
                # case): the first members one partition each, each member's target reached
                # once.
                for member, partition in zip(members, free, strict=False):
                    owners[partition] = member
                    sizes[member] += 1
                    target = targets[member]
                    if target is None:
                        target = self._partitions_of(member)
                    owned = target.get(topic_id)
                    if owned is None:
                        target[topic_id] = {partition}
                    else:
                        owned.add(partition)
                continue
            gained: dict[int, list[int]] = {}
            for start, taking in rounds:
                # The first `taking` members, one partition each (zip stops at the shorter).
                for member, partition in zip(members, free[start : start + taking], strict=False):
                    owners[partition] = member
                    taken = gained.get(member)
                    if taken is None:
                        gained[member] = [partition]
                    else:
                        taken.append(partition)
            for member, partitions in gained.items():
                sizes[member] += len(partitions)
                target = self._partitions_of(member)
                owned = target.get(topic_id)
                if owned is None:
                    target[topic_id] = set(partitions)
                else:
                    owned.update(partitions)

    def _assign_unassigned_by_rack(
        self, topic_id: TopicId, free: list[int], racks: PartitionRacks
    ) -> None:
        """The round-robin of `_assign_unassigned`, the same members taking as many
        partitions in the same rounds, each taking a partition local to it when one is
        left."""
        rack_of = self.rack_of
        assert rack_of is not None
        sizes = self.sizes
        owners = self.owners[topic_id]
        pools: dict[str, list[int]] = {}
        for position, partition in enumerate(free):
            for replica_rack in racks[partition]:
                pool = pools.get(replica_rack)
                if pool is None:
                    pools[replica_rack] = [position]
                else:
                    pool.append(position)
        cursors = dict.fromkeys(pools, 0)
        taken = bytearray(len(free))
        cursor = 0
        members = sorted(self.subscribers[topic_id], key=sizes.__getitem__)
        gained: dict[int, list[int]] = {}

        def give(member: int, position: int) -> None:
            taken[position] = 1
            partition = free[position]
            owners[partition] = member
            taken_by = gained.get(member)
            if taken_by is None:
                gained[member] = [partition]
            else:
                taken_by.append(partition)

        level = sizes[members[0]]
        in_range = 0
        given = 0
        while given < len(free):
            while in_range < len(members) and sizes[members[in_range]] <= level:
                in_range += 1
            taking = min(in_range, len(free) - given)
            unmatched: list[int] = []
            # The members of the plain round (the first `taking`), so that every member
            # ends the round with the plain assignment's size.
            for member in members[:taking]:
                rack = rack_of[member]
                pool = pools.get(rack) if rack is not None else None
                if rack is not None and pool is not None:
                    index = cursors[rack]
                    while index < len(pool) and taken[pool[index]]:
                        index += 1
                    cursors[rack] = index
                    if index < len(pool):
                        give(member, pool[index])
                        continue
                unmatched.append(member)
            for member in unmatched:
                while taken[cursor]:
                    cursor += 1
                give(member, cursor)
            given += taking
            level += 1
        for member, partitions in gained.items():
            sizes[member] += len(partitions)
            target = self._partitions_of(member)
            owned = target.get(topic_id)
            if owned is None:
                target[topic_id] = set(partitions)
            else:
                owned.update(partitions)

    def _balance(self) -> None:
        # A topic with one subscriber has nothing to balance.
        movable = [t for t, members in self.subscribers.items() if len(members) >= 2]
        if not movable:
            return
        ordered = self._sorted_topics(movable)
        balancer = _Balancer(self.sizes)
        last_moved = -1
        for _ in range(MAX_BALANCE_ROUNDS):
            for position, topic_id in enumerate(ordered):
                if position == last_moved:
                    # A whole round since the last move: nothing more to gain.
                    return
                if self._balance_topic(topic_id, balancer) > 0 or last_moved == -1:
                    last_moved = position

    def _balance_topic(self, topic_id: TopicId, balancer: _Balancer) -> int:
        """Moves partitions of the topic from its most to its least loaded subscribers until
        their sizes are within one of each other or the most loaded own none of it."""
        subscribers = self.subscribers[topic_id]
        if self.balanced_at.get(id(subscribers)) == self.moves:
            return 0
        if balancer.start(subscribers) <= 1:
            self.balanced_at[id(subscribers)] = self.moves
            return 0
        owners = self.owners[topic_id]
        # The topic's partitions grouped by owner, so that a member's are a slice.
        partitions = sorted(range(len(owners)), key=lambda p: (owners[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for position, partition in enumerate(partitions):
            owner = owners[partition]
            start.setdefault(owner, position)
            end[owner] = position + 1

        if self.racks is not None and topic_id in self.racks:
            return self._balance_topic_by_rack(topic_id, balancer, partitions, start, end)
        moved = 0
        while not balancer.is_balanced():
            giver = -1
            while True:
                giver = balancer.next_most_loaded()
                if giver == -1:
                    break
                if end.get(giver, 0) - start.get(giver, 0) <= 0:
                    # It owns none of this topic: out of the range for this topic.
                    balancer.exclude_most_loaded()
                    continue
                break
            if giver == -1:
                break
            end[giver] -= 1
            partition = partitions[end[giver]]
            taker = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._move(topic_id, partition, taker)
            moved += 1
        return moved

    def _balance_topic_by_rack(
        self,
        topic_id: TopicId,
        balancer: _Balancer,
        partitions: list[int],
        start: dict[int, int],
        end: dict[int, int],
    ) -> int:
        """`_balance_topic`'s moves, the same givers and takers, each move taking of the
        giver's partitions one with a replica in the taker's rack when there is one (the
        last of its partitions otherwise)."""
        rack_of = self.rack_of
        assert rack_of is not None
        racks = self.racks[topic_id] if self.racks is not None else ()
        # Built on a giver's first move: its partitions of the topic split into those it
        # just got (unowned before this assignment) and those it owned, each all and by
        # rack, in slice order. It gives what it just got first, so that moving for a rack
        # never costs what members keep.
        choices: dict[int, tuple[list[int], dict[str, list[int]], list[int], dict[str, list[int]]]]
        choices = {}
        moved_partitions: set[int] = set()
        moved = 0
        while not balancer.is_balanced():
            giver = -1
            while True:
                giver = balancer.next_most_loaded()
                if giver == -1:
                    break
                if end.get(giver, 0) - start.get(giver, 0) <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if giver == -1:
                break
            end[giver] -= 1
            taker = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            choice = choices.get(giver)
            if choice is None:
                choice = choices[giver] = self._giving_order(
                    topic_id, giver, partitions[start[giver] : end[giver] + 1], racks
                )
            rack = rack_of[taker]
            partition = -1
            for candidates in (
                choice[1].get(rack) if rack is not None else None,
                choice[0],
                choice[3].get(rack) if rack is not None else None,
                choice[2],
            ):
                while candidates:
                    last = candidates.pop()
                    if last not in moved_partitions:
                        partition = last
                        break
                if partition != -1:
                    break
            moved_partitions.add(partition)
            self._move(topic_id, partition, taker)
            moved += 1
        return moved

    def _giving_order(
        self, topic_id: TopicId, giver: int, slice_: list[int], racks: PartitionRacks
    ) -> tuple[list[int], dict[str, list[int]], list[int], dict[str, list[int]]]:
        """The giver's partitions of the topic it did not own before, all and by rack, then
        those it owned, all and by rack."""
        current = self.spec.members[self.member_ids[giver]].assignment.partitions.get(topic_id)
        fresh: list[int] = []
        owned: list[int] = []
        fresh_by_rack: dict[str, list[int]] = {}
        owned_by_rack: dict[str, list[int]] = {}
        for partition in slice_:
            if current is not None and partition in current:
                owned.append(partition)
                by_rack = owned_by_rack
            else:
                fresh.append(partition)
                by_rack = fresh_by_rack
            for replica_rack in racks[partition]:
                by_rack.setdefault(replica_rack, []).append(partition)
        return fresh, fresh_by_rack, owned, owned_by_rack

    def _partitions_of(self, index: int) -> dict[TopicId, set[int]]:
        partitions = self.target[index]
        if partitions is None:
            current = self.spec.members[self.member_ids[index]].assignment.partitions
            partitions = self.target[index] = _copy(current.items())
        return partitions

    def _move(self, topic_id: TopicId, partition: int, to: int) -> None:
        owners = self.owners[topic_id]
        previous = owners[partition]
        if previous != -1:
            giving = self._partitions_of(previous)
            owned = giving.get(topic_id)
            if owned is not None:
                owned.discard(partition)
                if not owned:
                    del giving[topic_id]
            self.sizes[previous] -= 1
        taking = self._partitions_of(to)
        owned = taking.get(topic_id)
        if owned is None:
            taking[topic_id] = {partition}
        else:
            owned.add(partition)
        owners[partition] = to
        self.sizes[to] += 1
        self.moves += 1


class _Balancer:
    """Kafka's MemberAssignmentBalancer: the subscribers of one topic sorted by size, with two
    ranges over them. The least loaded range [0, least_end) grows rightwards and hands out
    partitions round-robin, its level rising by one each time every member in it has taken
    one; the most loaded range [most_start, most_end) grows leftwards and gives partitions up
    the same way. Balanced when the two levels are within one.

        partitions  |          most loaded ->  [##<- ]#
                    |                        ##[#####]#
                    | [..->  ]  <- least     ##[#####]#
                    | [######]##             ##[#####]#
                    +---------------------------------> members
    """

    __slots__ = (
        "least_end",
        "least_level",
        "members",
        "most_end",
        "most_level",
        "most_start",
        "next_least",
        "next_most",
        "sizes",
    )

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.members: list[int] = []
        self.least_end = self.least_level = self.next_least = 0
        self.most_start = self.most_end = self.most_level = self.next_most = 0

    def start(self, members: Sequence[int]) -> int:
        """Sorts the members by size and resets the ranges; returns the spread of sizes."""
        assert members, "a topic's balancer needs a subscriber"
        sizes = self.sizes
        # By size, ties by member number: the subscribers come in ascending order and the
        # sort is stable, so the size alone is the key (and a C-level one).
        self.members = sorted(members, key=sizes.__getitem__)
        smallest = sizes[self.members[0]]
        largest = sizes[self.members[-1]]
        self.least_end = 0
        self.least_level = smallest - 1
        self.next_least = 0
        self.most_start = self.most_end = len(self.members)
        self.most_level = largest + 1
        self.next_most = len(self.members) - 1
        return largest - smallest

    def next_least_loaded(self) -> int:
        if self.next_least >= self.least_end:
            # Everyone in the range has had one more: raise its level and take in the members
            # now at that level.
            self.least_level += 1
            members, sizes = self.members, self.sizes
            while (
                self.least_end < len(members) and sizes[members[self.least_end]] == self.least_level
            ):
                self.least_end += 1
            self.next_least = 0
        member = self.members[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        """The next member to give a partition up, -1 when none is left."""
        members, sizes = self.members, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # Every member of the range was excluded: restart the level from the member
                # just left of it, so that the range surely grows.
                self.most_level = sizes[members[self.most_start - 1]]
            else:
                self.most_level -= 1
            while self.most_start > 0 and sizes[members[self.most_start - 1]] == self.most_level:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = members[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Takes the member just returned by next_most_loaded out of the most loaded range
        (it has nothing of this topic to give)."""
        members = self.members
        last = self.most_end - 1
        members[self.next_most + 1], members[last] = members[last], members[self.next_most + 1]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_level - self.least_level <= 1
