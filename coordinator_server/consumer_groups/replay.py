"""The replay of the consumer group records (types 9 to 14): the half of Kafka's
GroupMetadataManager that rebuilds the consumer groups from the log, live and on load.

A record of a group that does not exist creates it, a tombstone of one that does not exist
is ignored, and the group's metadata tombstone removes it once its members and target
assignment are gone (Kafka's order of a deletion's tombstones); a log that breaks Kafka's
order raises ConsumerGroupReplayError.
"""

from __future__ import annotations

from coordinator_server.consumer_groups.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    NO_ASSIGNMENT_EPOCH,
    ConsumerGroup,
    ConsumerGroupReplayError,
    ResolvedRegularExpression,
    member_with_assignment,
    member_with_metadata,
    partitions_from_record,
)
from coordinator_server.consumer_groups.member import EMPTY_TOPIC_PARTITIONS, ConsumerGroupMember
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecordKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator_server.timeline import SnapshotRegistry, TimelineDict


class ConsumerGroupRecords:
    """Replays the records into the partition's groups (the manager's TimelineDict)."""

    def __init__(
        self, registry: SnapshotRegistry, groups: TimelineDict[str, ConsumerGroup]
    ) -> None:
        self._registry = registry
        self._groups = groups

    def replay(self, key: ConsumerGroupRecordKey, value: object | None) -> None:
        """One consumer group record, `value` None for a tombstone."""
        if type(key) is ConsumerGroupMetadataKey:
            assert value is None or type(value) is ConsumerGroupMetadataValue
            self._replay_group_metadata(key, value)
        elif type(key) is ConsumerGroupMemberMetadataKey:
            assert value is None or type(value) is ConsumerGroupMemberMetadataValue
            self._replay_member_metadata(key, value)
        elif type(key) is ConsumerGroupTargetAssignmentMetadataKey:
            assert value is None or type(value) is ConsumerGroupTargetAssignmentMetadataValue
            self._replay_target_assignment_metadata(key, value)
        elif type(key) is ConsumerGroupTargetAssignmentMemberKey:
            assert value is None or type(value) is ConsumerGroupTargetAssignmentMemberValue
            self._replay_target_assignment_member(key, value)
        elif type(key) is ConsumerGroupCurrentMemberAssignmentKey:
            assert value is None or type(value) is ConsumerGroupCurrentMemberAssignmentValue
            self._replay_current_assignment(key, value)
        elif type(key) is ConsumerGroupRegularExpressionKey:
            assert value is None or type(value) is ConsumerGroupRegularExpressionValue
            self._replay_regular_expression(key, value)
        else:
            raise ValueError(f"not a consumer group record key: {key!r}")

    def _group_or_create(self, group_id: str) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if group is None:
            group = ConsumerGroup(self._registry, group_id)
            self._groups[group_id] = group
        return group

    def _replay_group_metadata(
        self, key: ConsumerGroupMetadataKey, value: ConsumerGroupMetadataValue | None
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).set_group_epoch(value.epoch, value.metadata_hash)
            return
        group = self._groups.get(key.group)
        if group is None:
            return
        if group.num_members():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes group {key.group}, which still has "
                f"{group.num_members()} members"
            )
        if group.target_assignments():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes group {key.group}, whose target assignment still has "
                f"{len(group.target_assignments())} members"
            )
        if group.target_assignment_epoch() != NO_ASSIGNMENT_EPOCH:
            raise ConsumerGroupReplayError(
                f"a tombstone deletes group {key.group} before its target assignment "
                "metadata's tombstone"
            )
        group.mark_dead()
        self._groups.pop(key.group)

    def _replay_member_metadata(
        self, key: ConsumerGroupMemberMetadataKey, value: ConsumerGroupMemberMetadataValue | None
    ) -> None:
        if value is not None:
            group = self._group_or_create(key.group)
            member = group.member(key.member_id) or ConsumerGroupMember(key.member_id)
            group.update_member(member_with_metadata(member, value))
            return
        found = self._groups.get(key.group)
        leaving = None if found is None else found.member(key.member_id)
        if found is None or leaving is None:
            return
        if leaving.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
            raise ConsumerGroupReplayError(
                f"a tombstone deletes member {key.member_id} of group {key.group} before its "
                "current assignment's tombstone"
            )
        if key.member_id in found.target_assignments():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes member {key.member_id} of group {key.group} before its "
                "target assignment's tombstone"
            )
        found.remove_member(key.member_id)

    def _replay_target_assignment_metadata(
        self,
        key: ConsumerGroupTargetAssignmentMetadataKey,
        value: ConsumerGroupTargetAssignmentMetadataValue | None,
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).set_target_assignment_epoch(
                value.assignment_epoch, value.assignment_timestamp_ms
            )
            return
        group = self._groups.get(key.group)
        if group is None:
            return
        if group.target_assignments():
            raise ConsumerGroupReplayError(
                f"a tombstone deletes the target assignment of group {key.group}, which still "
                f"has {len(group.target_assignments())} members"
            )
        group.set_target_assignment_epoch(NO_ASSIGNMENT_EPOCH)

    def _replay_target_assignment_member(
        self,
        key: ConsumerGroupTargetAssignmentMemberKey,
        value: ConsumerGroupTargetAssignmentMemberValue | None,
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).update_target_assignment(
                key.member_id, partitions_from_record(value.partitions)
            )
            return
        group = self._groups.get(key.group)
        if group is not None:
            group.remove_target_assignment(key.member_id)

    def _replay_current_assignment(
        self,
        key: ConsumerGroupCurrentMemberAssignmentKey,
        value: ConsumerGroupCurrentMemberAssignmentValue | None,
    ) -> None:
        if value is not None:
            # Kafka creates the member here too: compaction may have kept this record of a
            # member whose metadata record is later in the log.
            group = self._group_or_create(key.group)
            member = group.member(key.member_id) or ConsumerGroupMember(key.member_id)
            group.update_member(member_with_assignment(member, value))
            return
        found = self._groups.get(key.group)
        leaving = None if found is None else found.member(key.member_id)
        if found is None or leaving is None:
            return
        # The member has left: it holds nothing, and its metadata's tombstone may follow.
        found.update_member(
            leaving.replace(
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned_partitions=EMPTY_TOPIC_PARTITIONS,
                partitions_pending_revocation=EMPTY_TOPIC_PARTITIONS,
            )
        )

    def _replay_regular_expression(
        self,
        key: ConsumerGroupRegularExpressionKey,
        value: ConsumerGroupRegularExpressionValue | None,
    ) -> None:
        if value is not None:
            self._group_or_create(key.group).update_resolved_regular_expression(
                key.regular_expression,
                ResolvedRegularExpression(
                    frozenset(value.topics), value.version, value.timestamp_ms
                ),
            )
            return
        group = self._groups.get(key.group)
        if group is not None:
            group.update_resolved_regular_expression(key.regular_expression, None)


__all__ = ["ConsumerGroupRecords"]
