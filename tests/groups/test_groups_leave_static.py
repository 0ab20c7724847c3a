"""LeaveGroup (batch, KIP-345) and static membership."""

from __future__ import annotations

from groups_harness import (
    DELAY_MS,
    GROUP,
    RC,
    GroupsContext,
    join_request,
    join_response,
    protocols,
    sync_response,
)

from coordinator_protocol.errors import ErrorCode, NotEnoughReplicasError
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.records import GroupMetadataValue

S = ClassicGroupState


def static_stable_group(ctx: GroupsContext, *instances: str) -> tuple[dict[str, str], int]:
    """Static members (instance -> member id), Stable after the leader's sync."""
    joins = {i: ctx.join(join_request(instance=i)) for i in instances}
    ctx.sleep_until_done(list(joins.values()))
    ids = {i: join_response(p).member_id for i, p in joins.items()}
    generation = join_response(joins[instances[0]]).generation_id
    leader = join_response(joins[instances[0]]).leader
    for i, m in ids.items():
        if m != leader:
            ctx.sync(m, generation, instance=i)
    leader_instance = next(i for i, m in ids.items() if m == leader)
    ctx.sync(leader, generation, {m: i.encode() for i, m in ids.items()}, instance=leader_instance)
    assert ctx.state() is S.STABLE
    return ids, generation


# B22: LeaveGroup.
def test_leave_of_unknown_group_is_none_with_every_member_unknown() -> None:
    ctx = GroupsContext()
    response = ctx.leave(("a", None), ("", "i"))
    assert response.error_code == ErrorCode.NONE
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
        ("a", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("", "i", ErrorCode.UNKNOWN_MEMBER_ID),
    ]


def test_batch_leave_answers_per_member_and_rebalances_once() -> None:  # B22
    ctx = GroupsContext()
    members, _generation = ctx.stable_group(4)
    response = ctx.leave((members[1], None), ("nobody", None), (members[2], None), ("", None))
    assert [m.error_code for m in response.members] == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    group = ctx.group()
    assert set(group.members) == {members[0], members[3]}
    assert group.state is S.PREPARING_REBALANCE
    assert not ctx.timer.is_scheduled(f"heartbeat-{GROUP}-{members[1]}")


def test_leave_of_a_pending_member_removes_it() -> None:  # B22
    ctx = GroupsContext()
    pending = join_response(ctx.join(join_request())).member_id
    response = ctx.leave((pending, None))
    assert response.members[0].error_code == ErrorCode.NONE
    assert not ctx.group().is_pending_member(pending)
    assert not ctx.timer.is_scheduled(f"heartbeat-{GROUP}-{pending}")


def test_leave_answers_the_leavers_parked_join_with_unknown_member_id() -> None:  # B22
    ctx = GroupsContext()
    members, _ = ctx.stable_group(2)
    parked = ctx.join(join_request(members[0]))  # the leader's rejoin parks
    ctx.leave((members[0], None))
    response = join_response(parked)
    assert (response.error_code, response.member_id) == (ErrorCode.UNKNOWN_MEMBER_ID, "")


def test_leave_in_preparing_rebalance_completes_the_join_phase() -> None:  # B22
    ctx = GroupsContext()
    members, generation = ctx.stable_group(3)
    joins = [ctx.join(join_request(m)) for m in members[:2]]
    assert not joins[0].done
    ctx.leave((members[2], None))
    assert {join_response(p).generation_id for p in joins} == {generation + 1}


def test_leave_of_a_member_with_a_parked_sync_answers_it_and_rebalances() -> None:  # B22
    ctx = GroupsContext()
    _a, ja = ctx.join_new()
    b, jb = ctx.join_new()
    ctx.sleep_until_done([ja, jb])
    generation = join_response(ja).generation_id
    follower_sync = ctx.sync(b, generation)
    ctx.leave((b, None))
    assert sync_response(follower_sync).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert ctx.state() is S.PREPARING_REBALANCE


def test_admin_removal_of_a_static_member_by_instance_id() -> None:  # B22, B23
    ctx = GroupsContext()
    ids, _generation = static_stable_group(ctx, "i1", "i2")
    response = ctx.leave(("", "i2"))
    assert (response.members[0].member_id, response.members[0].error_code) == ("", ErrorCode.NONE)
    assert not ctx.group().has_member(ids["i2"])
    assert ctx.group().static_member_id("i2") is None
    fenced = ctx.leave(("wrong-id", "i1"))
    assert fenced.members[0].error_code == ErrorCode.FENCED_INSTANCE_ID


def test_leave_of_a_dead_group_is_coordinator_not_available() -> None:  # B22, B2
    ctx = GroupsContext()
    ctx.stable_group(1)
    ctx.shard.managers.groups.on_unloaded()
    assert ctx.leave(("x", None)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


# B23: static membership.
def test_static_member_joins_in_one_step() -> None:
    ctx = GroupsContext()
    parked = ctx.join(join_request(instance="i1"))
    assert not parked.done
    ctx.sleep(DELAY_MS)
    response = join_response(parked)
    assert response.error_code == ErrorCode.NONE
    assert ctx.group().static_member_id("i1") == response.member_id


def test_static_rejoin_without_changes_replaces_the_member_id_without_rebalance() -> None:
    # B23, E6
    ctx = GroupsContext()
    ids, generation = static_stable_group(ctx, "i1", "i2")
    old = ids["i2"]
    since = ctx.end_offset
    rejoin = ctx.join(join_request(instance="i2"))
    response = join_response(rejoin)
    assert response.error_code == ErrorCode.NONE
    assert response.generation_id == generation
    assert response.member_id != old and response.member_id.startswith("i2-")
    assert response.skip_assignment is False and response.members == []
    group = ctx.group()
    assert group.state is S.STABLE
    assert group.static_member_id("i2") == response.member_id
    assert not group.has_member(old)
    # The assignment stays with the instance, and the group is rewritten.
    assert group.member(response.member_id).assignment == b"i2"
    ((_group_id, value),) = ctx.group_records(since)
    assert isinstance(value, GroupMetadataValue)
    assert {m.member_id for m in value.members} == {ids["i1"], response.member_id}
    assert ctx.timer.is_scheduled(f"heartbeat-{GROUP}-{response.member_id}")
    # The old id is fenced.
    assert ctx.heartbeat(old, generation, instance="i2") == ErrorCode.FENCED_INSTANCE_ID
    assert ctx.heartbeat(response.member_id, generation, instance="i2") == ErrorCode.NONE


def test_replaced_static_leader_gets_the_members_and_skip_assignment() -> None:  # B23
    ctx = GroupsContext()
    ids, _generation = static_stable_group(ctx, "i1", "i2")
    assert ctx.group().leader_id == ids["i1"]
    response = join_response(ctx.join(join_request(instance="i1")))
    assert response.skip_assignment is True
    assert response.leader == response.member_id
    assert {m.member_id for m in response.members} == {response.member_id, ids["i2"]}
    assert ctx.group().leader_id == response.member_id


def test_failed_persist_of_a_static_replacement_reverts_it() -> None:  # B23
    ctx = GroupsContext()
    ids, generation = static_stable_group(ctx, "i1", "i2")
    error = NotEnoughReplicasError("down")
    parked = ctx.fail_append_parkable(
        lambda s, h: s.join_group(RC, join_request(instance="i2"), h), error
    )
    assert parked.response is error
    assert ctx.group().static_member_id("i2") == ids["i2"]
    assert ctx.heartbeat(ids["i2"], generation, instance="i2") == ErrorCode.NONE


def test_static_rejoin_that_changes_the_protocol_rebalances() -> None:  # B23
    ctx = GroupsContext()
    first = ctx.join(join_request(instance="i1", protos=protocols("range", "roundrobin")))
    ctx.sleep(DELAY_MS)
    generation = join_response(first).generation_id
    member_id = join_response(first).member_id
    ctx.sync(member_id, generation, {member_id: b"a"}, instance="i1")
    assert ctx.group().protocol_name == "range"
    # The same instance now prefers roundrobin: the selected protocol would change.
    rejoin = ctx.join(join_request(instance="i1", protos=protocols("roundrobin", "range")))
    # It is the only member and it rejoined, so the new join phase ends at once.
    response = join_response(rejoin)
    assert response.protocol_name == "roundrobin"
    assert response.generation_id == generation + 1
    assert ctx.state() is S.COMPLETING_REBALANCE


def test_static_replacement_fences_the_old_members_parked_requests() -> None:  # B23
    ctx = GroupsContext()
    ids, generation = static_stable_group(ctx, "i1", "i2")
    # A rebalance: the old i2 member parks its JoinGroup, then a new i2 instance shows up.
    ctx.join(join_request(ids["i1"], instance="i1"))
    old_join = ctx.join(join_request(ids["i2"], instance="i2"))
    assert old_join.done  # everyone rejoined: CompletingRebalance
    old_sync = ctx.sync(ids["i2"], generation + 1, instance="i2")
    assert not old_sync.done
    new_join = ctx.join(join_request(instance="i2"))
    assert sync_response(old_sync).error_code == ErrorCode.FENCED_INSTANCE_ID
    # CompletingRebalance: the replacement always rebalances.
    assert ctx.state() is S.PREPARING_REBALANCE
    assert not new_join.done


def test_static_replacement_in_preparing_rebalance_fences_the_parked_join() -> None:  # B23
    ctx = GroupsContext()
    ids, generation = static_stable_group(ctx, "i1", "i2", "i3")
    ctx.join(join_request(ids["i1"], instance="i1"))  # leader rejoin
    old_join = ctx.join(join_request(ids["i2"], instance="i2"))
    assert not old_join.done
    new_join = ctx.join(join_request(instance="i2"))
    old = join_response(old_join)
    assert (old.error_code, old.member_id) == (ErrorCode.FENCED_INSTANCE_ID, ids["i2"])
    ctx.join(join_request(ids["i3"], instance="i3"))
    new = join_response(new_join)
    assert new.generation_id == generation + 1
    assert ctx.group().static_member_id("i2") == new.member_id


def test_requests_with_a_known_instance_but_another_member_id_are_fenced() -> None:  # B23
    ctx = GroupsContext()
    ids, generation = static_stable_group(ctx, "i1")
    assert join_response(ctx.join(join_request("bad", instance="i1"))).error_code == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    assert sync_response(ctx.sync("bad", generation, instance="i1")).error_code == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    assert ctx.heartbeat("bad", generation, instance="i1") == ErrorCode.FENCED_INSTANCE_ID
    assert ctx.leave(("bad", "i1")).members[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    commit = ctx.commit_offsets(
        {("t", 0): 1}, generation=generation, member_id="bad", instance="i1"
    )
    assert commit.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    unknown = join_response(ctx.join(join_request(ids["i1"], instance="other")))
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
