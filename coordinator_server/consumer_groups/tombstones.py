"""The tombstones that remove a consumer group from the log, in the order replay requires:
what DeleteGroups, the offset expiration and a downgrade to a classic group write. Pure."""

from __future__ import annotations

from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_current_member_assignment_tombstone_record,
    new_consumer_group_member_metadata_tombstone_record,
    new_consumer_group_metadata_tombstone_record,
    new_consumer_group_regular_expression_tombstone_record,
    new_consumer_group_target_assignment_member_tombstone_record,
    new_consumer_group_target_assignment_metadata_tombstone_record,
)


def group_tombstone_records(group: ConsumerGroup) -> list[CoordinatorRecord]:
    """The group's tombstones in Kafka's order (`ConsumerGroup.createGroupTombstoneRecords`),
    which replay requires: each member's current assignment, each target assignment, the
    target assignment's metadata, each member's metadata, each resolved regular expression,
    then the group's metadata."""
    group_id = group.group_id
    members = sorted(group.members())
    # A target assignment without a member would stop the group's tombstone at replay.
    targets = sorted(set(members).union(group.target_assignments()))
    records = [
        new_consumer_group_current_member_assignment_tombstone_record(group_id, member_id)
        for member_id in members
    ]
    records.extend(
        new_consumer_group_target_assignment_member_tombstone_record(group_id, member_id)
        for member_id in targets
    )
    records.append(new_consumer_group_target_assignment_metadata_tombstone_record(group_id))
    records.extend(
        new_consumer_group_member_metadata_tombstone_record(group_id, member_id)
        for member_id in members
    )
    # The group lists its resolved regular expressions nowhere else.
    records.extend(
        new_consumer_group_regular_expression_tombstone_record(group_id, regex)
        for regex in sorted(group.resolved_regular_expressions())
    )
    records.append(new_consumer_group_metadata_tombstone_record(group_id))
    return records


__all__ = ["group_tombstone_records"]
