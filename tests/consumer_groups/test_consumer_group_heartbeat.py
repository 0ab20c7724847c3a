"""ConsumerGroupHeartbeat as Kafka's GroupMetadataManagerTest has it: the request's
validation, a member joining, a second member taking partitions only once the first has
released them, leaving, fenced epochs, unknown members, static members away and back; each
case's records and answers, and every result's records replayed into the manager."""

from __future__ import annotations

import pytest
from consumer_group_replay import replay

from coordinator_protocol.consumer_groups import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    ConsumerGroupConfig,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.member import ReconciliationState
from coordinator_server.consumer_groups.metadata_hash import subscribed_topics_hash
from coordinator_server.records import CoordinatorRecord
from coordinator_server.records.consumer_groups import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator_server.runtime.api import RecordRun
from coordinator_server.timeline import SnapshotRegistry

GROUP = "fooup"
FOO = bytes(range(1, 17))
BAR = bytes(range(17, 33))
TOPICS = ClusterTopicsSnapshot({"foo": ClusterTopic(FOO, 6), "bar": ClusterTopic(BAR, 3)})
NOW_MS = 1_000


class Context:
    """A manager fed its own results' records, as the shard does, with every record kept
    so that a fresh manager can replay the whole log."""

    def __init__(self, config: ConsumerGroupConfig | None = None, max_size: int = 100) -> None:
        self.max_size = max_size
        self.config = config
        self.manager = ConsumerGroupManager(
            SnapshotRegistry(), max_size, config, topics=lambda: TOPICS
        )
        self.log: list[CoordinatorRecord] = []

    def heartbeat(
        self, request: ConsumerGroupHeartbeatRequest
    ) -> tuple[list[CoordinatorRecord], ConsumerGroupHeartbeatResponse]:
        result = self.manager.heartbeat(
            request, client_id="client", client_host="/10.0.0.1", topics=TOPICS, now_ms=NOW_MS
        )
        assert result.response is not None
        assert not isinstance(result.records, RecordRun)
        records = list(result.records)
        for record in records:
            replay(self.manager, record)
        self.log.extend(records)
        response = result.response
        if response.error_code == 0 and response.member_epoch >= 0:
            # The answer agrees with the state its records replay to.
            group = self.manager.group(GROUP)
            assert group is not None
            member = group.member(request.member_id)
            assert member is not None
            assert member.member_epoch == response.member_epoch
            if response.assignment is not None:
                assert {
                    tp.topic_id: frozenset(tp.partitions)
                    for tp in response.assignment.topic_partitions
                } == dict(member.assigned_partitions)
        return records, response

    def assert_log_replays_to_same_state(self) -> None:
        fresh = ConsumerGroupManager(SnapshotRegistry(), self.max_size, self.config)
        for record in self.log:
            replay(fresh, record)
        live, again = self.manager.group(GROUP), fresh.group(GROUP)
        assert live is not None and again is not None
        assert again.members() == live.members()
        assert again.target_assignments() == live.target_assignments()
        assert again.group_epoch() == live.group_epoch()
        assert again.target_assignment_epoch() == live.target_assignment_epoch()
        assert again.state() is live.state()


def join(
    member_id: str, *topics: str, instance_id: str | None = None, assignor: str | None = "range"
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=0,
        instance_id=instance_id,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=list(topics),
        server_assignor=assignor,
        topic_partitions=[],
    )


def beat(
    member_id: str,
    epoch: int,
    owned: dict[bytes, list[int]] | None = None,
    instance_id: str | None = None,
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        topic_partitions=None
        if owned is None
        else [
            ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=topic_id, topic_name="foo" if topic_id == FOO else "bar", partitions=p
            )
            for topic_id, p in owned.items()
        ],
    )


def assignment(response: ConsumerGroupHeartbeatResponse) -> dict[bytes, list[int]] | None:
    if response.assignment is None:
        return None
    return {tp.topic_id: tp.partitions for tp in response.assignment.topic_partitions}


def metadata_record(
    member_id: str, *topics: str, instance_id: str | None = None
) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupMemberMetadataKey(GROUP, member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id, None, "client", "/10.0.0.1", tuple(sorted(topics)), None, 5000, "range"
        ),
    )


def epoch_record(epoch: int, *subscribed: str) -> CoordinatorRecord:
    """The group's epoch record, with the hash of the topics its members subscribe to."""
    return CoordinatorRecord(
        ConsumerGroupMetadataKey(GROUP),
        ConsumerGroupMetadataValue(epoch, subscribed_topics_hash(subscribed, TOPICS)),
    )


def target_record(member_id: str, partitions: dict[bytes, tuple[int, ...]]) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupTargetAssignmentMemberKey(GROUP, member_id),
        ConsumerGroupTargetAssignmentMemberValue(tuple(sorted(partitions.items()))),
    )


def target_epoch_record(epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupTargetAssignmentMetadataKey(GROUP),
        ConsumerGroupTargetAssignmentMetadataValue(epoch, NOW_MS),
    )


def current_record(
    member_id: str,
    epoch: int,
    previous: int,
    state: ReconciliationState,
    assigned: dict[bytes, tuple[int, ...]],
    pending: dict[bytes, tuple[int, ...]] | None = None,
) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupCurrentMemberAssignmentKey(GROUP, member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            epoch,
            previous,
            state.value,
            tuple(sorted(assigned.items())),
            tuple(sorted((pending or {}).items())),
        ),
    )


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (join("").replace(member_id=""), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
        (join("m").replace(group_id=""), ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
        (join("m", instance_id=""), ErrorCode.INVALID_REQUEST, "InstanceId can't be empty."),
        (join("m").replace(rack_id=""), ErrorCode.INVALID_REQUEST, "RackId can't be empty."),
        (
            join("m").replace(rebalance_timeout_ms=-1),
            ErrorCode.INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            join("m").replace(topic_partitions=None),
            ErrorCode.INVALID_REQUEST,
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            join("m").replace(subscribed_topic_names=None),
            ErrorCode.INVALID_REQUEST,
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
            "(re-)joining.",
        ),
        (beat("m", -2), ErrorCode.INVALID_REQUEST, "InstanceId can't be null."),
        (beat("m", -3), ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
        (
            join("m", assignor="sticky"),
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
        ),
    ],
)
def test_invalid_requests_get_kafkas_errors_and_no_record(
    request_: ConsumerGroupHeartbeatRequest, code: ErrorCode, message: str
) -> None:
    records, response = Context().heartbeat(request_)
    assert records == []
    assert (response.error_code, response.error_message) == (code, message)


def test_first_member_joining_an_empty_group_gets_everything_at_epoch_1() -> None:
    ctx = Context()
    records, response = ctx.heartbeat(join("A", "foo", "bar"))
    everything = {FOO: (0, 1, 2, 3, 4, 5), BAR: (0, 1, 2)}
    assert records == [
        metadata_record("A", "foo", "bar"),
        epoch_record(1, "foo", "bar"),
        target_record("A", everything),
        target_epoch_record(1),
        current_record("A", 1, 0, ReconciliationState.STABLE, everything),
    ]
    assert (response.member_id, response.member_epoch, response.heartbeat_interval_ms) == (
        "A",
        1,
        5000,
    )
    assert assignment(response) == {FOO: [0, 1, 2, 3, 4, 5], BAR: [0, 1, 2]}
    assert response.assignment is not None
    assert [tp.topic_name for tp in response.assignment.topic_partitions] == ["foo", "bar"]

    # A steady heartbeat writes nothing and sends no assignment.
    records, response = ctx.heartbeat(beat("A", 1))
    assert records == []
    assert (response.member_epoch, response.assignment) == (1, None)
    ctx.assert_log_replays_to_same_state()


def test_second_member_gets_partitions_only_once_the_first_releases_them() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    records, response = ctx.heartbeat(join("B", "foo"))
    # The range assignor gives B the upper half; A still owns it, so B waits at epoch 2.
    assert records == [
        metadata_record("B", "foo"),
        epoch_record(2, "foo"),
        target_record("A", {FOO: (0, 1, 2)}),
        target_record("B", {FOO: (3, 4, 5)}),
        target_epoch_record(2),
        current_record("B", 2, 0, ReconciliationState.UNRELEASED_PARTITIONS, {}),
    ]
    assert (response.member_epoch, assignment(response)) == (2, {})

    # A is asked to revoke, and stays at its epoch until it has.
    records, response = ctx.heartbeat(beat("A", 1, {FOO: [0, 1, 2, 3, 4, 5]}))
    assert records == [
        current_record(
            "A",
            1,
            1,
            ReconciliationState.UNREVOKED_PARTITIONS,
            {FOO: (0, 1, 2)},
            {FOO: (3, 4, 5)},
        )
    ]
    assert (response.member_epoch, assignment(response)) == (1, {FOO: [0, 1, 2]})

    # B keeps waiting while A holds them (its previous epoch moves up, as Kafka's does).
    records, response = ctx.heartbeat(beat("B", 2, {}))
    assert records == [current_record("B", 2, 2, ReconciliationState.UNRELEASED_PARTITIONS, {})]
    assert (response.member_epoch, response.assignment) == (2, None)

    # A releases them and moves to epoch 2.
    records, response = ctx.heartbeat(beat("A", 1, {FOO: [0, 1, 2]}))
    assert records == [current_record("A", 2, 1, ReconciliationState.STABLE, {FOO: (0, 1, 2)})]
    assert (response.member_epoch, response.assignment) == (2, None)

    # Now B gets them.
    records, response = ctx.heartbeat(beat("B", 2, {}))
    assert records == [current_record("B", 2, 2, ReconciliationState.STABLE, {FOO: (3, 4, 5)})]
    assert (response.member_epoch, assignment(response)) == (2, {FOO: [3, 4, 5]})
    group = ctx.manager.group(GROUP)
    assert group is not None and group.state().value == "Stable"
    ctx.assert_log_replays_to_same_state()


def test_a_full_request_gets_the_assignment_again() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    full = beat("A", 1, {FOO: [0, 1, 2, 3, 4, 5]}).replace(
        rebalance_timeout_ms=5000, subscribed_topic_names=["foo"]
    )
    records, response = ctx.heartbeat(full)
    assert records == []
    assert assignment(response) == {FOO: [0, 1, 2, 3, 4, 5]}


def test_subscription_change_bumps_the_group_epoch_and_the_target() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    records, response = ctx.heartbeat(
        beat("A", 1, {FOO: [0, 1, 2, 3, 4, 5]}).replace(subscribed_topic_names=["foo", "bar"])
    )
    everything = {FOO: (0, 1, 2, 3, 4, 5), BAR: (0, 1, 2)}
    assert records == [
        metadata_record("A", "foo", "bar"),
        epoch_record(2, "foo", "bar"),
        target_record("A", everything),
        target_epoch_record(2),
        current_record("A", 2, 1, ReconciliationState.STABLE, everything),
    ]
    assert (response.member_epoch, assignment(response)) == (
        2,
        {FOO: [0, 1, 2, 3, 4, 5], BAR: [0, 1, 2]},
    )
    ctx.assert_log_replays_to_same_state()


def test_leaving_writes_the_tombstones_and_bumps_the_group_epoch() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    ctx.heartbeat(join("B", "foo"))
    records, response = ctx.heartbeat(beat("B", -1))
    assert records == [
        CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(GROUP, "B"), None),
        CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(GROUP, "B"), None),
        CoordinatorRecord(ConsumerGroupMemberMetadataKey(GROUP, "B"), None),
        epoch_record(3, "foo"),
        # The target without B is computed with the leave: A is given everything.
        target_record("A", {FOO: (0, 1, 2, 3, 4, 5)}),
        target_epoch_record(3),
    ]
    assert (response.member_id, response.member_epoch, response.assignment) == ("B", -1, None)
    # A's next heartbeat moves it to the new target.
    records, response = ctx.heartbeat(beat("A", 1, {FOO: [0, 1, 2, 3, 4, 5]}))
    assert records == [
        current_record("A", 3, 1, ReconciliationState.STABLE, {FOO: (0, 1, 2, 3, 4, 5)}),
    ]
    assert response.member_epoch == 3
    ctx.assert_log_replays_to_same_state()


@pytest.mark.parametrize(
    ("epoch", "owned"),
    [(3, {FOO: [0, 1, 2, 3, 4, 5]}), (0, {}), (1, {FOO: [0, 1, 2, 3, 4, 5]}), (1, None)],
)
def test_epochs_from_the_past_or_the_future_are_fenced(
    epoch: int, owned: dict[bytes, list[int]] | None
) -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    ctx.heartbeat(beat("A", 1).replace(subscribed_topic_names=["foo", "bar"]))  # now at 2
    request = join("A", "foo") if epoch == 0 else beat("A", epoch, owned)
    if epoch == 1 and owned is not None:
        # The previous epoch with a partition never assigned is fenced too.
        request = beat("A", 1, {FOO: [0], BAR: [7]})
    records, response = ctx.heartbeat(request.replace(member_epoch=epoch))
    assert records == []
    assert response.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_the_previous_epoch_with_a_subset_of_the_assignment_is_accepted() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    ctx.heartbeat(beat("A", 1).replace(subscribed_topic_names=["foo", "bar"]))
    _, response = ctx.heartbeat(beat("A", 1, {FOO: [0, 1]}))
    assert (response.error_code, response.member_epoch) == (0, 2)


def test_unknown_member_and_unknown_group() -> None:
    ctx = Context()
    _, response = ctx.heartbeat(beat("A", 1))
    assert (response.error_code, response.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Consumer group {GROUP} not found.",
    )
    ctx.heartbeat(join("A", "foo"))
    for request in (beat("Z", 1), beat("Z", -1)):
        records, response = ctx.heartbeat(request)
        assert records == []
        assert (response.error_code, response.error_message) == (
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"Member Z is not a member of group {GROUP}.",
        )


def test_a_full_group_refuses_new_members_only() -> None:
    ctx = Context(max_size=1)
    ctx.heartbeat(join("A", "foo"))
    records, response = ctx.heartbeat(join("B", "foo"))
    assert (records, response.error_code) == ([], ErrorCode.GROUP_MAX_SIZE_REACHED)
    assert ctx.heartbeat(beat("A", 1))[1].error_code == 0


def test_static_member_away_and_back_keeps_its_partitions() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo", instance_id="a"))
    ctx.heartbeat(join("B", "foo"))
    ctx.heartbeat(beat("A", 1, {FOO: [0, 1, 2, 3, 4, 5]}, instance_id="a"))
    ctx.heartbeat(beat("A", 1, {FOO: [0, 1, 2]}, instance_id="a"))
    ctx.heartbeat(beat("B", 2, {}))

    # Another process with the same instance id cannot take it while A is there.
    records, response = ctx.heartbeat(join("A2", "foo", instance_id="a"))
    assert (records, response.error_code) == ([], ErrorCode.UNRELEASED_INSTANCE_ID)
    # Nor heartbeat under it.
    _, response = ctx.heartbeat(beat("A2", 2, instance_id="a"))
    assert response.error_code == ErrorCode.FENCED_INSTANCE_ID
    _, response = ctx.heartbeat(beat("A2", 2, instance_id="zz"))
    assert (response.error_code, response.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Instance id zz is unknown.",
    )

    # A leaves for a while: epoch -2, partitions kept, group epoch unchanged.
    records, response = ctx.heartbeat(beat("A", -2, instance_id="a"))
    assert records == [current_record("A", -2, 1, ReconciliationState.STABLE, {FOO: (0, 1, 2)})]
    assert (response.member_id, response.member_epoch) == ("A", -2)

    # It comes back as A2 and gets its partitions at the same epoch, nothing moving.
    records, response = ctx.heartbeat(join("A2", "foo", instance_id="a"))
    assert records == [
        CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(GROUP, "A"), None),
        CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(GROUP, "A"), None),
        CoordinatorRecord(ConsumerGroupMemberMetadataKey(GROUP, "A"), None),
        metadata_record("A2", "foo", instance_id="a"),
        target_record("A2", {FOO: (0, 1, 2)}),
        current_record("A2", 0, 0, ReconciliationState.STABLE, {FOO: (0, 1, 2)}),
        current_record("A2", 2, 0, ReconciliationState.STABLE, {FOO: (0, 1, 2)}),
    ]
    assert (response.member_id, response.member_epoch, assignment(response)) == (
        "A2",
        2,
        {FOO: [0, 1, 2]},
    )
    ctx.assert_log_replays_to_same_state()

    # Leaving for good (-1) removes it and bumps the group epoch.
    records, _ = ctx.heartbeat(beat("A2", -1, instance_id="a"))
    assert epoch_record(3, "foo") in records
    ctx.assert_log_replays_to_same_state()


def test_a_steady_heartbeat_is_answered_as_the_full_path_would_answer_it() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    manager = ctx.manager
    steady = beat("A", 1)
    # The first steady heartbeat takes the full path: it checks the cluster's topics once.
    records, response = ctx.heartbeat(steady)
    assert (records, response.member_epoch, response.assignment) == ([], 1, None)
    fast = manager._steady_heartbeat(steady, "client", "/10.0.0.1", TOPICS)
    assert fast is not None and fast.response == response and not fast.records
    # Anything new goes the full way: another client, an epoch of the past, new topics.
    assert manager._steady_heartbeat(steady, "other", "/10.0.0.1", TOPICS) is None
    assert manager._steady_heartbeat(beat("A", 0), "client", "/10.0.0.1", TOPICS) is None
    grown = ClusterTopicsSnapshot({"foo": ClusterTopic(FOO, 8), "bar": ClusterTopic(BAR, 3)}, 1)
    assert manager._steady_heartbeat(steady, "client", "/10.0.0.1", grown) is None
    result = manager.heartbeat(
        steady, client_id="client", client_host="/10.0.0.1", topics=grown, now_ms=NOW_MS
    )
    assert result.records, "the grown topic bumps the group's epoch"


def test_a_static_member_back_with_another_subscription_hashes_only_the_new_one() -> None:
    ctx = Context()
    ctx.heartbeat(join("A", "foo", instance_id="a"))
    ctx.heartbeat(beat("A", -2, instance_id="a"))
    _, response = ctx.heartbeat(join("A2", "bar", instance_id="a"))
    assert response.error_code == 0, response
    group = ctx.manager.group(GROUP)
    assert group is not None
    assert group.metadata_hash() == subscribed_topics_hash(["bar"], TOPICS)
    ctx.assert_log_replays_to_same_state()


def test_a_waiting_member_is_told_to_come_back_sooner() -> None:
    # B waits for partitions A still owns: a twentieth of the interval.
    ctx = Context()
    ctx.heartbeat(join("A", "foo"))
    _, waiting = ctx.heartbeat(join("B", "foo"))
    assert waiting.member_epoch == 2 and waiting.assignment is not None
    assert not waiting.assignment.topic_partitions
    assert waiting.heartbeat_interval_ms == 250
    # A, at rest apart from its revocation, keeps the configured interval.
    _, revoking = ctx.heartbeat(beat("A", 1, {FOO: [0, 1, 2, 3, 4, 5]}))
    assert revoking.heartbeat_interval_ms == 5000

    # With targets batched a second apart, a member joining 300 ms after the last
    # computation is told to come back just after the next one.
    batched = ConsumerGroupManager(
        SnapshotRegistry(),
        100,
        ConsumerGroupConfig(assignment_interval_ms=1000),
        topics=lambda: TOPICS,
    )
    for member_id, now_ms in (("A", NOW_MS), ("B", NOW_MS + 300)):
        result = batched.heartbeat(
            join(member_id, "foo"),
            client_id="client",
            client_host="/10.0.0.1",
            topics=TOPICS,
            now_ms=now_ms,
        )
        for record in result.records:
            replay(batched, record)
    assert result.response is not None
    assert result.response.heartbeat_interval_ms == 1000 - 300 + 20
