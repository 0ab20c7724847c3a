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
  node; the standby counts are balanced too, and sticky the same way.
- Deterministic: the same claims give the same assignment, whatever the order of the
  members in the mapping.
"""

from __future__ import annotations

from collections import deque
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
    owned_count = dict.fromkeys(claims, 0)
    for node in owners.values():
        owned_count[node] += 1
    # A claim to stand by for a partition the node now owns is no claim.
    winners = _winners(
        claims,
        {node: claim.standby for node, claim in claims.items()},
        num_partitions,
        excluded=owners,
    )
    kept = _kept(claims, winners)
    # The larger quotas go first to the nodes that own fewer: a node can stand by only for
    # partitions it does not own, and this keeps every node's owned plus standby counts
    # within the partition count, which is all a complete assignment needs (Hall's
    # condition: any two nodes together can stand by for every partition).
    quotas = _quotas(
        sorted(claims, key=lambda node: (owned_count[node], -len(kept[node]), node)),
        num_partitions,
    )
    nodes = list(claims)
    standbys: dict[int, int] = {}
    load: dict[int, int] = {}
    for node, partitions in kept.items():
        keep = partitions[: quotas[node]]
        standbys.update(dict.fromkeys(keep, node))
        load[node] = len(keep)
    for partition in range(num_partitions):
        if partition not in standbys:
            _place_standby(partition, nodes, owners, quotas, standbys, load)
    return standbys


def _place_standby(
    partition: int,
    nodes: list[int],
    owners: Mapping[int, int],
    quotas: Mapping[int, int],
    standbys: dict[int, int],
    load: dict[int, int],
) -> None:
    """Give `partition` a standby: the least loaded node with room that does not own it, or,
    when every such node is full, along the shortest chain of moves that ends at a node with
    room (node A takes the partition and gives up one of its own, which node B takes, ...)."""
    free = [node for node in nodes if node != owners[partition] and load[node] < quotas[node]]
    if free:
        node = min(free, key=lambda candidate: (load[candidate], candidate))
        standbys[partition] = node
        load[node] += 1
        return
    held: dict[int, list[int]] = {node: [] for node in nodes}
    for other, node in sorted(standbys.items()):
        held[node].append(other)
    # via[p] = (q, node): node takes q and gives p up.
    via: dict[int, tuple[int, int]] = {}
    queue = deque([partition])
    seen = {partition}
    while queue:
        current = queue.popleft()
        for node in nodes:
            if node == owners[current] or node == standbys.get(current):
                continue
            if load[node] < quotas[node]:
                standbys[current] = node
                load[node] += 1
                while current != partition:
                    previous, taker = via[current]
                    standbys[previous] = taker
                    current = previous
                return
            for given_up in held[node]:
                if given_up not in seen:
                    seen.add(given_up)
                    via[given_up] = (current, node)
                    queue.append(given_up)
    raise AssertionError(f"no standby can be found for partition {partition}")
