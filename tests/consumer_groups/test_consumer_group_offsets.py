"""Committed offsets of consumer groups (KIP-848) through the shard, as Kafka's
OffsetMetadataManagerTest and GroupMetadataManagerTest have them: OffsetCommit and
TxnOffsetCommit checked against the member epoch, OffsetFetch from a member, OffsetDelete of
subscribed topics, DeleteGroups, and the offset expiration job deleting an empty group.

The groups are made by the consumer group manager's heartbeats, their records replayed
through the shard as the runtime replays them."""

from __future__ import annotations

import pytest
from shard_context import ShardTestContext

from coordinator_protocol.consumer_groups import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode, StaleMemberEpochError, UnknownMemberIdError
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
)
from coordinator_server.consumer_groups.heartbeat import ClusterTopic, ClusterTopicsSnapshot
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.groups.store import GroupsConfig
from coordinator_server.offsets.transactional import (
    TransactionalCommit,
    TransactionalCommitPartition,
    TransactionalCommitTopic,
)
from coordinator_server.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    OffsetCommitKey,
    new_consumer_group_regular_expression_record,
    new_offset_commit_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator_server.shard import ShardConfig

GROUP = "orders"
FOO = bytes(range(1, 17))
BAR = bytes(range(17, 33))
TOPICS = ClusterTopicsSnapshot({"foo": ClusterTopic(FOO, 3), "bar": ClusterTopic(BAR, 2)})
RETENTION_MS = 60_000

NONE = ErrorCode.NONE
STALE = ErrorCode.STALE_MEMBER_EPOCH
UNKNOWN_MEMBER = ErrorCode.UNKNOWN_MEMBER_ID

Offsets = dict[tuple[str, int], int]


def consumer_groups(ctx: ShardTestContext) -> ConsumerGroupManager:
    return ctx.shard.managers.consumer_groups


def heartbeat(
    ctx: ShardTestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    result = consumer_groups(ctx).heartbeat(
        request,
        client_id="client",
        client_host="/10.0.0.1",
        topics=TOPICS,
        now_ms=ctx.clock.now_ms(),
    )
    ctx.apply_result(result)
    assert result.response is not None
    assert result.response.error_code == NONE, result.response
    return result.response


def join(ctx: ShardTestContext, member_id: str, *topics: str, regex: str | None = None) -> int:
    """The member joins, subscribed to `topics` (or `regex`); its epoch."""
    response = heartbeat(
        ctx,
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=member_id,
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=list(topics),
            subscribed_topic_regex=regex,
            topic_partitions=[],
        ),
    )
    return response.member_epoch


def leave(ctx: ShardTestContext, member_id: str) -> None:
    heartbeat(
        ctx, ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=member_id, member_epoch=-1)
    )


def epoch_of(ctx: ShardTestContext, member_id: str) -> int:
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    member = group.member(member_id)
    assert member is not None
    return member.member_epoch


def commit(
    ctx: ShardTestContext,
    offsets: Offsets,
    member_id: str = "",
    epoch: int = -1,
    group: str = GROUP,
) -> dict[tuple[str, int], ErrorCode]:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
        )
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()],
    )
    response = ctx.write(lambda shard: shard.commit_offset(request))
    return {
        (topic.name, p.partition_index): ErrorCode(p.error_code)
        for topic in response.topics
        for p in topic.partitions
    }


def fetch(
    ctx: ShardTestContext,
    topics: dict[str, list[int]] | None = None,
    member_id: str | None = None,
    epoch: int = -1,
    committed_offset: int | None = None,
    group: str = GROUP,
) -> tuple[ErrorCode, Offsets]:
    """The group's error and its offsets (-1 left out), as `fetch_offsets` answers."""
    request = OffsetFetchRequestGroup(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        topics=None
        if topics is None
        else [OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )
    response = ctx.shard.fetch_offsets(request, committed_offset)
    return ErrorCode(response.error_code), {
        (topic.name, p.partition_index): p.committed_offset
        for topic in response.topics
        for p in topic.partitions
        if p.committed_offset >= 0
    }


def txn_commit(
    ctx: ShardTestContext, offsets: Offsets, generation: int, member_id: str, producer_id: int = 7
) -> dict[tuple[str, int], ErrorCode]:
    request = TransactionalCommit(
        group_id=GROUP,
        transactional_id="txn",
        producer_id=producer_id,
        producer_epoch=0,
        generation_id=generation,
        member_id=member_id,
        topics=[
            TransactionalCommitTopic(
                name=topic, partitions=[TransactionalCommitPartition(partition, offset)]
            )
            for (topic, partition), offset in offsets.items()
        ],
    )
    answer = ctx.write(lambda shard: shard.txn_offset_commit(request))
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def delete_offsets(ctx: ShardTestContext, topics: dict[str, list[int]]) -> dict[str, list[int]]:
    request = OffsetDeleteRequest(
        group_id=GROUP,
        topics=[
            OffsetDeleteRequestTopic(
                name=t, partitions=[OffsetDeleteRequestPartition(partition_index=p) for p in ps]
            )
            for t, ps in topics.items()
        ],
    )
    response = ctx.write(lambda shard: shard.delete_offsets(request))
    assert response.error_code == NONE
    return {t.name: [p.error_code for p in t.partitions] for t in response.topics}


def keys(records: list[CoordinatorRecord]) -> list[tuple[object, bool]]:
    """Each record's key, and whether it is a tombstone."""
    return [(record.key, record.value is None) for record in records]


# OffsetCommit (testConsumerGroupOffsetCommit*).


def test_a_member_commits_at_its_epoch_and_no_classic_group_appears() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    assert epoch >= 1
    since = ctx.end_offset
    assert commit(ctx, {("foo", 0): 100}, "A", epoch) == {("foo", 0): NONE}
    assert keys(ctx.records_written(since)) == [(OffsetCommitKey(GROUP, "foo", 0), False)]
    # The offsets are the consumer group's: no simple classic group holds them.
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert fetch(ctx) == (NONE, {("foo", 0): 100})
    # Rebuilt from the log, it is still the consumer group's alone.
    ctx.reload()
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert consumer_groups(ctx).group(GROUP) is not None
    assert fetch(ctx, {"foo": [0]}, "A", epoch) == (NONE, {("foo", 0): 100})


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_epoch_other_than_the_members_is_stale_older_or_newer(delta: int) -> None:
    # Kafka's testConsumerGroupOffsetCommitWithStaleMemberEpoch: a smaller and a larger
    # epoch are both STALE_MEMBER_EPOCH.
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    since = ctx.end_offset
    assert commit(ctx, {("foo", 0): 1, ("bar", 1): 2}, "A", epoch + delta) == {
        ("foo", 0): STALE,
        ("bar", 1): STALE,
    }
    assert ctx.end_offset == since


def test_an_unknown_member_is_unknown_member_id() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    assert commit(ctx, {("foo", 0): 1}, "B", epoch) == {("foo", 0): UNKNOWN_MEMBER}


def test_a_simple_commit_needs_a_group_without_members() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    # Members: a commit naming none is no member's (Kafka looks the empty id up).
    assert commit(ctx, {("foo", 0): 1}) == {("foo", 0): UNKNOWN_MEMBER}
    assert commit(ctx, {("foo", 0): 1}, "A", -1) == {("foo", 0): STALE}
    assert commit(ctx, {("foo", 0): 5}, "A", epoch) == {("foo", 0): NONE}
    leave(ctx, "A")
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None and not group.num_members()
    # Empty: the admin client's commit is accepted, and the group stays a consumer group.
    assert commit(ctx, {("foo", 0): 9, ("bar", 0): 3}) == {("foo", 0): NONE, ("bar", 0): NONE}
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert fetch(ctx) == (NONE, {("foo", 0): 9, ("bar", 0): 3})
    # So is a member epoch of a member that has gone, for no member is checked.
    assert commit(ctx, {("foo", 0): 10}, "A", -1) == {("foo", 0): NONE}


def test_an_accepted_commit_does_not_keep_the_session_alive() -> None:
    # Classic members' commits keep their sessions; a consumer group's members keep
    # theirs by heartbeats only: a member that only commits is fenced when its session
    # (45 s by default) ends.
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    ctx.sleep(40_000)
    assert commit(ctx, {("foo", 0): 1}, "A", epoch) == {("foo", 0): NONE}
    ctx.sleep(5_000)
    group = consumer_groups(ctx).group(GROUP)
    assert group is not None
    assert group.member("A") is None
    assert commit(ctx, {("foo", 0): 2}, "A", epoch) == {("foo", 0): UNKNOWN_MEMBER}


def test_a_commit_to_no_group_still_makes_a_simple_classic_group() -> None:
    ctx = ShardTestContext()
    assert commit(ctx, {("foo", 0): 1}, group="simple") == {("foo", 0): NONE}
    assert ctx.shard.managers.groups.group("simple") is not None
    assert consumer_groups(ctx).group("simple") is None
    assert commit(ctx, {("foo", 0): 1}, "A", 3, group="nobody") == {
        ("foo", 0): ErrorCode.GROUP_ID_NOT_FOUND
    }
    assert consumer_groups(ctx).group("nobody") is None


# TxnOffsetCommit (testConsumerGroupTransactionalOffsetCommit*).


def test_transactional_commit_checks_the_member_unless_the_producer_names_none() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    assert txn_commit(ctx, {("foo", 0): 1}, epoch, "A") == {("foo", 0): NONE}
    # A wrong epoch is ILLEGAL_GENERATION: TxnOffsetCommit has no STALE_MEMBER_EPOCH.
    assert txn_commit(ctx, {("foo", 0): 1}, epoch + 1, "A") == {
        ("foo", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert txn_commit(ctx, {("foo", 0): 1}, epoch - 1, "A") == {
        ("foo", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert txn_commit(ctx, {("foo", 0): 1}, epoch, "B") == {("foo", 0): UNKNOWN_MEMBER}
    # Generation -1 and no member id: the producer names no member, nothing is checked.
    assert txn_commit(ctx, {("foo", 1): 2}, -1, "", producer_id=8) == {("foo", 1): NONE}
    # A member id with generation -1 is checked (and the member is not at -1).
    assert txn_commit(ctx, {("foo", 1): 2}, -1, "A") == {("foo", 1): ErrorCode.ILLEGAL_GENERATION}
    # Committed at the transaction's end, into the consumer group's offsets.
    ctx.write(lambda shard: shard.complete_transaction_offsets(7, 0, True))
    assert fetch(ctx) == (NONE, {("foo", 0): 1})
    assert ctx.shard.managers.groups.group(GROUP) is None


# OffsetFetch (testConsumerGroupOffsetFetch*).


def test_fetch_from_a_member_checks_its_epoch_and_admins_are_not_checked() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 4}, "A", epoch)
    assert fetch(ctx, {"foo": [0, 1]}, "A", epoch) == (NONE, {("foo", 0): 4})
    assert fetch(ctx, None, "A", epoch) == (NONE, {("foo", 0): 4})
    assert fetch(ctx, {"foo": [0]}, "A", epoch - 1) == (STALE, {})
    assert fetch(ctx, None, "A", epoch + 1) == (STALE, {})
    assert fetch(ctx, {"foo": [0]}, "B", epoch) == (UNKNOWN_MEMBER, {})
    # An epoch without a member id is no member's.
    assert fetch(ctx, {"foo": [0]}, None, epoch) == (UNKNOWN_MEMBER, {})
    # No member id and epoch -1: an admin's fetch.
    assert fetch(ctx, {"foo": [0]}) == (NONE, {("foo", 0): 4})


def test_fetch_doors_raise_the_groups_error() -> None:
    # What the service's reads call: the error is raised, and becomes the group's error.
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 4}, "A", epoch)
    shard = ctx.shard
    with pytest.raises(StaleMemberEpochError):
        shard.fetch_partition_offsets(
            GROUP, [("foo", [0])], None, 10_000, member_id="A", member_epoch=epoch + 1
        )
    with pytest.raises(UnknownMemberIdError):
        shard.fetch_all_offsets(GROUP, None, 10_000, member_id="B", member_epoch=epoch)
    fetched = shard.fetch_all_offsets(GROUP, None, 10_000, member_id="A", member_epoch=epoch)
    assert fetched is not None
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetched[0]] == [
        ("foo", [4])
    ]


def test_fetch_as_of_the_committed_offset_sees_the_members_committed() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 4}, "A", epoch)
    ctx.commit()
    committed = ctx.end_offset
    join(ctx, "B", "foo")
    b_epoch = epoch_of(ctx, "B")
    # B's join is not committed yet: a read of the committed state does not know B.
    assert fetch(ctx, {"foo": [0]}, "B", b_epoch, committed_offset=committed) == (
        UNKNOWN_MEMBER,
        {},
    )
    assert fetch(ctx, {"foo": [0]}, "B", b_epoch) == (NONE, {("foo", 0): 4})
    # A's epoch as of then.
    assert fetch(ctx, {"foo": [0]}, "A", epoch, committed_offset=committed) == (
        NONE,
        {("foo", 0): 4},
    )


def test_classic_groups_ignore_the_member_fields_of_a_fetch() -> None:
    ctx = ShardTestContext()
    commit(ctx, {("foo", 0): 1}, group="simple")
    assert fetch(ctx, {"foo": [0]}, "nobody", 42, group="simple") == (NONE, {("foo", 0): 1})


# OffsetDelete (testConsumerGroupOffsetDelete*).


def test_offset_delete_refuses_subscribed_topics_and_deletes_the_others() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 1, ("bar", 0): 2, ("bar", 1): 3}, "A", epoch)
    since = ctx.end_offset
    assert delete_offsets(ctx, {"foo": [0], "bar": [0, 1]}) == {
        "foo": [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC],
        "bar": [NONE, NONE],
    }
    assert keys(ctx.records_written(since)) == [
        (OffsetCommitKey(GROUP, "bar", 0), True),
        (OffsetCommitKey(GROUP, "bar", 1), True),
    ]
    assert fetch(ctx) == (NONE, {("foo", 0): 1})


def test_offset_delete_counts_the_topics_of_resolved_regular_expressions() -> None:
    ctx = ShardTestContext()
    join(ctx, "A", regex="ba.*")
    ctx.replay_all(
        [
            new_consumer_group_regular_expression_record(
                GROUP, "ba.*", ConsumerGroupRegularExpressionValue(("bar",), 1, 0)
            )
        ]
    )
    commit(ctx, {("bar", 0): 2, ("foo", 0): 1}, "A", epoch_of(ctx, "A"))
    assert delete_offsets(ctx, {"bar": [0], "foo": [0]}) == {
        "bar": [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC],
        "foo": [NONE],
    }
    assert fetch(ctx) == (NONE, {("bar", 0): 2})


# DeleteGroups (testDeleteGroups with consumer groups).


def test_delete_groups_refuses_a_group_with_members() -> None:
    ctx = ShardTestContext()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 1}, "A", epoch)
    since = ctx.end_offset
    results = ctx.write(lambda shard: shard.delete_groups([GROUP]))
    assert [(r.group_id, r.error_code) for r in results] == [(GROUP, ErrorCode.NON_EMPTY_GROUP)]
    assert ctx.end_offset == since


def test_delete_groups_writes_offsets_then_the_groups_tombstones_in_kafkas_order() -> None:
    ctx = ShardTestContext()
    join(ctx, "A", "foo")
    join(ctx, "B", "bar")
    commit(ctx, {("foo", 0): 1, ("bar", 1): 2}, "A", epoch_of(ctx, "A"))
    leave(ctx, "A")
    leave(ctx, "B")
    # A resolved regular expression no member subscribes to any more (one a compacted log
    # kept, say): the group's deletion removes it too.
    ctx.replay_all(
        [
            new_consumer_group_regular_expression_record(
                GROUP, "ba.*", ConsumerGroupRegularExpressionValue(("bar",), 1, 0)
            )
        ]
    )
    since = ctx.end_offset
    results = ctx.write(lambda shard: shard.delete_groups([GROUP, GROUP]))
    assert [(r.group_id, r.error_code) for r in results] == [(GROUP, NONE), (GROUP, NONE)]
    assert keys(ctx.records_written(since)) == [
        (OffsetCommitKey(GROUP, "bar", 1), True),
        (OffsetCommitKey(GROUP, "foo", 0), True),
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), True),
        (ConsumerGroupRegularExpressionKey(GROUP, "ba.*"), True),
        (ConsumerGroupMetadataKey(GROUP), True),
    ]
    assert consumer_groups(ctx).group(GROUP) is None
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert fetch(ctx) == (NONE, {})
    ctx.reload()
    assert consumer_groups(ctx).group(GROUP) is None
    assert ctx.shard.managers.groups.group(GROUP) is None


def test_delete_group_records_name_every_member_in_kafkas_order() -> None:
    # What DeleteGroups never deletes (members), written in the order replay requires:
    # replayed, they leave nothing of the group.
    ctx = ShardTestContext()
    join(ctx, "A", "foo")
    join(ctx, "B", "foo", "bar")
    records = consumer_groups(ctx).delete_group_records(GROUP)
    assert keys(records) == [
        (ConsumerGroupCurrentMemberAssignmentKey(GROUP, "A"), True),
        (ConsumerGroupCurrentMemberAssignmentKey(GROUP, "B"), True),
        (ConsumerGroupTargetAssignmentMemberKey(GROUP, "A"), True),
        (ConsumerGroupTargetAssignmentMemberKey(GROUP, "B"), True),
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), True),
        (ConsumerGroupMemberMetadataKey(GROUP, "A"), True),
        (ConsumerGroupMemberMetadataKey(GROUP, "B"), True),
        (ConsumerGroupMetadataKey(GROUP), True),
    ]
    ctx.replay_all(records)
    assert consumer_groups(ctx).group(GROUP) is None
    assert consumer_groups(ctx).delete_group_records(GROUP) == []


# The offset expiration job (testCleanupExpiredOffsets with consumer groups).


def expiring_context() -> ShardTestContext:
    return ShardTestContext(ShardConfig(groups=GroupsConfig(offsets_retention_ms=RETENTION_MS)))


def expire(ctx: ShardTestContext, after_ms: int) -> list[CoordinatorRecord]:
    """Time moves on by `after_ms` (no timer fires) and the job runs once: its records."""
    ctx.clock.advance(after_ms)
    since = ctx.end_offset
    ctx.write_result(lambda shard: shard.cleanup_group_metadata())
    return ctx.records_written(since)


def test_a_member_keeps_its_subscribed_offsets_and_the_others_expire() -> None:
    ctx = expiring_context()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 1, ("bar", 0): 2}, "A", epoch)
    assert expire(ctx, RETENTION_MS - 1) == []
    assert keys(expire(ctx, 1)) == [(OffsetCommitKey(GROUP, "bar", 0), True)]
    assert fetch(ctx) == (NONE, {("foo", 0): 1})
    assert expire(ctx, 10 * RETENTION_MS) == []
    assert consumer_groups(ctx).group(GROUP) is not None


def test_an_empty_groups_offsets_expire_from_their_commit_then_the_group_goes() -> None:
    ctx = expiring_context()
    epoch = join(ctx, "A", "foo")
    commit(ctx, {("foo", 0): 1}, "A", epoch)
    ctx.clock.advance(RETENTION_MS // 2)
    commit(ctx, {("foo", 1): 2}, "A", epoch)
    leave(ctx, "A")
    # Retention counts from each commit, not from when the group became empty.
    assert keys(expire(ctx, RETENTION_MS // 2)) == [(OffsetCommitKey(GROUP, "foo", 0), True)]
    assert consumer_groups(ctx).group(GROUP) is not None
    assert keys(expire(ctx, RETENTION_MS // 2)) == [
        (OffsetCommitKey(GROUP, "foo", 1), True),
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), True),
        (ConsumerGroupMetadataKey(GROUP), True),
    ]
    assert consumer_groups(ctx).group(GROUP) is None
    assert ctx.shard.managers.groups.group(GROUP) is None


def test_an_empty_group_without_offsets_is_deleted_at_the_next_pass() -> None:
    ctx = expiring_context()
    join(ctx, "A", "foo")
    assert expire(ctx, 1) == []
    leave(ctx, "A")
    assert keys(expire(ctx, 1)) == [
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), True),
        (ConsumerGroupMetadataKey(GROUP), True),
    ]
    assert consumer_groups(ctx).group(GROUP) is None


def test_a_pending_transactional_offset_keeps_the_group() -> None:
    ctx = expiring_context()
    join(ctx, "A", "foo")
    leave(ctx, "A")
    assert txn_commit(ctx, {("foo", 0): 1}, -1, "") == {("foo", 0): NONE}
    assert expire(ctx, 10 * RETENTION_MS) == []
    assert consumer_groups(ctx).group(GROUP) is not None


def test_a_simple_group_shadowed_by_a_consumer_group_is_left_to_it() -> None:
    # A log whose offsets made a simple classic group before the consumer group's records
    # (compaction may leave it so): the consumer group's rules expire them.
    ctx = expiring_context()
    now = ctx.clock.now_ms()
    ctx.replay_all([new_offset_commit_record(GROUP, "foo", 0, 1, -1, "", now)])
    assert ctx.shard.managers.groups.group(GROUP) is not None
    epoch = join(ctx, "A", "foo")
    assert commit(ctx, {("bar", 0): 3}, "A", epoch) == {("bar", 0): NONE}
    records = expire(ctx, RETENTION_MS)
    assert keys(records) == [(OffsetCommitKey(GROUP, "bar", 0), True)]
    assert GroupMetadataKey(GROUP) not in [record.key for record in records]
