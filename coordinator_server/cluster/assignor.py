"""Who owns which log partition, and who stands by for it: the sticky assignment of the
cluster, as a pure function of what the members say about themselves.

Every node of the cluster is a member of one consumer group; its leader calls `assign` with
each member's claim (its node id and address, what it owns and stands by for now, and the
generation those come from) and hands every member the result. The rules:

- One member per node id. Members that share a node id are taken in member id order: the
  first is the node, the later ones get nothing and an error.
- Balanced: the nodes' owned counts differ by at most one.
- Sticky: a node keeps what it owns as far as balance allows. A partition two nodes claim
  goes to the claim of the newer generation (the other node's claim is stale: it missed a
  rebalance), then to the lower node id. A partition nobody owns (a departed node's, a new
  one's) goes to the node that stood by for it when that node has room, else to the least
  loaded node. So a node joining takes about P/n partitions from the others and moves
  nothing else; a node leaving moves only its own partitions.
- Standbys: with two nodes or more, every partition has one standby, never on its owner's
  node; the standby counts are balanced too, each node's partitions have theirs spread
  evenly over the other nodes (so that a node's death finds its partitions warm on nodes
  with room for them), and they are sticky within that spread.
- Deterministic: the same claims give the same assignment, whatever the order of the
  members in the mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "NO_GENERATION",
    "ClusterAssignment",
    "ClusterView",
    "NodeAssignment",
    "NodeClaim",
    "assign",
    "duplicate_node_error",
]

NO_GENERATION = -1
"""The generation of a claim that comes from no assignment (a node that just started)."""


@dataclass(frozen=True, slots=True)
class NodeClaim:
    """What one member says about itself when it joins: its node and what it holds."""

    node_id: int
    host: str
    port: int
    owned: frozenset[int] = frozenset()
    standby: frozenset[int] = frozenset()
    generation: int = NO_GENERATION
    """The generation whose assignment `owned` and `standby` come from."""


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """What one member is given: the partitions it owns and stands by for, or an error."""

    owned: frozenset[int] = frozenset()
    standby: frozenset[int] = frozenset()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The whole cluster as one assignment made it: every member gets all of it."""

    owners: Mapping[int, int] = field(default_factory=dict)
    """partition -> the node id that owns it"""
    standbys: Mapping[int, int] = field(default_factory=dict)
    """partition -> the node id that stands by for it"""
    nodes: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    """node id -> its advertised (host, port)"""


@dataclass(frozen=True, slots=True)
class ClusterAssignment:
    """What `assign` returns: each member's part, by member id, and the view."""

    members: Mapping[str, NodeAssignment]
    view: ClusterView


def duplicate_node_error(claim: NodeClaim, first_member_id: str, first: NodeClaim) -> str:
    """The error a member with a node id already taken is given."""
    return (
        f"node id {claim.node_id} is already in the cluster (member {first_member_id} at "
        f"{first.host}:{first.port}); this node ({claim.host}:{claim.port}) is given no "
        "partitions: give every node its own node id"
    )


def assign(members: Mapping[str, NodeClaim], num_partitions: int) -> ClusterAssignment:
    """The assignment of `num_partitions` log partitions to `members` (member id -> claim)."""
    assert num_partitions >= 0
    errors: dict[str, str] = {}
    member_of_node: dict[int, str] = {}
    for member_id in sorted(members):
        claim = members[member_id]
        first = member_of_node.get(claim.node_id)
        if first is None:
            member_of_node[claim.node_id] = member_id
        else:
            errors[member_id] = duplicate_node_error(claim, first, members[first])
    claims = {node: members[member_of_node[node]] for node in sorted(member_of_node)}

    owners = _assign_owners(claims, num_partitions)
    standbys = _assign_standbys(claims, owners, num_partitions)

    owned_by: dict[int, set[int]] = {node: set() for node in claims}
    for partition, node in owners.items():
        owned_by[node].add(partition)
    standing_by: dict[int, set[int]] = {node: set() for node in claims}
    for partition, node in standbys.items():
        standing_by[node].add(partition)

    result: dict[str, NodeAssignment] = {}
    for member_id in members:
        error = errors.get(member_id)
        if error is not None:
            result[member_id] = NodeAssignment(error=error)
            continue
        node = members[member_id].node_id
        result[member_id] = NodeAssignment(
            owned=frozenset(owned_by[node]), standby=frozenset(standing_by[node])
        )
    view = ClusterView(
        owners=dict(sorted(owners.items())),
        standbys=dict(sorted(standbys.items())),
        nodes={node: (claim.host, claim.port) for node, claim in claims.items()},
    )
    return ClusterAssignment(members=result, view=view)


def _winners(
    claims: Mapping[int, NodeClaim],
    claimed: Mapping[int, Iterable[int]],
    num_partitions: int,
    excluded: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """partition -> the node whose claim on it wins: the newest generation, then the lowest
    node id. `claimed`: node -> the partitions it claims; partitions past the topic's end,
    and a node's claim on a partition `excluded` gives that node, are no claims."""
    winners: dict[int, int] = {}
    for node, partitions in claimed.items():
        for partition in partitions:
            if not 0 <= partition < num_partitions:
                continue
            if excluded is not None and excluded.get(partition) == node:
                continue
            other = winners.get(partition)
            if other is None or _claim_rank(claims, node) < _claim_rank(claims, other):
                winners[partition] = node
    return winners


def _claim_rank(claims: Mapping[int, NodeClaim], node: int) -> tuple[int, int]:
    return (-claims[node].generation, node)


def _quotas(nodes: list[int], num_partitions: int) -> dict[int, int]:
    """Balanced counts for `nodes`, the larger ones to the first nodes of the list."""
    base, extra = divmod(num_partitions, len(nodes))
    return {node: base + (1 if rank < extra else 0) for rank, node in enumerate(nodes)}


def _kept(nodes: Iterable[int], winners: Mapping[int, int]) -> dict[int, list[int]]:
    """Each node's winning claims, in partition order."""
    kept: dict[int, list[int]] = {node: [] for node in nodes}
    for partition in sorted(winners):
        kept[winners[partition]].append(partition)
    return kept


def _assign_owners(claims: Mapping[int, NodeClaim], num_partitions: int) -> dict[int, int]:
    if not claims or num_partitions == 0:
        return {}
    winners = _winners(
        claims, {node: claim.owned for node, claim in claims.items()}, num_partitions
    )
    kept = _kept(claims, winners)
    # The larger quotas go to the nodes that hold the most, so that as few as possible give
    # a partition up.
    quotas = _quotas(sorted(claims, key=lambda node: (-len(kept[node]), node)), num_partitions)

    owners: dict[int, int] = {}
    load: dict[int, int] = {}
    orphans = [partition for partition in range(num_partitions) if partition not in winners]
    for node, partitions in kept.items():
        keep = partitions[: quotas[node]]
        orphans.extend(partitions[quotas[node] :])
        owners.update(dict.fromkeys(keep, node))
        load[node] = len(keep)
    orphans.sort()

    # A partition nobody keeps goes to the node that stood by for it (its state is warm
    # there) when that node has room, else to the least loaded node.
    standby_of = _winners(
        claims, {node: claim.standby for node, claim in claims.items()}, num_partitions
    )
    for partition in orphans:
        standby = standby_of.get(partition)
        if standby is not None and load[standby] < quotas[standby]:
            node = standby
        else:
            node = min(
                (candidate for candidate in claims if load[candidate] < quotas[candidate]),
                key=lambda candidate: (load[candidate], candidate),
            )
        owners[partition] = node
        load[node] += 1
    return owners


def _assign_standbys(
    claims: Mapping[int, NodeClaim], owners: Mapping[int, int], num_partitions: int
) -> dict[int, int]:
    if len(claims) < 2 or num_partitions == 0:
        return {}
    nodes = sorted(claims)
    owned_count = dict.fromkeys(nodes, 0)
    for node in owners.values():
        owned_count[node] += 1
    # room[(owner, node)]: how many of owner's partitions node is still to stand by for.
    room = _standby_shares(nodes, owned_count)
    # A claim to stand by for a partition the node now owns is no claim.
    winners = _winners(
        claims,
        {node: claim.standby for node, claim in claims.items()},
        num_partitions,
        excluded=owners,
    )
    standbys: dict[int, int] = {}
    for partition in sorted(winners):
        pair = (owners[partition], winners[partition])
        if room.get(pair, 0) > 0:
            standbys[partition] = winners[partition]
            room[pair] -= 1
    for partition in range(num_partitions):
        if partition not in standbys:
            owner = owners[partition]
            node = next(node for node in nodes if room.get((owner, node), 0) > 0)
            standbys[partition] = node
            room[(owner, node)] -= 1
    return standbys


def _standby_shares(nodes: list[int], owned_count: Mapping[int, int]) -> dict[tuple[int, int], int]:
    """(owner, node) -> how many of owner's partitions node stands by for: each owner's
    partitions spread evenly over the other nodes (so that when it dies each survivor takes
    over about as many of them as it has room for, and finds them warm), with the nodes'
    standby counts balanced (the larger ones to the nodes that own fewer). The shares
    depend on the owned counts only: an assignment fed back keeps its standbys.

    Each owner gives every other node its even part, rounded down; the rest (fewer than
    nodes per owner, one at most to a node) go where the standby counts still have room,
    a small flow problem solved exactly (augmenting paths)."""
    num_partitions = sum(owned_count.values())
    quotas = _quotas(sorted(nodes, key=lambda node: (owned_count[node], node)), num_partitions)
    shares: dict[tuple[int, int], int] = {}
    room = dict(quotas)
    extras: dict[int, int] = {}
    for owner in nodes:
        base, extras[owner] = divmod(owned_count[owner], len(nodes) - 1)
        for node in nodes:
            if node != owner:
                shares[(owner, node)] = base
                room[node] -= base
    # given[owner]: the nodes an owner's odd partitions went to, one each.
    given: dict[int, list[int]] = {owner: [] for owner in nodes}
    for owner in nodes:
        for _ in range(extras[owner]):
            if not _augment(owner, nodes, given, room):
                # No exact balance exists (never seen): the least loaded node that can.
                node = min(
                    (n for n in nodes if n != owner and n not in given[owner]),
                    key=lambda n: (-room[n], n),
                )
                given[owner].append(node)
                room[node] -= 1
    for owner, nodes_given in given.items():
        for node in nodes_given:
            shares[(owner, node)] += 1
    return shares


def _augment(
    owner: int, nodes: list[int], given: dict[int, list[int]], room: dict[int, int]
) -> bool:
    """One more odd partition of `owner` to a node with room, moving others' odd partitions
    along the shortest chain if need be (owner gives to A, A's giver B gives to C instead,
    ...). False when no chain exists."""
    # came[node] = the owner that gives to node on the path, and the node that owner gave to
    # before (None: the path's start).
    came: dict[int, tuple[int, int | None]] = {}
    frontier: list[tuple[int, int | None]] = [(owner, None)]
    while frontier:
        next_frontier: list[tuple[int, int | None]] = []
        for giver, released in frontier:
            for node in nodes:
                if node == giver or node in given[giver] or node in came:
                    continue
                came[node] = (giver, released)
                if room[node] > 0:
                    room[node] -= 1
                    while True:
                        giver_of, released_by = came[node]
                        given[giver_of].append(node)
                        if released_by is None:
                            return True
                        given[giver_of].remove(released_by)
                        node = released_by
                # Another owner that gives to `node` could give elsewhere, freeing it.
                next_frontier.extend(
                    (other, node) for other in nodes if other != giver and node in given[other]
                )
        frontier = next_frontier
    return False
