"""The coordinator cluster: which node owns which partition of the log, and which stands by.

Nodes that share the Kafka cluster and the log topic form one cluster. Its membership is a
consumer group of the Kafka cluster whose group id is the cluster id (`membership.py`); the
group's assignment, computed by the sticky assignor (`assignor.py`, pure) and carried in the
group protocol's user data (`codec.py`, the format of docs/CLUSTER.md), is the ownership of
the log's partitions (`view.py`). A node's lease (`lease.py`, pure) says until when it is a
member for sure.

`ClusterMembership` is imported on first use, so that code needing only the view or the
assignor does not pay for importing aiokafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordinator_server.cluster.assignor import (
    ClusterAssignment,
    ClusterView,
    NodeAssignment,
    NodeClaim,
    assign,
)
from coordinator_server.cluster.view import OwnershipView

if TYPE_CHECKING:
    from coordinator_server.cluster.membership import ClusterMembership, ClusterMembershipError

__all__ = [
    "ClusterAssignment",
    "ClusterMembership",
    "ClusterMembershipError",
    "ClusterView",
    "NodeAssignment",
    "NodeClaim",
    "OwnershipView",
    "assign",
]

_LAZY_FROM_MEMBERSHIP = frozenset({"ClusterMembership", "ClusterMembershipError"})


def __getattr__(name: str) -> Any:
    if name in _LAZY_FROM_MEMBERSHIP:
        from coordinator_server.cluster import membership

        return getattr(membership, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
