"""Kafka's assignor tests ported (UniformHomogeneousAssignmentBuilderTest, its predecessor
OptimizedUniformAssignmentBuilderTest, UniformHeterogeneousAssignmentBuilderTest,
RangeAssignorTest): the same groups, the same expected assignments.

Kafka's homogeneous builder walks the subscribed topics in its hash set's order, which for
Kafka's three test topic ids is topic2, topic3, topic1; ours walks them in topic id order. The
homogeneous tests' ids sort in that order so that the expected assignments are Kafka's,
unchanged. The heterogeneous builder breaks ties by topic id, as Kafka's, and range works per
topic: their tests' ids sort as Kafka's do."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import pytest
from assignor_helpers import group, member, metadata, plain, topic_id

from coordinator_protocol.errors import UnsupportedAssignorError
from coordinator_server.consumer_groups.assignors import ASSIGNORS, assignor_named
from coordinator_server.consumer_groups.assignors.api import (
    GroupSpec,
    PartitionAssignorError,
    PartitionRange,
    SubscribedTopicMetadata,
    SubscriptionType,
    without_cycle_collection,
)
from coordinator_server.consumer_groups.assignors.range import RangeServerAssignor
from coordinator_server.consumer_groups.assignors.uniform import UniformServerAssignor
from coordinator_server.consumer_groups.topics import TopicId

HOMO = SubscriptionType.HOMOGENEOUS
HETERO = SubscriptionType.HETEROGENEOUS

T2, T3, T1 = (topic_id(n) for n in range(1, 4))
# Elsewhere, ids in Kafka's order (its Uuid order of the same ids).
H1, H2, H3, H4 = (topic_id(n) for n in range(11, 15))

uniform = UniformServerAssignor()
range_assignor = RangeServerAssignor()


# -- uniform, homogeneous ---------------------------------------------------------------------


def test_homogeneous_one_member_no_topic() -> None:
    spec = group({"A": member([])}, HOMO)
    assert uniform.assign(spec, metadata({T1: 3})).members == {}


def test_homogeneous_member_subscribed_to_missing_topic() -> None:
    spec = group({"A": member([T2])}, HOMO)
    with pytest.raises(PartitionAssignorError):
        uniform.assign(spec, metadata({T1: 3}))


def test_homogeneous_first_assignment_two_members_two_topics() -> None:
    spec = group({"A": member([T1, T3]), "B": member([T1, T3])}, HOMO)
    assert plain(uniform.assign(spec, metadata({T1: 3, T3: 2}))) == {
        "A": {T1: {0}, T3: {0, 1}},
        "B": {T1: {1, 2}},
    }


def test_homogeneous_more_members_than_partitions() -> None:
    spec = group({m: member([T3]) for m in "ABC"}, HOMO)
    assert plain(uniform.assign(spec, metadata({T3: 2}))) == {
        "A": {T3: {0}},
        "B": {T3: {1}},
        "C": {},
    }


def test_homogeneous_unbalanced_previous_assignment() -> None:
    # Kafka walks A's assignment in insertion order (topic1 first); so does a dict.
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 1], T2: [0, 1]}),
            "B": member([T1, T2], {T1: [2], T2: [2]}),
        },
        HOMO,
    )
    assert plain(uniform.assign(spec, metadata({T1: 3, T2: 3}))) == {
        "A": {T1: {0, 1}, T2: {0}},
        "B": {T1: {2}, T2: {1, 2}},
    }


def test_homogeneous_partitions_added() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 2], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1, 2]}),
        },
        HOMO,
    )
    assert plain(uniform.assign(spec, metadata({T1: 6, T2: 5}))) == {
        "A": {T1: {0, 2, 3}, T2: {0, 3, 4}},
        "B": {T1: {1, 4, 5}, T2: {1, 2}},
    }


def test_homogeneous_member_added() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0, 2], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1, 2]}),
            "C": member([T1, T2]),
        },
        HOMO,
    )
    assert plain(uniform.assign(spec, metadata({T1: 3, T2: 3}))) == {
        "A": {T1: {0, 2}},
        "B": {T1: {1}, T2: {1}},
        "C": {T2: {0, 2}},
    }


def test_homogeneous_member_removed() -> None:
    spec = group(
        {
            "A": member([T1, T2], {T1: [0], T2: [0]}),
            "B": member([T1, T2], {T1: [1], T2: [1]}),
        },
        HOMO,
    )
    assert plain(uniform.assign(spec, metadata({T1: 3, T2: 3}))) == {
        "A": {T1: {0}, T2: {0, 2}},
        "B": {T1: {1, 2}, T2: {1}},
    }


def test_homogeneous_subscription_removed() -> None:
    spec = group(
        {
            "A": member([T2], {T1: [0], T2: [0]}),
            "B": member([T2], {T1: [1], T2: [1]}),
        },
        HOMO,
    )
    assert plain(uniform.assign(spec, metadata({T1: 2, T2: 2}))) == {
        "A": {T2: {0}},
        "B": {T2: {1}},
    }


def test_homogeneous_keeps_an_unchanged_assignment_uncopied() -> None:
    spec = group({"A": member([T1], {T1: [0]}), "B": member([T1], {T1: [1]})}, HOMO)
    result = uniform.assign(spec, metadata({T1: 2}))
    assert result.members["A"] is spec.member_assignment("A")


def test_homogeneous_large_group_is_balanced() -> None:
    topics = {topic_id(100 + i): 3 for i in range(99)}
    spec = group({f"member{i}": member(topics) for i in range(1, 50)}, HOMO)
    sizes = [
        sum(map(len, a.values())) for a in plain(uniform.assign(spec, metadata(topics))).values()
    ]
    assert sum(sizes) == 297
    assert max(sizes) - min(sizes) <= 1


# -- uniform, heterogeneous -------------------------------------------------------------------


def test_heterogeneous_two_members_no_topic() -> None:
    spec = group({"A": member([]), "B": member([])}, HETERO)
    assert uniform.assign(spec, metadata({H1: 3})).members == {}


def test_heterogeneous_members_subscribed_to_missing_topics() -> None:
    spec = group({"A": member([H3]), "B": member([H2])}, HETERO)
    with pytest.raises(PartitionAssignorError):
        uniform.assign(spec, metadata({H1: 3}))


def test_heterogeneous_first_assignment_two_members_two_topics() -> None:
    spec = group({"A": member([H1, H3]), "B": member([H3])}, HETERO)
    assert plain(uniform.assign(spec, metadata({H1: 3, H3: 6}))) == {
        "A": {H1: {0, 1, 2}, H3: {4}},
        "B": {H3: {0, 1, 2, 3, 5}},
    }


def test_heterogeneous_more_members_than_partitions() -> None:
    spec = group({"A": member([H3]), "B": member([H3]), "C": member([H1])}, HETERO)
    assert plain(uniform.assign(spec, metadata({H3: 1, H1: 2}))) == {
        "A": {H3: {0}},
        "B": {},
        "C": {H1: {0, 1}},
    }


def test_heterogeneous_unbalanced_previous_assignment() -> None:
    spec = group(
        {
            "A": member([H1], {H1: [0, 1, 2]}),
            "B": member([H1, H2], {H1: [3], H2: [0]}),
            "C": member([H1, H2, H3], {H1: [4, 5], H2: [1, 2, 3], H3: [0, 1, 2, 3]}),
        },
        HETERO,
    )
    assert plain(uniform.assign(spec, metadata({H1: 6, H2: 4, H3: 4}))) == {
        "A": {H1: {0, 1, 2, 5}},
        "B": {H1: {3}, H2: {0, 1, 2, 3}},
        "C": {H1: {4}, H3: {0, 1, 2, 3}},
    }


def test_heterogeneous_partitions_added() -> None:
    spec = group(
        {
            "A": member([H1, H3], {H1: [0, 1, 2, 3], H3: [0, 1]}),
            "B": member([H1, H2, H3, H4], {H2: [0, 1, 2], H4: [0, 1, 2]}),
        },
        HETERO,
    )
    assert plain(uniform.assign(spec, metadata({H1: 6, H2: 5, H3: 3, H4: 3}))) == {
        "A": {H1: {0, 1, 2, 3, 4, 5}, H3: {0, 1, 2}},
        "B": {H2: {0, 1, 2, 3, 4}, H4: {0, 1, 2}},
    }


def test_heterogeneous_member_and_partitions_added() -> None:
    spec = group(
        {
            "A": member([H1], {H1: [0, 2], H2: [0]}),
            "B": member([H1, H2], {H1: [1], H2: [1, 2]}),
            "C": member([H1, H2]),
        },
        HETERO,
    )
    assert plain(uniform.assign(spec, metadata({H1: 6, H2: 7}))) == {
        "A": {H1: {0, 2, 3, 4, 5}},
        "B": {H1: {1}, H2: {1, 2, 6}},
        "C": {H2: {0, 3, 4, 5}},
    }


def test_heterogeneous_member_removed() -> None:
    spec = group(
        {
            "A": member([H1, H3], {H1: [0, 1, 2], H3: [0, 1]}),
            "B": member([H2], {H2: [3, 4, 5, 6]}),
        },
        HETERO,
    )
    assert plain(uniform.assign(spec, metadata({H1: 3, H2: 8, H3: 3}))) == {
        "A": {H1: {0, 1, 2}, H3: {0, 1, 2}},
        "B": {H2: set(range(8))},
    }


def test_heterogeneous_subscription_removed() -> None:
    spec = group(
        {
            "A": member([H1], {H1: [0, 2], H2: [1, 3]}),
            "B": member([H1, H2], {H1: [1], H2: [0, 2, 4]}),
        },
        HETERO,
    )
    assert plain(uniform.assign(spec, metadata({H1: 3, H2: 5}))) == {
        "A": {H1: {0, 1, 2}},
        "B": {H2: {0, 1, 2, 3, 4}},
    }


def test_heterogeneous_partitions_run_out_for_a_new_member() -> None:
    spec = group(
        {
            "A": member([H1, H2, H3], {H1: [0, 1], H2: [0, 1], H3: [0, 1]}),
            "B": member([H1, H2, H3]),
        },
        HETERO,
    )
    assert plain(uniform.assign(spec, metadata({H1: 2, H2: 2, H3: 2}))) == {
        "A": {H2: {0}, H3: {0, 1}},
        "B": {H1: {0, 1}, H2: {1}},
    }


def test_heterogeneous_member_without_subscriptions() -> None:
    spec = group({"A": member([H1]), "B": member([])}, HETERO)
    assert plain(uniform.assign(spec, metadata({H1: 3}))) == {"A": {H1: {0, 1, 2}}, "B": {}}


# -- range ------------------------------------------------------------------------------------


def test_range_one_member_no_topic() -> None:
    spec = group({"A": member([])}, HOMO)
    assert plain(range_assignor.assign(spec, metadata({H1: 3}))) == {"A": {}}


def test_range_member_subscribed_to_missing_topic() -> None:
    spec = group({"A": member([H2])}, HOMO)
    with pytest.raises(PartitionAssignorError):
        range_assignor.assign(spec, metadata({H1: 3}))


def test_range_first_assignment_same_subscriptions() -> None:
    spec = group({"A": member([H1, H3]), "B": member([H1, H3])}, HOMO)
    assert plain(range_assignor.assign(spec, metadata({H1: 3, H3: 2}))) == {
        "A": {H1: {0, 1}, H3: {0}},
        "B": {H1: {2}, H3: {1}},
    }


def test_range_first_assignment_different_subscriptions() -> None:
    spec = group({"A": member([H1, H2]), "B": member([H3]), "C": member([H2, H3])}, HETERO)
    assert plain(range_assignor.assign(spec, metadata({H1: 3, H2: 3, H3: 2}))) == {
        "A": {H1: {0, 1, 2}, H2: {0, 1}},
        "B": {H3: {0}},
        "C": {H2: {2}, H3: {1}},
    }


def test_range_more_members_than_partitions() -> None:
    spec = group({m: member([H1, H3]) for m in "ABC"}, HOMO)
    assert plain(range_assignor.assign(spec, metadata({H1: 3, H3: 2}))) == {
        "A": {H1: {0}, H3: {0}},
        "B": {H1: {1}, H3: {1}},
        "C": {H1: {2}},
    }


def test_range_static_member_keeps_its_range_under_a_new_member_id() -> None:
    topics = metadata({H1: 3})
    before = group(
        {"A": member([H1], instance_id="instanceA"), "B": member([H1], instance_id="instanceB")}
    )
    after = group(
        {"B": member([H1], instance_id="instanceB"), "A1": member([H1], instance_id="instanceA")}
    )
    assert plain(range_assignor.assign(before, topics)) == {"A": {H1: {0, 1}}, "B": {H1: {2}}}
    assert plain(range_assignor.assign(after, topics)) == {"A1": {H1: {0, 1}}, "B": {H1: {2}}}


def test_range_mixed_static_membership() -> None:
    topics = metadata({H1: 5})
    before = group(
        {
            "A": member([H1], instance_id="instanceA"),
            "C": member([H1], instance_id="instanceC"),
            "B": member([H1]),
        }
    )
    after = group(
        {
            "C": member([H1], instance_id="instanceC"),
            "B": member([H1]),
            "A1": member([H1], instance_id="instanceA"),
        }
    )
    expected = {"A": {H1: {0, 1}}, "C": {H1: {2, 3}}, "B": {H1: {4}}}
    assert plain(range_assignor.assign(before, topics)) == expected
    expected["A1"] = expected.pop("A")
    assert plain(range_assignor.assign(after, topics)) == expected


def test_range_member_added_with_more_members_than_partitions() -> None:
    spec = group(
        {
            "A": member([H1, H2], {H1: [0], H2: [0]}),
            "B": member([H1, H2], {H1: [1], H2: [1]}),
            "C": member([H1, H2]),
        },
        HOMO,
    )
    assert plain(range_assignor.assign(spec, metadata({H1: 2, H2: 2}))) == {
        "A": {H1: {0}, H2: {0}},
        "B": {H1: {1}, H2: {1}},
        "C": {},
    }


def test_range_partition_added() -> None:
    spec = group(
        {
            "A": member([H1, H2], {H1: [0, 1], H2: [0, 1]}),
            "B": member([H1, H2], {H1: [2], H2: [2]}),
        },
        HOMO,
    )
    assert plain(range_assignor.assign(spec, metadata({H1: 4, H2: 4}))) == {
        "A": {H1: {0, 1}, H2: {0, 1}},
        "B": {H1: {2, 3}, H2: {2, 3}},
    }


def test_range_member_added() -> None:
    spec = group(
        {
            "A": member([H1, H2], {H1: [0, 1], H2: [0, 1]}),
            "B": member([H1, H2], {H1: [2], H2: [2]}),
            "C": member([H1, H2]),
        },
        HOMO,
    )
    assert plain(range_assignor.assign(spec, metadata({H1: 3, H2: 3}))) == {
        "A": {H1: {0}, H2: {0}},
        "B": {H1: {1}, H2: {1}},
        "C": {H1: {2}, H2: {2}},
    }


def test_range_member_and_partition_added() -> None:
    spec = group(
        {
            "A": member([H1, H2], {H1: [0, 1], H2: [0, 1]}),
            "B": member([H1, H2], {H1: [2], H2: [2]}),
            "C": member([H1]),
        },
        HETERO,
    )
    assert plain(range_assignor.assign(spec, metadata({H1: 4, H2: 3}))) == {
        "A": {H1: {0, 1}, H2: {0, 1}},
        "B": {H1: {2}, H2: {2}},
        "C": {H1: {3}},
    }


def test_range_member_removed() -> None:
    spec = group({"B": member([H1, H2], {H1: [2], H2: [2]})}, HOMO)
    assert plain(range_assignor.assign(spec, metadata({H1: 3, H2: 3}))) == {
        "B": {H1: {0, 1, 2}, H2: {0, 1, 2}},
    }


def test_range_subscriptions_removed() -> None:
    spec = group(
        {
            "A": member([H1], {H1: [0, 1, 2], H2: [0]}),
            "B": member([H1, H2, H3], {H2: [1]}),
            "C": member([H2], {H2: [2], H3: [0, 1]}),
        },
        HETERO,
    )
    assert plain(range_assignor.assign(spec, metadata({H1: 3, H2: 3, H3: 2}))) == {
        "A": {H1: {0, 1}},
        "B": {H1: {2}, H2: {0, 1}, H3: {0, 1}},
        "C": {H2: {2}},
    }


def test_range_answers_ranges() -> None:
    spec = group({"A": member([H1]), "B": member([H1])})
    result = range_assignor.assign(spec, metadata({H1: 5}))
    ranges = result.members["A"].partitions[H1]
    assert isinstance(ranges, PartitionRange)
    assert ranges == {0, 1, 2}
    assert 2 in ranges and 3 not in ranges and len(ranges) == 3


# -- the group spec and the registry ----------------------------------------------------------


def test_subscription_type_is_derived_when_not_given() -> None:
    assert group({"A": member([H1]), "B": member([H1])}).subscription_type is HOMO
    assert group({"A": member([H1]), "B": member([H2])}).subscription_type is HETERO
    assert GroupSpec({}).subscription_type is HOMO


def test_partition_owners() -> None:
    spec = group({"A": member([H1], {H1: [0, 2]}), "B": member([H1], {H1: [1]})})
    assert spec.is_partition_assigned(H1, 2)
    assert not spec.is_partition_assigned(H1, 3)
    assert not spec.is_partition_assigned(H2, 0)
    assert dict(spec.partition_owners(H1)) == {0: "A", 1: "B", 2: "A"}


def test_registry_by_name() -> None:
    assert set(ASSIGNORS) == {"uniform", "range"}
    for name, assignor in ASSIGNORS.items():
        assert assignor.name == name
        assert assignor_named(name) is assignor


def test_registry_refuses_unknown_names() -> None:
    with pytest.raises(UnsupportedAssignorError):
        assignor_named("sticky")
    with pytest.raises(UnsupportedAssignorError):
        assignor_named("range", {"uniform": uniform})


def test_empty_group() -> None:
    for assignor in ASSIGNORS.values():
        assert assignor.assign(GroupSpec({}), metadata({H1: 3})).members == {}


def test_an_assignment_runs_without_the_cycle_collector_and_leaves_it_as_it_was() -> None:
    seen: list[bool] = []

    @without_cycle_collection
    def assign() -> str:
        seen.append(gc.isenabled())
        return "assigned"

    was = gc.isenabled()
    try:
        gc.enable()
        assert assign() == "assigned" and gc.isenabled()
        gc.disable()
        assert assign() == "assigned" and not gc.isenabled()

        @without_cycle_collection
        def failing() -> None:
            raise ValueError("no assignment")

        gc.enable()
        with pytest.raises(ValueError, match="no assignment"):
            failing()
        assert gc.isenabled()
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
    assert seen == [False, False]


class _Watching:
    """Topic metadata that notes whether the cycle collector ran when it was read."""

    def __init__(self, counts: dict[TopicId, int]) -> None:
        self.plain = SubscribedTopicMetadata(counts)
        self.collector_on: list[bool] = []

    def partition_count(self, topic_id: TopicId) -> int | None:
        self.collector_on.append(gc.isenabled())
        return self.plain.partition_count(topic_id)

    def racks_for_partition(self, topic_id: TopicId, partition: int) -> AbstractSet[str]:
        return self.plain.racks_for_partition(topic_id, partition)

    def topic_racks(self, topic_id: TopicId) -> Sequence[AbstractSet[str]]:
        return self.plain.topic_racks(topic_id)


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_each_assignor_runs_without_the_cycle_collector(name: str) -> None:
    foo, bar = topic_id(1), topic_id(2)
    topics = _Watching({foo: 3, bar: 2})
    spec = group({"a": member([foo, bar]), "b": member([foo])})
    was = gc.isenabled()
    gc.enable()
    try:
        ASSIGNORS[name].assign(spec, topics)
        assert gc.isenabled()
    finally:
        if not was:
            gc.disable()
    assert topics.collector_on and not any(topics.collector_on)
