"""The assignors' invariants over random groups (members, subscriptions, partition counts and
previous assignments): every subscribed partition assigned exactly once, only to a subscriber
of its topic; balance within Kafka's bounds; members keep what they own where balance allows."""

from __future__ import annotations

from collections import Counter

from assignor_helpers import group, member, metadata, plain, topic_id
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.consumer_groups.assignors.api import (
    GroupSpec,
    SubscribedTopicMetadata,
)
from coordinator_server.consumer_groups.assignors.range import RangeServerAssignor
from coordinator_server.consumer_groups.assignors.uniform import UniformServerAssignor
from coordinator_server.consumer_groups.topics import TopicId

Plain = dict[str, dict[TopicId, set[int]]]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool) -> tuple[GroupSpec, SubscribedTopicMetadata]:
    counts = {topic_id(n): draw(st.integers(0, 12)) for n in range(draw(st.integers(1, 5)))}
    topics = sorted(counts)
    member_ids = [f"m{n}" for n in range(draw(st.integers(1, 7)))]
    if homogeneous:
        shared = draw(st.sets(st.sampled_from(topics)))
        subscriptions = dict.fromkeys(member_ids, shared)
    else:
        subscriptions = {m: draw(st.sets(st.sampled_from(topics))) for m in member_ids}
    # A previous assignment where each partition has at most one owner, subscribed or not
    # (a subscription may have changed since).
    owned: dict[str, dict[TopicId, list[int]]] = {m: {} for m in member_ids}
    for t in topics:
        for p in range(counts[t]):
            owner = draw(st.sampled_from([None, *member_ids]))
            if owner is not None:
                owned[owner].setdefault(t, []).append(p)
    spec = group({m: member(subscriptions[m], owned[m]) for m in member_ids})
    return spec, metadata(counts)


def check_valid(spec: GroupSpec, topics: SubscribedTopicMetadata, result: Plain) -> None:
    assert set(result) <= set(spec.members)
    subscribed = set().union(*(m.subscribed_topic_ids for m in spec.members.values()))
    seen: Counter[tuple[TopicId, int]] = Counter()
    for member_id, partitions in result.items():
        for t, ps in partitions.items():
            assert t in spec.member_subscription(member_id).subscribed_topic_ids
            seen.update((t, p) for p in ps)
    expected = {(t, p) for t in subscribed for p in range(topics.partition_counts[t])}
    assert set(seen) == expected
    assert all(n == 1 for n in seen.values())


def size(partitions: dict[TopicId, set[int]]) -> int:
    return sum(len(ps) for ps in partitions.values())


def owned_subscribed(spec: GroupSpec, member_id: str) -> set[tuple[TopicId, int]]:
    m = spec.member_subscription(member_id)
    return {
        (t, p)
        for t, ps in m.assignment.partitions.items()
        if t in m.subscribed_topic_ids
        for p in ps
    }


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_homogeneous(case: tuple[GroupSpec, SubscribedTopicMetadata]) -> None:
    spec, topics = case
    result = plain(UniformServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    if not result:
        return
    sizes = {m: size(result.get(m, {})) for m in spec.members}
    assert max(sizes.values()) - min(sizes.values()) <= 1
    min_quota = sum(sizes.values()) // len(sizes)
    for member_id in spec.members:
        kept = owned_subscribed(spec, member_id)
        now = {(t, p) for t, ps in result[member_id].items() for p in ps}
        # Within its quota, a member keeps everything it owned; over it, only what the quota
        # allows.
        if len(kept) <= min_quota:
            assert kept <= now
        else:
            assert len(kept & now) >= min_quota


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=False))
def test_uniform_heterogeneous(case: tuple[GroupSpec, SubscribedTopicMetadata]) -> None:
    spec, topics = case
    result = plain(UniformServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    if not result:
        return
    sizes = {m: size(result.get(m, {})) for m in spec.members}
    # Kafka's bound: no partition could move to a subscriber of its topic with two or more
    # fewer partitions than its owner.
    for owner, partitions in result.items():
        for t in partitions:
            for other, m in spec.members.items():
                if t in m.subscribed_topic_ids:
                    assert sizes[owner] - sizes[other] <= 1, (owner, other, t)
    # Already complete and within one everywhere: nothing moves.
    again = group(
        {m: member(s.subscribed_topic_ids, result.get(m, {})) for m, s in spec.members.items()}
    )
    if max(sizes.values()) - min(sizes.values()) <= 1:
        assert plain(UniformServerAssignor().assign(again, topics)) == result


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(lambda homogeneous: groups(homogeneous=homogeneous)))
def test_range(case: tuple[GroupSpec, SubscribedTopicMetadata]) -> None:
    spec, topics = case
    result = plain(RangeServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    for t, count in topics.partition_counts.items():
        subscribers = [m for m, s in spec.members.items() if t in s.subscribed_topic_ids]
        per_member = [len(result[m].get(t, ())) for m in subscribers]
        if per_member:
            assert max(per_member) - min(per_member) <= 1
            assert sum(per_member) == count
