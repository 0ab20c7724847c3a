"""SyncGroup, Heartbeat and the timers that keep or end a member's session."""

from __future__ import annotations

from groups_harness import (
    GROUP,
    RC,
    REBALANCE_MS,
    SESSION_MS,
    GroupsContext,
    assignment,
    join_request,
    join_response,
    sync_response,
)
from shard_context import Parked

from coordinator_protocol.errors import ErrorCode, NotCoordinatorError, NotEnoughReplicasError
from coordinator_protocol.messages import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.groups.store import ClassicGroupUpdate
from coordinator_server.records import GroupMetadataKey, GroupMetadataValue

S = ClassicGroupState


def completing_group(ctx: GroupsContext, n: int) -> tuple[list[str], int]:
    """n members whose join phase just ended: CompletingRebalance, nobody synced."""
    joins = []
    members = []
    for _ in range(n):
        member_id, parked = ctx.join_new()
        members.append(member_id)
        joins.append(parked)
    ctx.sleep_until_done(joins)
    assert ctx.state() is S.COMPLETING_REBALANCE
    return members, join_response(joins[0]).generation_id


# B20: the leader's assignment is persisted before any member gets its SyncGroup answer.
def test_leader_sync_writes_the_assignment_and_answers_everyone_in_the_same_result() -> None:
    ctx = GroupsContext()
    (a, b, c), generation = completing_group(ctx, 3)
    follower = ctx.sync(b, generation)
    assert not follower.done
    assert ctx.group().member(b).sync_handle is follower.handle
    leader = Parked()
    request = SyncGroupRequest(
        group_id=GROUP,
        generation_id=generation,
        member_id=a,
        assignments=[
            SyncGroupRequestAssignment(member_id=a, assignment=assignment("t", 0)),
            SyncGroupRequestAssignment(member_id=b, assignment=assignment("t", 1)),
        ],
    )
    result = ctx.shard.sync_group(RC, request, leader.handle)
    # Nothing is answered by the handler itself: the leader parks, and the answers ride on
    # the result's completions, which the runtime delivers once the record is committed.
    assert result.park
    assert not follower.done
    assert len(result.records) == 1
    record = result.records[0]
    assert record.key == GroupMetadataKey(GROUP)
    value = record.value
    assert isinstance(value, GroupMetadataValue)
    assert value.generation == generation and value.leader == a
    assert {m.member_id: m.assignment for m in value.members} == {
        a: assignment("t", 0),
        b: assignment("t", 1),
        c: b"",  # a member the leader left out gets an empty assignment
    }
    answers = dict(result.completions)
    assert set(answers) == {leader.handle, follower.handle}
    leader_answer = answers[leader.handle]
    assert isinstance(leader_answer, SyncGroupResponse)
    assert (leader_answer.assignment, leader_answer.protocol_name) == (assignment("t", 0), "range")
    assert answers[follower.handle].assignment == assignment("t", 1)  # type: ignore[attr-defined]
    # The update carries the Stable snapshot with the assignments.
    (update,) = result.updates
    assert isinstance(update, ClassicGroupUpdate) and update.group is not None
    assert update.group.state is S.STABLE
    assert update.group.member(c).assignment == b""
    ctx.apply_result(result)
    assert sync_response(follower).assignment == assignment("t", 1)
    assert sync_response(leader).error_code == ErrorCode.NONE
    # A member that syncs after the leader gets its stored assignment at once.
    late = sync_response(ctx.sync(c, generation))
    assert (late.error_code, late.assignment) == (ErrorCode.NONE, b"")
    assert ctx.group().has_received_sync_from_all_members()
    assert not ctx.timer.is_scheduled(f"sync-{GROUP}")


def test_failed_append_of_the_assignment_fails_the_syncs_and_starts_a_rebalance() -> None:
    # B20
    ctx = GroupsContext()
    (a, b, c), generation = completing_group(ctx, 3)
    follower = ctx.sync(b, generation)
    error = NotEnoughReplicasError("the log is down")
    leader = ctx.fail_append_parkable(
        lambda s, h: s.sync_group(
            RC,
            SyncGroupRequest(
                group_id=GROUP,
                generation_id=generation,
                member_id=a,
                assignments=[SyncGroupRequestAssignment(member_id=a, assignment=b"x")],
            ),
            h,
        ),
        error,
    )
    assert leader.response is error
    assert follower.response is error
    assert follower.completions == 1, "answered once, with the append's error"
    group = ctx.group()
    assert group.state is S.PREPARING_REBALANCE
    assert group.generation_id == generation
    assert all(m.assignment == b"" and m.sync_handle is None for m in group.members.values())
    # Everyone rejoins: a new generation.
    joins = [ctx.join(join_request(m)) for m in (a, b, c)]
    assert {join_response(p).generation_id for p in joins} == {generation + 1}


def test_failed_assignment_append_gives_other_parked_syncs_rebalance_in_progress() -> None:
    # B20, B12: a SyncGroup parked after the failed write is answered by the rebalance.
    ctx = GroupsContext()
    (a, b), generation = completing_group(ctx, 2)
    base = ctx.end_offset
    leader = Parked()
    result = ctx.shard.sync_group(
        RC, SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=a), leader.handle
    )
    ctx.apply_result(
        type(result)(
            records=result.records,
            updates=result.updates,
            park=True,
        )
    )
    del ctx.log[base:]
    ctx.registry.revert_to(base)
    late_follower = ctx.sync(b, generation)
    assert not late_follower.done
    assert result.on_append_failure is not None
    ctx.apply_result(result.on_append_failure())
    assert sync_response(late_follower).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert ctx.state() is S.PREPARING_REBALANCE


# B19: SyncGroup validation.
def test_sync_validation_errors() -> None:
    ctx = GroupsContext()
    assert sync_response(ctx.sync("m", 0)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    members, generation = ctx.stable_group(2)
    a = members[0]

    def code(member: str, gen: int, **kwargs: object) -> int:
        return sync_response(ctx.sync(member, gen, **kwargs)).error_code  # type: ignore[arg-type]

    assert code("nobody", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code(a, generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert code(a, generation, protocol_type="connect") == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert code(a, generation, protocol_name="sticky") == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert code(a, generation, protocol_type="consumer", protocol_name="range") == ErrorCode.NONE
    assert code(a, generation, instance="unknown") == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_to_an_empty_group_is_unknown_member_id() -> None:  # B2, B19
    ctx = GroupsContext()
    ctx.commit_offsets({("t", 0): 1})  # a simple group
    assert ctx.state() is S.EMPTY
    assert sync_response(ctx.sync("m", 0)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:  # B2, B20
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    ctx.join(join_request(members[0]))
    assert ctx.state() is S.PREPARING_REBALANCE
    response = sync_response(ctx.sync(members[1], generation))
    assert response.error_code == ErrorCode.REBALANCE_IN_PROGRESS


# B24: a SyncGroup sent again while one is parked.
def test_duplicate_follower_sync_completes_the_previous_one_with_not_coordinator() -> None:
    ctx = GroupsContext()
    (a, b), generation = completing_group(ctx, 2)
    first = ctx.sync(b, generation)
    second = ctx.sync(b, generation)
    assert isinstance(first.response, NotCoordinatorError)
    assert not second.done
    ctx.sync(a, generation, {a: b"A", b: b"B"})
    assert sync_response(second).assignment == b"B"
    assert first.completions == 1


# B21: Heartbeat in every state.
def test_heartbeat_of_unknown_group_or_member_is_unknown_member_id() -> None:
    ctx = GroupsContext()
    assert ctx.heartbeat("m", 0) == ErrorCode.UNKNOWN_MEMBER_ID
    members, generation = ctx.stable_group(1)
    assert ctx.heartbeat("other", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat(members[0], generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert ctx.heartbeat(members[0], generation, instance="i") == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_in_empty_group_is_unknown_member_id() -> None:  # B21
    ctx = GroupsContext()
    ctx.join(join_request())  # creates an Empty group with a pending member
    assert ctx.state() is S.EMPTY
    assert ctx.heartbeat("", 0) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_in_each_state_with_members() -> None:  # B21
    ctx = GroupsContext()
    (a, b), generation = completing_group(ctx, 2)
    # CompletingRebalance: NONE (the new coordinator), and the session timer is re-armed.
    ctx.sleep(SESSION_MS - 1)
    assert ctx.heartbeat(b, generation) == ErrorCode.NONE
    ctx.sync(b, generation)
    ctx.sync(a, generation, {a: b"", b: b""})
    # Stable: NONE.
    assert ctx.heartbeat(a, generation) == ErrorCode.NONE
    # PreparingRebalance: REBALANCE_IN_PROGRESS, still re-arming the timer.
    ctx.join(join_request(a))
    ctx.sleep(SESSION_MS - 1)
    assert ctx.heartbeat(b, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    ctx.sleep(SESSION_MS - 1)
    assert ctx.group().has_member(b)


# B17: the session timeout.
def test_member_that_stops_heartbeating_is_removed_and_the_group_rebalances() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    for _ in range(5):
        ctx.sleep(SESSION_MS - 1)
        assert ctx.heartbeat(members[0], generation) == ErrorCode.NONE
        assert ctx.heartbeat(members[1], generation) == ErrorCode.NONE
    ctx.sleep(SESSION_MS - 1)
    ctx.heartbeat(members[0], generation)
    ctx.sleep(1)
    group = ctx.group()
    assert not group.has_member(members[1])
    assert group.state is S.PREPARING_REBALANCE
    assert ctx.heartbeat(members[0], generation) == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_and_commit_keep_the_session_alive() -> None:  # B17, C3
    ctx = GroupsContext()
    (a, b), generation = completing_group(ctx, 2)
    ctx.sleep(SESSION_MS - 1)
    ctx.sync(b, generation)
    ctx.sync(a, generation, {a: b"", b: b""})  # the answers re-arm both members' timers
    ctx.sleep(SESSION_MS - 1)
    for member in (a, b):
        response = ctx.commit_offsets({("t", 0): 5}, generation=generation, member_id=member)
        assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
    ctx.sleep(SESSION_MS - 1)
    assert ctx.state() is S.STABLE
    assert ctx.group().num_members() == 2
    ctx.sleep(1)
    assert ctx.group().num_members() == 0


def test_member_with_a_parked_join_survives_its_session_timeout() -> None:  # B17
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    leader_join = ctx.join(join_request(members[0]))
    # The follower must rejoin; the leader waits, its heartbeat satisfied by the parked join.
    for _ in range(3):
        ctx.sleep(SESSION_MS - 1)
        ctx.heartbeat(members[1], generation)
    assert ctx.group().has_member(members[0])
    assert not leader_join.done
    ctx.join(join_request(members[1]))
    assert join_response(leader_join).generation_id == generation + 1


def test_session_expiry_in_preparing_rebalance_completes_the_join_phase() -> None:  # B17
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    leader_join = ctx.join(join_request(members[0]))
    ctx.sleep(SESSION_MS)
    assert join_response(leader_join).generation_id == generation + 1
    assert not ctx.group().has_member(members[1])


# B18: members that never send SyncGroup.
def test_members_that_never_sync_are_removed_at_the_pending_sync_timeout() -> None:
    ctx = GroupsContext()
    (a, b, c), generation = completing_group(ctx, 3)
    assert ctx.timer.is_scheduled(f"sync-{GROUP}")
    ctx.sync(a, generation, {a: b"", b: b"", c: b""})
    ctx.sync(b, generation)
    assert ctx.group().pending_sync_members == {c}
    # c keeps heartbeating but never syncs.
    waited = 0
    while waited + 5000 < REBALANCE_MS:
        ctx.sleep(5000)
        waited += 5000
        for m in (a, b, c):
            ctx.heartbeat(m, generation)
    assert ctx.group().has_member(c)
    ctx.sleep(REBALANCE_MS - waited)
    group = ctx.group()
    assert not group.has_member(c)
    assert group.state is S.PREPARING_REBALANCE


def test_pending_sync_timer_is_cancelled_once_everyone_synced() -> None:  # B18
    ctx = GroupsContext()
    (a, b), generation = completing_group(ctx, 2)
    ctx.sync(b, generation)
    ctx.sync(a, generation, {a: b"", b: b""})
    assert not ctx.timer.is_scheduled(f"sync-{GROUP}")
