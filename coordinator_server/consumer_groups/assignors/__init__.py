"""The server-side assignors of Kafka's consumer group protocol, by name (Kafka's `uniform`
and `range`), and the choice of one by the name a member or the configuration gives."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator_protocol.errors import UnsupportedAssignorError
from coordinator_server.consumer_groups.assignors.api import PartitionAssignor
from coordinator_server.consumer_groups.assignors.range import RangeServerAssignor
from coordinator_server.consumer_groups.assignors.uniform import UniformServerAssignor
from coordinator_server.consumer_groups.member import ConsumerGroupMember

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


def preferred_assignor(members: Iterable[ConsumerGroupMember], default: str) -> str:
    """The assignor most members name, the default when none names one (Kafka's
    `computePreferredServerAssignor`); a tie goes to the first name in order, so that
    every replica of the group picks the same."""
    counts: dict[str, int] = {}
    for member in members:
        if member.server_assignor is not None:
            counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
    if not counts:
        return default
    return min(counts, key=lambda name: (-counts[name], name))
