"""Transactional offsets through the shard: TxnOffsetCommit (Kafka's
OffsetMetadataManagerTest's transactional cases), the end of a transaction as one write,
require_stable fetches, expiration and deletion with pending offsets."""

from __future__ import annotations

from groups.groups_harness import GroupsContext
from shard_context import ShardTestContext
from txn_offsets_harness import (
    end_txn,
    fetch_committed,
    fetch_stable,
    pending_state,
    plain_commit,
    txn_commit,
    txn_request,
)

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.groups.store import GroupsConfig
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    TransactionalOffsetKey,
    TransactionalOffsetValue,
    new_offset_commit_record,
    new_transactional_offset_record,
    new_transactional_offset_tombstone_record,
)
from coordinator_server.shard import ShardConfig

NONE = ErrorCode.NONE
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


def committed(ctx: ShardTestContext, group: str, topic: str, partition: int) -> int | None:
    value = ctx.shard.managers.offsets.committed_offset(group, topic, partition)
    return None if value is None else value.offset


# TxnOffsetCommit (testGenericGroupTransactionalOffsetCommit*).


def test_member_commit_writes_pending_records_not_plain_ones() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(1)
    start = ctx.end_offset
    assert txn_commit(
        ctx,
        "g",
        7,
        {("bar", 0): 100},
        producer_epoch=3,
        generation=generation,
        member_id=members[0],
    ) == {("bar", 0): NONE}
    assert ctx.records_written(start) == [
        new_transactional_offset_record(
            "g", "bar", 0, 7, TransactionalOffsetValue(3, 100, 1, "metadata", ctx.clock.now_ms())
        )
    ]
    assert committed(ctx, "g", "bar", 0) is None
    assert ctx.shard.has_pending_transactional_offsets(7)
    assert not ctx.shard.has_pending_transactional_offsets(8)


def test_unknown_group_with_a_generation_is_illegal_generation() -> None:
    ctx = ShardTestContext()
    assert txn_commit(ctx, "foo", 7, {("bar", 0): 100}, generation=10, member_id="member") == {
        ("bar", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert ctx.end_offset == 0


def test_unknown_group_without_generation_becomes_a_simple_group() -> None:
    ctx = ShardTestContext()
    assert txn_commit(ctx, "foo", 7, {("bar", 0): 100}) == {("bar", 0): NONE}
    group = ctx.shard.managers.groups.group("foo")
    assert group is not None and group.state is ClassicGroupState.EMPTY


def test_unknown_member_and_illegal_generation() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(1)
    assert txn_commit(ctx, "g", 7, {("bar", 0): 1}, generation=generation, member_id="x") == {
        ("bar", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
    assert txn_commit(
        ctx, "g", 7, {("bar", 0): 1}, generation=generation + 5, member_id=members[0]
    ) == {("bar", 0): ErrorCode.ILLEGAL_GENERATION}


def test_group_state_is_not_enforced() -> None:
    """Unlike OffsetCommit: no member id on a group with members (older TxnOffsetCommits
    carry none), and a commit while the group completes a rebalance, are accepted."""
    ctx = GroupsContext()
    member_id, parked = ctx.join_new()
    ctx.sleep_until_done([parked])
    assert ctx.state() is ClassicGroupState.COMPLETING_REBALANCE
    generation = parked.response.generation_id
    assert txn_commit(ctx, "g", 7, {("bar", 0): 1}, generation=generation, member_id=member_id) == {
        ("bar", 0): NONE
    }
    assert txn_commit(ctx, "g", 8, {("bar", 1): 1}) == {("bar", 1): NONE}


def test_empty_group_id_and_metadata_too_large() -> None:
    ctx = ShardTestContext(ShardConfig(offsets=OffsetsConfig(offset_metadata_max_bytes=5)))
    assert txn_commit(ctx, "", 7, {("bar", 0): 1}) == {("bar", 0): ErrorCode.INVALID_GROUP_ID}
    request = txn_request("g", 7, {("bar", 0): 1}, metadata="toolong")
    ok = txn_request("g", 7, {("bar", 1): 1}, metadata="ok")
    both = type(request)(**{**_fields(request), "topics": [*request.topics, *ok.topics]})
    response = ctx.write(lambda s: s.txn_offset_commit(both))
    codes = [p.error_code for t in response.topics for p in t.partitions]
    assert codes == [ErrorCode.OFFSET_METADATA_TOO_LARGE, NONE]
    assert [r.key for r in ctx.records_written()] == [TransactionalOffsetKey("g", "bar", 1, 7)]


def _fields(request: object) -> dict[str, object]:
    return {name: getattr(request, name) for name in request.__slots__}  # type: ignore[attr-defined]


def test_older_producer_epoch_is_fenced() -> None:
    ctx = ShardTestContext()
    assert txn_commit(ctx, "g", 7, {("bar", 0): 1}, producer_epoch=5) == {("bar", 0): NONE}
    assert txn_commit(ctx, "g", 7, {("bar", 1): 1}, producer_epoch=4) == {
        ("bar", 1): ErrorCode.INVALID_PRODUCER_EPOCH
    }
    # The end of an older epoch's transaction changes nothing either.
    start = ctx.end_offset
    assert end_txn(ctx, 7, True, producer_epoch=4) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert ctx.end_offset == start
    assert end_txn(ctx, 7, True, producer_epoch=5) == NONE
    assert committed(ctx, "g", "bar", 0) == 1


def test_limits_refuse_new_partitions_only() -> None:
    ctx = ShardTestContext(
        ShardConfig(
            offsets=OffsetsConfig(
                max_committed_offsets_per_group=3, max_pending_transactional_offsets=4
            )
        )
    )
    plain_commit(ctx, "g", {("t", 0): 1, ("t", 1): 1})
    # The group holds two partitions: one more fits, a pending one counts as held.
    assert txn_commit(ctx, "g", 7, {("t", 0): 5, ("t", 2): 5, ("t", 3): 5}) == {
        ("t", 0): NONE,
        ("t", 2): NONE,
        ("t", 3): ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    }
    assert txn_commit(ctx, "g", 8, {("t", 2): 6, ("t", 1): 6}) == {("t", 2): NONE, ("t", 1): NONE}
    # Four pending offsets are held in the partition: only rewrites fit.
    assert txn_commit(ctx, "h", 9, {("t", 0): 1}) == {
        ("t", 0): ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    }
    assert txn_commit(ctx, "g", 7, {("t", 0): 9}) == {("t", 0): NONE}


def test_what_the_end_of_a_transaction_writes_must_fit_half_a_batch() -> None:
    ctx = ShardTestContext(ShardConfig(offsets=OffsetsConfig(max_records_bytes=1000)))
    codes = txn_commit(ctx, "g", 7, {("t", p): 1 for p in range(10)})
    accepted = [key for key, code in codes.items() if code == NONE]
    assert 0 < len(accepted) < 10
    assert all(
        code == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        for key, code in codes.items()
        if key not in accepted
    )
    result = ctx.write_result(lambda s: s.complete_transaction_offsets(7, 0, True))
    encoded = sum(len(k) + len(v or b"") for k, v in ctx.log[-len(result.records) :])
    assert result.atomic and encoded <= 1000


def test_a_failed_append_leaves_no_pending_offset() -> None:
    ctx = ShardTestContext()
    ctx.fail_append(lambda s: s.txn_offset_commit(txn_request("g", 7, {("t", 0): 1})), OSError())
    assert pending_state(ctx) == {}
    assert not ctx.shard.has_pending_transactional_offsets(7)


def test_committed_reads_see_pending_offsets_once_committed() -> None:
    ctx = ShardTestContext()
    txn_commit(ctx, "g", 7, {("t", 0): 1})
    assert ctx.shard.has_pending_transactional_offsets(7)
    assert not ctx.shard.has_pending_transactional_offsets(7, ctx.registry.committed_offset)
    ctx.commit()
    assert ctx.shard.has_pending_transactional_offsets(7, ctx.registry.committed_offset)


# Fetches (testFetchOffsetsWithPendingTransactionalOffsets, testFetchAll...).


def test_fetch_with_pending_transactional_offsets() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "group", {("foo", 0): 100, ("foo", 1): 110, ("bar", 0): 200})
    ctx.commit()
    # bar-1 has no committed offset: it is unstable too.
    txn_commit(ctx, "group", 10, {("foo", 1): 111, ("bar", 0): 201, ("bar", 1): 211})
    topics = {"foo": [0, 1], "bar": [0, 1]}
    assert fetch_stable(ctx, "group", topics) == {
        ("foo", 0): (100, NONE),
        ("foo", 1): (-1, UNSTABLE),
        ("bar", 0): (-1, UNSTABLE),
        ("bar", 1): (-1, UNSTABLE),
    }
    ctx.commit()
    assert fetch_committed(ctx, "group", topics) == {
        ("foo", 0): (100, NONE),
        ("foo", 1): (110, NONE),
        ("bar", 0): (200, NONE),
        ("bar", 1): (-1, NONE),
    }
    assert end_txn(ctx, 10, True) == NONE
    assert fetch_stable(ctx, "group", topics) == {
        ("foo", 0): (100, NONE),
        ("foo", 1): (111, NONE),
        ("bar", 0): (201, NONE),
        ("bar", 1): (211, NONE),
    }


def test_fetch_all_with_pending_transactional_offsets() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "group", {("foo", 0): 100, ("foo", 1): 110, ("bar", 0): 200})
    txn_commit(ctx, "group", 10, {("foo", 1): 111, ("bar", 0): 201, ("bar", 1): 211})
    # Only committed offsets are listed (Kafka lists the main store's).
    assert fetch_stable(ctx, "group") == {
        ("foo", 0): (100, NONE),
        ("foo", 1): (-1, UNSTABLE),
        ("bar", 0): (-1, UNSTABLE),
    }
    ctx.commit()
    assert fetch_committed(ctx, "group") == {
        ("foo", 0): (100, NONE),
        ("foo", 1): (110, NONE),
        ("bar", 0): (200, NONE),
    }
    end_txn(ctx, 10, False)
    assert fetch_stable(ctx, "group")[("bar", 0)] == (200, NONE)


# The end of a transaction (testReplayTransactionEndMarker*).


def test_end_marker_commits_one_producer_and_aborts_another() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "foo", {("bar", 0): 99})
    txn_commit(ctx, "foo", 5, {("bar", 0): 100})
    txn_commit(ctx, "foo", 6, {("bar", 1): 200})
    # An unknown producer's end writes nothing.
    start = ctx.end_offset
    assert end_txn(ctx, 1, True) == NONE
    assert ctx.end_offset == start

    assert end_txn(ctx, 5, True) == NONE
    now = ctx.clock.now_ms()
    assert ctx.records_written(start) == [
        new_transactional_offset_tombstone_record("foo", "bar", 0, 5),
        new_offset_commit_record("foo", "bar", 0, 100, 1, "metadata", now),
    ]
    assert committed(ctx, "foo", "bar", 0) == 100
    assert ctx.shard.managers.offsets.pending.get(5, "foo", "bar", 0) is None

    start = ctx.end_offset
    assert end_txn(ctx, 6, False) == NONE
    assert ctx.records_written(start) == [
        new_transactional_offset_tombstone_record("foo", "bar", 1, 6)
    ]
    assert committed(ctx, "foo", "bar", 1) is None
    assert pending_state(ctx) == {}
    # A repeated end (a marker retried) is a no-op.
    start = ctx.end_offset
    assert end_txn(ctx, 5, True) == NONE
    assert ctx.end_offset == start


def test_end_marker_keeps_the_most_recent_committed_offset() -> None:
    ctx = ShardTestContext()
    txn_commit(ctx, "foo", 5, {("bar", 0): 100})
    plain_commit(ctx, "foo", {("bar", 0): 101})
    start = ctx.end_offset
    end_txn(ctx, 5, True)
    # Only the tombstone: the plain commit came later.
    assert ctx.records_written(start) == [
        new_transactional_offset_tombstone_record("foo", "bar", 0, 5)
    ]
    assert committed(ctx, "foo", "bar", 0) == 101


def test_a_pending_offset_written_after_a_plain_commit_wins() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "foo", {("bar", 0): 101})
    txn_commit(ctx, "foo", 5, {("bar", 0): 100})
    end_txn(ctx, 5, True)
    assert committed(ctx, "foo", "bar", 0) == 100


def test_a_later_pending_offset_of_another_producer_still_wins() -> None:
    """Kafka compares record offsets: producer 6's pending offset came after producer 5's,
    so it wins whichever transaction commits first."""
    ctx = ShardTestContext()
    txn_commit(ctx, "foo", 5, {("bar", 0): 100})
    txn_commit(ctx, "foo", 6, {("bar", 0): 200})
    start = ctx.end_offset
    end_txn(ctx, 5, True)
    records = ctx.records_written(start)
    # The later pending offset is written again after the plain commit.
    assert [type(r.key) for r in records] == [
        TransactionalOffsetKey,
        OffsetCommitKey,
        TransactionalOffsetKey,
    ]
    assert records[2].key == TransactionalOffsetKey("foo", "bar", 0, 6)
    assert committed(ctx, "foo", "bar", 0) == 100
    end_txn(ctx, 6, True)
    assert committed(ctx, "foo", "bar", 0) == 200
    ctx.reload()
    assert committed(ctx, "foo", "bar", 0) == 200


def test_an_earlier_pending_offset_of_another_producer_loses() -> None:
    ctx = ShardTestContext()
    txn_commit(ctx, "foo", 5, {("bar", 0): 100})
    txn_commit(ctx, "foo", 6, {("bar", 0): 200})
    start = ctx.end_offset
    end_txn(ctx, 6, True)
    assert len(ctx.records_written(start)) == 2
    end_txn(ctx, 5, True)
    assert committed(ctx, "foo", "bar", 0) == 200


# Expiration (testCleanupExpiredOffsetsWithPendingTransactionalOffsets).


def test_expiration_spares_offsets_with_pending_ones_and_their_group() -> None:
    retention_ms = 60_000
    ctx = ShardTestContext(
        ShardConfig(
            groups=GroupsConfig(
                offsets_retention_ms=retention_ms, offsets_retention_check_interval_ms=1000
            )
        )
    )
    ctx.shard.on_loaded()
    plain_commit(ctx, "group-id", {("foo", 0): 100, ("foo", 1): 100})
    txn_commit(ctx, "group-id", 10, {("foo", 0): 101, ("other", 0): 5})
    ctx.sleep(retention_ms + 1000)
    # foo-1 expired; foo-0 has a pending offset; the group stays.
    assert committed(ctx, "group-id", "foo", 0) == 100
    assert committed(ctx, "group-id", "foo", 1) is None
    assert ctx.shard.managers.groups.group("group-id") is not None
    end_txn(ctx, 10, False)
    ctx.sleep(1000)
    assert committed(ctx, "group-id", "foo", 0) is None
    assert ctx.shard.managers.groups.group("group-id") is None


def test_a_group_with_only_pending_offsets_is_not_deleted_by_expiration() -> None:
    ctx = ShardTestContext()
    ctx.shard.on_loaded()
    txn_commit(ctx, "g", 10, {("foo", 0): 1})
    ctx.sleep(
        ctx.config.groups.offsets_retention_ms
        + ctx.config.groups.offsets_retention_check_interval_ms
    )
    assert ctx.shard.managers.groups.group("g") is not None
    end_txn(ctx, 10, True)
    assert committed(ctx, "g", "foo", 0) == 1


# Deletion (testDeleteGroupAllOffsetsWithPendingTransactionalOffsets, OffsetDelete's).


def test_delete_group_tombstones_its_pending_offsets() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "foo", {("bar", 0): 100, ("bar", 1): 100})
    txn_commit(ctx, "foo", 5, {("bar", 1): 101, ("bar", 2): 102})
    txn_commit(ctx, "foo", 6, {("bar", 2): 103})
    txn_commit(ctx, "other", 5, {("bar", 0): 1})
    start = ctx.end_offset
    results = ctx.write(lambda s: s.delete_groups(["foo"]))
    assert [r.error_code for r in results] == [NONE]
    keys = [r.key for r in ctx.records_written(start)]
    assert keys == [
        OffsetCommitKey("foo", "bar", 0),
        OffsetCommitKey("foo", "bar", 1),
        TransactionalOffsetKey("foo", "bar", 1, 5),
        TransactionalOffsetKey("foo", "bar", 2, 5),
        TransactionalOffsetKey("foo", "bar", 2, 6),
        GroupMetadataKey("foo"),
    ]
    assert all(r.value is None for r in ctx.records_written(start))
    # The transaction's end then commits only what is left: the other group's offset.
    end_txn(ctx, 5, True)
    assert committed(ctx, "foo", "bar", 1) is None
    assert ctx.shard.managers.groups.group("foo") is None
    assert committed(ctx, "other", "bar", 0) == 1


def test_offset_delete_tombstones_pending_offsets_of_the_partition() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "foo", {("bar", 0): 100})
    txn_commit(ctx, "foo", 5, {("bar", 0): 101, ("bar", 1): 101, ("baz", 0): 1})
    start = ctx.end_offset
    request = OffsetDeleteRequest(
        group_id="foo",
        topics=[
            OffsetDeleteRequestTopic(
                name="bar",
                partitions=[
                    OffsetDeleteRequestPartition(partition_index=0),
                    OffsetDeleteRequestPartition(partition_index=1),
                ],
            )
        ],
    )
    response = ctx.write(lambda s: s.delete_offsets(request))
    assert [p.error_code for t in response.topics for p in t.partitions] == [NONE, NONE]
    assert [(r.key, r.value) for r in ctx.records_written(start)] == [
        (OffsetCommitKey("foo", "bar", 0), None),
        (TransactionalOffsetKey("foo", "bar", 0, 5), None),
        (TransactionalOffsetKey("foo", "bar", 1, 5), None),
    ]
    end_txn(ctx, 5, True)
    assert committed(ctx, "foo", "bar", 0) is None
    assert committed(ctx, "foo", "bar", 1) is None
    assert committed(ctx, "foo", "baz", 0) == 1


# Loads.


def test_load_replays_pending_offsets_and_their_ends() -> None:
    ctx = ShardTestContext()
    plain_commit(ctx, "g", {("t", 0): 1})
    txn_commit(ctx, "g", 5, {("t", 0): 2, ("t", 1): 2})
    txn_commit(ctx, "h", 6, {("t", 0): 3})
    end_txn(ctx, 6, True)
    before = pending_state(ctx)
    ctx.reload()
    assert pending_state(ctx) == before
    assert fetch_stable(ctx, "g", {"t": [0, 1]}) == {
        ("t", 0): (-1, UNSTABLE),
        ("t", 1): (-1, UNSTABLE),
    }
    assert committed(ctx, "h", "t", 0) == 3
    assert ctx.shard.has_pending_transactional_offsets(5, ctx.registry.committed_offset)
    end_txn(ctx, 5, True)
    assert committed(ctx, "g", "t", 0) == 2


def test_pending_value_is_the_committed_value() -> None:
    ctx = ShardTestContext()
    txn_commit(ctx, "g", 5, {("t", 0): 2}, metadata=None, leader_epoch=-1)
    end_txn(ctx, 5, True)
    assert ctx.shard.managers.offsets.committed_offset("g", "t", 0) == OffsetCommitValue(
        2, -1, "", ctx.clock.now_ms()
    )
