"""Builders shared by the assignor tests and the benchmark: groups and topics from plain maps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator_server.consumer_groups.assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    SubscribedTopicMetadata,
    SubscriptionType,
)
from coordinator_server.consumer_groups.topics import TopicId

Owned = Mapping[TopicId, Iterable[int]]


def topic_id(n: int) -> TopicId:
    """A 16-byte topic id that sorts by n."""
    return n.to_bytes(16, "big")


def member(
    topics: Iterable[TopicId],
    owned: Owned | None = None,
    instance_id: str | None = None,
    rack_id: str | None = None,
) -> MemberSubscription:
    return MemberSubscription(
        subscribed_topic_ids=frozenset(topics),
        assignment=MemberAssignment({t: set(ps) for t, ps in (owned or {}).items()}),
        instance_id=instance_id,
        rack_id=rack_id,
    )


def group(
    members: Mapping[str, MemberSubscription], subscription_type: SubscriptionType | None = None
) -> GroupSpec:
    return GroupSpec(dict(members), subscription_type)


def metadata(counts: Mapping[TopicId, int]) -> SubscribedTopicMetadata:
    return SubscribedTopicMetadata(dict(counts))


def plain(assignment: GroupAssignment) -> dict[str, dict[TopicId, set[int]]]:
    """The assignment as plain dicts and sets, empty topics left out, for comparisons."""
    return {
        member_id: {t: set(ps) for t, ps in target.partitions.items() if ps}
        for member_id, target in assignment.members.items()
    }
