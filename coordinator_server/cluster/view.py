"""What a node knows of the cluster after an assignment: the whole view and its own part."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator_server.cluster.assignor import NO_GENERATION, ClusterView

__all__ = ["OwnershipView"]


@dataclass(frozen=True, slots=True)
class OwnershipView:
    """One node's view of the cluster as of one generation of its group.

    `owners`, `standbys` and `nodes` are the same on every node for the same generation;
    `mine_owned` and `mine_standby` are this node's part of them. `error` says why this
    node was given nothing (its node id is taken by another member, or the assignment could
    not be read): the node owns nothing then, whatever `owners` says."""

    generation: int = NO_GENERATION
    owners: Mapping[int, int] = field(default_factory=dict)
    standbys: Mapping[int, int] = field(default_factory=dict)
    nodes: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    mine_owned: frozenset[int] = frozenset()
    mine_standby: frozenset[int] = frozenset()
    error: str | None = None

    @classmethod
    def of(
        cls, generation: int, node_id: int, view: ClusterView, error: str | None
    ) -> OwnershipView:
        """`node_id`'s view of `view`, or, with an error, a view in which it has nothing."""
        if error is not None:
            mine_owned: frozenset[int] = frozenset()
            mine_standby: frozenset[int] = frozenset()
        else:
            mine_owned = frozenset(p for p, node in view.owners.items() if node == node_id)
            mine_standby = frozenset(p for p, node in view.standbys.items() if node == node_id)
        return cls(
            generation=generation,
            owners=view.owners,
            standbys=view.standbys,
            nodes=view.nodes,
            mine_owned=mine_owned,
            mine_standby=mine_standby,
            error=error,
        )

    def same_ownership(self, other: OwnershipView) -> bool:
        """Whether the two views differ in nothing but their generation."""
        return (
            dict(self.owners) == dict(other.owners)
            and dict(self.standbys) == dict(other.standbys)
            and dict(self.nodes) == dict(other.nodes)
            and self.mine_owned == other.mine_owned
            and self.mine_standby == other.mine_standby
            and self.error == other.error
        )

    def owner_address(self, partition: int) -> tuple[str, int] | None:
        """Where the owner of `partition` listens, or None when nobody owns it."""
        node = self.owners.get(partition)
        return None if node is None else self.nodes.get(node)
