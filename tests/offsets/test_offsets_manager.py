"""OffsetMetadataManager through the shard test context: simple commits and fetches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from shard_context import ShardTestContext

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
)
from coordinator_server.offsets.manager import OffsetsConfig
from coordinator_server.records import OffsetCommitKey, OffsetCommitValue
from coordinator_server.shard import ShardConfig


def commit_request(
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    metadata: str | None = None,
    leader_epoch: int = -1,
) -> OffsetCommitRequest:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=leader_epoch,
                committed_metadata=metadata,
            )
        )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()],
    )


def errors_of(response: object) -> dict[tuple[str, int], int]:
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in response.topics  # type: ignore[attr-defined]
        for p in topic.partitions
    }


def fetch(
    ctx: ShardTestContext,
    group: str,
    topics: dict[str, list[int]] | None = None,
    *,
    committed: bool = True,
) -> dict[tuple[str, int], tuple[int, int, str | None]]:
    request = OffsetFetchRequestGroup(
        group_id=group,
        topics=None
        if topics is None
        else [OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()],
    )
    at = ctx.registry.committed_offset if committed else None
    response = ctx.shard.fetch_offsets(request, at)
    assert response.error_code == ErrorCode.NONE
    return {
        (topic.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata)
        for topic in response.topics
        for p in topic.partitions
    }


def test_simple_commit_writes_one_record_per_partition_with_the_commit_time() -> None:
    ctx = ShardTestContext()
    response = ctx.write(
        lambda s: s.commit_offset(
            commit_request("g", {("t", 0): 10, ("t", 1): 20}, metadata="m", leader_epoch=3)
        )
    )
    assert errors_of(response) == {("t", 0): 0, ("t", 1): 0}
    records = ctx.records_written()
    now = ctx.clock.now_ms()
    assert [(r.key, r.value) for r in records] == [
        (OffsetCommitKey("g", "t", 0), OffsetCommitValue(10, 3, "m", now, None)),
        (OffsetCommitKey("g", "t", 1), OffsetCommitValue(20, 3, "m", now, None)),
    ]


def test_fetch_returns_committed_offsets_and_minus_one_for_partitions_without_commit() -> None:
    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 10})))
    ctx.commit()
    assert fetch(ctx, "g", {"t": [0, 1]}) == {("t", 0): (10, -1, ""), ("t", 1): (-1, -1, "")}


def test_fetch_of_unknown_group_returns_minus_one_and_fetch_all_returns_nothing() -> None:
    ctx = ShardTestContext()
    assert fetch(ctx, "nobody", {"t": [0]}) == {("t", 0): (-1, -1, "")}
    assert fetch(ctx, "nobody") == {}


def test_fetch_all_returns_every_committed_offset_of_the_group_only() -> None:
    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("a", 1): 1, ("b", 0): 2})))
    ctx.write(lambda s: s.commit_offset(commit_request("other", {("a", 0): 9})))
    ctx.commit()
    assert fetch(ctx, "g") == {("a", 1): (1, -1, ""), ("b", 0): (2, -1, "")}


def test_committed_offsets_are_read_whole_while_commits_change_them() -> None:
    """The consumer lag reads them in slices, commits landing in between: nothing raises,
    each offset is given once, and the count matches."""
    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("a", 0): 1, ("a", 1): 2})))
    ctx.write(lambda s: s.commit_offset(commit_request("h", {("b", 0): 3})))
    reading = ctx.shard.committed_offsets()
    first = next(reading)
    # A new group, a new partition of a group being read, and a new offset of one.
    ctx.write(lambda s: s.commit_offset(commit_request("new", {("c", 0): 4})))
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("a", 2): 5, ("a", 0): 6})))
    rest = list(reading)
    given = [first, *rest]
    assert len(given) == len({(g, t, p) for g, t, p, _ in given})
    assert {(g, t, p) for g, t, p, _ in given} >= {("g", "a", 0), ("g", "a", 1), ("h", "b", 0)}
    assert sorted(ctx.shard.committed_offsets()) == [
        ("g", "a", 0, 6),
        ("g", "a", 1, 2),
        ("g", "a", 2, 5),
        ("h", "b", 0, 3),
        ("new", "c", 0, 4),
    ]
    assert ctx.shard.num_offsets() == 5


def test_metadata_over_the_limit_fails_that_partition_only() -> None:
    ctx = ShardTestContext(ShardConfig(offsets=OffsetsConfig(offset_metadata_max_bytes=4)))
    request = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata="12345"
                    ),
                    OffsetCommitRequestPartition(
                        partition_index=1, committed_offset=2, committed_metadata="1234"
                    ),
                ],
            )
        ],
    )
    response = ctx.write(lambda s: s.commit_offset(request))
    assert errors_of(response) == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ("t", 1): ErrorCode.NONE,
    }
    ctx.commit()
    assert fetch(ctx, "g", {"t": [0, 1]}) == {("t", 0): (-1, -1, ""), ("t", 1): (2, -1, "1234")}


def test_metadata_limit_counts_utf16_units_as_kafka_does() -> None:
    ctx = ShardTestContext(ShardConfig(offsets=OffsetsConfig(offset_metadata_max_bytes=2)))
    # One character outside the Basic Multilingual Plane is two UTF-16 units: at the limit.
    ok = ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 1}, metadata="😀")))
    too_large = ctx.write(
        lambda s: s.commit_offset(commit_request("g", {("t", 0): 1}, metadata="a😀"))
    )
    assert errors_of(ok) == {("t", 0): ErrorCode.NONE}
    assert errors_of(too_large) == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}


def test_member_commit_to_unknown_group_is_group_id_not_found() -> None:
    ctx = ShardTestContext()
    response = ctx.write(
        lambda s: s.commit_offset(commit_request("g", {("t", 0): 1}, generation=1, member_id="m"))
    )
    assert errors_of(response) == {("t", 0): ErrorCode.GROUP_ID_NOT_FOUND}
    assert ctx.records_written() == []


def test_member_commit_to_memberless_group_is_unknown_member_id() -> None:
    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 1})))
    response = ctx.write(
        lambda s: s.commit_offset(commit_request("g", {("t", 0): 2}, generation=0, member_id="m"))
    )
    assert errors_of(response) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_negative_generation_with_a_member_id_is_still_a_simple_commit() -> None:
    # Kafka: generation < 0 on an empty group is accepted whatever the member id says.
    ctx = ShardTestContext()
    response = ctx.write(
        lambda s: s.commit_offset(commit_request("g", {("t", 0): 5}, member_id="m"))
    )
    assert errors_of(response) == {("t", 0): ErrorCode.NONE}


def test_committed_reads_do_not_see_a_write_until_it_commits() -> None:
    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 1})))
    ctx.commit()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 2, ("u", 0): 7})))
    assert fetch(ctx, "g", {"t": [0], "u": [0]}) == {("t", 0): (1, -1, ""), ("u", 0): (-1, -1, "")}
    assert fetch(ctx, "g") == {("t", 0): (1, -1, "")}
    # require_stable reads the latest state.
    assert fetch(ctx, "g", committed=False) == {("t", 0): (2, -1, ""), ("u", 0): (7, -1, "")}
    ctx.commit()
    assert fetch(ctx, "g") == {("t", 0): (2, -1, ""), ("u", 0): (7, -1, "")}


def test_revert_restores_the_committed_offsets() -> None:
    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 1})))
    ctx.commit()
    base = ctx.end_offset
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 2})))
    ctx.write(lambda s: s.commit_offset(commit_request("new", {("t", 0): 3})))
    ctx.revert_to(base)
    assert fetch(ctx, "g", committed=False) == {("t", 0): (1, -1, "")}
    assert not ctx.shard.managers.offsets.group_exists("new")


def test_tombstone_deletes_and_reload_rebuilds_the_same_state() -> None:
    from coordinator_server.records import new_offset_commit_tombstone_record

    ctx = ShardTestContext()
    ctx.write(lambda s: s.commit_offset(commit_request("g", {("t", 0): 1, ("t", 1): 2})))
    ctx.replay_all([new_offset_commit_tombstone_record("g", "t", 0)])
    ctx.commit()
    assert fetch(ctx, "g") == {("t", 1): (2, -1, "")}
    ctx.reload()
    assert fetch(ctx, "g") == {("t", 1): (2, -1, "")}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["g1", "g2", "ü"]),
            st.sampled_from(["t", "u"]),
            st.integers(0, 3),
            st.integers(-1, 2**63 - 1),
            st.booleans(),  # whether the log commits after this write
        ),
        max_size=40,
    )
)
def test_committed_offsets_equal_a_simple_model_across_reloads(
    commits: list[tuple[str, str, int, int, bool]],
) -> None:
    ctx = ShardTestContext()
    latest: dict[tuple[str, str, int], int] = {}
    committed: dict[tuple[str, str, int], int] = {}
    for group, topic, partition, offset, flush in commits:
        ctx.write(
            lambda s, g=group, t=topic, p=partition, o=offset: s.commit_offset(
                commit_request(g, {(t, p): o})
            )
        )
        latest[(group, topic, partition)] = offset
        if flush:
            ctx.commit()
            committed = dict(latest)
        for g in ("g1", "g2", "ü"):
            seen = {(g, t, p): v[0] for (t, p), v in fetch(ctx, g).items()}
            assert seen == {k: v for k, v in committed.items() if k[0] == g}
    ctx.reload()
    for g in ("g1", "g2", "ü"):
        seen = {(g, t, p): v[0] for (t, p), v in fetch(ctx, g).items()}
        assert seen == {k: v for k, v in latest.items() if k[0] == g}
