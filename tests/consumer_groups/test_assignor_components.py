"""A heterogeneous group cut into the parts its subscriptions make (`assignors/components.py`),
and the `uniform` assignor over those parts: each part on its own, homogeneous parts by the
homogeneous builder, with the guarantees of the whole group's assignment."""

from __future__ import annotations

from assignor_helpers import group, member, metadata, plain, topic_id

from coordinator_server.consumer_groups.assignors.api import SubscriptionType
from coordinator_server.consumer_groups.assignors.components import independent_parts
from coordinator_server.consumer_groups.assignors.uniform import UniformServerAssignor

T1, T2, T3, T4, T5 = (topic_id(n) for n in range(1, 6))
HOMO = SubscriptionType.HOMOGENEOUS
HETERO = SubscriptionType.HETEROGENEOUS


def parts_of(spec_members: dict[str, list[bytes]]) -> list[tuple[list[str], SubscriptionType]]:
    parts = independent_parts(group({m: member(ts) for m, ts in spec_members.items()}))
    assert parts is not None
    return [(list(part.members), part.subscription_type) for part in parts]


def test_one_subscription_is_one_part() -> None:
    assert independent_parts(group({"a": member([T1]), "b": member([T1])})) is None


def test_subscriptions_joined_by_a_chain_of_topics_are_one_part() -> None:
    # a and c share nothing, but b shares a topic with each.
    spec = group({"a": member([T1]), "b": member([T1, T2]), "c": member([T2, T3])})
    assert independent_parts(spec) is None


def test_disjoint_subscriptions_are_parts_in_the_groups_order() -> None:
    assert parts_of({"a": [T1, T2], "b": [T3], "c": [T1, T2], "d": [T3, T4], "e": []}) == [
        (["a", "c"], HOMO),
        (["b", "d"], HETERO),
        (["e"], HOMO),
    ]


def test_a_chain_found_late_joins_parts_found_early() -> None:
    # The first two subscriptions look apart until the third links them.
    assert parts_of({"a": [T1], "b": [T2], "c": [T5], "d": [T1, T2]}) == [
        (["a", "b", "d"], HETERO),
        (["c"], HOMO),
    ]


def test_uniform_deals_a_homogeneous_part_whole_runs() -> None:
    """Two buckets, each of two members subscribed to its own two topics of four partitions:
    each member gets one whole topic (the homogeneous builder's quota), not two partitions of
    each topic (the heterogeneous builder's round-robin over the whole group)."""
    spec = group(
        {
            "a": member([T1, T2]),
            "b": member([T1, T2]),
            "c": member([T3, T4]),
            "d": member([T3, T4]),
            "e": member([], {T5: [0]}),
        }
    )
    assert spec.subscription_type is HETERO
    topics = metadata(dict.fromkeys((T1, T2, T3, T4), 4))
    result = plain(UniformServerAssignor().assign(spec, topics))
    assert result == {
        "a": {T1: {0, 1, 2, 3}},
        "b": {T2: {0, 1, 2, 3}},
        "c": {T3: {0, 1, 2, 3}},
        "d": {T4: {0, 1, 2, 3}},
        # It subscribes to nothing: it keeps nothing.
        "e": {},
    }


def test_uniform_keeps_what_a_part_owns_when_a_member_joins_it() -> None:
    owned = {"a": {T1: [0, 1, 2, 3], T2: [0]}, "b": {T2: [1, 2, 3]}, "c": {T3: [0, 1]}}
    members = {m: member([T3] if m == "c" else [T1, T2], owned[m]) for m in owned}
    members["n"] = member([T1, T2])
    result = plain(UniformServerAssignor().assign(group(members), metadata({T1: 4, T2: 4, T3: 2})))
    assert result["c"] == {T3: {0, 1}}
    sizes = {m: sum(len(ps) for ps in result[m].values()) for m in ("a", "b", "n")}
    assert sorted(sizes.values()) == [2, 3, 3]
    # Each member of the part keeps what it owned up to its quota.
    assert (
        len({(T1, p) for p in range(4)} & {(t, p) for t, ps in result["a"].items() for p in ps})
        == 3
    )
    assert result["b"][T2] <= {1, 2, 3}
