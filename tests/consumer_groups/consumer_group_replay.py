"""A consumer group record replayed into a manager, as the shard's dispatch does: the tests of
the manager feed it its own results' records."""

from __future__ import annotations

from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.records import CoordinatorRecord
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRecordKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)


def replay(manager: ConsumerGroupManager, record: CoordinatorRecord) -> None:
    key = record.key
    assert isinstance(
        key,
        ConsumerGroupMetadataKey
        | ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey
        | ConsumerGroupRegularExpressionKey,
    ), key
    typed: ConsumerGroupRecordKey = key
    manager.replay(typed, record.value)
