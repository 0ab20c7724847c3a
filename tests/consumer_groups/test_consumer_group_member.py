"""Kafka's `ConsumerGroupMemberTest` for what our member holds: a new member, equality,
updates where a field left out is unchanged, and Kafka's member states by value."""

from __future__ import annotations

import uuid

import pytest

from coordinator_server.consumer_groups.member import ConsumerGroupMember, ReconciliationState

T1 = uuid.uuid4().bytes
T2 = uuid.uuid4().bytes


def full_member() -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "member-id",
        member_epoch=10,
        previous_member_epoch=9,
        instance_id="instance-id",
        rack_id="rack-id",
        rebalance_timeout_ms=5000,
        client_id="client-id",
        client_host="hostname",
        subscribed_topic_names=frozenset(["foo", "bar"]),
        subscribed_topic_regex="regex",
        server_assignor="range",
        assigned_partitions={T1: frozenset({1, 2, 3})},
        partitions_pending_revocation={T2: frozenset({4, 5, 6})},
    )


def test_new_member() -> None:
    member = full_member()
    assert member.member_id == "member-id"
    assert member.member_epoch == 10
    assert member.previous_member_epoch == 9
    assert member.instance_id == "instance-id"
    assert member.rack_id == "rack-id"
    assert member.rebalance_timeout_ms == 5000
    assert member.client_id == "client-id"
    assert member.client_host == "hostname"
    assert member.subscribed_topic_names == {"bar", "foo"}
    assert member.subscribed_topic_regex == "regex"
    assert member.server_assignor == "range"
    assert member.assigned_partitions == {T1: {1, 2, 3}}
    assert member.partitions_pending_revocation == {T2: {4, 5, 6}}


def test_defaults_are_kafkas() -> None:
    member = ConsumerGroupMember("m")
    assert (member.member_epoch, member.previous_member_epoch) == (0, -1)
    assert member.state is ReconciliationState.STABLE
    assert member.instance_id is None
    assert member.rack_id is None
    assert member.rebalance_timeout_ms == -1
    assert (member.client_id, member.client_host) == ("", "")
    assert member.subscribed_topic_names == frozenset()
    assert member.subscribed_topic_regex == ""
    assert member.server_assignor is None
    assert member.assigned_partitions == {}
    assert member.partitions_pending_revocation == {}


def test_equals() -> None:
    assert full_member() == full_member()
    # However partitions are given: lists, sets, topics without partitions.
    given_otherwise = full_member().replace(
        assigned_partitions={T1: [3, 2, 1, 1], T2: []},
        partitions_pending_revocation={T2: (6, 5, 4)},
    )
    assert given_otherwise == full_member()


def test_is_immutable() -> None:
    member = full_member()
    with pytest.raises(AttributeError):
        member.member_epoch = 11  # type: ignore[misc]
    with pytest.raises(TypeError):
        member.assigned_partitions[T2] = frozenset({0})  # type: ignore[index]


def test_update_member() -> None:
    member = full_member()
    # Nothing given: nothing changes.
    assert member.maybe_update() == member

    updated = member.maybe_update(
        rack_id="new-rack-id",
        instance_id="new-instance-id",
        server_assignor="new-assignor",
        subscribed_topic_names=["zar"],
        subscribed_topic_regex="new-regex",
        rebalance_timeout_ms=6000,
    )
    assert updated.instance_id == "new-instance-id"
    assert updated.rack_id == "new-rack-id"
    assert updated.subscribed_topic_names == {"zar"}
    assert updated.subscribed_topic_regex == "new-regex"
    assert updated.server_assignor == "new-assignor"
    assert updated.rebalance_timeout_ms == 6000
    # What a heartbeat does not carry stays as it was.
    assert updated.assigned_partitions == member.assigned_partitions
    assert updated.member_epoch == member.member_epoch


def test_with_member_epoch_keeps_the_previous_one() -> None:
    member = full_member().with_member_epoch(12)
    assert (member.member_epoch, member.previous_member_epoch) == (12, 10)


@pytest.mark.parametrize(
    ("value", "state"),
    [
        (0, ReconciliationState.STABLE),
        (1, ReconciliationState.UNREVOKED_PARTITIONS),
        (2, ReconciliationState.UNRELEASED_PARTITIONS),
        (127, ReconciliationState.UNKNOWN),
        (3, ReconciliationState.UNKNOWN),
        (-1, ReconciliationState.UNKNOWN),
    ],
)
def test_member_state_from_value(value: int, state: ReconciliationState) -> None:
    assert ReconciliationState.from_value(value) is state


def test_owns_partition() -> None:
    member = full_member()
    assert member.owns_partition(T1, 1)
    assert member.owns_partition(T2, 4)
    assert not member.owns_partition(T1, 4)
