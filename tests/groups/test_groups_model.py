"""The classic group snapshot itself: states, protocol choice, subscriptions, expiration
conditions and the GroupMetadata record round trip."""

from __future__ import annotations

import dataclasses

import pytest
from groups_harness import subscription
from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.groups.classic import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    OffsetExpirationCondition,
    compute_subscribed_topics,
)
from coordinator_server.records import GroupMemberValue, GroupMetadataValue, OffsetCommitValue
from coordinator_server.runtime.api import ResponseHandle

S = ClassicGroupState
NOW = 1_000_000


def member(
    member_id: str,
    *protos: tuple[str, bytes],
    instance: str | None = None,
    protocol_type: str = "consumer",
) -> ClassicGroupMember:
    return ClassicGroupMember(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="/h",
        rebalance_timeout_ms=5000,
        session_timeout_ms=3000,
        protocol_type=protocol_type,
        protocols=protos or (("range", subscription("t")),),
    )


def group_with(*members: ClassicGroupMember) -> ClassicGroup:
    group = ClassicGroup.create("g", NOW)
    for m in members:
        group = group.add_member(m)
    return group


# B1: states and their allowed transitions.
@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        (S.PREPARING_REBALANCE, S.EMPTY, True),
        (S.STABLE, S.EMPTY, False),
        (S.EMPTY, S.PREPARING_REBALANCE, True),
        (S.STABLE, S.PREPARING_REBALANCE, True),
        (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE, True),
        (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, True),
        (S.STABLE, S.COMPLETING_REBALANCE, False),
        (S.COMPLETING_REBALANCE, S.STABLE, True),
        (S.PREPARING_REBALANCE, S.STABLE, False),
        (S.EMPTY, S.DEAD, True),
        (S.STABLE, S.DEAD, True),
        (S.DEAD, S.DEAD, True),
        (S.DEAD, S.EMPTY, False),
    ],
)
def test_state_transitions_follow_kafkas_table(
    source: ClassicGroupState, target: ClassicGroupState, allowed: bool
) -> None:
    group = ClassicGroup("g", source, NOW)
    if allowed:
        moved = group.transition_to(target, NOW + 5)
        assert moved.state is target
        assert moved.previous_state is source
        assert moved.current_state_timestamp_ms == NOW + 5
        assert group.state is source, "snapshots are immutable"
    else:
        with pytest.raises(ValueError):
            group.transition_to(target, NOW + 5)


def test_state_values_are_kafkas_display_names() -> None:  # B1
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    assert S.COMPLETING_REBALANCE.lower_name == "completingrebalance"


def test_first_member_sets_protocol_type_and_leads_and_removal_moves_leadership() -> None:
    # B15
    group = group_with(member("a"), member("b"), member("c"))
    assert group.protocol_type == "consumer"
    assert group.leader_id == "a"
    group = group.remove_member("a")
    assert group.leader_id == "b"
    assert group.remove_members(["b", "c"]).leader_id is None


def test_empty_group_supports_any_non_empty_protocol_type_and_list() -> None:  # B8
    group = ClassicGroup.create("g", NOW)
    assert group.supports_protocols("consumer", {"range"})
    assert not group.supports_protocols("", {"range"})
    assert not group.supports_protocols("consumer", set())


def test_non_empty_group_needs_its_protocol_type_and_a_protocol_every_member_has() -> None:
    # B8
    group = group_with(
        member("a", ("range", b""), ("roundrobin", b"")), member("b", ("roundrobin", b""))
    ).transition_to(S.PREPARING_REBALANCE, NOW)
    assert group.supports_protocols("consumer", {"roundrobin", "sticky"})
    assert not group.supports_protocols("consumer", {"range"})
    assert not group.supports_protocols("connect", {"roundrobin"})


def test_protocol_selection_counts_each_members_first_supported_candidate() -> None:  # B9
    group = group_with(
        member("a", ("range", b""), ("roundrobin", b""), ("sticky", b"")),
        member("b", ("roundrobin", b""), ("range", b"")),
        member("c", ("roundrobin", b""), ("range", b"")),
    )
    # "sticky" is not a candidate (b and c lack it); two votes for roundrobin, one for range.
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "roundrobin"


def test_subscribed_topics_are_the_union_of_consumer_subscriptions() -> None:  # B25
    members = [
        member("a", ("range", subscription("t1", "t2"))),
        member("b", ("range", subscription("t2", "t3"))),
    ]
    assert compute_subscribed_topics("consumer", "range", members) == frozenset({"t1", "t2", "t3"})
    assert compute_subscribed_topics("consumer", "range", []) == frozenset()
    # Unknown: another protocol type, no protocol yet, or bytes that do not parse.
    assert compute_subscribed_topics("connect", "range", members) is None
    assert compute_subscribed_topics("consumer", None, members) is None
    garbled = [member("a", ("range", b"\xc1 not msgpack"))]
    assert compute_subscribed_topics("consumer", "range", garbled) is None


def test_unparsable_consumer_subscription_counts_as_subscribed_to_everything() -> None:  # B25
    group = group_with(member("a", ("range", b"\xc1"))).transition_to(S.PREPARING_REBALANCE, NOW)
    group = group.init_next_generation(NOW)
    assert group.subscribed_topics is None
    assert group.is_subscribed_to_topic("anything")
    other = group_with(member("a", ("x", b"\xc1"), protocol_type="connect"))
    other = other.transition_to(S.PREPARING_REBALANCE, NOW).init_next_generation(NOW)
    assert not other.is_subscribed_to_topic("anything")


def offset(commit_ms: int, expire_ms: int | None = None) -> OffsetCommitValue:
    return OffsetCommitValue(1, -1, "", commit_ms, expire_ms)


def test_expiration_condition_of_a_simple_group_counts_from_the_commit() -> None:  # C14
    condition = ClassicGroup.create("g", NOW).offset_expiration_condition()
    assert condition == OffsetExpirationCondition(None)
    assert condition.is_offset_expired(offset(100), 100 + 50, 50)
    assert not condition.is_offset_expired(offset(100), 100 + 49, 50)
    # An explicit expire timestamp wins over retention.
    assert condition.is_offset_expired(offset(100, expire_ms=120), 120, 10_000)


def test_expiration_condition_of_an_empty_group_counts_from_when_it_became_empty() -> None:
    # C14
    group = ClassicGroup("g", S.EMPTY, 5_000, protocol_type="consumer", generation_id=3)
    condition = group.offset_expiration_condition()
    assert condition is not None
    assert condition.base_of(offset(100)) == 5_000
    # Without a state timestamp (an old record): the commit time.
    no_ts = ClassicGroup("g", S.EMPTY, None, protocol_type="consumer")
    condition = no_ts.offset_expiration_condition()
    assert condition is not None and condition.base_of(offset(100)) == 100


def test_expiration_condition_of_groups_with_members() -> None:  # C14
    stable = group_with(member("a")).transition_to(S.PREPARING_REBALANCE, NOW)
    stable = stable.init_next_generation(NOW).transition_to(S.STABLE, NOW)
    assert stable.offset_expiration_condition() == OffsetExpirationCondition(None)
    rebalancing = stable.transition_to(S.PREPARING_REBALANCE, NOW)
    assert rebalancing.offset_expiration_condition() is None
    connect = group_with(member("a", ("x", b""), protocol_type="connect"))
    connect = connect.transition_to(S.PREPARING_REBALANCE, NOW).init_next_generation(NOW)
    connect = connect.transition_to(S.STABLE, NOW)
    assert connect.offset_expiration_condition() is None


def test_record_round_trip_loads_stable_with_the_selected_protocol_only() -> None:  # E7
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=7,
        protocol_name="range",
        leader="b",
        current_state_timestamp_ms=1234,
        members=(
            GroupMemberValue("a", None, "c1", "/h1", -1, 6000, subscription("x"), b"A"),
            GroupMemberValue("b", "i-b", "c2", "/h2", 9000, 7000, subscription("y"), b"B"),
        ),
    )
    group = ClassicGroup.from_record("g", value)
    assert group.state is S.STABLE
    assert group.generation_id == 7
    assert group.leader_id == "b"
    assert group.static_members == {"i-b": "b"}
    # A rebalance timeout of -1 (old records) is the session timeout.
    assert group.member("a").rebalance_timeout_ms == 6000
    assert group.member("a").protocols == (("range", subscription("x")),)
    assert group.subscribed_topics == frozenset({"x", "y"})
    rewritten = group.to_record_value()
    assert rewritten.members[0].rebalance_timeout_ms == 6000
    assert rewritten.members[1] == value.members[1]
    assert (rewritten.generation, rewritten.protocol_name, rewritten.leader) == (7, "range", "b")
    assert rewritten.current_state_timestamp_ms == 1234


def test_record_without_members_loads_empty_and_empty_protocol_type_means_none() -> None:
    # E7
    group = ClassicGroup.from_record("g", GroupMetadataValue("", 0, None, None, -1, ()))
    assert group.state is S.EMPTY
    assert group.protocol_type is None
    assert group.current_state_timestamp_ms is None


_MEMBER_IDS = ("m1", "m2", "m3", "m4")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(("add", "update", "remove", "clear_all", "static")),
            st.sampled_from(_MEMBER_IDS),
            st.booleans(),
            st.sampled_from((("range",), ("range", "roundrobin"), ("roundrobin",))),
        ),
        max_size=40,
    )
)
def test_what_the_group_derives_from_its_members_is_always_what_a_fresh_count_gives(
    changes: list[tuple[str, str, bool, tuple[str, ...]]],
) -> None:
    # The protocol counts, the join answer's size and the members awaiting a JoinGroup answer
    # are carried over from snapshot to snapshot, not recounted: after any run of changes they
    # must equal what a group built afresh from the same members counts.
    group = ClassicGroup.create("g", NOW)
    group.num_awaiting_join_response()
    group.candidate_protocols()
    group.join_answer_members_bytes()
    for op, member_id, awaiting, protocols in changes:
        handle = ResponseHandle(None) if awaiting else None
        changed = dataclasses.replace(
            member(member_id, *((name, subscription("t")) for name in protocols)),
            join_handle=handle,
        )
        if op == "add" and member_id not in group.members:
            group = group.add_member(changed)
        elif op == "update" and member_id in group.members:
            group = group.update_member(changed)
        elif op == "remove":
            group = group.remove_member(member_id)
        elif op == "clear_all":
            group = group.update_members(lambda m: dataclasses.replace(m, join_handle=None))
        elif op == "static" and member_id in group.members:
            instance = f"instance-{member_id}"
            if not group.has_static_member(instance):
                group = group.remove_member(member_id).add_member(
                    dataclasses.replace(changed, group_instance_id=instance)
                )
            new = dataclasses.replace(
                changed, member_id=f"{member_id}-again", group_instance_id=instance
            )
            group = group.replace_static_member(instance, member_id, new).remove_member(
                new.member_id
            )
        fresh = ClassicGroup.create("g", NOW)
        for m in group.members.values():
            fresh = fresh.add_member(m)
        assert group.num_awaiting_join_response() == fresh.num_awaiting_join_response()
        assert group.candidate_protocols() == fresh.candidate_protocols()
        assert group.join_answer_members_bytes() == fresh.join_answer_members_bytes()
