"""Online migration between classic and consumer groups through the shard, as Kafka's
GroupMetadataManagerTest has it: a ConsumerGroupHeartbeat joining a classic group upgrades
it (under the migration policy), classic members live in the consumer group through
JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the group downgrades to a classic group
when its last member on the consumer protocol leaves. Each case's records and answers, the
timers it arms, and the log replayed into a fresh shard."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, get_args

import pytest
from groups.groups_harness import (
    RC,
    SESSION_MS,
    GroupsContext,
    assignment,
    join_request,
    join_response,
    subscription,
    sync_response,
)
from shard_context import MockTimer

from coordinator_protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from coordinator_protocol.consumer import TopicPartitions as NamedPartitions
from coordinator_protocol.consumer_groups import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import JoinGroupResponse, OffsetCommitResponse
from coordinator_server.consumer_group_settings import MigrationPolicy
from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    ConsumerGroupConfig,
)
from coordinator_server.consumer_groups.member import ReconciliationState
from coordinator_server.consumer_groups.migration_policy import ConsumerGroupMigrationPolicy
from coordinator_server.consumer_groups.timeouts import (
    join_timeout_key,
    session_timeout_key,
    sync_timeout_key,
)
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.groups.rebalance import classic_group_heartbeat_key, classic_group_join_key
from coordinator_server.groups.store import GroupsConfig
from coordinator_server.records import GroupMetadataKey
from coordinator_server.records.consumer_groups import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator_server.runtime.api import ShardContext
from coordinator_server.shard import LogPartitionShard, ShardConfig
from coordinator_server.timeline import SnapshotRegistry

GROUP = "g"
T_ID = bytes(range(1, 17))
U_ID = bytes(range(17, 33))
TOPICS = ClusterTopicsSnapshot({"t": ClusterTopic(T_ID, 4), "u": ClusterTopic(U_ID, 2)})
CONSUMER = "consumer-member"
NONE = ErrorCode.NONE

BIDIRECTIONAL = ConsumerGroupMigrationPolicy.BIDIRECTIONAL


class MigrationContext(GroupsContext):
    """The classic groups' test context on a shard that knows the data cluster's topics,
    with the consumer group protocol's calls."""

    def __init__(
        self,
        policy: ConsumerGroupMigrationPolicy = BIDIRECTIONAL,
        *,
        classic_max_size: int = 100,
        consumer_max_size: int = 100,
        assignment_interval_ms: int = 0,
    ) -> None:
        super().__init__(
            ShardConfig(
                groups=GroupsConfig(initial_rebalance_delay_ms=0, max_size=classic_max_size),
                consumer_groups=ConsumerGroupConfig(
                    migration_policy=policy,
                    max_size=consumer_max_size,
                    assignment_interval_ms=assignment_interval_ms,
                ),
            )
        )

    def build(self) -> None:
        self.registry = SnapshotRegistry()
        self.timer = MockTimer(self.clock)
        self.shard = LogPartitionShard(
            ShardContext(0, self.clock, self.timer, self.registry),
            self.config,
            cluster_topics=lambda: TOPICS,
        )

    def consumer_group(self) -> ConsumerGroup:
        group = self.shard.managers.consumer_groups.group(GROUP)
        assert group is not None, "no consumer group"
        return group

    def beat(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        response: ConsumerGroupHeartbeatResponse = self.write(
            lambda shard: shard.consumer_group_heartbeat(RC, request)
        )
        return response

    def join_consumer(
        self, member_id: str = CONSUMER, *topics: str
    ) -> ConsumerGroupHeartbeatResponse:
        return self.beat(
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=member_id,
                member_epoch=0,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=list(topics or ("t",)),
                topic_partitions=[],
            )
        )

    def timer_delay(self, key: str) -> int | None:
        timeout = self.timer._timeouts.get(key)
        return None if timeout is None else timeout.deadline_ms - self.clock.now_ms()

    def owners(self) -> dict[tuple[bytes, int], str]:
        """Who owns each partition of the consumer group, assigned or being revoked; no
        partition twice."""
        owners: dict[tuple[bytes, int], str] = {}
        for member_id, member in self.consumer_group().members().items():
            for partitions in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic_id, indexes in partitions.items():
                    for index in indexes:
                        assert (topic_id, index) not in owners, "a partition owned twice"
                        owners[(topic_id, index)] = member_id
        return owners


def names(assigned: bytes) -> dict[str, list[int]]:
    decoded = ConsumerProtocolAssignment.decode(assigned)
    return {tp.topic: sorted(tp.partitions) for tp in decoded.partitions}


def stable_classic(ctx: MigrationContext) -> tuple[list[str], int]:
    """Two classic members in a Stable group subscribed to "t", the leader first, the
    first owning t-0 and t-1, the second t-2 and t-3; and the generation."""
    (a, joined_a), (b, joined_b) = ctx.join_new(), ctx.join_new()
    ctx.sleep_until_done([joined_a, joined_b])
    generation = join_response(joined_a).generation_id
    leader = join_response(joined_a).leader
    members = [leader, b if leader == a else a]
    follower = ctx.sync(members[1], generation)
    ctx.sync(
        leader, generation, {members[0]: assignment("t", 0, 1), members[1]: assignment("t", 2, 3)}
    )
    assert sync_response(follower).error_code == NONE
    return members, generation


def static_join(ctx: MigrationContext, instance: str, **kwargs: Any) -> str:
    """A static classic member joins in one step: its member id."""
    joined = classic_join(ctx, "", instance=instance, **kwargs)
    assert joined.error_code == NONE, joined
    return joined.member_id


def classic_join(ctx: MigrationContext, member_id: str, **kwargs: Any) -> JoinGroupResponse:
    return join_response(ctx.join(join_request(member_id, **kwargs)))


# Upgrade.


def test_a_consumer_member_joining_a_stable_classic_group_upgrades_it() -> None:
    ctx = MigrationContext()
    members, generation = stable_classic(ctx)
    start = ctx.end_offset

    response = ctx.join_consumer()

    assert response.error_code == NONE, response
    assert response.member_epoch == generation + 1
    records = ctx.records_written(start)
    # The classic group's tombstone, then the consumer group Kafka's conversion writes,
    # then the joining member's own records.
    assert records[0].key == GroupMetadataKey(GROUP) and records[0].value is None
    kinds = [type(record.key) for record in records[1:8]]
    assert kinds == [
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupCurrentMemberAssignmentKey,
    ]
    converted = {r.key.member_id: r.value for r in records[1:3]}  # type: ignore[union-attr]
    for member_id in members:
        value = converted[member_id]
        assert value is not None
        assert value.classic_member_metadata == ClassicMemberMetadata(
            SESSION_MS, (ClassicProtocol("range", subscription("t")),)
        )
        assert value.subscribed_topic_names == ("t",)
    assert records[3].value.epoch == generation  # type: ignore[union-attr]
    assert records[6].value.assignment_epoch == generation  # type: ignore[union-attr]
    assert ctx.find_group(GROUP) is None

    group = ctx.consumer_group()
    assert group.group_epoch() == generation + 1
    for index, member_id in enumerate(members):
        member = group.member(member_id)
        assert member is not None and member.use_classic_protocol
        # At the classic generation, still owning its classic assignment.
        assert (member.member_epoch, member.state) == (generation, ReconciliationState.STABLE)
        assert member.assigned_partitions == {T_ID: frozenset({2 * index, 2 * index + 1})}
    ctx.owners()
    # Each classic member's session is its JoinGroup's.
    for member_id in members:
        assert ctx.timer_delay(session_timeout_key(GROUP, member_id)) == SESSION_MS
    assert ctx.timer_delay(session_timeout_key(GROUP, CONSUMER)) == 45_000

    ctx.commit()
    (described,) = ctx.shard.consumer_group_describe([GROUP], ctx.registry.committed_offset)
    types = {m.member_id: m.member_type for m in described.members}
    assert types == {**dict.fromkeys(members, MEMBER_TYPE_CLASSIC), CONSUMER: MEMBER_TYPE_CONSUMER}


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        (ConsumerGroupMigrationPolicy.DISABLED, "online upgrade is disabled"),
        (ConsumerGroupMigrationPolicy.DOWNGRADE, "online upgrade is disabled"),
    ],
)
def test_the_policy_may_refuse_the_upgrade(policy: ConsumerGroupMigrationPolicy, why: str) -> None:
    ctx = MigrationContext(policy)
    stable_classic(ctx)
    before = ctx.group().persisted_view()
    start = ctx.end_offset
    result = ctx.write_result(
        lambda shard: shard.consumer_group_heartbeat(
            RC,
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=CONSUMER,
                member_epoch=0,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=["t"],
                topic_partitions=[],
            ),
        )
    )
    assert result.response is not None
    assert result.response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert why in (result.response.error_message or "")
    assert ctx.end_offset == start
    assert ctx.group().persisted_view() == before


def test_a_group_too_large_or_of_another_protocol_is_not_upgraded() -> None:
    ctx = MigrationContext(consumer_max_size=1)
    stable_classic(ctx)
    response = ctx.write(
        lambda shard: shard.consumer_group_heartbeat(
            RC,
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=CONSUMER,
                member_epoch=0,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=["t"],
                topic_partitions=[],
            ),
        )
    )
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "exceeds the consumer group maximum size" in response.error_message

    other = MigrationContext()
    member_id, parked = other.join_new(protocol_type="connect")
    other.sleep_until_done([parked])
    refused = other.join_consumer()
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "does not use the consumer embedded protocol" in refused.error_message
    assert other.group().has_member(member_id)


def test_a_heartbeat_other_than_a_join_to_a_classic_group_is_not_found() -> None:
    ctx = MigrationContext()
    stable_classic(ctx)
    response = ctx.beat(
        ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id="x", member_epoch=3)
    )
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_an_upgrade_answers_the_parked_joins_so_that_they_rejoin_the_consumer_group() -> None:
    ctx = MigrationContext()
    members, _ = stable_classic(ctx)
    # The first member rejoins: the group rebalances, its JoinGroup parked until the other
    # rejoins too.
    parked = ctx.join(join_request(members[0]))
    assert not parked.done
    assert ctx.state() is ClassicGroupState.PREPARING_REBALANCE

    assert ctx.join_consumer().error_code == NONE

    assert join_response(parked).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    group = ctx.consumer_group()
    assert set(group.members()) == {*members, CONSUMER}


def test_an_upgrade_whose_append_fails_leaves_the_classic_group_as_it_was() -> None:
    ctx = MigrationContext()
    stable_classic(ctx)
    before = ctx.group().persisted_view()
    request = ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=CONSUMER,
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    ctx.fail_append(lambda shard: shard.consumer_group_heartbeat(RC, request), TimeoutError())
    assert ctx.group().persisted_view() == before
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None


def test_overlapping_classic_assignments_are_not_upgraded() -> None:
    ctx = MigrationContext()
    (a, joined_a), (b, joined_b) = ctx.join_new(), ctx.join_new()
    ctx.sleep_until_done([joined_a, joined_b])
    generation = join_response(joined_a).generation_id
    leader = join_response(joined_a).leader
    follower = ctx.sync(b if leader == a else a, generation)
    # The leader hands out t-0 twice: a consumer group cannot hold that.
    ctx.sync(leader, generation, {a: assignment("t", 0), b: assignment("t", 0)})
    assert sync_response(follower).error_code == NONE
    response = ctx.join_consumer()
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "Cannot upgrade classic group g" in response.error_message
    assert ctx.state() is ClassicGroupState.STABLE


# Classic members of a consumer group.


def test_classic_members_rejoin_and_reconcile_after_an_upgrade() -> None:
    ctx = MigrationContext()
    members, generation = stable_classic(ctx)
    joined = ctx.join_consumer()
    epoch = joined.member_epoch
    # The consumer member waits for partitions the classic members still own.
    assert ctx.consumer_group().member(CONSUMER).state is ReconciliationState.UNRELEASED_PARTITIONS

    for member_id in members:
        # Told to rejoin; an eager member revoked everything before it does.
        assert ctx.heartbeat(member_id, generation) == ErrorCode.REBALANCE_IN_PROGRESS
        assert ctx.timer_delay(join_timeout_key(GROUP, member_id)) is not None
        rejoined = classic_join(ctx, member_id)
        assert rejoined.error_code == NONE, rejoined
        assert (rejoined.generation_id, rejoined.protocol_type) == (epoch, "consumer")
        assert (rejoined.protocol_name, rejoined.leader, rejoined.members) == ("range", "", [])
        assert not ctx.timer.is_scheduled(join_timeout_key(GROUP, member_id))
        assert ctx.timer_delay(sync_timeout_key(GROUP, member_id)) == 60_000
        synced = sync_response(
            ctx.sync(member_id, epoch, protocol_type="consumer", protocol_name="range")
        )
        assert synced.error_code == NONE
        member = ctx.consumer_group().member(member_id)
        assert member is not None
        assert names(synced.assignment) == {
            "t": sorted(member.assigned_partitions.get(T_ID, frozenset()))
        }
        assert not ctx.timer.is_scheduled(sync_timeout_key(GROUP, member_id))
        assert ctx.heartbeat(member_id, epoch) == NONE

    # The consumer member takes what was released: everyone owns a part, nothing twice.
    response = ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=CONSUMER, member_epoch=epoch, topic_partitions=[]
        )
    )
    assert response.error_code == NONE
    owners = ctx.owners()
    assert sorted(owners) == [(T_ID, index) for index in range(4)]
    assert set(owners.values()) == {*members, CONSUMER}
    assert ctx.consumer_group().state().value == "Stable"


def test_a_new_classic_member_joins_a_consumer_group_in_two_steps() -> None:
    ctx = MigrationContext()
    assert ctx.join_consumer(CONSUMER, "t", "u").member_epoch == 1
    protos = [("range", subscription("t", "u"))]
    first = join_response(ctx.join(join_request(protos=protos)))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member_id = first.member_id
    assert member_id and ctx.consumer_group().member(member_id) is None

    joined = classic_join(ctx, member_id, protos=protos)
    assert (joined.error_code, joined.generation_id, joined.member_id) == (NONE, 2, member_id)
    member = ctx.consumer_group().member(member_id)
    assert member is not None and member.use_classic_protocol
    assert member.subscribed_topic_names == {"t", "u"}
    assert ctx.timer_delay(session_timeout_key(GROUP, member_id)) == SESSION_MS
    assert ctx.timer_delay(sync_timeout_key(GROUP, member_id)) == 60_000
    # Its whole target is still the consumer member's: it gets nothing yet, and waits.
    assert member.state is ReconciliationState.UNRELEASED_PARTITIONS
    assert names(sync_response(ctx.sync(member_id, 2)).assignment) == {}
    assert ctx.heartbeat(member_id, 2) == NONE

    # The consumer member gives its half up.
    owned = [
        ConsumerGroupHeartbeatRequestTopicPartitions(
            topic_id=T_ID, topic_name="t", partitions=[0, 1, 2, 3]
        ),
        ConsumerGroupHeartbeatRequestTopicPartitions(
            topic_id=U_ID, topic_name="u", partitions=[0, 1]
        ),
    ]
    revoking = ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=CONSUMER, member_epoch=1, topic_partitions=owned
        )
    )
    assert revoking.assignment is not None
    kept = [
        ConsumerGroupHeartbeatRequestTopicPartitions(
            topic_id=tp.topic_id, topic_name=tp.topic_name, partitions=tp.partitions
        )
        for tp in revoking.assignment.topic_partitions
    ]
    acked = ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=CONSUMER, member_epoch=1, topic_partitions=kept
        )
    )
    assert acked.member_epoch == 2
    # The classic member is told to rejoin, and then has its half.
    assert ctx.heartbeat(member_id, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    assert classic_join(ctx, member_id, protos=protos).generation_id == 2
    given = names(sync_response(ctx.sync(member_id, 2)).assignment)
    assert sum(len(partitions) for partitions in given.values()) == 3
    owners = ctx.owners()
    assert len(owners) == 6 and set(owners.values()) == {CONSUMER, member_id}


def test_a_classic_join_is_refused_as_kafka_refuses_it() -> None:
    ctx = MigrationContext(consumer_max_size=1)
    ctx.join_consumer()
    full = classic_join(ctx, "")
    assert full.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert full.error_message == "The consumer group has reached its maximum capacity of 1 members."

    ctx = MigrationContext()
    ctx.join_consumer()
    assert classic_join(ctx, "", protocol_type="connect").error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert classic_join(ctx, "x", session_ms=1).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    # A second classic member must share a protocol with the first.
    assert classic_join(ctx, "a", protos=[("roundrobin", subscription("t"))]).error_code == NONE
    refused = classic_join(ctx, "b", protos=[("range", subscription("t"))])
    assert refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # A subscription that is no subscription.
    assert classic_join(ctx, "c", protos=[("roundrobin", b"\x01")]).error_code == (
        ErrorCode.UNKNOWN_SERVER_ERROR
    )


def test_classic_sync_group_checks_as_kafka_does() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    a = static_join(ctx, "ia")
    epoch = ctx.consumer_group().member(a).member_epoch

    def code(member_id: str, generation: int, **kwargs: Any) -> int:
        return int(sync_response(ctx.sync(member_id, generation, **kwargs)).error_code)

    assert code("nobody", epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code("other", epoch, instance="ia") == ErrorCode.FENCED_INSTANCE_ID
    assert code(a, epoch, instance="ia", protocol_type="connect") == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert code(a, epoch, instance="ia", protocol_name="roundrobin") == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert code(a, epoch + 7, instance="ia") == ErrorCode.ILLEGAL_GENERATION
    # The consumer member is no classic member.
    consumer_epoch = ctx.consumer_group().member(CONSUMER).member_epoch
    assert code(CONSUMER, consumer_epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code(a, epoch, instance="ia") == NONE

    # A newer target: the member must rejoin first.
    ctx.join_consumer("another")
    assert code(a, epoch, instance="ia") == ErrorCode.REBALANCE_IN_PROGRESS
    assert ctx.timer_delay(join_timeout_key(GROUP, a)) == 60_000


def test_a_classic_member_is_fenced_when_it_does_not_rejoin_in_time() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    assert classic_join(ctx, "a", rebalance_ms=500).error_code == NONE
    epoch = ctx.consumer_group().member("a").member_epoch
    sync_response(ctx.sync("a", epoch))
    assert ctx.heartbeat("a", epoch) == NONE
    assert ctx.heartbeat("a", epoch + 1) == ErrorCode.ILLEGAL_GENERATION
    assert ctx.heartbeat("nobody", epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    ctx.join_consumer("another")
    assert ctx.heartbeat("a", epoch) == ErrorCode.REBALANCE_IN_PROGRESS
    assert ctx.timer_delay(join_timeout_key(GROUP, "a")) == 500
    group_epoch = ctx.consumer_group().group_epoch()

    ctx.sleep(501)

    group = ctx.consumer_group()
    assert group.member("a") is None
    assert group.group_epoch() == group_epoch + 1
    assert not ctx.timer.is_scheduled(session_timeout_key(GROUP, "a"))


def test_a_classic_member_is_fenced_after_its_session() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    assert classic_join(ctx, "a", session_ms=SESSION_MS).error_code == NONE
    epoch = ctx.consumer_group().member("a").member_epoch
    sync_response(ctx.sync("a", epoch))
    ctx.sleep(SESSION_MS - 1)
    assert ctx.heartbeat("a", epoch) == NONE
    ctx.sleep(SESSION_MS - 1)
    assert ctx.consumer_group().member("a") is not None
    ctx.sleep(2)
    assert ctx.consumer_group().member("a") is None


def test_classic_leave_group_fences_the_members_it_names_together() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    a = static_join(ctx, "i-a")
    static_join(ctx, "i-b")
    group_epoch = ctx.consumer_group().group_epoch()
    start = ctx.end_offset
    response = ctx.leave((a, "i-a"), ("", "i-b"), ("nobody", None), ("x", "i-a"))
    codes = [(m.member_id, m.group_instance_id, m.error_code) for m in response.members]
    assert codes == [
        (a, "i-a", NONE),
        ("", "i-b", NONE),
        ("nobody", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("x", "i-a", ErrorCode.FENCED_INSTANCE_ID),
    ]
    group = ctx.consumer_group()
    assert set(group.members()) == {CONSUMER}
    # Both removed, one epoch bump.
    epochs = [r for r in ctx.records_written(start) if type(r.key) is ConsumerGroupMetadataKey]
    assert [r.value.epoch for r in epochs] == [group_epoch + 1]  # type: ignore[union-attr]


def test_a_classic_members_commit_is_checked_against_its_member_epoch() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    assert classic_join(ctx, "a").error_code == NONE
    epoch = ctx.consumer_group().member("a").member_epoch

    def commit(generation: int) -> int:
        response: OffsetCommitResponse = ctx.commit_offsets(
            {("t", 0): 7}, generation=generation, member_id="a"
        )
        return int(response.topics[0].partitions[0].error_code)

    assert commit(epoch + 1) == ErrorCode.ILLEGAL_GENERATION
    assert commit(epoch) == NONE
    assert ctx.fetch(latest=True) == {("t", 0): 7}


# Downgrade.


def upgraded(ctx: MigrationContext) -> tuple[list[str], int]:
    """A classic group of two upgraded by the consumer member, everyone reconciled."""
    members, _ = stable_classic(ctx)
    epoch = ctx.join_consumer().member_epoch
    for member_id in members:
        classic_join(ctx, member_id)
        sync_response(ctx.sync(member_id, epoch))
    ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=CONSUMER, member_epoch=epoch, topic_partitions=[]
        )
    )
    return members, epoch


def test_the_group_downgrades_when_its_last_consumer_member_leaves() -> None:
    ctx = MigrationContext()
    members, epoch = upgraded(ctx)
    committed = ctx.commit_offsets({("t", 1): 11}, generation=epoch, member_id=members[0])
    assert committed.topics[0].partitions[0].error_code == NONE
    group = ctx.consumer_group()
    targets = {m: group.target_assignment(m) for m in members}
    start = ctx.end_offset

    left = ctx.beat(
        ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=CONSUMER, member_epoch=-1)
    )
    assert (left.error_code, left.member_epoch) == (NONE, -1)

    records = ctx.records_written(start)
    # The consumer group's tombstones in replay order, then the classic group's record.
    assert all(record.value is None for record in records[:-1])
    assert type(records[-2].key) is ConsumerGroupMetadataKey
    assert records[-1].key == GroupMetadataKey(GROUP)
    value = records[-1].value
    assert value is not None
    assert (value.protocol_type, value.protocol_name, value.generation) == (
        "consumer",
        "range",
        epoch,
    )
    assert value.leader == sorted(members)[0]
    for stored in value.members:
        # Each member's assignment is its target in the consumer group.
        assert names(stored.assignment) == {"t": sorted(targets[stored.member_id][T_ID])}
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
    classic = ctx.group()
    assert classic.state is ClassicGroupState.PREPARING_REBALANCE
    assert set(classic.members) == set(members)
    for member_id in members:
        assert ctx.timer.is_scheduled(classic_group_heartbeat_key(GROUP, member_id))
        assert not ctx.timer.is_scheduled(session_timeout_key(GROUP, CONSUMER))
    assert ctx.timer.is_scheduled(classic_group_join_key(GROUP))

    # The members learn it from their heartbeat, rejoin and form a generation; the offsets
    # stayed.
    for member_id in members:
        assert ctx.heartbeat(member_id, epoch) == ErrorCode.REBALANCE_IN_PROGRESS
    joins = [ctx.join(join_request(member_id)) for member_id in members]
    ctx.sleep_until_done(joins)
    generation = join_response(joins[0]).generation_id
    assert generation == epoch + 1
    assert ctx.fetch(latest=True) == {("t", 1): 11}


def test_a_downgrade_replays_from_the_log() -> None:
    ctx = MigrationContext()
    members, _ = upgraded(ctx)
    ctx.beat(ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=CONSUMER, member_epoch=-1))
    view = ctx.group().persisted_view()
    ctx.reload()
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
    assert ctx.group().persisted_view() == view
    # Loaded as Kafka loads a group with members: Stable, its members' sessions running.
    assert ctx.state() is ClassicGroupState.STABLE
    for member_id in members:
        assert ctx.timer.is_scheduled(classic_group_heartbeat_key(GROUP, member_id))


def test_an_upgrade_replays_from_the_log() -> None:
    ctx = MigrationContext()
    upgraded(ctx)
    group = ctx.consumer_group()
    state = (
        group.group_epoch(),
        group.target_assignment_epoch(),
        group.members(),
        group.target_assignments(),
    )
    ctx.reload()
    group = ctx.consumer_group()
    assert (
        group.group_epoch(),
        group.target_assignment_epoch(),
        group.members(),
        group.target_assignments(),
    ) == state
    assert group.num_classic_members() == 2
    assert ctx.find_group(GROUP) is None


def test_the_group_downgrades_when_its_last_consumer_member_times_out() -> None:
    ctx = MigrationContext()
    members, epoch = upgraded(ctx)
    for _ in range(5):
        ctx.sleep(SESSION_MS // 2)
        for member_id in members:
            ctx.heartbeat(member_id, epoch)
    # 25 s in: the consumer member's 45 s session has not ended.
    assert ctx.shard.managers.consumer_groups.group(GROUP) is not None
    for _ in range(5):
        ctx.sleep(SESSION_MS // 2)
        for member_id in members:
            ctx.heartbeat(member_id, epoch)
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
    assert set(ctx.group().members) == set(members)


@pytest.mark.parametrize(
    ("policy", "classic_max_size"),
    [(ConsumerGroupMigrationPolicy.UPGRADE, 100), (BIDIRECTIONAL, 1)],
)
def test_no_downgrade_when_the_policy_or_the_classic_size_forbids_it(
    policy: ConsumerGroupMigrationPolicy, classic_max_size: int
) -> None:
    ctx = MigrationContext(policy)
    ctx.join_consumer()
    for member_id in ("a", "b"):
        assert classic_join(ctx, member_id).error_code == NONE
    # The classic groups' limit lowered since (`--group-max-size` bounds both kinds).
    ctx.config = replace(ctx.config, groups=replace(ctx.config.groups, max_size=classic_max_size))
    ctx.reload()
    ctx.beat(ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=CONSUMER, member_epoch=-1))
    assert set(ctx.consumer_group().members()) == {"a", "b"}
    assert ctx.find_group(GROUP) is None


def test_a_classic_member_leaving_does_not_downgrade_while_a_consumer_member_stays() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    assert classic_join(ctx, "a").error_code == NONE
    assert classic_join(ctx, "b").error_code == NONE
    ctx.leave(("a", None))
    assert set(ctx.consumer_group().members()) == {CONSUMER, "b"}
    # The last classic member leaving empties nothing but itself.
    ctx.leave(("b", None))
    assert set(ctx.consumer_group().members()) == {CONSUMER}


def test_an_empty_consumer_group_joined_by_join_group_becomes_a_classic_group() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    ctx.commit_offsets({("t", 0): 5}, generation=1, member_id=CONSUMER)
    ctx.beat(ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=CONSUMER, member_epoch=-1))
    assert ctx.consumer_group().num_members() == 0
    start = ctx.end_offset

    first = join_response(ctx.join(join_request()))

    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    records = ctx.records_written(start)
    assert all(record.value is None for record in records[:-1])
    assert type(records[-2].key) is ConsumerGroupMetadataKey
    assert records[-1].key == GroupMetadataKey(GROUP)
    assert ctx.shard.managers.consumer_groups.group(GROUP) is None
    _, parked = ctx.join_new()
    ctx.sleep_until_done([parked])
    assert join_response(parked).error_code == NONE
    assert ctx.fetch(latest=True) == {("t", 0): 5}


def test_a_consumer_member_replacing_a_classic_static_member_takes_its_partitions() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    a = static_join(ctx, "ia")
    epoch = ctx.consumer_group().member(a).member_epoch
    sync_response(ctx.sync(a, epoch, instance="ia"))
    # A consumer of the same instance takes over at once: the classic member never said it
    # left, and Kafka checks that only between members on the consumer protocol.
    response = ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id="a2",
            instance_id="ia",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
    )
    assert response.error_code == NONE, response
    group = ctx.consumer_group()
    assert group.member(a) is None
    replaced = group.member("a2")
    assert replaced is not None and not replaced.use_classic_protocol
    assert group.num_classic_members() == 0
    ctx.owners()


def test_a_classic_subscription_naming_what_it_owns_revokes_first() -> None:
    ctx = MigrationContext()
    ctx.join_consumer()
    epoch = ctx.consumer_group().group_epoch()
    owned = ConsumerProtocolSubscription(
        topics=["t"], owned_partitions=[NamedPartitions("t", [0, 1, 2, 3])]
    ).encode()
    # A cooperative classic member rejoining with the partitions it still holds: it is not
    # given partitions another member still owns.
    assert classic_join(ctx, "a", protos=[("range", owned)]).error_code == NONE
    assert ctx.consumer_group().group_epoch() == epoch + 1
    ctx.owners()


def test_the_setting_names_every_policy() -> None:
    assert get_args(MigrationPolicy) == tuple(
        policy.value for policy in ConsumerGroupMigrationPolicy
    )
    assert ConsumerGroupMigrationPolicy.parse(" Upgrade ") is ConsumerGroupMigrationPolicy.UPGRADE
    with pytest.raises(ValueError, match="unknown consumer group migration policy"):
        ConsumerGroupMigrationPolicy.parse("sideways")
    enabled = {
        policy.value: (policy.upgrade_enabled, policy.downgrade_enabled)
        for policy in ConsumerGroupMigrationPolicy
    }
    assert enabled == {
        "disabled": (False, False),
        "upgrade": (True, False),
        "downgrade": (False, True),
        "bidirectional": (True, True),
    }


def test_a_consumer_member_of_a_classic_static_members_instance_takes_its_place() -> None:
    ctx = MigrationContext()
    (dynamic, joined), static_parked = ctx.join_new(), ctx.join(join_request(instance="ia"))
    ctx.sleep_until_done([joined, static_parked])
    static = join_response(static_parked).member_id
    generation = join_response(joined).generation_id
    leader = join_response(joined).leader
    follower = ctx.sync(static if leader == dynamic else dynamic, generation)
    ctx.sync(leader, generation, {dynamic: assignment("t", 0, 1), static: assignment("t", 2, 3)})
    assert sync_response(follower).error_code == NONE

    response = ctx.beat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id="replacement",
            instance_id="ia",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
    )

    assert response.error_code == NONE, response
    group = ctx.consumer_group()
    assert set(group.members()) == {dynamic, "replacement"}
    assert group.static_member_id("ia") == "replacement"
    replacement = group.member("replacement")
    assert replacement is not None and not replacement.use_classic_protocol
    ctx.owners()


def test_a_downgrade_whose_append_fails_leaves_the_consumer_group_as_it_was() -> None:
    ctx = MigrationContext()
    members, _ = upgraded(ctx)
    group = ctx.consumer_group()
    before = (group.group_epoch(), group.members(), group.target_assignments())
    leave = ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=CONSUMER, member_epoch=-1)
    ctx.fail_append(lambda shard: shard.consumer_group_heartbeat(RC, leave), TimeoutError())
    group = ctx.consumer_group()
    assert (group.group_epoch(), group.members(), group.target_assignments()) == before
    assert ctx.find_group(GROUP) is None
    # The members carry on in the consumer group.
    assert ctx.heartbeat(members[0], group.member(members[0]).member_epoch) == NONE


def test_a_classic_member_is_told_to_rejoin_once_a_batched_target_is_computed() -> None:
    ctx = MigrationContext(assignment_interval_ms=1_000)
    ctx.join_consumer()
    assert classic_join(ctx, "a").error_code == NONE
    epoch = ctx.consumer_group().member("a").member_epoch
    sync_response(ctx.sync("a", epoch))
    # Another member joins within the interval: the group's epoch moves, its target waits.
    ctx.join_consumer("another")
    group = ctx.consumer_group()
    assert group.group_epoch() > group.target_assignment_epoch() == epoch
    # A rejoin now would find the same target: the member is not asked for one yet.
    assert ctx.heartbeat("a", epoch) == NONE
    ctx.sleep(1_000)
    assert ctx.consumer_group().target_assignment_epoch() > epoch
    assert ctx.heartbeat("a", epoch) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = classic_join(ctx, "a")
    assert rejoined.generation_id == ctx.consumer_group().target_assignment_epoch()
