"""A group cut into its independent parts: the connected components of its subscriptions.

Two members are in the same part when they subscribe to a common topic, or are linked by a
chain of members that do. No partition of one part can go to a member of another, and a
member's load counts only against the members it shares a topic with, so an assignor that
balances within each topic's subscribers (the `uniform` assignor) gives the same guarantees
assigning each part on its own as assigning the whole.

Why it is worth it: a part whose members all subscribe to the same topics is a homogeneous
group, and the homogeneous builder deals each member a quota of whole runs of partitions
instead of handing out every topic round-robin and balancing topic by topic. On the group of
Kafka's assignor benchmark with heterogeneous subscriptions (1,000 members in five buckets,
each bucket subscribed to its own 200 topics), `tests/consumer_groups/bench_assignor.py`
printed 19.4 ms for the first assignment with the heterogeneous builder over the whole group
and 7.8 ms for five homogeneous parts; each member also ends up with a few topics' runs of
partitions rather than one partition of each of 50 topics. Parts that mix subscriptions still
go to the heterogeneous builder, which on a part gives what it gives on the whole: its
round-robin and its moves only involve a topic's subscribers.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from coordinator_server.consumer_groups.assignors.api import (
    GroupSpec,
    MemberSubscription,
    SubscriptionType,
)
from coordinator_server.consumer_groups.topics import TopicId


def independent_parts(spec: GroupSpec) -> list[GroupSpec] | None:
    """The group's parts, each a `GroupSpec` of its members in the group's order, with its
    own subscription type; None when the group is one part."""
    # Members share a few distinct subscriptions: the parts are found over those.
    members_of: dict[AbstractSet[TopicId], list[str]] = {}
    for member_id, member in spec.members.items():
        members_of.setdefault(member.subscribed_topic_ids, []).append(member_id)
    subscriptions = list(members_of)
    if len(subscriptions) < 2:
        return None
    # Union-find over the subscriptions, joined through the topics they share.
    parent = list(range(len(subscriptions)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    first_subscriber: dict[TopicId, int] = {}
    parts = len(subscriptions)
    for index, subscribed in enumerate(subscriptions):
        for topic_id in subscribed:
            other = first_subscriber.setdefault(topic_id, index)
            if other != index:
                a, b = root(index), root(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
                    parts -= 1
    if parts == 1:
        return None
    # Part root -> the subscriptions in it; a part with one subscription is homogeneous.
    subscriptions_in: dict[int, int] = {}
    for index in range(len(subscriptions)):
        top = root(index)
        subscriptions_in[top] = subscriptions_in.get(top, 0) + 1
    members: dict[int, dict[str, MemberSubscription]] = {}
    part_of = {subscribed: root(i) for i, subscribed in enumerate(subscriptions)}
    for member_id, member in spec.members.items():
        top = part_of[member.subscribed_topic_ids]
        in_part = members.get(top)
        if in_part is None:
            in_part = members[top] = {}
        in_part[member_id] = member
    return [
        GroupSpec(
            in_part,
            SubscriptionType.HOMOGENEOUS
            if subscriptions_in[top] == 1
            else SubscriptionType.HETEROGENEOUS,
        )
        for top, in_part in members.items()
    ]
