"""The limits of the offsets manager: committed offsets per group, commits that must fit one
batch, topic names, fetches within a byte limit, and work per distinct partition or group
whatever a request repeats."""

from __future__ import annotations

from shard_context import ShardTestContext

from coordinator_protocol.envelope import encode_body
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetFetchResponseTopic,
)
from coordinator_server.groups.answer_sizes import str_bytes
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.records import OffsetCommitKey
from coordinator_server.runtime.batch import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES
from coordinator_server.shard import ShardConfig


def config(**offsets: int) -> ShardConfig:
    return ShardConfig(offsets=OffsetsConfig(**offsets))


def commit(
    ctx: ShardTestContext,
    group: str,
    partitions: list[tuple[str, int]],
    *,
    metadata: str = "",
) -> list[tuple[str, int, int]]:
    """Commit offset 7 of each (topic, partition), in order (a topic entry per run of one
    topic); the answer per partition, in order."""
    topics: list[OffsetCommitRequestTopic] = []
    for topic, partition in partitions:
        if not topics or topics[-1].name != topic:
            topics.append(OffsetCommitRequestTopic(name=topic, partitions=[]))
        topics[-1].partitions.append(
            OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=7, committed_metadata=metadata
            )
        )
    response = ctx.write(
        lambda s: s.commit_offset(OffsetCommitRequest(group_id=group, topics=topics))
    )
    return [
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    ]


def held(ctx: ShardTestContext, group: str) -> set[tuple[str, int]]:
    offsets = ctx.shard.managers.offsets.group_offsets(group)
    return set() if offsets is None else set(offsets.keys())


def test_new_partitions_beyond_the_limit_are_refused_and_the_others_committed() -> None:
    ctx = ShardTestContext(config(max_committed_offsets_per_group=3))
    assert commit(ctx, "g", [("t", 0), ("t", 1)]) == [("t", 0, 0), ("t", 1, 0)]
    answered = commit(ctx, "g", [("t", 1), ("u", 0), ("u", 1), ("u", 0), ("t", 0), ("u", 2)])
    refused = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    assert answered == [
        ("t", 1, 0),
        ("u", 0, 0),
        ("u", 1, refused),
        ("u", 0, 0),
        ("t", 0, 0),
        ("u", 2, refused),
    ]
    assert held(ctx, "g") == {("t", 0), ("t", 1), ("u", 0)}
    # Another group has its own room.
    assert commit(ctx, "other", [("u", 1), ("u", 2)]) == [("u", 1, 0), ("u", 2, 0)]


def test_a_log_holding_more_offsets_than_the_limit_loads_and_its_partitions_commit() -> None:
    ctx = ShardTestContext(config(max_committed_offsets_per_group=10))
    commit(ctx, "g", [("t", n) for n in range(8)])
    ctx.config = config(max_committed_offsets_per_group=2)
    ctx.reload()
    assert len(held(ctx, "g")) == 8
    assert commit(ctx, "g", [("t", 7), ("t", 8)]) == [
        ("t", 7, 0),
        ("t", 8, ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
    ]


def records_bytes(group: str, topic: str, partitions: int, metadata: str) -> int:
    # What the runtime counts for the records of a commit (all integers at their widest).
    per_record = RECORD_OVERHEAD_BYTES + 34 + str_bytes(group) + str_bytes(topic)
    return partitions * (per_record + str_bytes(metadata))


def test_a_commit_whose_records_cannot_fit_one_batch_is_refused_whole_before_any_record() -> None:
    max_batch_bytes = 64 * 1024
    limit = max_batch_bytes - BATCH_OVERHEAD_BYTES
    metadata = "m" * 100
    fitting = limit // records_bytes("g", "t", 1, metadata)
    ctx = ShardTestContext(
        config(
            max_records_bytes=limit,
            record_overhead_bytes=RECORD_OVERHEAD_BYTES,
            offset_metadata_max_bytes=4096,
        )
    )
    too_many = [("t", n) for n in range(fitting + 1)]
    result = ctx.shard.commit_offset(
        OffsetCommitRequest(
            group_id="g",
            topics=[
                OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        OffsetCommitRequestPartition(
                            partition_index=n, committed_offset=1, committed_metadata=metadata
                        )
                        for _, n in too_many
                    ],
                )
            ],
        )
    )
    assert not result.records
    assert result.response is not None
    assert {p.error_code for p in result.response.topics[0].partitions} == {
        ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    }
    # One partition less fits, and goes in one batch (atomic).
    answered = commit(ctx, "g", too_many[:-1], metadata=metadata)
    assert {code for _, _, code in answered} == {ErrorCode.NONE}
    written = sum(len(key) + len(value or b"") + RECORD_OVERHEAD_BYTES for key, value in ctx.log)
    assert written + BATCH_OVERHEAD_BYTES <= max_batch_bytes


def test_a_commits_result_asks_for_one_batch() -> None:
    ctx = ShardTestContext()
    result = ctx.write_result(
        lambda s: s.commit_offset(
            OffsetCommitRequest(
                group_id="g",
                topics=[
                    OffsetCommitRequestTopic(
                        name="t",
                        partitions=[
                            OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                        ],
                    )
                ],
            )
        )
    )
    assert result.atomic


def test_a_topic_name_too_long_is_refused_for_its_partitions_only() -> None:
    ctx = ShardTestContext(config(max_id_length=5))
    assert commit(ctx, "g", [("t", 0), ("toolong", 0), ("toolong", 1), ("u", 3)]) == [
        ("t", 0, 0),
        ("toolong", 0, ErrorCode.INVALID_REQUEST),
        ("toolong", 1, ErrorCode.INVALID_REQUEST),
        ("u", 3, 0),
    ]
    assert held(ctx, "g") == {("t", 0), ("u", 3)}


def delete(ctx: ShardTestContext, group: str, partitions: list[tuple[str, int]]) -> object:
    topics: list[OffsetDeleteRequestTopic] = []
    for topic, partition in partitions:
        if not topics or topics[-1].name != topic:
            topics.append(OffsetDeleteRequestTopic(name=topic, partitions=[]))
        topics[-1].partitions.append(OffsetDeleteRequestPartition(partition_index=partition))
    return ctx.write(lambda s: s.delete_offsets(OffsetDeleteRequest(group_id=group, topics=topics)))


def test_offset_delete_answers_each_repeat_and_writes_one_tombstone_per_partition() -> None:
    ctx = ShardTestContext()
    commit(ctx, "g", [("t", 0), ("t", 1)])
    before = ctx.end_offset
    response = delete(ctx, "g", [("t", 0)] * 10_000 + [("t", 1), ("t", 5)])
    assert len(response.topics[0].partitions) == 10_002  # type: ignore[attr-defined]
    tombstones = ctx.records_written(before)
    assert sorted((r.key.topic, r.key.partition) for r in tombstones) == [("t", 0), ("t", 1)]  # type: ignore[union-attr]
    assert all(type(r.key) is OffsetCommitKey and r.value is None for r in tombstones)


def test_delete_groups_naming_a_group_again_answers_it_and_writes_its_tombstones_once() -> None:
    ctx = ShardTestContext()
    commit(ctx, "g", [("t", n) for n in range(100)])
    before = ctx.end_offset
    results = ctx.write(lambda s: s.delete_groups(["g"] * 10_000 + ["unknown"]))
    assert [r.error_code for r in results[:2]] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(results) == 10_001
    assert results[-1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # 100 offsets and the group: 101 tombstones, not 10,000 times as many.
    assert len(ctx.records_written(before)) == 101


def test_delete_groups_within_a_record_budget_deletes_a_prefix() -> None:
    ctx = ShardTestContext()
    for group in ("a", "b", "c"):
        commit(ctx, group, [("t", n) for n in range(10)])
    results = ctx.write(lambda s: s.delete_groups(["a", "b", "c"], max_records=15))
    # "a" makes 11 tombstones, under 15: "b" is deleted too; then the budget is spent.
    assert [r.group_id for r in results] == ["a", "b"]
    assert ctx.shard.managers.groups.group("c") is not None


def test_fetch_stops_at_its_byte_limit_and_shares_the_answer_of_a_repeated_partition() -> None:
    ctx = ShardTestContext()
    commit(ctx, "g", [("t", 0)], metadata="x" * 100)
    commit(ctx, "g", [("t", 1)])
    ctx.commit()
    at = ctx.registry.committed_offset
    requested = [("t", [0] * 1000 + [1, 2])]
    fetched = ctx.shard.fetch_partition_offsets("g", requested, at, 10_000_000)
    assert fetched is not None
    (topic,), size = fetched
    assert len(topic.partitions) == 1002
    assert len({id(p) for p in topic.partitions}) == 3
    assert size >= len(encode_body(OffsetFetchResponseTopic(name="t", partitions=topic.partitions)))
    assert ctx.shard.fetch_partition_offsets("g", requested, at, size - 1) is None
    # What the partitions cost without their metadata is refused before any look-up.
    assert ctx.shard.fetch_partition_offsets("g", [("t", [0] * 10**6)], at, 1000) is None


def test_fetch_all_is_refused_from_the_offset_count_alone() -> None:
    ctx = ShardTestContext()
    commit(ctx, "g", [("t", n) for n in range(1000)])
    ctx.commit()
    at = ctx.registry.committed_offset
    whole = ctx.shard.fetch_all_offsets("g", at, 10_000_000)
    assert whole is not None and len(whole[0][0].partitions) == 1000
    assert ctx.shard.fetch_all_offsets("g", at, whole[1] - 1) is None
    assert ctx.shard.fetch_all_offsets("g", at, 1000) is None
