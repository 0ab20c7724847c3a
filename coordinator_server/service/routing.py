"""Where a request goes: the log partition of a group id or transactional id (Kafka's
`partitionFor`), and the node FindCoordinator names for each partition. Both services route
by it, the same way, so a transactional id lives where a group of the same name would.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_protocol.messages import FindCoordinatorResponseCoordinator
from coordinator_server.node_address import NodeAddress, Placement

__all__ = ["Routing"]

# Group ids whose partition is remembered; past it the memory starts over.
_PARTITION_CACHE_SIZE = 100_000
# Node addresses whose FindCoordinator answer is remembered (a cluster has a few nodes; the
# bound only guards against addresses that keep changing).
_MAX_NODE_ANSWERS = 1024

_NO_COORDINATOR = FindCoordinatorResponseCoordinator(
    node_id=-1,
    host="",
    port=-1,
    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
    error_message="no node owns the group's partition yet",
)


class Routing:
    """The partitions of the log and who owns them: `node` is this node as FindCoordinator
    names it; `placement` says which node owns each partition (None: this node owns every
    partition)."""

    __slots__ = ("_num_partitions", "_partitions", "coordinator_of")

    def __init__(
        self, num_partitions: int, node: NodeAddress, placement: Placement | None = None
    ) -> None:
        self._num_partitions = num_partitions
        self._partitions: dict[str, int] = {}
        self.coordinator_of: Callable[[int], FindCoordinatorResponseCoordinator] = _coordinator_of(
            node, placement
        )
        """FindCoordinator's answer for a partition: the node that owns it now."""

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def partition_for(self, key: str) -> int:
        """The log partition of a group id or transactional id."""
        # Java's string hash runs in Python, a character at a time, and the same groups come
        # back with every heartbeat and commit: remember the answers (of ids no longer than
        # max_id_length: the callers check first).
        partitions = self._partitions
        partition = partitions.get(key)
        if partition is None:
            if len(partitions) >= _PARTITION_CACHE_SIZE:
                partitions.clear()
            partition = partitions[key] = partition_for(key, self._num_partitions)
        return partition


def _coordinator_of(
    node: NodeAddress, placement: Placement | None
) -> Callable[[int], FindCoordinatorResponseCoordinator]:
    def answer(address: NodeAddress) -> FindCoordinatorResponseCoordinator:
        return FindCoordinatorResponseCoordinator(
            node_id=address.node_id,
            host=address.host,
            port=address.port,
            error_code=ErrorCode.NONE,
        )

    this_node = answer(node)
    if placement is None:
        return lambda partition: this_node
    # One answer per node, built once: FindCoordinator is asked for every group.
    answers: dict[NodeAddress, FindCoordinatorResponseCoordinator] = {node: this_node}

    def coordinator_of(partition: int) -> FindCoordinatorResponseCoordinator:
        owner = placement(partition)
        if owner is None:
            return _NO_COORDINATOR
        found = answers.get(owner)
        if found is None:
            if len(answers) > _MAX_NODE_ANSWERS:
                answers.clear()
            found = answers[owner] = answer(owner)
        return found

    return coordinator_of
