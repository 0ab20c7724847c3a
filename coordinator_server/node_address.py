"""Where a node of the cluster answers: what FindCoordinator and DescribeCluster name, what
the cluster's membership hands out and what the transaction markers' peers dial."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["ClusterNodes", "NodeAddress", "Placement"]


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int


Placement = Callable[[int], "NodeAddress | None"]
"""The node that owns a log partition now, or None while no node does (a cluster between
two assignments)."""

ClusterNodes = Callable[[], Sequence[NodeAddress]]
"""Every node of the cluster as this node knows it now (empty before its first assignment)."""
