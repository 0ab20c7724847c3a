"""The cluster's sticky assignment: examples of each rule, then the rules as properties."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.cluster.assignor import (
    ClusterAssignment,
    NodeAssignment,
    NodeClaim,
    assign,
)


def claim(node_id: int, owned: set[int] | None = None, standby: set[int] | None = None,
          generation: int = 1) -> NodeClaim:  # fmt: skip
    return NodeClaim(
        node_id=node_id,
        host=f"node-{node_id}",
        port=9000 + node_id,
        owned=frozenset(owned or ()),
        standby=frozenset(standby or ()),
        generation=generation,
    )


def fed_back(result: ClusterAssignment, members: Mapping[str, NodeClaim],
             generation: int) -> dict[str, NodeClaim]:  # fmt: skip
    """The members' claims at the next rebalance: what the assignment gave them."""
    return {
        member_id: NodeClaim(
            node_id=member.node_id,
            host=member.host,
            port=member.port,
            owned=result.members[member_id].owned,
            standby=result.members[member_id].standby,
            generation=generation,
        )
        for member_id, member in members.items()
    }


def check_rules(result: ClusterAssignment, members: Mapping[str, NodeClaim],
                partitions: int) -> None:  # fmt: skip
    """Every rule an assignment must keep, whatever the claims."""
    view = result.view
    valid = [m for m in members if result.members[m].error is None]
    nodes = {members[m].node_id for m in valid}
    assert len(nodes) == len(valid), "one member per node id"
    assert set(view.nodes) == nodes
    for member_id in valid:
        member = members[member_id]
        assert view.nodes[member.node_id] == (member.host, member.port)
    for part in result.members.values():
        if part.error is not None:
            assert part == NodeAssignment(error=part.error)
    if not nodes:
        assert not view.owners and not view.standbys
        return
    # One owner per partition, and the members' parts are the view's.
    assert sorted(view.owners) == list(range(partitions))
    for member_id in valid:
        node = members[member_id].node_id
        part = result.members[member_id]
        assert part.owned == {p for p, n in view.owners.items() if n == node}
        assert part.standby == {p for p, n in view.standbys.items() if n == node}
    owned = Counter(view.owners.values())
    counts = [owned.get(node, 0) for node in nodes]
    assert max(counts) - min(counts) <= 1, counts
    if len(nodes) == 1:
        assert not view.standbys
        return
    assert sorted(view.standbys) == list(range(partitions))
    assert all(view.standbys[p] != view.owners[p] for p in range(partitions))
    standing = Counter(view.standbys.values())
    counts = [standing.get(node, 0) for node in nodes]
    assert max(counts) - min(counts) <= 1, counts


def moved(before: ClusterAssignment, after: ClusterAssignment) -> set[int]:
    return {p for p, node in after.view.owners.items() if before.view.owners.get(p) != node}


# Examples.


def test_one_member_owns_everything_and_stands_by_for_nothing() -> None:
    members = {"m": claim(1)}
    result = assign(members, 4)
    assert result.members["m"] == NodeAssignment(owned=frozenset(range(4)))
    assert result.view.owners == dict.fromkeys(range(4), 1)
    assert result.view.standbys == {}
    assert result.view.nodes == {1: ("node-1", 9001)}


def test_no_members_or_no_partitions() -> None:
    assert assign({}, 6).view.owners == {}
    result = assign({"a": claim(1), "b": claim(2)}, 0)
    assert result.members["a"] == NodeAssignment()
    assert result.view.owners == {} and result.view.standbys == {}
    assert result.view.nodes == {1: ("node-1", 9001), 2: ("node-2", 9002)}


def test_fresh_members_are_balanced_and_stand_by_on_other_nodes() -> None:
    members = {"a": claim(1), "b": claim(2), "c": claim(3)}
    result = assign(members, 6)
    assert [len(result.members[m].owned) for m in "abc"] == [2, 2, 2]
    assert [len(result.members[m].standby) for m in "abc"] == [2, 2, 2]
    check_rules(result, members, 6)


def test_members_keep_what_they_own() -> None:
    members = {"a": claim(1, {0, 3, 4}), "b": claim(2, {1, 2, 5})}
    result = assign(members, 6)
    assert result.members["a"].owned == {0, 3, 4}
    assert result.members["b"].owned == {1, 2, 5}


def test_a_member_over_its_quota_gives_up_its_highest_partitions() -> None:
    members = {"a": claim(1, {0, 1, 2, 3}), "b": claim(2, {4, 5}), "c": claim(3)}
    result = assign(members, 6)
    assert result.members["a"].owned == {0, 1}
    assert result.members["b"].owned == {4, 5}
    assert result.members["c"].owned == {2, 3}


def test_an_orphan_goes_to_its_standby_when_it_has_room_else_to_the_least_loaded() -> None:
    # Node 3 left: it owned 4 and 5; node 2 stood by for 5, node 1 for 4.
    members = {
        "a": claim(1, {0, 1}, {4}),
        "b": claim(2, {2, 3}, {5}),
    }
    result = assign(members, 6)
    assert result.members["a"].owned == {0, 1, 4}
    assert result.members["b"].owned == {2, 3, 5}
    # Node 1 is full once it has 4: partition 5 (its standby) goes to the least loaded.
    members = {"a": claim(1, {0, 1, 2}, {4, 5}), "b": claim(2, {3})}
    result = assign(members, 6)
    assert result.members["a"].owned == {0, 1, 2}
    assert result.members["b"].owned == {3, 4, 5}


def test_a_partition_two_members_claim_goes_to_the_newer_generation() -> None:
    members = {"a": claim(1, {0, 1}, generation=4), "b": claim(2, {1, 2}, generation=5)}
    result = assign(members, 4)
    assert 1 in result.members["b"].owned
    assert 1 not in result.members["a"].owned
    # Of the same generation: the lower node id.
    members = {"a": claim(2, {1}, generation=5), "b": claim(1, {1}, generation=5)}
    assert 1 in assign(members, 4).members["b"].owned


def test_claims_past_the_topics_end_are_no_claims() -> None:
    members = {"a": claim(1, {0, 7, 9}, {8}), "b": claim(2, {1})}
    result = assign(members, 2)
    assert result.view.owners == {0: 1, 1: 2}
    check_rules(result, members, 2)


def test_a_duplicate_node_id_is_given_nothing_and_an_error() -> None:
    members = {"m-2": claim(1, {0, 1}), "m-1": claim(1, {2, 3}), "m-3": claim(2)}
    result = assign(members, 4)
    error = result.members["m-2"].error
    assert error is not None
    assert "node id 1 is already in the cluster (member m-1 at node-1:9001)" in error
    assert result.members["m-2"].owned == frozenset()
    # The first by member id keeps what it owns; the later one's claims count for nothing.
    assert result.members["m-1"].owned == {2, 3}
    assert result.members["m-3"].owned == {0, 1}
    assert set(result.view.nodes) == {1, 2}
    check_rules(result, members, 4)


def test_a_standby_claim_on_a_partition_the_node_now_owns_moves() -> None:
    # Node 2 took partition 2 over from a departed node and had been its standby.
    members = {"a": claim(1, {0, 1}, {2, 3}), "b": claim(2, {2, 3}, {0, 2})}
    result = assign(members, 4)
    assert result.view.standbys == {0: 2, 1: 2, 2: 1, 3: 1}


def test_standbys_stay_balanced_when_owners_crowd_them_out() -> None:
    # Three nodes, seven partitions: node 1 owns three and cannot stand by for them.
    members = {
        "a": claim(1, {0, 1, 2}, {3, 4, 5, 6}),
        "b": claim(2, {3, 4}, {0, 1, 2}),
        "c": claim(3, {5, 6}),
    }
    result = assign(members, 7)
    check_rules(result, members, 7)
    assert len(result.members["a"].standby) == 2


def test_the_member_order_does_not_matter() -> None:
    members = {f"m-{i}": claim(i % 4, {i, i + 5}, {i + 1}, generation=i % 3) for i in range(7)}
    expected = assign(members, 12)
    keys = list(members)
    for seed in range(5):
        random.Random(seed).shuffle(keys)
        assert assign({k: members[k] for k in keys}, 12) == expected


# Properties.

partition_sets = st.frozensets(st.integers(0, 40), max_size=12)
claims = st.builds(
    NodeClaim,
    node_id=st.integers(0, 7),
    host=st.sampled_from(["a", "b"]),
    port=st.integers(1, 3),
    owned=partition_sets,
    standby=partition_sets,
    generation=st.integers(-1, 3),
)
member_sets = st.dictionaries(st.text("xyz", min_size=1, max_size=3), claims, max_size=8)


@settings(max_examples=300, deadline=None)
@given(members=member_sets, partitions=st.integers(0, 36))
def test_any_claims_give_a_balanced_assignment_with_one_owner_per_partition(
    members: dict[str, NodeClaim], partitions: int
) -> None:
    result = assign(members, partitions)
    check_rules(result, members, partitions)
    assert assign(dict(reversed(members.items())), partitions) == result


@settings(max_examples=200, deadline=None)
@given(members=member_sets, partitions=st.integers(0, 36))
def test_an_assignment_fed_back_is_kept(members: dict[str, NodeClaim], partitions: int) -> None:
    first = assign(members, partitions)
    again = assign(fed_back(first, members, 1), partitions)
    assert again.view == first.view


stable_sizes = st.tuples(st.integers(1, 7), st.integers(0, 40))


def stable(
    nodes: int, partitions: int, seed: int
) -> tuple[ClusterAssignment, dict[str, NodeClaim]]:
    """A cluster of `nodes` nodes after a few rebalances in which nodes came and went: every
    member's claim is what the last assignment gave it."""
    rng = random.Random(seed)
    members: dict[str, NodeClaim] = {}
    result = assign(members, partitions)
    for generation in range(rng.randint(nodes, nodes + 4)):
        members = fed_back(result, members, generation)
        if members and (len(members) >= nodes or rng.random() < 0.3):
            del members[rng.choice(sorted(members))]
        else:
            node = rng.choice(sorted(set(range(10)) - {m.node_id for m in members.values()}))
            members[f"member-{node}-{generation}"] = claim(node, generation=-1)
        result = assign(members, partitions)
    while len(members) != nodes:
        members = fed_back(result, members, 100 + len(members))
        if len(members) > nodes:
            del members[rng.choice(sorted(members))]
        else:
            node = rng.choice(sorted(set(range(10)) - {m.node_id for m in members.values()}))
            members[f"member-{node}-late"] = claim(node, generation=-1)
        result = assign(members, partitions)
    return result, fed_back(result, members, 200)


@settings(max_examples=300, deadline=None)
@given(sizes=stable_sizes, seed=st.integers(0, 10_000), data=st.data())
def test_a_node_joining_moves_at_most_its_share(
    sizes: tuple[int, int], seed: int, data: st.DataObject
) -> None:
    nodes, partitions = sizes
    before, members = stable(nodes, partitions, seed)
    taken = {m.node_id for m in members.values()}
    joiner = data.draw(st.sampled_from(sorted(set(range(11)) - taken)))
    members["member-new"] = claim(joiner, generation=-1)
    after = assign(members, partitions)
    check_rules(after, members, partitions)
    changed = moved(before, after)
    assert len(changed) <= math.ceil(partitions / (nodes + 1))
    # Only to the new node.
    assert all(after.view.owners[p] == joiner for p in changed)


@settings(max_examples=300, deadline=None)
@given(sizes=stable_sizes, seed=st.integers(0, 10_000), data=st.data())
def test_a_node_leaving_moves_only_its_own_partitions(
    sizes: tuple[int, int], seed: int, data: st.DataObject
) -> None:
    nodes, partitions = sizes
    before, members = stable(nodes + 1, partitions, seed)
    leaver = data.draw(st.sampled_from(sorted(members)))
    left = members.pop(leaver).node_id
    after = assign(members, partitions)
    check_rules(after, members, partitions)
    assert moved(before, after) == {p for p, n in before.view.owners.items() if n == left}


@settings(max_examples=300, deadline=None)
@given(sizes=st.tuples(st.integers(2, 6), st.integers(0, 60)), seed=st.integers(0, 10_000),
       data=st.data())  # fmt: skip
def test_a_node_leaving_hands_its_partitions_to_their_standbys(
    sizes: tuple[int, int], seed: int, data: st.DataObject
) -> None:
    """Failover is warm: each node's partitions have their standbys spread over the other
    nodes, so that the survivors have room for them where they stand by. Only rounding
    may send a few elsewhere: at most one per survivor."""
    nodes, partitions = sizes
    before, members = stable(nodes + 1, partitions, seed)
    leaver = data.draw(st.sampled_from(sorted(members)))
    left = members.pop(leaver).node_id
    after = assign(members, partitions)
    check_rules(after, members, partitions)
    orphans = [p for p, n in before.view.owners.items() if n == left]
    cold = [p for p in orphans if after.view.owners[p] != before.view.standbys[p]]
    assert len(cold) <= nodes - 1 if nodes > 1 else not cold, (orphans, cold)
