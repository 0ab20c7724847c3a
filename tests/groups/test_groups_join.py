"""JoinGroup: creation, the two-step join, protocols, group size, the join phase and its
timers, leader election."""

from __future__ import annotations

from groups_harness import (
    DELAY_MS,
    GROUP,
    RC,
    REBALANCE_MS,
    SESSION_MS,
    GroupsContext,
    join_request,
    join_response,
    protocols,
    shard_config,
    subscription,
    sync_response,
)
from shard_context import Parked

from coordinator_protocol.errors import ErrorCode, NotCoordinatorError, NotEnoughReplicasError
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.records import GroupMetadataValue

S = ClassicGroupState


# B3: the session timeout is checked against the configured range before the group.
def test_session_timeout_outside_the_range_is_invalid_session_timeout() -> None:
    ctx = GroupsContext(min_session_timeout_ms=6000, max_session_timeout_ms=30000)
    for session_ms in (5999, 30001):
        response = join_response(ctx.join(join_request(session_ms=session_ms)))
        assert response.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert ctx.records_written() == []
    ok = join_response(ctx.join(join_request(session_ms=30000)))
    assert ok.error_code == ErrorCode.MEMBER_ID_REQUIRED


# B4: a JoinGroup without member id creates the group, with an empty GroupMetadata record.
def test_join_creates_the_group_and_writes_an_empty_group_record() -> None:
    ctx = GroupsContext()
    ctx.join(join_request())
    group = ctx.group()
    assert group.state is S.EMPTY
    assert group.generation_id == 0
    assert ctx.group_records() == [
        (GROUP, GroupMetadataValue("", 0, None, None, ctx.clock.now_ms(), ()))
    ]


def test_join_with_a_member_id_to_an_unknown_group_is_unknown_member_id() -> None:  # B4
    ctx = GroupsContext()
    response = join_response(ctx.join(join_request("someone")))
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert response.member_id == "someone"
    assert ctx.shard.managers.groups.group(GROUP) is None
    assert ctx.records_written() == []


def test_failed_append_of_a_new_group_removes_it_and_fails_the_join() -> None:  # B4
    ctx = GroupsContext()
    error = NotEnoughReplicasError("down")
    parked = ctx.fail_append_parkable(lambda s, h: s.join_group(RC, join_request(), h), error)
    assert parked.response is error
    assert ctx.shard.managers.groups.group(GROUP) is None


# B6: member ids are the client id (or instance id) and a UUID.
def test_member_ids_are_client_or_instance_id_plus_a_uuid() -> None:
    ctx = GroupsContext()
    dynamic = join_response(ctx.join(join_request())).member_id
    assert dynamic.startswith(f"{RC.client_id}-") and len(dynamic) == len(RC.client_id) + 37
    ctx.join(join_request(instance="inst-1"))
    static_id = ctx.group().static_member_id("inst-1")
    assert static_id is not None and static_id.startswith("inst-1-")
    again = join_response(ctx.join(join_request())).member_id
    assert again != dynamic


# B7: the two-step join.
def test_dynamic_member_gets_member_id_required_and_joins_with_it() -> None:
    ctx = GroupsContext()
    first = join_response(ctx.join(join_request()))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member_id = first.member_id
    group = ctx.group()
    assert group.is_pending_member(member_id)
    assert not group.has_member(member_id)
    assert ctx.timer.is_scheduled(f"heartbeat-{GROUP}-{member_id}")
    second = ctx.join(join_request(member_id))
    assert not second.done
    group = ctx.group()
    assert group.has_member(member_id)
    assert not group.is_pending_member(member_id)
    assert group.state is S.PREPARING_REBALANCE


def test_pending_member_that_does_not_rejoin_is_dropped_at_its_session_timeout() -> None:
    # B7
    ctx = GroupsContext()
    member_id = join_response(ctx.join(join_request(session_ms=SESSION_MS))).member_id
    ctx.sleep(SESSION_MS - 1)
    assert ctx.group().is_pending_member(member_id)
    ctx.sleep(1)
    assert not ctx.group().is_pending_member(member_id)
    response = join_response(ctx.join(join_request(member_id)))
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_expiry_lets_the_join_phase_complete() -> None:  # B7, B17
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    # A new member is announced, then the leader rejoins: the rebalance waits for the
    # pending member, and completes when its pending id expires.
    pending = join_response(ctx.join(join_request(session_ms=SESSION_MS))).member_id
    leader_join = ctx.join(join_request(members[0]))
    follower_join = ctx.join(join_request(members[1]))
    assert ctx.state() is S.PREPARING_REBALANCE
    assert not leader_join.done
    ctx.sleep(SESSION_MS)
    assert not ctx.group().is_pending_member(pending)
    assert join_response(leader_join).generation_id == generation + 1
    assert join_response(follower_join).error_code == ErrorCode.NONE
    assert ctx.state() is S.COMPLETING_REBALANCE


# B8: protocol compatibility.
def test_inconsistent_group_protocol() -> None:
    ctx = GroupsContext()
    for request in (join_request(protocol_type=""), join_request(protos=[])):
        response = join_response(ctx.join(request))
        assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert response.member_id == ""
    ctx.stable_group(1)
    wrong_type = join_response(ctx.join(join_request(protocol_type="connect")))
    assert wrong_type.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    no_common = join_response(ctx.join(join_request(protos=protocols("roundrobin"))))
    assert no_common.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert no_common.member_id == ""


def test_existing_member_with_incompatible_protocols_keeps_its_id_in_the_error() -> None:
    # B8, B11
    ctx = GroupsContext()
    members, _ = ctx.stable_group(2)
    response = join_response(ctx.join(join_request(members[1], protos=protocols("other"))))
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert response.member_id == members[1]


# B9: protocol chosen by votes at the generation bump.
def test_protocol_is_chosen_by_the_members_votes() -> None:
    ctx = GroupsContext()
    _a, ja = ctx.join_new(protos=protocols("range", "roundrobin"))
    _b, jb = ctx.join_new(protos=protocols("roundrobin", "range"))
    _c, jc = ctx.join_new(protos=protocols("roundrobin", "range", "sticky"))
    ctx.sleep_until_done([ja, jb, jc])
    assert {join_response(p).protocol_name for p in (ja, jb, jc)} == {"roundrobin"}
    assert ctx.group().protocol_name == "roundrobin"


# B10: group.max.size.
def test_new_member_beyond_max_size_is_rejected() -> None:
    ctx = GroupsContext(max_size=2)
    ctx.stable_group(2)
    first = join_response(ctx.join(join_request()))
    # Stable: the pending id is no member yet, so the two-step join itself is refused.
    assert first.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert first.member_id == ""
    assert ctx.group().num_members() == 2


def test_max_size_during_rebalance_counts_members_awaiting_join() -> None:  # B10
    ctx = GroupsContext(max_size=2)
    a, ja = ctx.join_new()
    _b, _jb = ctx.join_new()
    # Two members await their join answer: a third pending member is turned away.
    pending = join_response(ctx.join(join_request())).member_id
    response = join_response(ctx.join(join_request(pending)))
    assert response.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert not ctx.group().is_pending_member(pending)
    # An existing awaiting member rejoining is accepted.
    again = ctx.join(join_request(a))
    assert not again.done
    assert isinstance(ja.response, NotCoordinatorError)


def test_group_over_a_lowered_max_size_rebalances_on_load_and_kicks_the_last_joiners() -> None:
    # B10, A6
    ctx = GroupsContext(max_size=5)
    members, generation = ctx.stable_group(3)
    ctx.config = shard_config(max_size=2)
    ctx.reload()
    assert ctx.state() is S.PREPARING_REBALANCE
    joins = [ctx.join(join_request(m)) for m in members]
    assert join_response(joins[2]).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert not ctx.group().has_member(members[2])
    # Every member left has rejoined: the join completes at once, not at the rebalance
    # timeout (Kafka's join purgatory is checked after the rejection too).
    assert joins[0].done and joins[1].done
    assert join_response(joins[0]).generation_id == generation + 1
    assert join_response(joins[1]).generation_id == generation + 1
    assert ctx.group().num_members() == 2
    assert ctx.state() is S.COMPLETING_REBALANCE


# B11: an existing member's JoinGroup, by state.
def test_rejoin_in_completing_rebalance_with_same_metadata_returns_the_generation() -> None:
    ctx = GroupsContext()
    a, ja = ctx.join_new()
    b, jb = ctx.join_new()
    ctx.sleep_until_done([ja, jb])
    generation = join_response(ja).generation_id
    leader_again = join_response(ctx.join(join_request(a)))
    assert leader_again.generation_id == generation
    assert leader_again.leader == a
    assert {m.member_id for m in leader_again.members} == {a, b}
    follower_again = join_response(ctx.join(join_request(b)))
    assert follower_again.members == []
    assert ctx.state() is S.COMPLETING_REBALANCE


def test_rejoin_in_completing_rebalance_with_new_metadata_rebalances() -> None:  # B11, B12
    ctx = GroupsContext()
    a, ja = ctx.join_new()
    b, jb = ctx.join_new()
    ctx.sleep_until_done([ja, jb])
    generation = join_response(ja).generation_id
    follower_sync = ctx.sync(b, generation)
    assert not follower_sync.done
    changed = ctx.join(join_request(b, protos=protocols(topics=("t", "u"))))
    assert ctx.state() is S.PREPARING_REBALANCE
    # The parked SyncGroup is cancelled by the new rebalance.
    assert sync_response(follower_sync).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    leader = ctx.join(join_request(a))
    assert join_response(leader).generation_id == generation + 1
    assert join_response(changed).generation_id == generation + 1


def test_rejoin_in_stable() -> None:  # B11
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    # A follower with unchanged metadata gets the current generation, nothing changes.
    same = join_response(ctx.join(join_request(members[1])))
    assert (same.error_code, same.generation_id, same.members) == (ErrorCode.NONE, generation, [])
    assert ctx.state() is S.STABLE
    # A follower with new metadata rebalances.
    changed = ctx.join(join_request(members[1], protos=protocols(topics=("x",))))
    assert not changed.done
    assert ctx.state() is S.PREPARING_REBALANCE


def test_leader_rejoin_in_stable_always_rebalances() -> None:  # B11
    ctx = GroupsContext()
    members, generation = ctx.stable_group(2)
    leader = ctx.join(join_request(members[0]))
    assert not leader.done
    assert ctx.state() is S.PREPARING_REBALANCE
    follower = ctx.join(join_request(members[1]))
    assert join_response(leader).generation_id == generation + 1
    assert join_response(follower).generation_id == generation + 1


def test_join_of_unknown_member_to_existing_group_is_unknown_member_id() -> None:  # B11
    ctx = GroupsContext()
    ctx.stable_group(1)
    response = join_response(ctx.join(join_request("nobody")))
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID


# B12 / B14: the join phase completes when every member rejoined.
def test_rebalance_completes_once_every_member_rejoined() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(3)
    joins = [ctx.join(join_request(m)) for m in members[:2]]
    assert not any(p.done for p in joins)
    last = ctx.join(join_request(members[2]))
    responses = [join_response(p) for p in (*joins, last)]
    assert {r.generation_id for r in responses} == {generation + 1}
    assert [len(r.members) for r in responses] == [3, 0, 0]
    assert {r.leader for r in responses} == {members[0]}
    group = ctx.group()
    assert group.state is S.COMPLETING_REBALANCE
    assert group.pending_sync_members == set(members)
    assert ctx.timer.is_scheduled(f"sync-{GROUP}")


# B13: the initial rebalance delay.
def test_initial_rebalance_waits_for_the_delay_even_if_everyone_joined() -> None:
    ctx = GroupsContext()
    _a, ja = ctx.join_new()
    ctx.sleep(DELAY_MS - 1)
    assert not ja.done
    ctx.sleep(1)
    assert join_response(ja).generation_id == 1


def test_initial_rebalance_delay_is_extended_while_members_keep_joining() -> None:  # B13
    ctx = GroupsContext(initial_rebalance_delay_ms=3000)
    _a, ja = ctx.join_new(rebalance_ms=10_000)  # remaining: 10000 - 3000 = 7000
    ctx.sleep(2000)
    _b, jb = ctx.join_new(rebalance_ms=10_000)
    ctx.sleep(1000)  # 3000: a member was added, extend by min(3000, 7000)
    assert not ja.done
    _c, jc = ctx.join_new(rebalance_ms=10_000)
    ctx.sleep(3000)  # 6000: extended again by min(3000, 4000)
    assert not ja.done
    ctx.sleep(2999)
    assert not ja.done
    ctx.sleep(1)  # 9000: nobody new, complete
    assert {join_response(p).generation_id for p in (ja, jb, jc)} == {1}


def test_initial_rebalance_extension_is_bounded_by_the_rebalance_timeout() -> None:  # B13
    ctx = GroupsContext(initial_rebalance_delay_ms=3000)
    _a, ja = ctx.join_new(rebalance_ms=5000)  # remaining 2000
    _b, _jb = ctx.join_new(rebalance_ms=5000)
    ctx.sleep(3000)
    assert not ja.done
    ctx.sleep(1999)
    assert not ja.done
    ctx.sleep(1)  # extended by min(3000, 2000) only
    assert join_response(ja).error_code == ErrorCode.NONE


# B14: the rebalance timeout ends the join phase without the members that did not rejoin.
def test_rebalance_timeout_removes_dynamic_members_that_did_not_rejoin() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(3)
    leader = ctx.join(join_request(members[0]))
    follower = ctx.join(join_request(members[1]))
    # The absent member keeps its session alive: only its missing JoinGroup removes it.
    for _ in range(REBALANCE_MS // 5000 - 1):
        ctx.sleep(5000)
        assert ctx.heartbeat(members[2], generation) == ErrorCode.REBALANCE_IN_PROGRESS
    ctx.sleep(4999)
    assert not leader.done
    ctx.sleep(1)
    assert join_response(leader).generation_id == generation + 1
    assert join_response(follower).error_code == ErrorCode.NONE
    group = ctx.group()
    assert set(group.members) == set(members[:2])
    assert not ctx.timer.is_scheduled(f"heartbeat-{GROUP}-{members[2]}")


def test_join_phase_of_a_group_everyone_left_ends_empty_with_a_record() -> None:  # B14, E6
    ctx = GroupsContext()
    members, generation = ctx.stable_group(1)
    since = ctx.end_offset
    ctx.leave((members[0], None))
    group = ctx.group()
    assert group.state is S.EMPTY
    assert group.generation_id == generation + 1
    assert ctx.group_records(since) == [
        (GROUP, GroupMetadataValue("consumer", generation + 1, None, None, ctx.clock.now_ms(), ()))
    ]


def test_join_phase_without_any_rejoined_member_waits_another_rebalance_timeout() -> None:
    # B14: static members are kept when they do not rejoin.
    ctx = GroupsContext()
    first = ctx.join(join_request(instance="s1", session_ms=2 * REBALANCE_MS))
    ctx.sleep(DELAY_MS)
    member_id = join_response(first).member_id
    generation = join_response(first).generation_id
    ctx.sync(member_id, generation, {member_id: b"x"}, instance="s1")
    since = ctx.end_offset
    # A new dynamic member triggers a rebalance, then leaves: nobody is left awaiting.
    pending = join_response(ctx.join(join_request())).member_id
    newcomer = ctx.join(join_request(pending))
    ctx.leave((pending, None))
    assert join_response(newcomer).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    ctx.sleep(REBALANCE_MS)
    group = ctx.group()
    assert group.state is S.PREPARING_REBALANCE
    assert group.has_member(member_id)
    assert ctx.timer.is_scheduled(f"join-{GROUP}")
    assert ctx.group_records(since) == []
    # When the static member rejoins, the phase completes.
    again = ctx.join(join_request(member_id, instance="s1", session_ms=2 * REBALANCE_MS))
    assert join_response(again).generation_id == generation + 1


def _rebalance_without_the_leader(
    ctx: GroupsContext, members: list[str], generation: int
) -> list[Parked]:
    """A follower changes its subscription, every member but the leader rejoins; the leader
    keeps heartbeating until the rebalance timeout ends the join phase."""
    joins = [ctx.join(join_request(members[1], protos=protocols(topics=("t", "u"))))]
    joins += [ctx.join(join_request(m)) for m in members[2:]]
    for _ in range(REBALANCE_MS // 5000):
        ctx.sleep(5000)
        ctx.heartbeat(members[0], generation)
    return joins


# B15: leader election.
def test_dynamic_leader_that_does_not_rejoin_is_removed_and_a_rejoined_member_leads() -> None:
    ctx = GroupsContext()
    members, generation = ctx.stable_group(3)
    joins = _rebalance_without_the_leader(ctx, members, generation)
    responses = [join_response(p) for p in joins]
    assert {r.leader for r in responses} == {members[1]}
    assert len(responses[0].members) == 2
    assert not ctx.group().has_member(members[0])


def test_static_leader_that_does_not_rejoin_stays_but_a_rejoined_member_leads() -> None:
    # B15, B23
    ctx = GroupsContext()
    static_join = ctx.join(join_request(instance="s", session_ms=2 * REBALANCE_MS))
    b, jb = ctx.join_new()
    ctx.sleep_until_done([static_join, jb])
    leader = join_response(static_join).member_id
    generation = join_response(jb).generation_id
    assert join_response(jb).leader == leader
    ctx.sync(b, generation)
    ctx.sync(leader, generation, {leader: b"s", b: b"b"}, instance="s")
    rejoin = ctx.join(join_request(b, protos=protocols(topics=("x",))))
    for _ in range(REBALANCE_MS // 5000):
        ctx.sleep(5000)
    response = join_response(rejoin)
    assert response.leader == b
    assert {m.member_id for m in response.members} == {leader, b}
    assert ctx.group().has_member(leader)


# B16: a new member's JoinGroup is bounded by the new-member join timeout.
def test_new_member_is_not_governed_by_its_session_timeout_while_its_join_is_parked() -> None:
    ctx = GroupsContext()
    a, _ja = ctx.join_new(rebalance_ms=1_000_000, session_ms=SESSION_MS)
    assert ctx.group().member(a).is_new
    ctx.sleep(SESSION_MS + 1)
    assert ctx.group().has_member(a)


def test_new_member_that_never_completes_its_join_is_removed_after_the_join_timeout() -> None:
    # B16: the group's static member never rejoins (a long rebalance timeout) but keeps
    # its session alive; the newcomer waits until the new-member join timeout.
    ctx = GroupsContext(initial_rebalance_delay_ms=0, new_member_join_timeout_ms=300_000)
    s_join = ctx.join(join_request(instance="s", rebalance_ms=1_000_000))
    ctx.sleep(0)
    static_id = join_response(s_join).member_id
    ctx.sync(static_id, 1, {static_id: b"a"}, instance="s")
    newcomer_id, newcomer = ctx.join_new(rebalance_ms=1_000_000)
    waited = 0
    while waited < 300_000 - 5000:
        ctx.sleep(5000)
        waited += 5000
        ctx.heartbeat(static_id, 1, instance="s")
    assert not newcomer.done
    ctx.sleep(5000)
    response = join_response(newcomer)
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert response.member_id == ""
    assert not ctx.group().has_member(newcomer_id)


def test_after_the_join_phase_the_session_timeout_applies_again() -> None:  # B16, B17
    ctx = GroupsContext()
    a, ja = ctx.join_new()
    ctx.sleep_until_done([ja])
    assert not ctx.group().member(a).is_new
    # It never sends SyncGroup nor heartbeats: its session ends before the pending-sync timer.
    ctx.sleep(SESSION_MS)
    assert not ctx.group().has_member(a)


# B24: a member that sends JoinGroup again while one is parked.
def test_duplicate_join_completes_the_previous_one_with_not_coordinator() -> None:
    ctx = GroupsContext()
    a, first = ctx.join_new()
    second = ctx.join(join_request(a))
    assert isinstance(first.response, NotCoordinatorError)
    assert not second.done
    ctx.sleep_until_done([second])
    assert join_response(second).error_code == ErrorCode.NONE
    assert first.completions == 1


def test_join_answers_carry_the_generation_protocol_and_leader() -> None:  # B14
    ctx = GroupsContext()
    a, ja = ctx.join_new(protos=[("range", subscription("t"))])
    b, jb = ctx.join_new(protos=[("range", subscription("u"))])
    ctx.sleep_until_done([ja, jb])
    leader, follower = join_response(ja), join_response(jb)
    assert (leader.protocol_type, leader.protocol_name, leader.leader) == ("consumer", "range", a)
    assert {(m.member_id, m.metadata) for m in leader.members} == {
        (a, subscription("t")),
        (b, subscription("u")),
    }
    assert follower.members == [] and follower.leader == a and follower.member_id == b
    assert leader.skip_assignment is False
