"""The OffsetCommit write path: its records as one run, and their bulk replay.

A commit's result carries its records as one OffsetCommitRun, encoded in one call and
replayed through the shard's `replay` in one go. Whatever mix of topics, repeated
partitions, over-long metadata, committed and failed appends, the state it builds must be
the one a load of the log builds (the load's runs, or the records one by one, through the
same `replay`), and reads as of the committed offset must see committed commits only.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from shard_context import ShardTestContext

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from coordinator_server.offsets.manager import OffsetCommitRun, OffsetsConfig
from coordinator_server.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    encode_record,
)
from coordinator_server.shard import LogPartitionShard, ShardConfig

GROUPS = ("g1", "g2")
MAX_METADATA = 3
CONFIG = ShardConfig(offsets=OffsetsConfig(offset_metadata_max_bytes=MAX_METADATA))

Partition = tuple[str, int, int, str | None]  # topic, partition, offset, metadata
State = dict[tuple[str, str, int], OffsetCommitValue]


def request(group: str, partitions: list[Partition]) -> OffsetCommitRequest:
    """One topic entry per run of partitions of the same topic, in the given order (a topic
    may come back in a later entry, and a partition twice)."""
    topics: list[OffsetCommitRequestTopic] = []
    for topic, partition, offset, metadata in partitions:
        if not topics or topics[-1].name != topic:
            topics.append(OffsetCommitRequestTopic(name=topic, partitions=[]))
        topics[-1].partitions.append(
            OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=offset % 3 - 1,
                committed_metadata=metadata,
            )
        )
    return OffsetCommitRequest(group_id=group, topics=topics)


def answers(response: OffsetCommitResponse) -> list[tuple[str, int, int]]:
    return [
        (topic.name, p.partition_index, p.error_code)
        for topic in response.topics
        for p in topic.partitions
    ]


def state_of(shard: LogPartitionShard, offset: int | None = None) -> State:
    """Every committed offset of every group, whole values, latest or as of `offset`."""
    state: State = {}
    offsets = shard.managers.offsets
    for group in GROUPS:
        timeline = offsets.group_offsets(group)
        if timeline is None:
            continue
        items = timeline.items() if offset is None else timeline.items_at(offset)
        for (topic, partition), value in items:
            state[(group, topic, partition)] = value
    return state


def groups_of(shard: LogPartitionShard) -> dict[str, tuple[object, ...]]:
    return {group.group_id: group.persisted_view() for group in shard.managers.groups.groups()}


def test_a_commit_writes_the_bytes_of_its_records_in_request_order() -> None:
    ctx = ShardTestContext(CONFIG)
    now = ctx.clock.now_ms()
    response = ctx.write(
        lambda s: s.commit_offset(
            request(
                "g1",
                [("t", 1, 10, "m"), ("t", 0, 11, "long"), ("u", 5, 12, None), ("t", 1, 13, "")],
            )
        )
    )
    assert answers(response) == [
        ("t", 1, ErrorCode.NONE),
        ("t", 0, ErrorCode.OFFSET_METADATA_TOO_LARGE),
        ("u", 5, ErrorCode.NONE),
        ("t", 1, ErrorCode.NONE),
    ]
    expected = [
        CoordinatorRecord(OffsetCommitKey("g1", "t", 1), OffsetCommitValue(10, 0, "m", now)),
        CoordinatorRecord(OffsetCommitKey("g1", "u", 5), OffsetCommitValue(12, -1, "", now)),
        CoordinatorRecord(OffsetCommitKey("g1", "t", 1), OffsetCommitValue(13, 0, "", now)),
    ]
    assert ctx.log == [encode_record(record) for record in expected]
    # The same partition twice: the later one wins, as replaying the records one by one does.
    assert state_of(ctx.shard) == {
        ("g1", "t", 1): OffsetCommitValue(13, 0, "", now),
        ("g1", "u", 5): OffsetCommitValue(12, -1, "", now),
    }


def test_a_commit_with_every_partition_refused_writes_nothing_and_creates_no_group() -> None:
    ctx = ShardTestContext(CONFIG)
    response = ctx.write(
        lambda s: s.commit_offset(request("g1", [("t", 0, 1, "long"), ("t", 1, 1, "xyzw")]))
    )
    assert {code for _, _, code in answers(response)} == {ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert ctx.log == []
    assert ctx.shard.managers.groups.group("g1") is None


def test_commits_of_the_same_partitions_get_equal_answers() -> None:
    ctx = ShardTestContext(CONFIG)
    partitions = [("t", 0, 1, None), ("t", 1, 2, None), ("u", 0, 3, None)]
    first = ctx.write(lambda s: s.commit_offset(request("g1", partitions)))
    second = ctx.write(lambda s: s.commit_offset(request("g2", partitions)))
    other = ctx.write(lambda s: s.commit_offset(request("g1", partitions[:2])))
    assert (
        answers(first) == answers(second) == [(t, p, ErrorCode.NONE) for t, p, _, _ in partitions]
    )
    assert answers(other) == answers(first)[:2]


def test_a_failed_append_of_a_commit_leaves_nothing_of_it() -> None:
    ctx = ShardTestContext(CONFIG)
    ctx.write(lambda s: s.commit_offset(request("g1", [("t", 0, 1, None)])))
    ctx.commit()
    before = state_of(ctx.shard)
    groups = groups_of(ctx.shard)
    ctx.fail_append(
        lambda s: s.commit_offset(request("g1", [("t", 0, 2, None), ("t", 1, 3, None)] * 2)),
        RuntimeError("append failed"),
    )
    ctx.fail_append(
        lambda s: s.commit_offset(request("g2", [("t", 0, 4, None)])),
        RuntimeError("append failed"),
    )
    assert state_of(ctx.shard) == before
    assert groups_of(ctx.shard) == groups
    assert ctx.shard.managers.groups.group("g2") is None
    assert ctx.registry.uncommitted_changes == 0


commit_steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("commit"),
            st.sampled_from(GROUPS),
            st.lists(
                st.tuples(
                    st.sampled_from(["t", "u"]),
                    st.integers(0, 2),
                    st.integers(0, 2**63 - 1),
                    st.sampled_from([None, "", "ab", "abc", "abcd", "😀😀"]),
                ),
                min_size=1,
                max_size=6,
            ),
            st.booleans(),  # whether its append fails
        ),
        st.tuples(st.just("log_commits")),
        st.tuples(st.just("time_passes"), st.integers(0, 5000)),
    ),
    max_size=25,
)


@settings(max_examples=100, deadline=None)
@given(commit_steps)
def test_live_commits_and_a_load_of_their_log_build_the_same_state(
    steps: list[tuple[object, ...]],
) -> None:
    ctx = ShardTestContext(CONFIG)
    committed: State = {}
    latest: State = {}
    for step in steps:
        if step[0] == "commit":
            _, group, partitions, fails = step
            assert isinstance(group, str) and isinstance(partitions, list)
            now = ctx.clock.now_ms()
            commit_request = request(group, partitions)
            if fails:
                ctx.fail_append(
                    lambda s, r=commit_request: s.commit_offset(r),
                    RuntimeError("append failed"),
                )
            else:
                response = ctx.write(lambda s, r=commit_request: s.commit_offset(r))
                for (topic, partition, offset, metadata), (_, _, code) in zip(
                    partitions, answers(response), strict=True
                ):
                    too_large = len((metadata or "").encode("utf-16-le")) // 2 > MAX_METADATA
                    assert code == (
                        ErrorCode.OFFSET_METADATA_TOO_LARGE if too_large else ErrorCode.NONE
                    )
                    if not too_large:
                        latest[(group, topic, partition)] = OffsetCommitValue(
                            offset, offset % 3 - 1, metadata or "", now
                        )
        elif step[0] == "log_commits":
            ctx.commit()
            committed = dict(latest)
        else:
            assert isinstance(step[1], int)
            ctx.clock.advance(step[1])
        assert state_of(ctx.shard) == latest
        assert state_of(ctx.shard, ctx.registry.committed_offset) == committed

    live_groups = groups_of(ctx.shard)
    assert set(live_groups) == {group for group, _, _ in latest}
    # A load through the shard's own sink (load_replay: runs of commits)...
    ctx.reload()
    assert state_of(ctx.shard) == latest
    assert groups_of(ctx.shard) == live_groups
    # ...and record by record, through the same `replay`, build the same state.
    objects = ShardTestContext(CONFIG)
    objects.registry.set_tracking(False)
    for offset, (key, value) in enumerate(ctx.log):
        objects.shard.replay(offset, decode_record(key, value))
    assert state_of(objects.shard) == latest
    assert groups_of(objects.shard) == live_groups


def test_a_commit_split_over_two_batches_replays_each_part_in_its_own_batch() -> None:
    # The runtime replays the records of a write that spills into a new batch in two runs,
    # each under its batch's epoch; reads as of the first batch's end see the first run.
    ctx = ShardTestContext(CONFIG)
    partitions = [("t", 0, 1, None), ("t", 1, 2, None), ("u", 0, 3, None), ("t", 0, 4, None)]
    result = ctx.shard.commit_offset(request("g1", partitions))
    run = result.records
    assert isinstance(run, OffsetCommitRun) and len(run) == 4
    ctx.registry.set_epoch(0)
    ctx.shard.replay(0, run.slice(0, 2))
    ctx.registry.set_epoch(2)
    ctx.shard.replay(2, run.slice(2, 4))
    now = ctx.clock.now_ms()
    first = {
        ("g1", "t", 0): OffsetCommitValue(1, 0, "", now),
        ("g1", "t", 1): OffsetCommitValue(2, 1, "", now),
    }
    assert state_of(ctx.shard, 2) == first
    assert state_of(ctx.shard, 4) == {
        **first,
        ("g1", "u", 0): OffsetCommitValue(3, -1, "", now),
        ("g1", "t", 0): OffsetCommitValue(4, 0, "", now),
    }
    ctx.registry.revert_to(2)
    assert state_of(ctx.shard) == first


def test_offsets_of_every_group_share_one_string_per_topic_name() -> None:
    ctx = ShardTestContext(CONFIG)
    for group in GROUPS:
        # A new str object per request, as decoding a request makes.
        topic = "".join(["top", "ic"])
        ctx.write(lambda s, g=group, t=topic: s.commit_offset(request(g, [(t, 0, 1, None)])))

    def topic_names(shard: LogPartitionShard) -> list[str]:
        offsets = shard.managers.offsets
        return [topic for group in GROUPS for (topic, _) in offsets.group_offsets(group) or ()]

    first, second = topic_names(ctx.shard)
    assert first == second == "topic" and first is second
    ctx.reload()
    first, second = topic_names(ctx.shard)
    assert first is second


def test_a_load_holds_a_bounded_run_of_a_group_s_commits_and_replays_all_of_it() -> None:
    from coordinator_server.records import new_offset_commit_tombstone_record
    from coordinator_server.shard.load_replay import LOAD_RUN_LIMIT

    ctx = ShardTestContext(CONFIG)
    ctx.registry.set_tracking(False)
    count = 2 * LOAD_RUN_LIMIT + 7
    records = [
        encode_record(
            CoordinatorRecord(
                OffsetCommitKey("g1", f"t{p % 3}", p), OffsetCommitValue(p, -1, "", 5)
            )
        )
        for p in range(count)
    ]
    # A tombstone in the middle of the run replays after what came before it.
    records.insert(10, encode_record(new_offset_commit_tombstone_record("g1", "t1", 1)))
    sink = ctx.shard.load_replay()
    for offset, (key, value) in enumerate(records):
        sink(offset, key, value)
        assert sink.held <= LOAD_RUN_LIMIT
    sink.close()
    state = state_of(ctx.shard)
    assert len(state) == count - 1
    assert ("g1", "t1", 1) not in state
    last = count - 1
    assert state[("g1", f"t{last % 3}", last)] == OffsetCommitValue(last, -1, "", 5)
    # Loaded topic names are shared strs, as live commits make them.
    names = {id(topic) for (_, topic, _) in state}
    assert len(names) == 3
