"""The sticky assignor: balanced, and moving as few partitions as it can (Kafka's
StickyAssignor, KIP-54 and KIP-341).

Each member tells the leader what it had: the assignor's user data carries the member's
previous assignment and its generation (for the eager protocol, where a member gives up
everything before rejoining and so sends no `owned_partitions`); without user data the
subscription's `owned_partitions` are used. Claims from an older generation than another
member's, or the same partition claimed twice in one generation, are not trusted (Kafka's
rules).

Two algorithms, as in Kafka's AbstractStickyAssignor:

- Every member subscribes to the same topics (the common case): each member keeps what it
  owned up to its quota (`partitions // members`, one more for the first
  `partitions % members` members that owned more), then the members under quota are filled
  round-robin with the partitions left, in topic-partition order.
- Subscriptions differ: each member keeps what it owned and may still have; the rest go,
  fewest-candidates first, to the least loaded member that can take them; then partitions
  move from a member to one with at least two fewer that can take them, until no such move
  exists, which is Kafka's definition of a balanced assignment.

User data format: a "consumer" protocol assignment (msgpack, `coordinator_protocol.consumer`) whose
partitions are the previous assignment and whose user_data is the generation as a 4-byte
big-endian signed integer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence, Set

from aiokafka.structs import TopicPartition

from coordinator_client.assignors import (
    AbstractAssignor,
    Assignment,
    Subscription,
    from_topic_partitions,
    to_topic_partitions,
)
from coordinator_protocol.consumer import ConsumerProtocolAssignment, InvalidConsumerProtocolError

__all__ = ["DEFAULT_GENERATION", "StickyAssignor", "decode_user_data", "encode_user_data"]

DEFAULT_GENERATION = -1
"""Kafka's "no generation known"."""


def encode_user_data(partitions: Sequence[TopicPartition], generation: int) -> bytes:
    return ConsumerProtocolAssignment(
        to_topic_partitions(partitions), generation.to_bytes(4, "big", signed=True)
    ).encode()


def decode_user_data(data: bytes) -> tuple[list[TopicPartition], int | None]:
    """(previous assignment, generation or None).

    Raises:
        InvalidConsumerProtocolError: not user data of this assignor.
    """
    decoded = ConsumerProtocolAssignment.decode(data)
    generation = None
    if decoded.user_data is not None:
        if len(decoded.user_data) != 4:
            raise InvalidConsumerProtocolError("sticky user data: generation must be 4 bytes")
        generation = int.from_bytes(decoded.user_data, "big", signed=True)
    return from_topic_partitions(decoded.partitions), generation


class StickyAssignor(AbstractAssignor):
    name = "sticky"

    def __init__(self) -> None:
        self._previous: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    # The member's side: remember what was received, send it with the next subscription.

    def subscription_user_data(self, topics: Set[str]) -> bytes | None:
        if self._previous is None:
            return None
        return encode_user_data(self._previous, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._previous = list(assignment.partitions)
        self._generation = generation_id

    # The leader's side.

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        if not subscriptions:
            return {}
        topic_sets = {member: frozenset(s.topics) for member, s in subscriptions.items()}
        if len(set(topic_sets.values())) == 1:
            owned = _owned_of_newest_generation(subscriptions, topic_sets, partitions_per_topic)
            topics = next(iter(topic_sets.values()))
            return _constrained_assign(_all_partitions(topics, partitions_per_topic), owned)
        owned = _owned_by_newest_claim(subscriptions, topic_sets, partitions_per_topic)
        return _general_assign(topic_sets, partitions_per_topic, owned)


def _member_data(subscription: Subscription) -> tuple[list[TopicPartition], int | None]:
    if subscription.user_data:
        try:
            return decode_user_data(subscription.user_data)
        except InvalidConsumerProtocolError:
            pass
    return list(subscription.owned_partitions), None


def _is_valid(
    tp: TopicPartition, topics: Set[str], partitions_per_topic: Mapping[str, int]
) -> bool:
    return tp.topic in topics and 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0)


def _all_partitions(
    topics: Set[str], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    return [
        TopicPartition(topic, partition)
        for topic in sorted(topics)
        for partition in range(partitions_per_topic.get(topic, 0))
    ]


def _drop_double_claims(owned: dict[str, list[TopicPartition]]) -> None:
    """A partition two members claim in the same generation belongs to neither (Kafka:
    "this will be invalidated and removed from their previous assignment")."""
    claims: dict[TopicPartition, int] = {}
    for partitions in owned.values():
        for tp in set(partitions):
            claims[tp] = claims.get(tp, 0) + 1
    for member, partitions in owned.items():
        seen: set[TopicPartition] = set()
        kept = []
        for tp in partitions:
            if claims[tp] == 1 and tp not in seen:
                kept.append(tp)
                seen.add(tp)
        owned[member] = kept


def _owned_of_newest_generation(
    subscriptions: Mapping[str, Subscription],
    topic_sets: Mapping[str, Set[str]],
    partitions_per_topic: Mapping[str, int],
) -> dict[str, list[TopicPartition]]:
    """Kafka's `allSubscriptionsEqual` rule: only members of the newest generation keep
    claims (members that report no generation count only if nobody reports one)."""
    data = {member: _member_data(s) for member, s in subscriptions.items()}
    generations = [generation for _, generation in data.values() if generation is not None]
    newest = max(generations, default=DEFAULT_GENERATION)
    owned: dict[str, list[TopicPartition]] = {}
    for member, (partitions, generation) in data.items():
        trusted = generation == newest if generation is not None else newest == DEFAULT_GENERATION
        owned[member] = (
            [tp for tp in partitions if _is_valid(tp, topic_sets[member], partitions_per_topic)]
            if trusted
            else []
        )
    _drop_double_claims(owned)
    return owned


def _owned_by_newest_claim(
    subscriptions: Mapping[str, Subscription],
    topic_sets: Mapping[str, Set[str]],
    partitions_per_topic: Mapping[str, int],
) -> dict[str, list[TopicPartition]]:
    """Kafka's `prepopulateCurrentAssignments` rule: per partition, the claim of the
    highest generation wins; two claims of that same generation cancel out."""
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for member, subscription in subscriptions.items():
        partitions, generation = _member_data(subscription)
        rank = DEFAULT_GENERATION if generation is None else generation
        for tp in dict.fromkeys(partitions):
            if not _is_valid(tp, topic_sets[member], partitions_per_topic):
                continue
            current = best.get(tp)
            if current is None or rank > current[0]:
                best[tp] = (rank, [member])
            elif rank == current[0]:
                current[1].append(member)
    owned: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for tp, (_, claimants) in sorted(best.items()):
        if len(claimants) == 1:
            owned[claimants[0]].append(tp)
    return owned


def _constrained_assign(
    all_partitions: list[TopicPartition], owned: Mapping[str, list[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    members = sorted(owned)
    min_quota, extra = divmod(len(all_partitions), len(members))
    max_quota = min_quota + (1 if extra else 0)
    assignment: dict[str, list[TopicPartition]] = {}
    unfilled: list[str] = []
    # Members at min_quota that may take one more, in the order they got there.
    at_min_quota: deque[str] = deque()
    over_min_quota = 0
    kept: set[TopicPartition] = set()
    for member in members:
        partitions = owned[member]
        if len(partitions) <= min_quota:
            keep = partitions
        elif over_min_quota < extra:
            keep = partitions[:max_quota]
            over_min_quota += 1
        else:
            keep = partitions[:min_quota]
        assignment[member] = list(keep)
        kept.update(keep)
        if len(keep) < min_quota:
            unfilled.append(member)
        elif len(keep) == min_quota and max_quota > min_quota:
            at_min_quota.append(member)
    unassigned = iter([tp for tp in all_partitions if tp not in kept])
    # Round-robin up to min_quota; the quotas guarantee enough partitions for it.
    while unfilled:
        next_round = []
        for member in unfilled:
            assignment[member].append(next(unassigned))
            if len(assignment[member]) < min_quota:
                next_round.append(member)
            elif max_quota > min_quota:
                at_min_quota.append(member)
        unfilled = next_round
    # What is left is one partition each for as many members as may go over min_quota.
    for tp in unassigned:
        assignment[at_min_quota.popleft()].append(tp)
    return assignment


def _general_assign(
    topic_sets: Mapping[str, Set[str]],
    partitions_per_topic: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    members = sorted(topic_sets)
    all_topics: set[str] = set().union(*topic_sets.values())
    candidates: dict[TopicPartition, list[str]] = {
        tp: [member for member in members if tp.topic in topic_sets[member]]
        for tp in _all_partitions(all_topics, partitions_per_topic)
    }
    assignment = {member: list(owned[member]) for member in members}
    assigned = {tp for partitions in assignment.values() for tp in partitions}
    unassigned = sorted(
        (tp for tp in candidates if tp not in assigned),
        key=lambda tp: (len(candidates[tp]), tp),
    )
    for tp in unassigned:
        taker = min(candidates[tp], key=lambda member: (len(assignment[member]), member))
        assignment[taker].append(tp)
    previous_owner = {tp: member for member, partitions in owned.items() for tp in partitions}
    # Each move takes a partition from a member with n to one with at most n - 2, which
    # lowers the sum of squared loads, so this ends.
    while _move_one(assignment, candidates, previous_owner):
        pass
    return assignment


def _move_one(
    assignment: dict[str, list[TopicPartition]],
    candidates: Mapping[TopicPartition, list[str]],
    previous_owner: Mapping[TopicPartition, str],
) -> bool:
    for giver in sorted(assignment, key=lambda member: (-len(assignment[member]), member)):
        load = len(assignment[giver])
        # Partitions the giver did not own before move first: they cost no stickiness.
        for tp in sorted(assignment[giver], key=lambda tp: (previous_owner.get(tp) == giver, tp)):
            takers = [m for m in candidates[tp] if len(assignment[m]) < load - 1]
            if takers:
                taker = min(
                    takers,
                    key=lambda m: (previous_owner.get(tp) != m, len(assignment[m]), m),
                )
                assignment[giver].remove(tp)
                assignment[taker].append(tp)
                return True
    return False
