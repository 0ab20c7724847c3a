"""Kafka's `CurrentAssignmentBuilderTest`, case by case: same inputs, same expected members.

Kafka resolves the member's subscription (names and regular expression) against its metadata
image inside the builder; ours is given the resolved topic ids, so each case passes the ids
Kafka's image and resolved expressions would give.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator_protocol.errors import FencedMemberEpochError
from coordinator_server.consumer_groups.current_assignment import CurrentAssignmentBuilder
from coordinator_server.consumer_groups.member import ConsumerGroupMember, ReconciliationState
from coordinator_server.consumer_groups.topics import TopicId, TopicPartitions

STABLE = ReconciliationState.STABLE
UNREVOKED = ReconciliationState.UNREVOKED_PARTITIONS
UNRELEASED = ReconciliationState.UNRELEASED_PARTITIONS

T1: TopicId = uuid.uuid4().bytes
T2: TopicId = uuid.uuid4().bytes
BOTH = frozenset({T1, T2})


def parts(*topics: tuple[TopicId, tuple[int, ...]]) -> dict[TopicId, frozenset[int]]:
    return {topic_id: frozenset(indexes) for topic_id, indexes in topics}


def member(
    state: ReconciliationState,
    epoch: int,
    previous: int,
    assigned: dict[TopicId, frozenset[int]],
    pending: dict[TopicId, frozenset[int]] | None = None,
    topics: tuple[str, ...] = ("topic1", "topic2"),
    regex: str = "",
) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "member",
        state=state,
        member_epoch=epoch,
        previous_member_epoch=previous,
        subscribed_topic_names=frozenset(topics),
        subscribed_topic_regex=regex,
        assigned_partitions=assigned,
        partitions_pending_revocation=pending or {},
    )


def build(
    current: ConsumerGroupMember,
    target_epoch: int,
    target: TopicPartitions,
    partition_epoch: int | dict[tuple[TopicId, int], int],
    owned: dict[TopicId, tuple[int, ...]] | None = None,
    subscribed: frozenset[TopicId] = BOTH,
    has_subscription_changed: bool = False,
) -> ConsumerGroupMember:
    if isinstance(partition_epoch, int):
        epoch = partition_epoch

        def current_partition_epoch(topic_id: TopicId, partition: int) -> int:
            return epoch
    else:
        epochs = partition_epoch

        def current_partition_epoch(topic_id: TopicId, partition: int) -> int:
            return epochs.get((topic_id, partition), -1)

    return CurrentAssignmentBuilder(
        member=current,
        target_assignment_epoch=target_epoch,
        target_assignment=target,
        current_partition_epoch=current_partition_epoch,
        subscribed_topic_ids=subscribed,
        owned_topic_partitions=owned,
        has_subscription_changed=has_subscription_changed,
    ).build()


def test_stable_to_stable() -> None:
    current = member(STABLE, 10, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))
    updated = build(current, 11, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))), 10)
    assert updated == member(STABLE, 11, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))


def test_stable_to_stable_with_new_partitions() -> None:
    current = member(STABLE, 10, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))
    updated = build(current, 11, parts((T1, (1, 2, 3, 4)), (T2, (4, 5, 6, 7))), -1)
    assert updated == member(STABLE, 11, 10, parts((T1, (1, 2, 3, 4)), (T2, (4, 5, 6, 7))))


def test_stable_to_unrevoked_partitions() -> None:
    current = member(STABLE, 10, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))
    updated = build(current, 11, parts((T1, (2, 3, 4)), (T2, (5, 6, 7))), -1)
    assert updated == member(
        UNREVOKED,
        10,
        10,
        parts((T1, (2, 3)), (T2, (5, 6))),
        pending=parts((T1, (1,)), (T2, (4,))),
    )


def test_stable_to_unreleased_partitions() -> None:
    current = member(STABLE, 10, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))
    updated = build(current, 11, parts((T1, (1, 2, 3, 4)), (T2, (4, 5, 6, 7))), 10)
    assert updated == member(UNRELEASED, 11, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))


def test_stable_to_unreleased_partitions_with_owned_partitions_not_having_revoked() -> None:
    current = member(STABLE, 10, 10, parts((T1, (1, 2, 3)), (T2, (4, 5, 6))))
    owner_epochs = {(T2, partition): 10 for partition in range(10)}
    updated = build(current, 11, parts((T1, (1, 2, 3)), (T2, (4, 5, 7))), owner_epochs, owned={})
    assert updated == member(UNRELEASED, 11, 10, parts((T1, (1, 2, 3)), (T2, (4, 5))))


def test_unrevoked_partitions_to_stable() -> None:
    current = member(
        UNREVOKED,
        10,
        10,
        parts((T1, (2, 3)), (T2, (5, 6))),
        pending=parts((T1, (1,)), (T2, (4,))),
    )
    updated = build(
        current,
        11,
        parts((T1, (2, 3)), (T2, (5, 6))),
        -1,
        owned={T1: (2, 3), T2: (5, 6)},
    )
    assert updated == member(STABLE, 11, 10, parts((T1, (2, 3)), (T2, (5, 6))))


@pytest.mark.parametrize(
    "owned",
    [None, {T1: (1, 2, 3), T2: (5, 6)}, {T1: (2, 3), T2: (4, 5, 6)}],
    ids=["owned-unknown", "still-owns-t1-1", "still-owns-t2-4"],
)
def test_remains_in_unrevoked_partitions(owned: dict[TopicId, tuple[int, ...]] | None) -> None:
    current = member(
        UNREVOKED,
        10,
        10,
        parts((T1, (2, 3)), (T2, (5, 6))),
        pending=parts((T1, (1,)), (T2, (4,))),
    )
    assert build(current, 12, parts((T1, (3,)), (T2, (6,))), -1, owned=owned) == current


def test_unrevoked_partitions_to_unrevoked_partitions() -> None:
    current = member(
        UNREVOKED,
        10,
        10,
        parts((T1, (2, 3)), (T2, (5, 6))),
        pending=parts((T1, (1,)), (T2, (4,))),
    )
    updated = build(current, 12, parts((T1, (3,)), (T2, (6,))), -1, owned={T1: (2, 3), T2: (5, 6)})
    assert updated == member(
        UNREVOKED, 10, 10, parts((T1, (3,)), (T2, (6,))), pending=parts((T1, (2,)), (T2, (5,)))
    )


def test_unrevoked_partitions_to_unreleased_partitions() -> None:
    current = member(UNREVOKED, 11, 10, parts((T1, (2, 3)), (T2, (5, 6))))
    updated = build(
        current,
        11,
        parts((T1, (2, 3, 4)), (T2, (5, 6, 7))),
        10,
        owned={T1: (2, 3), T2: (5, 6)},
    )
    assert updated == member(UNRELEASED, 11, 11, parts((T1, (2, 3)), (T2, (5, 6))))


def test_unrevoked_partitions_to_stable_with_returned_partitions_pending_revocation() -> None:
    # Partition 4 of topic 1 is being revoked from the member but is back in its target.
    current = member(
        UNREVOKED, 10, 10, parts((T1, (2, 3)), (T2, (5, 6))), pending=parts((T1, (4,)))
    )
    owner_epochs = {(T1, 2): 10, (T1, 3): 10, (T1, 4): 10, (T2, 5): 10, (T2, 6): 10}
    updated = build(
        current,
        12,
        parts((T1, (2, 3, 4)), (T2, (5, 6, 7))),
        owner_epochs,
        owned={T1: (2, 3), T2: (5, 6)},
    )
    assert updated == member(STABLE, 12, 10, parts((T1, (2, 3, 4)), (T2, (5, 6, 7))))


def test_unreleased_partitions_to_stable() -> None:
    current = member(UNRELEASED, 11, 11, parts((T1, (2, 3)), (T2, (5, 6))))
    updated = build(current, 12, parts((T1, (2, 3)), (T2, (5, 6))), 10)
    assert updated == member(STABLE, 12, 11, parts((T1, (2, 3)), (T2, (5, 6))))


def test_unreleased_partitions_to_stable_with_new_partitions() -> None:
    current = member(UNRELEASED, 11, 11, parts((T1, (2, 3)), (T2, (5, 6))))
    updated = build(current, 11, parts((T1, (2, 3, 4)), (T2, (5, 6, 7))), -1)
    assert updated == member(STABLE, 11, 11, parts((T1, (2, 3, 4)), (T2, (5, 6, 7))))


def test_unreleased_partitions_to_unreleased_partitions() -> None:
    current = member(UNRELEASED, 11, 11, parts((T1, (2, 3)), (T2, (5, 6))))
    assert build(current, 11, parts((T1, (2, 3, 4)), (T2, (5, 6, 7))), 10) == current


def test_unreleased_partitions_to_unrevoked_partitions() -> None:
    current = member(UNRELEASED, 11, 11, parts((T1, (2, 3)), (T2, (5, 6))))
    updated = build(current, 12, parts((T1, (3,)), (T2, (6,))), 10)
    assert updated == member(
        UNREVOKED, 11, 11, parts((T1, (3,)), (T2, (6,))), pending=parts((T1, (2,)), (T2, (5,)))
    )


def test_unknown_state() -> None:
    current = member(
        ReconciliationState.UNKNOWN,
        11,
        11,
        parts((T1, (3,)), (T2, (6,))),
        pending=parts((T1, (2,)), (T2, (5,))),
    )
    target = parts((T1, (3,)), (T2, (6,)))
    # The member is first fenced, to make the client drop all it holds...
    with pytest.raises(FencedMemberEpochError):
        build(current, 12, target, 10)
    # ...then it comes back holding nothing.
    updated = build(current, 12, target, 11, owned={})
    assert updated == member(STABLE, 12, 11, parts((T1, (3,)), (T2, (6,))))


@pytest.mark.parametrize(
    ("member_epoch", "target_epoch", "expected_epoch", "has_subscription_changed"),
    [(10, 11, 11, False), (10, 11, 11, True), (10, 10, 10, True)],
)
def test_stable_to_stable_with_assignment_topics_no_longer_in_subscription(
    member_epoch: int, target_epoch: int, expected_epoch: int, has_subscription_changed: bool
) -> None:
    # Topic 1 is assigned but no longer subscribed to.
    current = member(
        STABLE,
        member_epoch,
        member_epoch - 1,
        parts((T1, (1, 2, 3)), (T2, (4, 5, 6))),
        topics=("topic2",),
    )
    updated = build(
        current,
        target_epoch,
        parts((T1, (1, 2, 3)), (T2, (4, 5, 6))),
        -1,
        owned={T2: (4, 5, 6)},
        subscribed=frozenset({T2}),
        has_subscription_changed=has_subscription_changed,
    )
    # The previous epoch moves in every case, the epoch only with a new target.
    assert updated == member(
        STABLE, expected_epoch, member_epoch, parts((T2, (4, 5, 6))), topics=("topic2",)
    )


@pytest.mark.parametrize(
    ("member_epoch", "target_epoch", "expected_epoch", "has_subscription_changed"),
    [(10, 11, 10, False), (10, 11, 10, True), (10, 10, 10, True)],
)
def test_stable_to_unrevoked_partitions_with_assignment_topics_no_longer_in_subscription(
    member_epoch: int, target_epoch: int, expected_epoch: int, has_subscription_changed: bool
) -> None:
    current = member(
        STABLE,
        member_epoch,
        member_epoch - 1,
        parts((T1, (1, 2, 3)), (T2, (4, 5, 6))),
        topics=("topic2",),
    )
    updated = build(
        current,
        target_epoch,
        parts((T1, (1, 2, 3)), (T2, (4, 5, 6))),
        -1,
        owned={T1: (1, 2, 3), T2: (4, 5, 6)},
        subscribed=frozenset({T2}),
        has_subscription_changed=has_subscription_changed,
    )
    assert updated == member(
        UNREVOKED,
        expected_epoch,
        member_epoch,
        parts((T2, (4, 5, 6))),
        pending=parts((T1, (1, 2, 3))),
        topics=("topic2",),
    )


def test_remains_in_unrevoked_partitions_with_assignment_topics_no_longer_in_subscription() -> None:
    current = member(
        UNREVOKED,
        10,
        10,
        parts((T1, (2, 3)), (T2, (5, 6))),
        pending=parts((T1, (1,)), (T2, (4,))),
        topics=("topic2",),
    )
    updated = build(
        current,
        12,
        parts((T1, (1, 3, 4)), (T2, (6, 7))),
        -1,
        owned={T1: (1, 2, 3), T2: (4, 5, 6)},
        subscribed=frozenset({T2}),
        has_subscription_changed=True,
    )
    assert updated == member(
        UNREVOKED,
        10,
        10,
        parts((T2, (5, 6))),
        pending=parts((T1, (1, 2, 3)), (T2, (4,))),
        topics=("topic2",),
    )


FOO: TopicId = uuid.uuid4().bytes
BAR: TopicId = uuid.uuid4().bytes


@pytest.mark.parametrize(
    ("topics", "subscribed", "expected"),
    [
        # Kafka's testSubscribedTopicNameAndUnresolvedRegularExpression: an expression not
        # resolved yet matches nothing, so only "foo" (by name) is subscribed.
        (("foo",), frozenset({FOO}), "foo-kept"),
        # testUnresolvedRegularExpression: no names, the expression unresolved.
        ((), frozenset(), "all-revoked"),
        # testSubscribedTopicNameAndResolvedRegularExpression: "bar*" resolved to "bar".
        (("foo",), frozenset({FOO, BAR}), "unchanged"),
    ],
    ids=["name-and-unresolved-regex", "unresolved-regex", "name-and-resolved-regex"],
)
def test_regular_expression_subscriptions(
    topics: tuple[str, ...], subscribed: frozenset[TopicId], expected: str
) -> None:
    current = member(
        STABLE, 10, 10, parts((FOO, (1, 2, 3)), (BAR, (4, 5, 6))), topics=topics, regex="bar*"
    )
    updated = build(
        current,
        10,
        parts((FOO, (1, 2, 3)), (BAR, (4, 5, 6))),
        -1,
        owned={FOO: (1, 2, 3), BAR: (4, 5, 6)},
        subscribed=subscribed,
        has_subscription_changed=True,
    )
    if expected == "unchanged":
        assert updated == current
        return
    kept = parts((FOO, (1, 2, 3))) if expected == "foo-kept" else {}
    revoked = (
        parts((BAR, (4, 5, 6)))
        if expected == "foo-kept"
        else parts((FOO, (1, 2, 3)), (BAR, (4, 5, 6)))
    )
    assert updated == member(UNREVOKED, 10, 10, kept, pending=revoked, topics=topics, regex="bar*")


def test_deleted_topic_is_revoked_though_still_in_the_target() -> None:
    # A topic deleted since the target was computed resolves to no id: its partitions are
    # revoked at the next heartbeat, before any new target.
    current = member(STABLE, 10, 10, parts((T1, (1, 2)), (T2, (3,))))
    updated = build(
        current,
        10,
        parts((T1, (1, 2)), (T2, (3,))),
        -1,
        owned={T1: (1, 2), T2: (3,)},
        subscribed=frozenset({T1}),
        has_subscription_changed=True,
    )
    assert updated == member(UNREVOKED, 10, 10, parts((T1, (1, 2))), pending=parts((T2, (3,))))
    # Once the client reports it no longer holds them, the member is stable again.
    settled = build(updated, 11, parts((T1, (1, 2))), -1, owned={T1: (1, 2)})
    assert settled == member(STABLE, 11, 10, parts((T1, (1, 2))))
