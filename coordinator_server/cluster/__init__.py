"""The coordinator cluster: which node owns which partition of the log, and which stands by.

Nodes that share the Kafka cluster and the log topic form one cluster. Its membership is a
consumer group of the Kafka cluster whose group id is the cluster id; the
group's assignment, computed by the sticky assignor (`assignor.py`, pure) and carried in the
group protocol's user data (`codec.py`, the format of docs/CLUSTER.md), is the ownership of
the log's partitions (`view.py`).
"""

from __future__ import annotations

from coordinator_server.cluster.assignor import (
    ClusterAssignment,
    ClusterView,
    NodeAssignment,
    NodeClaim,
    assign,
)
from coordinator_server.cluster.view import OwnershipView

__all__ = [
    "ClusterAssignment",
    "ClusterView",
    "NodeAssignment",
    "NodeClaim",
    "OwnershipView",
    "assign",
]
