"""Online downgrade on a replaced member, through the shard, as Kafka's
GroupMetadataManagerTest has it: a classic static member whose JoinGroup takes the instance
of a consumer group's last member on the consumer protocol converts the group back into a
classic group at once, when the migration policy and the classic groups' size allow it.
The records, the answers, the timers, and the log replayed into a fresh shard."""

from __future__ import annotations

from dataclasses import replace

import pytest
from consumer_groups.test_migration import (
    BIDIRECTIONAL,
    CONSUMER,
    GROUP,
    NONE,
    T_ID,
    MigrationContext,
    classic_join,
    names,
)
from groups.groups_harness import RC, commit_request, join_request, subscription, sync_response

from coordinator_protocol.consumer_groups import ConsumerGroupHeartbeatRequest
from coordinator_protocol.errors import ErrorCode
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.migration import downgrade_allowed_with_replaced_member
from coordinator_server.consumer_groups.migration_policy import ConsumerGroupMigrationPolicy
from coordinator_server.consumer_groups.timeouts import session_timeout_key, sync_timeout_key
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.groups.rebalance import classic_group_heartbeat_key, classic_group_join_key
from coordinator_server.records import GroupMetadataKey
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
)


def static_consumer_and_classic(ctx: MigrationContext) -> int:
    """A consumer-protocol member of instance "ic" (CONSUMER), then a classic member "a":
    the group's epoch, its target computed for both."""
    joined = ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=CONSUMER,
            instance_id="ic",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
    )
    assert joined.error_code == NONE, joined
    assert classic_join(ctx, "a").error_code == NONE
    group = ctx.consumer_group()
    assert group.target_assignment_epoch() == group.group_epoch()
    return group.group_epoch()


def test_a_classic_static_member_taking_the_last_consumer_members_place_downgrades() -> None:
    ctx = MigrationContext()
    epoch = static_consumer_and_classic(ctx)
    group = ctx.consumer_group()
    targets = {"a": group.target_assignment("a"), "ic": group.target_assignment(CONSUMER)}
    assert targets["a"] and targets["ic"]
    start = ctx.end_offset

    joined = classic_join(ctx, "", instance="ic")

    assert joined.error_code == NONE, joined
    # Told the classic group's generation, which its SyncGroup is checked against.
    assert joined.generation_id == epoch
    replacement = joined.member_id
    records = ctx.records_written(start)
    # The join's records (the replaced member's tombstones, the replacement's records),
    # then the group's tombstones, the replacement's among them, then the classic group's.
    assert records[-1].key == GroupMetadataKey(GROUP)
    assert type(records[-2].key) is ConsumerGroupMetadataKey
    tombstoned = {
        (type(record.key), record.key.member_id)
        for record in records
        if record.value is None and hasattr(record.key, "member_id")
    }
    for key_type in (
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupCurrentMemberAssignmentKey,
    ):
        assert {(key_type, member_id) for member_id in ("a", CONSUMER, replacement)} <= tombstoned
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None

    # The same subscription: the classic group is Stable at the consumer group's epoch, the
    # replacement holding the target of the member it replaced.
    classic = ctx.group()
    assert classic.state is ClassicGroupState.STABLE
    assert classic.generation_id == epoch
    assert classic.static_members == {"ic": replacement}
    assigned = {m: names(member.assignment) for m, member in classic.members.items()}
    assert assigned == {
        "a": {"t": sorted(targets["a"][T_ID])},
        replacement: {"t": sorted(targets["ic"][T_ID])},
    }
    for member_id in ("a", replacement):
        assert ctx.timer.is_scheduled(classic_group_heartbeat_key(GROUP, member_id))
    for member_id in (CONSUMER, replacement):
        assert not ctx.timer.is_scheduled(session_timeout_key(GROUP, member_id))
    assert not ctx.timer.is_scheduled(sync_timeout_key(GROUP, replacement))
    synced = sync_response(ctx.sync(replacement, joined.generation_id, instance="ic"))
    assert synced.error_code == NONE
    assert names(synced.assignment) == {"t": sorted(targets["ic"][T_ID])}
    assert ctx.heartbeat("a", epoch) == NONE


def test_a_replacement_with_another_subscription_downgrades_into_a_rebalance() -> None:
    ctx = MigrationContext()
    epoch = static_consumer_and_classic(ctx)

    joined = classic_join(ctx, "", instance="ic", protos=[("range", subscription("t", "u"))])

    assert joined.error_code == NONE, joined
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
    classic = ctx.group()
    assert classic.state is ClassicGroupState.PREPARING_REBALANCE
    assert set(classic.members) == {"a", joined.member_id}
    assert ctx.timer.is_scheduled(classic_group_join_key(GROUP))
    assert ctx.heartbeat("a", epoch) == ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize(
    "policy", [ConsumerGroupMigrationPolicy.UPGRADE, ConsumerGroupMigrationPolicy.DISABLED]
)
def test_no_downgrade_on_a_replacement_the_policy_forbids(
    policy: ConsumerGroupMigrationPolicy,
) -> None:
    ctx = MigrationContext(policy)
    static_consumer_and_classic(ctx)

    joined = classic_join(ctx, "", instance="ic")

    assert joined.error_code == NONE, joined
    group = ctx.consumer_group()
    assert set(group.members()) == {"a", joined.member_id}
    assert group.num_classic_members() == 2
    assert ctx.find_group(GROUP) is None
    assert ctx.timer.is_scheduled(session_timeout_key(GROUP, joined.member_id))


def test_a_replacement_downgrades_only_the_last_consumer_member_into_a_group_that_fits() -> None:
    ctx = MigrationContext()
    static_consumer_and_classic(ctx)
    group = ctx.consumer_group()
    consumer, classic = group.member(CONSUMER), group.member("a")
    assert consumer is not None and classic is not None

    def allowed(replaced: ConsumerGroupMember, classic_max_size: int = 100) -> bool:
        return downgrade_allowed_with_replaced_member(
            group, replaced, BIDIRECTIONAL, classic_max_size
        )

    assert allowed(consumer)
    # The swap leaves the group's size as it is: two members need room for two. (A JoinGroup
    # without a member id to a full group is refused before, as Kafka's.)
    assert allowed(consumer, classic_max_size=2)
    assert not allowed(consumer, classic_max_size=1)
    # A classic member replaced by another leaves the consumer member in the group.
    assert not allowed(classic)


def test_no_downgrade_on_a_replacement_while_another_consumer_member_stays() -> None:
    ctx = MigrationContext()
    static_consumer_and_classic(ctx)
    assert ctx.join_consumer("other").error_code == NONE

    joined = classic_join(ctx, "", instance="ic")

    assert joined.error_code == NONE, joined
    group = ctx.consumer_group()
    assert set(group.members()) == {"a", "other", joined.member_id}
    assert group.num_classic_members() == 2
    assert ctx.find_group(GROUP) is None


def test_a_downgrade_on_a_replacement_replays_from_the_log() -> None:
    ctx = MigrationContext()
    static_consumer_and_classic(ctx)
    joined = classic_join(ctx, "", instance="ic")
    assert joined.error_code == NONE, joined
    view = ctx.group().persisted_view()

    ctx.reload()

    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
    assert ctx.group().persisted_view() == view
    assert ctx.group().static_members == {"ic": joined.member_id}
    for member_id in ("a", joined.member_id):
        assert ctx.timer.is_scheduled(classic_group_heartbeat_key(GROUP, member_id))


def test_a_downgrade_on_a_replacement_whose_append_fails_leaves_the_group_as_it_was() -> None:
    ctx = MigrationContext()
    static_consumer_and_classic(ctx)
    group = ctx.consumer_group()
    before = (group.group_epoch(), group.members(), group.target_assignments())
    request = join_request("", instance="ic")

    ctx.fail_append_parkable(
        lambda shard, handle: shard.join_group(RC, request, handle), TimeoutError()
    )

    group = ctx.consumer_group()
    assert (group.group_epoch(), group.members(), group.target_assignments()) == before
    assert ctx.find_group(GROUP) is None


def test_a_consumer_group_beyond_max_groups_is_refused_as_a_classic_one_would_be() -> None:
    # The node's limit on groups bounds both kinds: a join that would make one more
    # group is POLICY_VIOLATION, and nothing is written.
    ctx = MigrationContext()
    ctx.config = replace(ctx.config, groups=replace(ctx.config.groups, max_groups=1))
    ctx.build()
    committed = ctx.write(
        lambda shard: shard.commit_offset(commit_request({("t", 0): 5}, group="other"))
    )
    assert {p.error_code for t in committed.topics for p in t.partitions} == {0}
    written = len(ctx.records_written())
    refused = ctx.join_consumer()
    assert refused.error_code == ErrorCode.POLICY_VIOLATION, refused
    assert len(ctx.records_written()) == written
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
