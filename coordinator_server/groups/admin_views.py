"""The admin views of the classic groups: DescribeGroups, ListGroups and DeleteGroups.

Reads see the groups that exist as of the last committed offset, with their latest content
(a group's members change in memory between two records). A deletion writes the group's
tombstone and stops its timers; the shard adds the tombstones of its offsets.
"""

from __future__ import annotations

from collections.abc import Collection

from coordinator_protocol.errors import ApiError, ErrorCode, GroupIdNotFoundError
from coordinator_protocol.messages import (
    DescribeGroupsResponseGroup,
    DescribeGroupsResponseMember,
    ListGroupsResponseGroup,
)
from coordinator_server.groups.answer_sizes import listed_group_bytes
from coordinator_server.groups.classic import ClassicGroup, ClassicGroupState
from coordinator_server.groups.rebalance import ClassicRebalance
from coordinator_server.groups.store import GroupStore
from coordinator_server.records import CoordinatorRecord, new_group_metadata_tombstone_record

EMPTY = ClassicGroupState.EMPTY
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD

CLASSIC_GROUP_TYPE = "classic"


def list_filter(values: list[str]) -> frozenset[str]:
    """A ListGroups filter as Kafka compares it (trimmed, lower case), each distinct value
    once, made once per request rather than once per partition."""
    return frozenset(value.strip().lower() for value in set(values))


class ClassicGroupAdmin:
    def __init__(self, store: GroupStore, rebalance: ClassicRebalance) -> None:
        self._groups = store.by_id
        self._rebalance = rebalance

    # DescribeGroups and ListGroups.

    def describe_groups(
        self, group_ids: list[str], committed_offset: int
    ) -> list[DescribeGroupsResponseGroup]:
        """Groups that exist as of `committed_offset`, with their latest content."""
        described: list[DescribeGroupsResponseGroup] = []
        for group_id in group_ids:
            group = self._visible_group(group_id, committed_offset)
            if group is None:
                described.append(
                    DescribeGroupsResponseGroup(
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        group_id=group_id,
                        group_state=DEAD.value,
                    )
                )
                continue
            protocol_name = group.protocol_name
            stable = group.state is STABLE and protocol_name is not None
            described.append(
                DescribeGroupsResponseGroup(
                    error_code=ErrorCode.NONE,
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol_name if stable and protocol_name is not None else "",
                    members=[
                        DescribeGroupsResponseMember(
                            member_id=member.member_id,
                            group_instance_id=member.group_instance_id,
                            client_id=member.client_id,
                            client_host=member.client_host,
                            member_metadata=(
                                member.metadata(protocol_name)
                                if stable and protocol_name is not None
                                else b""
                            ),
                            member_assignment=member.assignment,
                        )
                        for member in group.members.values()
                    ],
                )
            )
        return described

    def list_groups(
        self,
        states: Collection[str],
        types: Collection[str],
        committed_offset: int,
        max_bytes: int | None = None,
    ) -> tuple[list[ListGroupsResponseGroup], int] | None:
        """The groups as of `committed_offset` in one of `states` and of one of `types`
        (filters as `list_filter` makes them; empty: any), and the bytes they take in the
        answer; None once they would take more than `max_bytes`."""
        if types and CLASSIC_GROUP_TYPE not in types:
            return [], 0
        listed: list[ListGroupsResponseGroup] = []
        size = 0
        for group_id, committed in self._groups.items_at(committed_offset):
            group = self._groups.get(group_id) or committed
            if states and group.state.lower_name not in states:
                continue
            protocol_type = group.protocol_type or ""
            state = group.state.value
            if max_bytes is not None:
                size += listed_group_bytes(group_id, protocol_type, state)
                if size > max_bytes:
                    return None
            listed.append(
                ListGroupsResponseGroup(
                    group_id=group_id,
                    protocol_type=protocol_type,
                    group_state=state,
                    group_type=CLASSIC_GROUP_TYPE,
                )
            )
        return listed, size

    def _visible_group(self, group_id: str, committed_offset: int) -> ClassicGroup | None:
        committed = self._groups.get_at(group_id, committed_offset)
        if committed is None:
            return None
        return self._groups.get(group_id) or committed

    # DeleteGroups.

    def validate_delete_group(self, group_id: str) -> ApiError | None:
        group = self._groups.get(group_id)
        if group is None:
            return GroupIdNotFoundError(f"group {group_id} does not exist")
        return group.validate_delete_group()

    def create_group_tombstone_records(
        self, group_id: str, records: list[CoordinatorRecord]
    ) -> None:
        """Delete the group: its tombstone, and its timers."""
        records.append(new_group_metadata_tombstone_record(group_id))
        self._rebalance.cancel_timers(group_id)

    def maybe_delete_group(self, group_id: str, records: list[CoordinatorRecord]) -> None:
        """Delete the group if it is Empty (the offset expiration job)."""
        group = self._groups.get(group_id)
        if group is not None and group.state is EMPTY:
            self.create_group_tombstone_records(group_id, records)
