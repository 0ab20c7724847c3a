"""Rack-aware assignment (KIP-881's rule in the server-side assignors): partitions go to
members in one of their replicas' racks where the balance allows, the balance and what
members keep are those of the plain assignment, and without racks that matter the answer is
the plain one exactly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from assignor_helpers import group, member, plain, topic_id
from hypothesis import given, settings
from hypothesis import strategies as st
from test_assignor_properties import Plain, check_valid, owned_subscribed, size

from coordinator_server.consumer_groups.assignors.api import (
    GroupSpec,
    MemberSubscription,
    SubscribedTopicMetadata,
    SubscriptionType,
)
from coordinator_server.consumer_groups.assignors.racks import racks_matter
from coordinator_server.consumer_groups.assignors.range import RangeServerAssignor
from coordinator_server.consumer_groups.assignors.uniform import UniformServerAssignor
from coordinator_server.consumer_groups.topics import TopicId

T1, T2, T3 = topic_id(1), topic_id(2), topic_id(3)
RACKS = ("a", "b", "c")


def racked(
    counts: Mapping[TopicId, int], racks: Mapping[TopicId, Sequence[frozenset[str]]]
) -> SubscribedTopicMetadata:
    return SubscribedTopicMetadata(dict(counts), dict(racks))


def round_robin_racks(count: int, replicas: int = 1) -> tuple[frozenset[str], ...]:
    """Partition p on racks p, p+1, ... (mod 3): the layout of a cluster with one broker per
    rack."""
    return tuple(
        frozenset(RACKS[(p + r) % len(RACKS)] for r in range(replicas)) for p in range(count)
    )


def local_count(spec: GroupSpec, topics: SubscribedTopicMetadata, result: Plain) -> int:
    return sum(
        1
        for member_id, partitions in result.items()
        for t, ps in partitions.items()
        for p in ps
        if spec.members[member_id].rack_id in topics.racks_for_partition(t, p)
    )


def without_racks(spec: GroupSpec) -> GroupSpec:
    return group(
        {
            m: MemberSubscription(s.subscribed_topic_ids, s.assignment, None, s.instance_id)
            for m, s in spec.members.items()
        }
    )


def test_the_rule_of_when_racks_matter() -> None:
    two = (frozenset({"a"}), frozenset({"b"}))
    assert racks_matter({"a"}, [two])
    assert not racks_matter(set(), [two])  # no member has a rack
    assert not racks_matter({"c"}, [two])  # no partition in a member's rack
    everywhere = (frozenset({"a", "b"}), frozenset({"a", "b"}))
    assert not racks_matter({"a", "b"}, [everywhere])  # every partition in every rack
    assert not racks_matter({"a"}, [()])  # no partition racks


def test_uniform_homogeneous_gives_each_member_its_rack_local_partitions() -> None:
    topics = racked({T1: 6}, {T1: round_robin_racks(6)})
    spec = group({f"m{r}": member([T1], rack_id=r) for r in ("c", "b", "a")})
    result = plain(UniformServerAssignor().assign(spec, topics))
    assert result == {"mc": {T1: {2, 5}}, "mb": {T1: {1, 4}}, "ma": {T1: {0, 3}}}


def test_uniform_heterogeneous_gives_each_member_its_rack_local_partitions() -> None:
    topics = racked({T1: 6, T2: 3}, {T1: round_robin_racks(6), T2: round_robin_racks(3)})
    spec = group(
        {
            "mc": member([T1, T2], rack_id="c"),
            "mb": member([T1, T2], rack_id="b"),
            "ma": member([T1], rack_id="a"),
        }
    )
    result = plain(UniformServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    assert sorted(size(p) for p in result.values()) == [3, 3, 3]
    assert local_count(spec, topics, result) == 7  # T2-0 on rack a cannot go to `ma`
    assert result["ma"][T1] >= {0, 3}


def test_uniform_keeps_the_balance_when_the_racks_are_lopsided() -> None:
    # Every partition in rack a, two members there and one elsewhere: the one elsewhere
    # still gets its share.
    topics = racked({T1: 6}, {T1: (frozenset({"a"}),) * 5 + (frozenset({"b"}),)})
    spec = group(
        {
            "m1": member([T1], rack_id="a"),
            "m2": member([T1], rack_id="a"),
            "m3": member([T1], rack_id="z"),
        }
    )
    result = plain(UniformServerAssignor().assign(spec, topics))
    assert [size(result[m]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
    assert local_count(spec, topics, result) == 4


def test_uniform_moves_a_rack_local_partition_to_a_new_member() -> None:
    # Two members own 3 partitions each; a third, in rack c, joins: the partitions each
    # gives up are ones on rack c.
    topics = racked({T1: 6}, {T1: round_robin_racks(6)})
    owned = {"m1": {T1: [0, 1, 2]}, "m2": {T1: [3, 4, 5]}}
    for homogeneous in (True, False):
        spec = group(
            {
                "m1": member([T1], owned["m1"], rack_id="a"),
                "m2": member([T1], owned["m2"], rack_id="b"),
                "m3": member([T1], rack_id="c"),
            },
            SubscriptionType.HOMOGENEOUS if homogeneous else SubscriptionType.HETEROGENEOUS,
        )
        result = plain(UniformServerAssignor().assign(spec, topics))
        assert [size(result[m]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
        assert result["m1"][T1] | result["m2"][T1] | result["m3"][T1] == set(range(6))
        assert result["m1"][T1] < {0, 1, 2} and result["m2"][T1] < {3, 4, 5}


def test_uniform_heterogeneous_balancing_moves_rack_local_partitions() -> None:
    # m1 owns all of T1 and T2; m2 (rack c, subscribed to T1 only) is empty: balancing moves
    # T1's partitions on rack c to it.
    topics = racked({T1: 6, T2: 2}, {T1: round_robin_racks(6), T2: round_robin_racks(2)})
    spec = group(
        {
            "m1": member([T1, T2], {T1: range(6), T2: range(2)}, rack_id="a"),
            "m2": member([T1], rack_id="c"),
        }
    )
    result = plain(UniformServerAssignor().assign(spec, topics))
    assert size(result["m1"]) == 4 and size(result["m2"]) == 4
    # Two of T1 are on rack c; the other two moved are the last ones.
    assert {2, 5} <= result["m2"][T1]


def test_range_takes_rack_local_partitions_within_each_share() -> None:
    topics = racked({T1: 6}, {T1: round_robin_racks(6)})
    spec = group({f"m{r}": member([T1], rack_id=r) for r in ("a", "b", "c")})
    result = plain(RangeServerAssignor().assign(spec, topics))
    assert result == {"ma": {T1: {0, 3}}, "mb": {T1: {1, 4}}, "mc": {T1: {2, 5}}}


def test_range_keeps_the_shares_when_the_racks_are_lopsided() -> None:
    topics = racked({T1: 7}, {T1: (frozenset({"a"}),) * 6 + (frozenset({"b"}),)})
    spec = group(
        {"m1": member([T1], rack_id="a"), "m2": member([T1], rack_id="b"), "m3": member([T1])}
    )
    result = plain(RangeServerAssignor().assign(spec, topics))
    # m1 (rack a) takes its share of rack a's first; m2 gets the one partition on b and the
    # rest of its share; m3 (no rack) takes the first unassigned ones.
    assert sorted(size(p) for p in result.values()) == [2, 2, 3]
    assert result["m2"][T1] >= {6}
    check_valid(spec, topics, result)


def test_range_lines_co_partitioned_topics_up_with_racks() -> None:
    topics = racked(
        {T1: 6, T2: 6}, {T1: round_robin_racks(6), T2: round_robin_racks(6, replicas=2)}
    )
    spec = group({f"m{r}": member([T1, T2], rack_id=r) for r in ("a", "b", "c")})
    result = plain(RangeServerAssignor().assign(spec, topics))
    for partitions in result.values():
        assert partitions[T1] == partitions[T2]
    assert result["ma"][T1] == {0, 3}


def test_range_without_racks_that_matter_is_the_plain_range_assignment() -> None:
    spec = group({f"m{r}": member([T1], rack_id=r) for r in ("a", "b", "c")})
    everywhere = racked({T1: 7}, {T1: (frozenset(RACKS),) * 7})
    plain_metadata = racked({T1: 7}, {})
    expected = {"ma": {T1: {0, 1, 2}}, "mb": {T1: {3, 4}}, "mc": {T1: {5, 6}}}
    for topics in (everywhere, plain_metadata):
        assert plain(RangeServerAssignor().assign(spec, topics)) == expected
    # The plain answer's ranges, not sets.
    answer = RangeServerAssignor().assign(spec, everywhere)
    assert type(answer.members["ma"].partitions[T1]).__name__ == "PartitionRange"


@st.composite
def racked_groups(draw: st.DrawFn, homogeneous: bool) -> tuple[GroupSpec, SubscribedTopicMetadata]:
    counts = {topic_id(n): draw(st.integers(0, 12)) for n in range(draw(st.integers(1, 4)))}
    topics = sorted(counts)
    member_ids = [f"m{n}" for n in range(draw(st.integers(1, 7)))]
    if homogeneous:
        shared = draw(st.sets(st.sampled_from(topics)))
        subscriptions = dict.fromkeys(member_ids, shared)
    else:
        subscriptions = {m: draw(st.sets(st.sampled_from(topics))) for m in member_ids}
    owned: dict[str, dict[TopicId, list[int]]] = {m: {} for m in member_ids}
    for t in topics:
        for p in range(counts[t]):
            owner = draw(st.sampled_from([None, *member_ids]))
            if owner is not None:
                owned[owner].setdefault(t, []).append(p)
    rack_choice = st.sampled_from([None, *RACKS])
    racks = {
        t: tuple(
            frozenset(draw(st.sets(st.sampled_from(RACKS), max_size=2))) for _ in range(counts[t])
        )
        for t in topics
        if draw(st.booleans())
    }
    spec = group(
        {m: member(subscriptions[m], owned[m], rack_id=draw(rack_choice)) for m in member_ids}
    )
    return spec, racked(counts, racks)


@settings(max_examples=300, deadline=None)
@given(racked_groups(homogeneous=True))
def test_uniform_homogeneous_with_racks_keeps_sizes_and_as_many_owned_partitions(
    case: tuple[GroupSpec, SubscribedTopicMetadata],
) -> None:
    spec, topics = case
    result = plain(UniformServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    expected = plain(UniformServerAssignor().assign(without_racks(spec), topics))
    # Same sizes member by member, as many partitions kept.
    assert {m: size(result.get(m, {})) for m in spec.members} == {
        m: size(expected.get(m, {})) for m in spec.members
    }
    for member_id in spec.members:
        owned = owned_subscribed(spec, member_id)
        now = {(t, p) for t, ps in result.get(member_id, {}).items() for p in ps}
        before = {(t, p) for t, ps in expected.get(member_id, {}).items() for p in ps}
        # As many kept (which ones: the rack-local first).
        assert len(owned & now) == len(owned & before)


@settings(max_examples=300, deadline=None)
@given(racked_groups(homogeneous=False))
def test_uniform_heterogeneous_with_racks_keeps_kafkas_bound(
    case: tuple[GroupSpec, SubscribedTopicMetadata],
) -> None:
    spec, topics = case
    result = plain(UniformServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    if not result:
        return
    sizes = {m: size(result.get(m, {})) for m in spec.members}
    for owner, partitions in result.items():
        for t in partitions:
            for other, m in spec.members.items():
                if t in m.subscribed_topic_ids:
                    assert sizes[owner] - sizes[other] <= 1, (owner, other, t)
    expected = plain(UniformServerAssignor().assign(without_racks(spec), topics))
    # The same sizes member by member as without racks.
    assert sizes == {m: size(expected.get(m, {})) for m in spec.members}
    # What members keep of what they owned: at least as many as without racks.
    kept = sum(
        len(owned_subscribed(spec, m) & {(t, p) for t, ps in result.get(m, {}).items() for p in ps})
        for m in spec.members
    )
    kept_plain = sum(
        len(
            owned_subscribed(spec, m)
            & {(t, p) for t, ps in expected.get(m, {}).items() for p in ps}
        )
        for m in spec.members
    )
    assert kept >= kept_plain
    # Balanced and complete: nothing moves.
    again = group(
        {
            m: member(s.subscribed_topic_ids, result.get(m, {}), rack_id=s.rack_id)
            for m, s in spec.members.items()
        }
    )
    if max(sizes.values()) - min(sizes.values()) <= 1:
        assert plain(UniformServerAssignor().assign(again, topics)) == result


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(lambda homogeneous: racked_groups(homogeneous=homogeneous)))
def test_range_with_racks_keeps_the_shares(
    case: tuple[GroupSpec, SubscribedTopicMetadata],
) -> None:
    spec, topics = case
    result = plain(RangeServerAssignor().assign(spec, topics))
    check_valid(spec, topics, result)
    expected = plain(RangeServerAssignor().assign(without_racks(spec), topics))
    for t in topics.partition_counts:
        subscribers = [m for m, s in spec.members.items() if t in s.subscribed_topic_ids]
        shares = Counter(len(result[m].get(t, ())) for m in subscribers)
        assert shares == Counter(len(expected[m].get(t, ())) for m in subscribers)
