"""The assignors on Kafka's own examples (their javadoc and AbstractStickyAssignorTest),
plus validity, balance and stickiness over random groups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_client import (
    Assignment,
    Assignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
)
from coordinator_client.sticky import decode_user_data, encode_user_data


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def subs(**topics: Sequence[str]) -> dict[str, Subscription]:
    return {member: Subscription(tuple(t)) for member, t in topics.items()}


def owned(
    topics: Sequence[str], partitions: Sequence[TopicPartition], generation: int = 1
) -> Subscription:
    """A subscription that carries what the member had, as our sticky members send it."""
    return Subscription(tuple(topics), user_data=encode_user_data(partitions, generation))


def run(
    assignor: Assignor, counts: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, list[TopicPartition]]:
    return {m: list(a.partitions) for m, a in assignor.assign(counts, subscriptions).items()}


def assert_valid_and_balanced(
    assignment: Mapping[str, Sequence[TopicPartition]],
    counts: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
) -> None:
    """Kafka's verifyValidityAndBalance: every subscribed partition assigned exactly once,
    only to subscribers; and if two members differ by more than one partition, the bigger
    holds nothing the smaller could take."""
    assert set(assignment) == set(subscriptions)
    everything = [p for partitions in assignment.values() for p in partitions]
    assert len(everything) == len(set(everything))
    subscribed = {t for s in subscriptions.values() for t in s.topics}
    assert set(everything) == {tp(t, p) for t in subscribed for p in range(counts.get(t, 0))}
    for member, partitions in assignment.items():
        assert all(p.topic in subscriptions[member].topics for p in partitions)
    for big, big_partitions in assignment.items():
        for small, small_partitions in assignment.items():
            if len(big_partitions) - len(small_partitions) > 1:
                takeable = [p for p in big_partitions if p.topic in subscriptions[small].topics]
                assert not takeable, (big, small, takeable)


# Range


def test_range_kafka_javadoc_example() -> None:
    assignment = run(RangeAssignor(), {"t0": 3, "t1": 3}, subs(C0=["t0", "t1"], C1=["t0", "t1"]))
    assert assignment == {
        "C0": [tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)],
        "C1": [tp("t0", 2), tp("t1", 2)],
    }


def test_range_only_counts_the_subscribers_of_each_topic() -> None:
    assignment = run(
        RangeAssignor(), {"t1": 3, "t2": 2}, subs(c1=["t1"], c2=["t1", "t2"], c3=["t1"])
    )
    assert assignment == {"c1": [tp("t1", 0)], "c2": [tp("t1", 1), tp("t2", 0), tp("t2", 1)],
                          "c3": [tp("t1", 2)]}  # fmt: skip


def test_range_orders_static_members_by_instance_id_first() -> None:
    subscriptions = {
        "a-member": Subscription(("t",)),
        "z-member": Subscription(("t",), group_instance_id="instance-1"),
        "m-member": Subscription(("t",), group_instance_id="instance-2"),
    }
    assignment = run(RangeAssignor(), {"t": 3}, subscriptions)
    assert assignment == {"z-member": [tp("t", 0)], "m-member": [tp("t", 1)],
                          "a-member": [tp("t", 2)]}  # fmt: skip


def test_range_with_more_members_than_partitions_and_missing_topics() -> None:
    assignment = run(RangeAssignor(), {"t": 2}, subs(a=["t", "gone"], b=["t"], c=["t"]))
    assert assignment == {"a": [tp("t", 0)], "b": [tp("t", 1)], "c": []}


# Round robin


def test_roundrobin_kafka_javadoc_examples() -> None:
    same = run(RoundRobinAssignor(), {"t0": 3, "t1": 3}, subs(C0=["t0", "t1"], C1=["t0", "t1"]))
    assert same == {
        "C0": [tp("t0", 0), tp("t0", 2), tp("t1", 1)],
        "C1": [tp("t0", 1), tp("t1", 0), tp("t1", 2)],
    }
    mixed = run(
        RoundRobinAssignor(),
        {"t0": 1, "t1": 2, "t2": 3},
        subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"]),
    )
    assert mixed == {
        "C0": [tp("t0", 0)],
        "C1": [tp("t1", 0)],
        "C2": [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }


# Sticky: Kafka's examples


def test_sticky_kafka_javadoc_example_one() -> None:
    """Three members, four topics of two partitions; then C1 leaves and nothing of C0's or
    C2's moves."""
    counts = {f"t{i}": 2 for i in range(4)}
    topics = list(counts)
    first = run(StickyAssignor(), counts, subs(C0=topics, C1=topics, C2=topics))
    assert first == {
        "C0": [tp("t0", 0), tp("t1", 1), tp("t3", 0)],
        "C1": [tp("t0", 1), tp("t2", 0), tp("t3", 1)],
        "C2": [tp("t1", 0), tp("t2", 1)],
    }
    subscriptions = {"C0": owned(topics, first["C0"]), "C2": owned(topics, first["C2"])}
    second = run(StickyAssignor(), counts, subscriptions)
    assert_valid_and_balanced(second, counts, subscriptions)
    assert set(first["C0"]) <= set(second["C0"])
    assert set(first["C2"]) <= set(second["C2"])
    assert sorted(map(len, second.values())) == [4, 4]
    # Round robin, for contrast, moves C0's t1p1 and C2's t1p0 around.
    assert run(RoundRobinAssignor(), counts, subs(C0=topics, C2=topics))["C0"] == [
        tp("t0", 0), tp("t1", 0), tp("t2", 0), tp("t3", 0)
    ]  # fmt: skip


def test_sticky_kafka_javadoc_example_two() -> None:
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subscriptions = subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"])
    first = run(StickyAssignor(), counts, subscriptions)
    assert first == {
        "C0": [tp("t0", 0)],
        "C1": [tp("t1", 0), tp("t1", 1)],
        "C2": [tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }
    second = run(
        StickyAssignor(),
        counts,
        {"C1": owned(["t0", "t1"], first["C1"]), "C2": owned(["t0", "t1", "t2"], first["C2"])},
    )
    assert second == {
        "C1": [tp("t1", 0), tp("t1", 1), tp("t0", 0)],
        "C2": [tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }


def test_sticky_multiple_consumers_mixed_topic_subscriptions() -> None:
    counts = {"topic1": 3, "topic2": 2}
    subscriptions = subs(consumer1=["topic1"], consumer2=["topic1", "topic2"],
                         consumer3=["topic1"])  # fmt: skip
    assert run(StickyAssignor(), counts, subscriptions) == {
        "consumer1": [tp("topic1", 0), tp("topic1", 2)],
        "consumer2": [tp("topic2", 0), tp("topic2", 1)],
        "consumer3": [tp("topic1", 1)],
    }


def test_sticky_add_and_remove_two_consumers_two_topics() -> None:
    counts = {"topic1": 3, "topic2": 4}
    topics = ["topic1", "topic2"]
    first = run(StickyAssignor(), counts, subs(consumer1=topics, consumer2=topics))
    assert first == {
        "consumer1": [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1), tp("topic2", 3)],
        "consumer2": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)],
    }
    second = run(
        StickyAssignor(),
        counts,
        {
            "consumer1": owned(topics, first["consumer1"]),
            "consumer2": owned(topics, first["consumer2"]),
            "consumer3": owned(topics, []),
            "consumer4": owned(topics, []),
        },
    )
    assert second == {
        "consumer1": [tp("topic1", 0), tp("topic1", 2)],
        "consumer2": [tp("topic1", 1), tp("topic2", 0)],
        "consumer3": [tp("topic2", 1), tp("topic2", 3)],
        "consumer4": [tp("topic2", 2)],
    }
    third = run(
        StickyAssignor(),
        counts,
        {"consumer3": owned(topics, second["consumer3"]),
         "consumer4": owned(topics, second["consumer4"])},
    )  # fmt: skip
    assert third == {
        "consumer3": [tp("topic2", 1), tp("topic2", 3), tp("topic1", 0), tp("topic2", 0)],
        "consumer4": [tp("topic2", 2), tp("topic1", 1), tp("topic1", 2)],
    }


def test_sticky_consumer_owning_min_quota_gets_the_extra_partition() -> None:
    topics = ["topic1", "topic2"]
    assignment = run(
        StickyAssignor(),
        {"topic1": 2, "topic2": 3},
        {"consumer1": owned(topics, [tp("topic1", 0), tp("topic2", 1)]),
         "consumer2": owned(topics, [tp("topic1", 1), tp("topic2", 2)])},
    )  # fmt: skip
    assert assignment == {
        "consumer1": [tp("topic1", 0), tp("topic2", 1), tp("topic2", 0)],
        "consumer2": [tp("topic1", 1), tp("topic2", 2)],
    }


def test_sticky_more_owners_over_quota_than_extra_slots() -> None:
    topics = ["topic1", "topic2"]
    counts = {"topic1": 2, "topic2": 2}
    subscriptions = {
        "consumer1": owned(topics, [tp("topic1", 0), tp("topic2", 0)]),
        "consumer2": owned(topics, [tp("topic1", 1), tp("topic2", 1)]),
        "consumer3": owned(topics, []),
    }
    assignment = run(StickyAssignor(), counts, subscriptions)
    assert_valid_and_balanced(assignment, counts, subscriptions)
    # One of the two over-quota owners gives up one partition, to the new member; all
    # the others stay where they were (Kafka picks which owner by hash order; we by id).
    assert assignment == {
        "consumer1": [tp("topic1", 0), tp("topic2", 0)],
        "consumer2": [tp("topic1", 1)],
        "consumer3": [tp("topic2", 1)],
    }


def test_sticky_only_trusts_the_newest_generation() -> None:
    topics = ["t"]
    subscriptions = {
        # c1 was in generation 2 and had everything; c2 claims partitions from generation 1.
        "c1": owned(topics, [tp("t", 0), tp("t", 1)], generation=2),
        "c2": owned(topics, [tp("t", 2), tp("t", 3)], generation=1),
        "c3": owned(topics, [tp("t", 2)], generation=2),
    }
    assignment = run(StickyAssignor(), {"t": 6}, subscriptions)
    # c2's stale claim counts for nothing: t-2 stays with c3, and c2 is filled like a
    # newcomer (round-robin with c3 over what is left).
    assert assignment == {
        "c1": [tp("t", 0), tp("t", 1)],
        "c2": [tp("t", 3), tp("t", 5)],
        "c3": [tp("t", 2), tp("t", 4)],
    }


def test_sticky_drops_partitions_two_members_claim_in_one_generation() -> None:
    topics = ["t"]
    subscriptions = {
        "c1": owned(topics, [tp("t", 0), tp("t", 1)]),
        "c2": owned(topics, [tp("t", 1), tp("t", 2)]),
    }
    assignment = run(StickyAssignor(), {"t": 4}, subscriptions)
    # t-1 is claimed by both: neither keeps it for being the owner (c1 gets it back only
    # in the round-robin fill).
    assert assignment == {"c1": [tp("t", 0), tp("t", 1)], "c2": [tp("t", 2), tp("t", 3)]}


def test_sticky_falls_back_to_owned_partitions_without_user_data() -> None:
    subscriptions = {
        "c1": Subscription(("t",), owned_partitions=(tp("t", 2), tp("t", 3))),
        "c2": Subscription(("t",), owned_partitions=(tp("t", 0), tp("t", 1))),
    }
    assert run(StickyAssignor(), {"t": 4}, subscriptions) == {
        "c1": [tp("t", 2), tp("t", 3)],
        "c2": [tp("t", 0), tp("t", 1)],
    }


def test_sticky_member_side_carries_its_assignment_to_the_next_subscription() -> None:
    assignor = StickyAssignor()
    assert assignor.subscription_user_data({"t"}) is None
    assignor.on_assignment(Assignment((tp("t", 1), tp("t", 4))), generation_id=7)
    data = assignor.subscription_user_data({"t"})
    assert data is not None
    assert decode_user_data(data) == ([tp("t", 1), tp("t", 4)], 7)


def test_sticky_poor_round_robin_scenario_is_balanced() -> None:
    counts = {f"topic{i}": (i % 2) + 1 for i in range(1, 6)}
    all_topics = list(counts)
    subscriptions = subs(
        consumer1=all_topics,
        consumer2=["topic1", "topic3", "topic5"],
        consumer3=["topic1", "topic3", "topic5"],
        consumer4=all_topics,
    )
    assignment = run(StickyAssignor(), counts, subscriptions)
    assert_valid_and_balanced(assignment, counts, subscriptions)
    assert sorted(map(len, assignment.values())) == [2, 2, 2, 2]


def test_sticky_reassignment_after_one_consumer_leaves_nested_subscriptions() -> None:
    counts = {f"topic{i:02d}": i for i in range(1, 20)}
    subscriptions = {
        f"consumer{i:02d}": Subscription(tuple(f"topic{j:02d}" for j in range(1, i + 1)))
        for i in range(1, 20)
    }
    first = run(StickyAssignor(), counts, subscriptions)
    assert_valid_and_balanced(first, counts, subscriptions)
    second_subscriptions = {
        member: owned(s.topics, first[member])
        for member, s in subscriptions.items()
        if member != "consumer10"
    }
    second = run(StickyAssignor(), counts, second_subscriptions)
    assert_valid_and_balanced(second, counts, second_subscriptions)
    kept = sum(len(set(first[m]) & set(second[m])) for m in second)
    moved_away = sum(len(set(first[m]) - set(second[m])) for m in second)
    # Balance may require moving some, but most stay put.
    assert moved_away <= len(first["consumer10"])
    assert kept >= sum(len(first[m]) for m in second) - moved_away


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor(), StickyAssignor()])
def test_no_members_and_no_partitions(assignor: Assignor) -> None:
    assert run(assignor, {}, {}) == {}
    assert run(assignor, {}, subs(a=["t"])) == {"a": []}


# Properties over random groups

members_st = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8,
                      unique=True)  # fmt: skip
topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 7), min_size=1)


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Subscription]]:
    counts = draw(topics_st)
    names = sorted(counts)
    subscriptions = {
        member: Subscription(tuple(draw(st.lists(st.sampled_from(names), min_size=1, unique=True))))
        for member in draw(members_st)
    }
    return counts, subscriptions


@settings(max_examples=150, deadline=None)
@given(groups(), st.data())
def test_sticky_is_valid_balanced_and_sticky_over_random_groups(
    group: tuple[dict[str, int], dict[str, Subscription]], data: st.DataObject
) -> None:
    counts, subscriptions = group
    first = run(StickyAssignor(), counts, subscriptions)
    assert_valid_and_balanced(first, counts, subscriptions)
    # A member leaves and one joins; the survivors report what they had.
    survivors = data.draw(st.lists(st.sampled_from(sorted(subscriptions)), unique=True))
    second_subscriptions = {m: owned(subscriptions[m].topics, first[m]) for m in survivors}
    second_subscriptions["newcomer"] = Subscription(tuple(sorted(counts)))
    second = run(StickyAssignor(), counts, second_subscriptions)
    assert_valid_and_balanced(second, counts, second_subscriptions)
    if all(set(s.topics) == set(counts) for s in subscriptions.values()):
        # Equal subscriptions: a survivor keeps what it had, up to its new quota.
        total = sum(counts.values())
        quota = -(-total // len(second_subscriptions))
        for member in survivors:
            kept = set(first[member]) & set(second[member])
            assert len(kept) >= min(len(first[member]), total // len(second_subscriptions))
            assert len(second[member]) <= quota


@settings(max_examples=100, deadline=None)
@given(groups())
def test_range_and_roundrobin_assign_everything_once(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    counts, subscriptions = group
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        assignment = run(assignor, counts, subscriptions)
        everything = [p for partitions in assignment.values() for p in partitions]
        assert len(everything) == len(set(everything))
        subscribed = {t for s in subscriptions.values() for t in s.topics}
        assert set(everything) == {tp(t, p) for t in subscribed for p in range(counts[t])}
