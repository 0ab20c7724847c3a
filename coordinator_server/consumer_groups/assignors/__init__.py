"""The server-side assignors of Kafka's consumer group protocol, by name (Kafka's `uniform`
and `range`), and the choice of one by the name a member or the configuration gives."""

from __future__ import annotations

from collections.abc import Mapping

from coordinator_protocol.errors import UnsupportedAssignorError
from coordinator_server.consumer_groups.assignors.api import PartitionAssignor
from coordinator_server.consumer_groups.assignors.range import RangeServerAssignor
from coordinator_server.consumer_groups.assignors.uniform import UniformServerAssignor

ASSIGNORS: Mapping[str, PartitionAssignor] = {
    "uniform": UniformServerAssignor(),
    "range": RangeServerAssignor(),
}


def assignor_named(
    name: str, assignors: Mapping[str, PartitionAssignor] = ASSIGNORS
) -> PartitionAssignor:
    """The assignor of that name among `assignors` (the configured ones); an unknown name
    raises UnsupportedAssignorError, answered to the member as UNSUPPORTED_ASSIGNOR."""
    assignor = assignors.get(name)
    if assignor is None:
        raise UnsupportedAssignorError(f"Assignor {name} is not supported.")
    return assignor
