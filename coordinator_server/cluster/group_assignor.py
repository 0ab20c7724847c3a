"""The cluster's assignment as an aiokafka partition assignor: the group protocol's side of
`assignor.assign`.

aiokafka asks every member for its JoinGroup metadata (`metadata`: the member's claim in the
user data), asks the leader for everyone's assignment (`assign`: the log partitions a member
owns, and the whole view in the user data), and hands each member its own (`on_assignment`).
An instance serves one member: its claim and what it does with an assignment are the
member's, given as callables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from coordinator_server.cluster.assignor import NodeClaim, assign
from coordinator_server.cluster.codec import (
    ClusterFormatError,
    decode_claim,
    encode_assignment,
    encode_claim,
)

__all__ = ["ASSIGNOR_NAME", "OwnershipAssignor"]

log = logging.getLogger(__name__)

ASSIGNOR_NAME: Final = "coordinator-ownership"
"""The group protocol's name. Every member of a cluster must speak it: a consumer of another
protocol that joins the group by mistake is refused by the broker (INCONSISTENT_GROUP_PROTOCOL)
instead of being given partitions."""

# The consumer protocol's own version (the envelope aiokafka encodes), not our format's.
_CONSUMER_PROTOCOL_VERSION: Final = 0


class OwnershipAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """One member's assignor. `claim`: what the member holds now, asked at every join;
    `on_assignment`: called with each assignment the member is given."""

    name = ASSIGNOR_NAME

    def __init__(
        self,
        topic: str,
        claim: Callable[[], NodeClaim],
        on_assignment: Callable[[ConsumerProtocolMemberAssignment], None],
    ) -> None:
        self._topic = topic
        self._claim = claim
        self._on_assignment = on_assignment

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(
            _CONSUMER_PROTOCOL_VERSION, sorted(topics), encode_claim(self._claim())
        )

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        partitions = cluster.partitions_for_topic(self._topic) or set()
        claims: dict[str, NodeClaim] = {}
        unreadable: dict[str, str] = {}
        for member_id, metadata in members.items():
            try:
                claims[member_id] = decode_claim(metadata.user_data)
            except ClusterFormatError as format_error:
                unreadable[member_id] = (
                    f"the member's claim could not be read ({format_error}): it is given no "
                    "partitions"
                )
                log.error("member %s of the cluster: %s", member_id, unreadable[member_id])
        result = assign(claims, len(partitions))
        assignments: dict[str, ConsumerProtocolMemberAssignment] = {}
        for member_id in members:
            error = unreadable.get(member_id)
            part = result.members.get(member_id)
            owned = sorted(part.owned) if part is not None and error is None else []
            if part is not None and error is None:
                error = part.error
            assignments[member_id] = ConsumerProtocolMemberAssignment(
                _CONSUMER_PROTOCOL_VERSION,
                [(self._topic, owned)] if owned else [],
                encode_assignment(result.view, error),
            )
        return assignments

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self._on_assignment(assignment)
