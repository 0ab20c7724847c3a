"""Offsets of classic groups (commit checks, fetch, delete, expiration), the admin APIs
(DescribeGroups, ListGroups, DeleteGroups), and loading / unloading the partition."""

from __future__ import annotations

from groups_harness import (
    GROUP,
    RC,
    SESSION_MS,
    GroupsContext,
    join_request,
    join_response,
    protocols,
    subscription,
)

from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    SyncGroupRequest,
)
from coordinator_server.groups.admin_views import list_filter
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    new_offset_commit_record,
)
from coordinator_server.shard.log_partition import GROUP_EXPIRATION_KEY

S = ClassicGroupState
DAY_MS = 24 * 3600 * 1000
INTERVAL_MS = 600_000


def code_of(response: object) -> int:
    codes = {p.error_code for t in response.topics for p in t.partitions}  # type: ignore[attr-defined]
    assert len(codes) == 1, codes
    return codes.pop()


# C1: OffsetCommit to an unknown group.
def test_commit_to_unknown_group_with_negative_generation_creates_a_simple_group() -> None:
    ctx = GroupsContext()
    assert code_of(ctx.commit_offsets({("t", 0): 5})) == ErrorCode.NONE
    group = ctx.group()
    assert (group.state, group.protocol_type, group.generation_id) == (S.EMPTY, None, 0)
    # No GroupMetadata record: the offsets recreate the group on load (C16).
    assert ctx.group_records() == []
    ctx.reload()
    assert ctx.group().protocol_type is None
    assert ctx.fetch({"t": [0]}) == {("t", 0): 5}


def test_commit_with_a_generation_to_unknown_group_is_group_id_not_found() -> None:  # C1
    ctx = GroupsContext()
    response = ctx.commit_offsets({("t", 0): 5}, generation=0, member_id="m")
    assert code_of(response) == ErrorCode.GROUP_ID_NOT_FOUND
    assert ctx.shard.managers.groups.group(GROUP) is None


# C2: commits of group members.
def test_member_commit_checks_member_generation_and_state() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    a = members[0]
    commit = ctx.commit_offsets
    assert code_of(commit({("t", 0): 1}, generation=generation, member_id=a)) == ErrorCode.NONE
    assert code_of(commit({("t", 0): 1}, generation=generation, member_id="x")) == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert code_of(commit({("t", 0): 1}, generation=generation + 1, member_id=a)) == (
        ErrorCode.ILLEGAL_GENERATION
    )
    # A simple commit (no member, no generation) while the group has members.
    assert code_of(commit({("t", 0): 1})) == ErrorCode.UNKNOWN_MEMBER_ID
    # A member id with generation -1 is a member's commit with a wrong generation.
    assert code_of(commit({("t", 0): 1}, member_id=a)) == ErrorCode.ILLEGAL_GENERATION


def test_commit_during_rebalances() -> None:  # C2
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    # PreparingRebalance: the previous generation may still commit.
    ctx.join(join_request(members[0]))
    response = ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=members[1])
    assert code_of(response) == ErrorCode.NONE
    # CompletingRebalance: REBALANCE_IN_PROGRESS, even with the new generation.
    ctx.join(join_request(members[1]))
    assert ctx.state() is S.COMPLETING_REBALANCE
    response = ctx.commit_offsets({("t", 0): 1}, generation=generation + 1, member_id=members[1])
    assert code_of(response) == ErrorCode.REBALANCE_IN_PROGRESS


def test_member_commit_to_empty_group_is_unknown_member_id() -> None:  # C2, B2
    ctx = GroupsContext()
    members, generation = ctx.stable_group(1)
    ctx.leave((members[0], None))
    assert ctx.state() is S.EMPTY
    response = ctx.commit_offsets({("t", 0): 1}, generation=generation + 1, member_id=members[0])
    assert code_of(response) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code_of(ctx.commit_offsets({("t", 0): 1})) == ErrorCode.NONE


def test_commit_in_preparing_rebalance_keeps_the_session_alive() -> None:  # C3
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    ctx.join(join_request(members[0]))
    for _ in range(3):
        ctx.sleep(SESSION_MS - 1)
        ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=members[1])
    assert ctx.group().has_member(members[1])


# C7 / C8: OffsetFetch.
def test_fetch_of_unknown_group_gives_minus_one_and_fetch_all_nothing() -> None:
    ctx = GroupsContext()
    ctx.join(join_request())  # the group exists, committed, with no offsets
    ctx.commit()
    assert ctx.fetch({"t": [0]}) == {("t", 0): -1}
    assert ctx.fetch(group="other") == {}
    assert ctx.fetch({"t": [3]}, group="other") == {("t", 3): -1}


def test_fetch_reads_committed_offsets_and_require_stable_reads_the_latest() -> None:  # C7, C8
    ctx = GroupsContext()
    members, generation = ctx.stable_group(1)
    ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=members[0])
    ctx.commit()
    ctx.commit_offsets({("t", 0): 2}, generation=generation, member_id=members[0])
    assert ctx.fetch({"t": [0]}) == {("t", 0): 1}
    assert ctx.fetch({"t": [0]}, latest=True) == {("t", 0): 2}
    assert ctx.fetch(latest=True) == {("t", 0): 2}


def test_fetch_of_a_dead_group_gives_minus_one() -> None:  # C7, B26
    ctx = GroupsContext()
    ctx.commit_offsets({("t", 0): 1})
    ctx.commit()
    ctx.shard.managers.groups.on_unloaded()
    assert ctx.fetch({"t": [0]}, latest=True) == {("t", 0): -1}
    assert ctx.fetch(latest=True) == {}


# C12: OffsetDelete.
def delete_offsets(ctx: GroupsContext, topics: dict[str, list[int]]) -> OffsetDeleteResponse:
    request = OffsetDeleteRequest(
        group_id=GROUP,
        topics=[
            OffsetDeleteRequestTopic(
                name=t, partitions=[OffsetDeleteRequestPartition(partition_index=p) for p in ps]
            )
            for t, ps in topics.items()
        ],
    )
    return ctx.write(lambda s: s.delete_offsets(request))


def test_offset_delete_of_unknown_group_is_group_id_not_found() -> None:
    ctx = GroupsContext()
    assert delete_offsets(ctx, {"t": [0]}).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_delete_tombstones_committed_offsets_of_unsubscribed_topics() -> None:  # C12
    ctx = GroupsContext()
    members, generation = ctx.stable_group(1, protos=protocols(topics=("t",)))
    ctx.commit_offsets({("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=members[0])
    since = ctx.end_offset
    response = delete_offsets(ctx, {"t": [0], "u": [0, 1]})
    assert response.error_code == ErrorCode.NONE
    assert {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    } == {
        ("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("u", 0): ErrorCode.NONE,
        ("u", 1): ErrorCode.NONE,  # nothing committed: NONE, no tombstone
    }
    assert [(r.key, r.value) for r in ctx.records_written(since)] == [
        (OffsetCommitKey(GROUP, "u", 0), None)
    ]
    assert ctx.fetch(latest=True) == {("t", 0): 1}


def test_offset_delete_of_a_non_consumer_group_with_members_is_non_empty_group() -> None:
    # C12
    ctx = GroupsContext()
    first = ctx.join(join_request(instance="i", protocol_type="connect"))
    ctx.sleep(3000)
    assert join_response(first).error_code == ErrorCode.NONE
    assert delete_offsets(ctx, {"t": [0]}).error_code == ErrorCode.NON_EMPTY_GROUP


def test_offset_delete_treats_unparsable_subscriptions_as_subscribed() -> None:  # C12, B25
    ctx = GroupsContext()
    _members, _generation = ctx.stable_group(1, protos=[("range", b"\xc1")])
    response = delete_offsets(ctx, {"anything": [0]})
    assert response.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


# C13 / C14: the offset expiration job.
def test_expiration_job_is_scheduled_on_load_and_reschedules_itself() -> None:  # C13
    ctx = GroupsContext(offsets_retention_check_interval_ms=INTERVAL_MS)
    ctx.reload()
    assert ctx.timer.is_scheduled(GROUP_EXPIRATION_KEY)
    ctx.sleep(INTERVAL_MS)
    assert ctx.timer.is_scheduled(GROUP_EXPIRATION_KEY)


def test_simple_group_offsets_expire_from_their_commit_then_the_group_goes() -> None:
    # C13, C14
    ctx = GroupsContext(
        offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=INTERVAL_MS
    )
    ctx.reload()
    ctx.commit_offsets({("t", 0): 1})
    ctx.sleep(DAY_MS // 2)
    ctx.commit_offsets({("t", 1): 2})
    since = ctx.end_offset
    ctx.sleep(DAY_MS // 2 + INTERVAL_MS)
    assert [r.key for r in ctx.records_written(since)] == [OffsetCommitKey(GROUP, "t", 0)]
    assert ctx.group().state is S.EMPTY
    since = ctx.end_offset
    ctx.sleep(DAY_MS // 2)
    assert [(r.key, r.value) for r in ctx.records_written(since)] == [
        (OffsetCommitKey(GROUP, "t", 1), None),
        (GroupMetadataKey(GROUP), None),
    ]
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert ctx.fetch(latest=True) == {}


def test_empty_group_offsets_expire_from_when_it_became_empty() -> None:  # C14
    ctx = GroupsContext(
        offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=INTERVAL_MS
    )
    ctx.reload()
    members, generation = ctx.stable_group(1)
    ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=members[0])
    # Stable and subscribed to "t": never expires while the member lives.
    for _ in range(2 * DAY_MS // (SESSION_MS // 2)):
        ctx.sleep(SESSION_MS // 2)
        ctx.heartbeat(members[0], generation)
    assert ctx.fetch(latest=True) == {("t", 0): 1}
    ctx.leave((members[0], None))
    assert ctx.state() is S.EMPTY
    ctx.sleep(DAY_MS - INTERVAL_MS)
    assert ctx.fetch(latest=True) == {("t", 0): 1}
    ctx.sleep(2 * INTERVAL_MS)
    assert ctx.fetch(latest=True) == {}
    assert ctx.shard.managers.groups.group(GROUP) is None


def test_stable_consumer_group_expires_only_offsets_of_topics_nobody_subscribes() -> None:
    # C14
    ctx = GroupsContext(
        offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=INTERVAL_MS
    )
    ctx.reload()
    members, generation = ctx.stable_group(1, protos=protocols(topics=("t",)), session_ms=60_000)
    ctx.commit_offsets({("t", 0): 1, ("old", 0): 2}, generation=generation, member_id=members[0])
    for _ in range((DAY_MS + INTERVAL_MS) // 30_000):
        ctx.sleep(30_000)
        ctx.heartbeat(members[0], generation)
    assert ctx.fetch(latest=True) == {("t", 0): 1}
    assert ctx.state() is S.STABLE


def test_group_with_members_of_another_protocol_keeps_its_offsets() -> None:  # C14
    ctx = GroupsContext(
        offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=INTERVAL_MS
    )
    ctx.reload()
    members, generation = ctx.stable_group(1, protocol_type="connect", session_ms=60_000)
    ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=members[0])
    for _ in range((DAY_MS + INTERVAL_MS) // 30_000):
        ctx.sleep(30_000)
        ctx.heartbeat(members[0], generation)
    assert ctx.fetch(latest=True) == {("t", 0): 1}


def test_expired_commit_with_an_explicit_expire_timestamp() -> None:  # C13
    ctx = GroupsContext(
        offsets_retention_ms=DAY_MS, offsets_retention_check_interval_ms=INTERVAL_MS
    )
    ctx.reload()
    now = ctx.clock.now_ms()
    ctx.replay_all(
        [new_offset_commit_record(GROUP, "t", 0, 5, -1, "", now, expire_timestamp_ms=now + 1)]
    )
    ctx.sleep(INTERVAL_MS)
    assert ctx.fetch(latest=True) == {}


# D3: DeleteGroups.
def test_delete_groups() -> None:
    ctx = GroupsContext()
    ctx.commit_offsets({("t", 0): 1, ("t", 1): 2}, group="simple")
    ctx.stable_group(1, group="busy")
    since = ctx.end_offset
    results = ctx.write(lambda s: s.delete_groups(["simple", "busy", "nobody"]))
    assert [(r.group_id, r.error_code) for r in results] == [
        ("simple", ErrorCode.NONE),
        ("busy", ErrorCode.NON_EMPTY_GROUP),
        ("nobody", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert [(r.key, r.value) for r in ctx.records_written(since)] == [
        (OffsetCommitKey("simple", "t", 0), None),
        (OffsetCommitKey("simple", "t", 1), None),
        (GroupMetadataKey("simple"), None),
    ]
    ctx.commit()
    assert ctx.shard.managers.groups.group("simple") is None
    assert ctx.fetch({"t": [0]}, group="simple") == {("t", 0): -1}
    (described,) = ctx.shard.describe_groups(["simple"], ctx.registry.committed_offset)
    assert (described.error_code, described.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")


# D2: DescribeGroups.
def test_describe_stable_group_shows_members_with_metadata_and_assignment() -> None:
    ctx = GroupsContext()
    members, _generation = ctx.stable_group(2, protos=[("range", subscription("t"))])
    ctx.commit()
    (group,) = ctx.shard.describe_groups([GROUP], ctx.registry.committed_offset)
    assert (group.error_code, group.group_state, group.protocol_type, group.protocol_data) == (
        ErrorCode.NONE,
        "Stable",
        "consumer",
        "range",
    )
    assert [
        (m.member_id, m.client_id, m.client_host, m.member_metadata) for m in group.members
    ] == [(m, RC.client_id, RC.client_host, subscription("t")) for m in members]
    assert all(m.member_assignment for m in group.members)


def test_describe_non_stable_group_has_no_protocol_or_metadata() -> None:  # D2
    ctx = GroupsContext()
    members, _generation = ctx.stable_group(2)
    ctx.join(join_request(members[0]))
    ctx.commit()
    (group,) = ctx.shard.describe_groups([GROUP], ctx.registry.committed_offset)
    assert (group.group_state, group.protocol_data) == ("PreparingRebalance", "")
    assert all(m.member_metadata == b"" for m in group.members)
    # Assignments are kept until the next generation's assignment replaces them.
    assert all(m.member_assignment for m in group.members)


def test_describe_sees_only_committed_groups() -> None:  # D2, A11
    ctx = GroupsContext()
    ctx.join(join_request())
    (group,) = ctx.shard.describe_groups([GROUP], ctx.registry.committed_offset)
    assert (group.error_code, group.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    ctx.commit()
    (group,) = ctx.shard.describe_groups([GROUP], ctx.registry.committed_offset)
    assert (group.error_code, group.group_state) == (ErrorCode.NONE, "Empty")


# D1: ListGroups.
def test_list_groups_with_state_and_type_filters() -> None:
    ctx = GroupsContext()
    ctx.stable_group(1, group="stable")
    ctx.commit_offsets({("t", 0): 1}, group="simple")
    ctx.join(join_request(group="uncommitted"))
    ctx.commit()
    ctx.join(join_request(group="later"))
    committed = ctx.registry.committed_offset

    def listed(states: list[str], types: list[str]) -> set[tuple[str, str, str, str]]:
        result = ctx.shard.list_groups(list_filter(states), list_filter(types), committed)
        assert result is not None
        return {(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in result[0]}

    everything = {
        ("stable", "consumer", "Stable", "classic"),
        ("simple", "", "Empty", "classic"),
        ("uncommitted", "", "Empty", "classic"),
    }
    assert listed([], []) == everything
    assert listed([" STABLE "], []) == {("stable", "consumer", "Stable", "classic")}
    assert listed(["empty", "stable"], ["Classic"]) == everything
    assert listed(["completingrebalance"], []) == set()
    assert listed(["bogus"], []) == set()
    assert listed([], ["consumer"]) == set()
    assert listed([], ["classic", "share"]) == everything


# E6 / E7: reload from the log.
def test_reload_rebuilds_groups_and_offsets_and_rearms_member_timers() -> None:  # E7, A6
    ctx = GroupsContext()
    members, generation = ctx.stable_group(3)
    ctx.commit_offsets({("t", 0): 7}, generation=generation, member_id=members[1])
    before = ctx.group().persisted_view()
    ctx.reload()
    group = ctx.group()
    assert group.persisted_view() == before
    assert group.state is S.STABLE
    assert ctx.fetch({"t": [0]}) == {("t", 0): 7}
    for m in members:
        assert ctx.timer.is_scheduled(f"heartbeat-{GROUP}-{m}")
    # Members carry on with the loaded generation.
    assert ctx.heartbeat(members[0], generation) == ErrorCode.NONE
    # Those that stop heartbeating are removed after their session timeout.
    ctx.sleep(SESSION_MS)
    assert ctx.state() is S.EMPTY


def test_reload_of_a_rebalancing_group_shows_its_last_persisted_generation() -> None:  # E7
    ctx = GroupsContext()
    members, _generation = ctx.stable_group(2)
    persisted = ctx.group().persisted_view()
    ctx.join(join_request(members[0]))
    ctx.join(join_request(members[1]))
    assert ctx.state() is S.COMPLETING_REBALANCE
    ctx.reload()
    assert ctx.group().persisted_view() == persisted
    assert ctx.state() is S.STABLE


def test_group_metadata_is_written_where_kafka_writes_it() -> None:  # E6
    ctx = GroupsContext()
    a, ja = ctx.join_new()
    assert len(ctx.group_records()) == 1  # the new group
    ctx.sleep_until_done([ja])
    assert len(ctx.group_records()) == 1  # join completion into CompletingRebalance: none
    generation = join_response(ja).generation_id
    ctx.write_parkable(
        lambda s, h: s.sync_group(
            RC, SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=a), h
        )
    )
    assert len(ctx.group_records()) == 2  # the leader's assignment
    ctx.heartbeat(a, generation)
    ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=a)
    assert len(ctx.group_records()) == 2
    ctx.leave((a, None))
    assert len(ctx.group_records()) == 3  # join phase ending Empty


# B26: unloading.
def test_unload_makes_groups_dead_and_names_the_parked_callers() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    parked = ctx.join(join_request(members[0]))
    completions = ctx.shard.managers.groups.on_unloaded()
    assert [handle for handle, _ in completions] == [parked.handle]
    assert completions[0][1].error_code == ErrorCode.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert ctx.state() is S.DEAD
    # B2: Dead groups answer COORDINATOR_NOT_AVAILABLE.
    assert ctx.heartbeat(members[1], generation) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert join_response(ctx.join(join_request(members[1]))).error_code == (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    assert join_response(ctx.join(join_request())).error_code == (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    sync = ctx.sync(members[1], generation)
    assert sync.response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    commit = ctx.commit_offsets({("t", 0): 1}, generation=generation, member_id=members[1])
    assert code_of(commit) == ErrorCode.COORDINATOR_NOT_AVAILABLE
