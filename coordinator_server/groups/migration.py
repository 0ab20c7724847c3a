"""Online migration between classic and consumer groups, the classic group's half (Kafka's
`convertToConsumerGroup` as it ends the classic group, and `convertToClassicGroup` with
`ClassicGroup.fromConsumerGroup` and `createClassicGroupRecords`).

Upgrade: the classic group's tombstone, and its parked JoinGroups and SyncGroups answered
REBALANCE_IN_PROGRESS, so that their members rejoin the consumer group it becomes. Its
timers are left to fire: each looks the group up when it fires and finds none (or, after a
downgrade, a group whose own timers have replaced them by key or whose generation moved on).

Downgrade: the classic group of the members a consumer group keeps, given as the consumer
groups' side describes them (consumer_groups/migration.py): Stable at the consumer group's
epoch as its generation, the protocol its members vote for, its first member its leader,
each member's assignment the target it had. Its GroupMetadata record is what the log keeps;
the group itself then rebalances at once (its members learn it from their next heartbeat),
each member's session running from now. A downgrade on a static member taking the place of
the last consumer-protocol member with the same subscription does not rebalance, as Kafka's
does not: the assignments stand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from coordinator_protocol.errors import ErrorCode
from coordinator_server.groups.classic import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    compute_subscribed_topics,
)
from coordinator_server.groups.rebalance import ClassicRebalance
from coordinator_server.groups.store import (
    Effects,
    GroupStore,
    group_result,
    join_error,
    sync_error,
)
from coordinator_server.records import (
    CoordinatorRecord,
    new_group_metadata_record,
    new_group_metadata_tombstone_record,
)
from coordinator_server.runtime.api import CoordinatorResult, ResponseHandle


class DowngradedMemberView(Protocol):
    """A member of the classic group a consumer group downgrades to, as the consumer
    groups' side gives it."""

    @property
    def member_id(self) -> str: ...

    @property
    def group_instance_id(self) -> str | None: ...

    @property
    def client_id(self) -> str: ...

    @property
    def client_host(self) -> str: ...

    @property
    def rebalance_timeout_ms(self) -> int: ...

    @property
    def session_timeout_ms(self) -> int: ...

    @property
    def protocols(self) -> tuple[tuple[str, bytes], ...]: ...

    @property
    def assignment(self) -> bytes: ...


class ClassicGroupMigration:
    """The classic groups' part of a migration, over the partition's classic groups."""

    def __init__(self, store: GroupStore, rebalance: ClassicRebalance) -> None:
        self._groups = store.by_id
        self._rebalance = rebalance

    def upgrade(
        self, group_id: str
    ) -> tuple[list[CoordinatorRecord], list[tuple[ResponseHandle, object]]]:
        """The classic group's end as it becomes a consumer group: its tombstone, and the
        answers of its parked callers."""
        group = self._groups.get(group_id)
        assert group is not None, "an upgrade converts a classic group"
        completions: list[tuple[ResponseHandle, object]] = []
        for member in group.members.values():
            if member.join_handle is not None:
                completions.append(
                    (
                        member.join_handle,
                        join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id),
                    )
                )
            if member.sync_handle is not None:
                completions.append(
                    (member.sync_handle, sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
                )
        return [new_group_metadata_tombstone_record(group_id)], completions

    def downgrade(
        self,
        group_id: str,
        generation_id: int,
        members: Sequence[DowngradedMemberView],
        now_ms: int,
        *,
        rebalance: bool = True,
    ) -> CoordinatorResult[None]:
        """The classic group made of `members` at `generation_id`: its GroupMetadata record
        and the group, rebalancing unless `rebalance` is False (a static member that took a
        member's place with the same subscription: its members' assignments stand), as the
        update that follows the record."""
        assert members, "a downgrade keeps at least one member"
        classic_members = {
            member.member_id: ClassicGroupMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.session_timeout_ms,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=member.protocols,
                assignment=member.assignment,
            )
            for member in members
        }
        group = ClassicGroup(
            group_id,
            ClassicGroupState.STABLE,
            now_ms,
            generation_id=generation_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            leader_id=members[0].member_id,
            members=classic_members,
            static_members={
                member.group_instance_id: member.member_id
                for member in members
                if member.group_instance_id is not None
            },
        )
        protocol_name = group.select_protocol()
        group = dataclasses.replace(
            group,
            protocol_name=protocol_name,
            subscribed_topics=compute_subscribed_topics(
                CONSUMER_PROTOCOL_TYPE, protocol_name, classic_members.values()
            ),
        )
        fx = Effects(records=[new_group_metadata_record(group_id, group.to_record_value())])
        for member in members:
            self._rebalance.reschedule_heartbeat(
                group_id, member.member_id, member.session_timeout_ms
            )
        downgraded = self._rebalance.prepare_rebalance(group, fx) if rebalance else group
        return group_result(group_id, None, downgraded, fx, None, park=False)


__all__ = ["ClassicGroupMigration", "DowngradedMemberView"]
