"""The limits on what clients may make a group coordinator hold, as the managers check them.

Availability, not trust: a client must not be able to make one node hold unbounded state or
build an answer larger than any client can read. Each check gives the reason a request is
refused (a message for the client), or None. They apply to new requests only: replaying a
log written under other limits never fails.
"""

from __future__ import annotations

from typing import Final

from coordinator_protocol.messages import JoinGroupRequest
from coordinator_server.groups.answer_sizes import (
    ENVELOPE_BYTES,
    join_answer_bytes,
    join_member_bytes,
    utf8_length,
)
from coordinator_server.groups.classic import ClassicGroup

GENERATED_MEMBER_ID_SUFFIX: Final = 37
"""What the coordinator adds to a client id or instance id to make a member id: "-" and a
UUID."""


def new_group_refusal(groups: int, max_groups: int) -> str | None:
    """Why a request may not create a group when this node holds `groups` already."""
    if groups < max_groups:
        return None
    return (
        f"this coordinator holds {groups} groups, its limit (max_groups {max_groups}): "
        "no new group can be created until groups are deleted or expire"
    )


def join_answer_refusal(
    group: ClassicGroup, request: JoinGroupRequest, max_response_bytes: int
) -> str | None:
    """Why a JoinGroup must be refused because the leader's JoinGroup answer, which carries
    every member's metadata, would then exceed `max_response_bytes` (no client could read
    it, and the group could never form). A member counts with the largest of its protocols'
    metadata, since the protocol is selected only when the join phase ends."""
    member_id = request.member_id
    instance_id = request.group_instance_id
    if not member_id and instance_id is None:
        # A dynamic member's first JoinGroup only gets its member id: it joins nothing yet.
        return None
    metadata = 0
    longest_name = ""
    for protocol in request.protocols:
        metadata = max(metadata, len(protocol.metadata))
        if len(protocol.name) > len(longest_name):
            longest_name = protocol.name
    if member_id:
        id_length = utf8_length(member_id)
        replaced = group.members.get(member_id)
    else:
        assert instance_id is not None
        id_length = utf8_length(instance_id) + GENERATED_MEMBER_ID_SUFFIX
        static_member_id = group.static_member_id(instance_id)
        replaced = None if static_member_id is None else group.members.get(static_member_id)
    members = group.join_answer_members_bytes() + join_member_bytes(
        id_length, instance_id, metadata
    )
    if replaced is not None:
        members -= replaced.join_answer_bytes()
    # The answer names the leader twice (as leader and as its member id): any member may be
    # the leader, so count the longer of this one's id and the current leader's.
    leader_id_length = max(id_length, utf8_length(group.leader_id or ""))
    total = (
        members
        + join_answer_bytes(leader_id_length, request.protocol_type, longest_name)
        + ENVELOPE_BYTES
    )
    if total <= max_response_bytes:
        return None
    return (
        f"group {group.group_id} cannot take this member: the leader's JoinGroup answer "
        f"would be {total} bytes with it (every member's metadata), more than the largest "
        f"answer (max_response_bytes {max_response_bytes})"
    )
