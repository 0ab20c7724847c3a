"""A consumer group rebuilt from its records, in Kafka's orders: a member joining, a member
leaving, the group deleted; the derived state at each step, a failed write reverted, and a
shard loading a log that holds these records."""

from __future__ import annotations

import pytest
from shard_context import ShardTestContext

from coordinator_server.consumer_groups.current_assignment import NO_OWNER_EPOCH
from coordinator_server.consumer_groups.group import (
    ConsumerGroupReplayError,
    ConsumerGroupState,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.member import ReconciliationState
from coordinator_server.records import CoordinatorRecord
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicIdPartitions,
)

GROUP = "payments"
FOO = bytes(range(1, 17))
BAR = bytes(range(17, 33))


def metadata(member_id: str, *topics: str, instance_id: str | None = None) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupMemberMetadataKey(GROUP, member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id, None, "client", "/10.0.0.1", tuple(sorted(topics)), None, 45000, "uniform"
        ),
    )


def group_epoch(epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(ConsumerGroupMetadataKey(GROUP), ConsumerGroupMetadataValue(epoch))


def target(member_id: str, partitions: TopicIdPartitions) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupTargetAssignmentMemberKey(GROUP, member_id),
        ConsumerGroupTargetAssignmentMemberValue(partitions),
    )


def target_epoch(epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupTargetAssignmentMetadataKey(GROUP),
        ConsumerGroupTargetAssignmentMetadataValue(epoch),
    )


def current(
    member_id: str,
    epoch: int,
    assigned: TopicIdPartitions,
    pending: TopicIdPartitions = (),
    state: ReconciliationState = ReconciliationState.STABLE,
    previous: int = 0,
) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupCurrentMemberAssignmentKey(GROUP, member_id),
        ConsumerGroupCurrentMemberAssignmentValue(epoch, previous, state.value, assigned, pending),
    )


def member_tombstones(member_id: str) -> list[CoordinatorRecord]:
    """Kafka's order when a member leaves: current assignment, target, then metadata."""
    return [
        CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(GROUP, member_id), None),
        CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(GROUP, member_id), None),
        CoordinatorRecord(ConsumerGroupMemberMetadataKey(GROUP, member_id), None),
    ]


def join_a() -> list[CoordinatorRecord]:
    """Member A joins an empty group and is given foo-0 and foo-1 at epoch 1."""
    return [
        metadata("A", "foo", instance_id="a-1"),
        group_epoch(1),
        target("A", ((FOO, (0, 1)),)),
        target_epoch(1),
        current("A", 1, ((FOO, (0, 1)),)),
    ]


def consumer_groups(ctx: ShardTestContext) -> ConsumerGroupManager:
    return ctx.shard.managers.consumer_groups


def test_a_member_joining_goes_through_kafkas_states() -> None:
    ctx = ShardTestContext()
    records = join_a()
    ctx.replay_all(records[:2])
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.state() is ConsumerGroupState.ASSIGNING
    assert group.subscribed_topic_names() == {"foo": 1}
    assert group.static_member_id("a-1") == "A"

    ctx.replay_all(records[2:4])
    assert group.target_assignment("A") == {FOO: frozenset({0, 1})}
    assert group.target_owner(FOO, 1) == "A"
    # At the target's epoch, but the member has not reached it yet.
    assert group.state() is ConsumerGroupState.RECONCILING
    assert group.current_partition_epoch(FOO, 0) == NO_OWNER_EPOCH

    ctx.replay_all(records[4:])
    assert group.state() is ConsumerGroupState.STABLE
    assert group.current_partition_epoch(FOO, 0) == 1
    assert group.current_partition_epoch(FOO, 2) == NO_OWNER_EPOCH
    member = group.member("A")
    assert member is not None
    assert member.member_epoch == 1
    assert member.client_host == "/10.0.0.1"
    assert member.subscribed_topic_names == {"foo"}


def test_partitions_pending_revocation_keep_their_owners_epoch() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    ctx.replay_all(
        [
            metadata("B", "foo", "bar"),
            group_epoch(2),
            target("A", ((FOO, (0,)),)),
            target("B", ((BAR, (0,)), (FOO, (1,)))),
            target_epoch(2),
            # A must give foo-1 up before it moves on; B gets bar-0, foo-1 is withheld.
            current(
                "A", 1, ((FOO, (0,)),), ((FOO, (1,)),), ReconciliationState.UNREVOKED_PARTITIONS
            ),
            current("B", 2, ((BAR, (0,)),), (), ReconciliationState.UNRELEASED_PARTITIONS),
        ]
    )
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.state() is ConsumerGroupState.RECONCILING
    assert group.current_partition_epoch(FOO, 1) == 1
    assert group.current_partition_epoch(BAR, 0) == 2
    assert group.target_owner(FOO, 1) == "B"
    assert group.subscribed_topic_names() == {"foo": 2, "bar": 1}

    ctx.replay_all(
        [
            current("A", 2, ((FOO, (0,)),), previous=1),
            current("B", 2, ((BAR, (0,)), (FOO, (1,))), previous=0),
        ]
    )
    assert group.state() is ConsumerGroupState.STABLE
    assert dict(group.partition_epochs()) == {(FOO, 0): 2, (FOO, 1): 2, (BAR, 0): 2}


def test_a_partition_owned_twice_is_refused() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    with pytest.raises(ConsumerGroupReplayError, match="still owned at epoch 1"):
        ctx.replay_all([metadata("B", "foo"), current("B", 1, ((FOO, (1,)),))])


def test_a_member_leaves_with_kafkas_tombstones() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    ctx.replay_all([group_epoch(2), target_epoch(2)])
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.state() is ConsumerGroupState.RECONCILING

    first, second, third = member_tombstones("A")
    ctx.replay_all([first])
    left = group.member("A")
    assert left is not None
    assert left.member_epoch == -1
    assert group.current_partition_epoch(FOO, 0) == NO_OWNER_EPOCH
    ctx.replay_all([second])
    assert group.target_owner(FOO, 0) is None
    ctx.replay_all([third])
    assert group.member("A") is None
    assert group.static_members() == {}
    assert group.subscribed_topic_names() == {}
    assert group.state() is ConsumerGroupState.EMPTY


def test_a_metadata_tombstone_before_the_current_assignments_is_refused() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    with pytest.raises(ConsumerGroupReplayError, match="current assignment's tombstone"):
        ctx.replay_all([CoordinatorRecord(ConsumerGroupMemberMetadataKey(GROUP, "A"), None)])


def test_a_group_is_deleted_in_kafkas_order() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    manager = consumer_groups(ctx)
    group = manager.group(GROUP)
    assert group is not None
    with pytest.raises(ConsumerGroupReplayError, match="still has 1 members"):
        ctx.replay_all([CoordinatorRecord(ConsumerGroupMetadataKey(GROUP), None)])
    ctx.replay_all(
        [
            *member_tombstones("A"),
            CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(GROUP), None),
            CoordinatorRecord(ConsumerGroupMetadataKey(GROUP), None),
        ]
    )
    assert manager.group(GROUP) is None
    assert group.state() is ConsumerGroupState.DEAD
    # A tombstone of a group that does not exist is ignored, as Kafka ignores it.
    ctx.replay_all([CoordinatorRecord(ConsumerGroupMetadataKey(GROUP), None)])


def test_a_resolved_regex_counts_for_its_subscribers() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(
        [
            CoordinatorRecord(
                ConsumerGroupMemberMetadataKey(GROUP, "A"),
                ConsumerGroupMemberMetadataValue(
                    None, None, "client", "/h", ("foo",), "ba.*", 45000, None
                ),
            ),
            CoordinatorRecord(
                ConsumerGroupRegularExpressionKey(GROUP, "ba.*"),
                ConsumerGroupRegularExpressionValue(("bar", "baz"), 7, 1000),
            ),
        ]
    )
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.subscribed_topic_names() == {"foo": 1, "bar": 1, "baz": 1}
    ctx.replay_all([CoordinatorRecord(ConsumerGroupRegularExpressionKey(GROUP, "ba.*"), None)])
    assert group.subscribed_topic_names() == {"foo": 1}


def test_a_failed_write_reverts_its_replay() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    ctx.commit()
    base = ctx.end_offset
    ctx.replay_all(
        [
            metadata("B", "bar"),
            group_epoch(2),
            target("B", ((BAR, (0,)),)),
            target_epoch(2),
            current("B", 2, ((BAR, (0,)),)),
        ]
    )
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.num_members() == 2
    # Reads as of the committed offset see the group before the write.
    assert group.group_epoch(base) == 1
    assert group.state(base) is ConsumerGroupState.STABLE
    assert set(group.members(base)) == {"A"}

    ctx.revert_to(base)
    assert group.num_members() == 1
    assert group.group_epoch() == 1
    assert group.target_assignment_epoch() == 1
    assert group.state() is ConsumerGroupState.STABLE
    assert group.current_partition_epoch(BAR, 0) == NO_OWNER_EPOCH
    assert group.target_owner(BAR, 0) is None
    assert group.subscribed_topic_names() == {"foo": 1}


def test_a_reverted_deletion_brings_the_group_back() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    ctx.commit()
    base = ctx.end_offset
    ctx.replay_all(
        [
            *member_tombstones("A"),
            CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(GROUP), None),
            CoordinatorRecord(ConsumerGroupMetadataKey(GROUP), None),
        ]
    )
    assert consumer_groups(ctx).group(GROUP) is None
    ctx.revert_to(base)
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.state() is ConsumerGroupState.STABLE
    assert group.current_partition_epoch(FOO, 1) == 1
    assert group.static_member_id("a-1") == "A"


def test_a_shard_loads_a_log_holding_consumer_group_records() -> None:
    ctx = ShardTestContext()
    ctx.replay_all(join_a())
    ctx.replay_all([metadata("B", "bar"), group_epoch(2)])
    ctx.reload()
    manager = consumer_groups(ctx)
    assert manager.group_ids() == [GROUP]
    assert manager.num_members() == 2
    assert manager.count_by_state() == {"Assigning": 1}
    group = manager.group(GROUP)
    assert group is not None
    assert group.current_partition_epoch(FOO, 0) == 1
    assert group.subscribed_topic_names() == {"foo": 1, "bar": 1}
