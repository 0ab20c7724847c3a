"""Subscriptions by regular expression (KIP-848's `subscribed_topic_regex`) through
`ConsumerGroupManager.heartbeat` and replay, as Kafka's GroupMetadataManagerTest has them: a
pattern resolved to the matching topics' partitions, topics created and deleted picked up
once the cluster's snapshot changes and the refresh interval allows, the pattern refused
with INVALID_REGULAR_EXPRESSION and no record, names and patterns mixed, unused patterns
removed, the log replaying to the same state, RE2's full match, a pathological pattern
resolved in linear time, and resolutions that leave out the topics the principal of the
heartbeat may not describe (Kafka's `filterTopicDescribeAuthorizedTopics`)."""

from __future__ import annotations

import time
from collections.abc import Collection

import pytest
from consumer_group_replay import replay

from coordinator_protocol.consumer_groups import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.errors import ErrorCode
from coordinator_server.consumer_groups.group import ResolvedRegularExpression
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    ConsumerGroupConfig,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.metadata_hash import subscribed_topics_hash
from coordinator_server.consumer_groups.regex import (
    TopicRegexMatcher,
    update_regular_expressions,
)
from coordinator_server.records import CoordinatorRecord
from coordinator_server.records.consumer_groups import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)
from coordinator_server.runtime.api import RecordRun
from coordinator_server.timeline import SnapshotRegistry

GROUP = "regex-group"
FOO_1 = bytes(range(1, 17))
FOO_2 = bytes(range(17, 33))
BAR = bytes(range(33, 49))
OFFSETS = bytes(range(49, 65))
NAMES = {FOO_1: "foo-1", FOO_2: "foo-2", BAR: "bar"}
START_MS = 100_000
MIN_INTERVAL_MS = ConsumerGroupConfig().regex_refresh_min_interval_ms


def snapshot(version: int, **topics: tuple[bytes, int]) -> ClusterTopicsSnapshot:
    """The cluster at `version`: each topic by name (dashes for underscores) with its id and
    partition count, and Kafka's offsets topic, internal."""
    described = {
        name.replace("_", "-"): ClusterTopic(topic_id, count)
        for name, (topic_id, count) in topics.items()
    }
    described["__consumer_offsets"] = ClusterTopic(OFFSETS, 5, internal=True)
    return ClusterTopicsSnapshot(described, version)


V1 = snapshot(1, foo_1=(FOO_1, 3), foo_2=(FOO_2, 2), bar=(BAR, 4))


class Context:
    """A manager fed its own results' records, as the shard does, every record kept so that
    a fresh manager can replay the whole log; the time and the cluster's topics are set by
    the test."""

    def __init__(self, config: ConsumerGroupConfig | None = None) -> None:
        self.config = config
        self.topics = V1
        self.now_ms = START_MS
        self.manager = ConsumerGroupManager(
            SnapshotRegistry(), 100, config, topics=lambda: self.topics
        )
        self.log: list[CoordinatorRecord] = []
        # The topics the heartbeats' principal may not describe, and every set of names the
        # manager asked about.
        self.denied: set[str] = set()
        self.asked: list[set[str]] = []

    def denied_topics(self, names: Collection[str]) -> set[str]:
        self.asked.append(set(names))
        return self.denied & set(names)

    def heartbeat(
        self, request: ConsumerGroupHeartbeatRequest
    ) -> tuple[list[CoordinatorRecord], ConsumerGroupHeartbeatResponse]:
        result = self.manager.heartbeat(
            request,
            client_id="client",
            client_host="/10.0.0.1",
            topics=self.topics,
            now_ms=self.now_ms,
            denied_topics=self.denied_topics,
        )
        assert result.response is not None
        assert not isinstance(result.records, RecordRun)
        records = list(result.records)
        for record in records:
            replay(self.manager, record)
        self.log.extend(records)
        return records, result.response

    def ok(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        _, response = self.heartbeat(request)
        assert response.error_code == ErrorCode.NONE, response.error_message
        return response

    def resolved(self, regex: str) -> ResolvedRegularExpression | None:
        group = self.manager.group(GROUP)
        assert group is not None
        return group.resolved_regular_expression(regex)

    def assigned(self, member_id: str) -> dict[bytes, list[int]]:
        group = self.manager.group(GROUP)
        assert group is not None
        member = group.member(member_id)
        assert member is not None
        return {topic: sorted(parts) for topic, parts in member.assigned_partitions.items()}

    def settle(self, member_id: str) -> dict[bytes, list[int]]:
        """Heartbeats of the member, owning what it was given, until it stops changing."""
        for _ in range(5):
            group = self.manager.group(GROUP)
            assert group is not None
            member = group.member(member_id)
            assert member is not None
            before = self.assigned(member_id)
            self.ok(beat(member_id, member.member_epoch, before))
            if self.assigned(member_id) == before:
                return before
        raise AssertionError(f"member {member_id} did not settle")


def join(
    member_id: str, regex: str | None = None, topics: list[str] | None = None
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor="range",
        topic_partitions=[],
    )


def beat(
    member_id: str,
    epoch: int,
    owned: dict[bytes, list[int]] | None = None,
    regex: str | None = None,
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=epoch,
        subscribed_topic_regex=regex,
        topic_partitions=None
        if owned is None
        else [
            ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=topic, topic_name=NAMES[topic], partitions=parts
            )
            for topic, parts in owned.items()
        ],
    )


def leave(member_id: str) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=member_id, member_epoch=-1)


def regex_records(records: list[CoordinatorRecord]) -> list[tuple[str, object]]:
    return [
        (record.key.regular_expression, record.value)
        for record in records
        if isinstance(record.key, ConsumerGroupRegularExpressionKey)
    ]


def key_kinds(records: list[CoordinatorRecord]) -> list[str]:
    return [type(record.key).__name__.removeprefix("ConsumerGroup") for record in records]


def group_epoch_record(records: list[CoordinatorRecord]) -> ConsumerGroupMetadataValue:
    (value,) = [
        record.value for record in records if isinstance(record.key, ConsumerGroupMetadataKey)
    ]
    assert isinstance(value, ConsumerGroupMetadataValue)
    return value


def test_a_regex_member_is_given_the_partitions_of_the_topics_it_matches() -> None:
    ctx = Context()
    records, response = ctx.heartbeat(join("A", regex="foo-.*"))
    assert response.error_code == ErrorCode.NONE
    assert response.member_epoch == 1
    # The pattern's resolution replays after the member's metadata, before the group's
    # epoch, whose hash covers the matched topics.
    assert key_kinds(records) == [
        "MemberMetadataKey",
        "RegularExpressionKey",
        "MetadataKey",
        "TargetAssignmentMemberKey",
        "TargetAssignmentMetadataKey",
        "CurrentMemberAssignmentKey",
    ]
    assert regex_records(records) == [
        ("foo-.*", ConsumerGroupRegularExpressionValue(("foo-1", "foo-2"), 1, START_MS))
    ]
    assert group_epoch_record(records) == ConsumerGroupMetadataValue(
        1, subscribed_topics_hash({"foo-1", "foo-2"}, V1)
    )
    assert response.assignment is not None
    assert {tp.topic_name: tp.partitions for tp in response.assignment.topic_partitions} == {
        "foo-1": [0, 1, 2],
        "foo-2": [0, 1],
    }
    assert ctx.resolved("foo-.*") == ResolvedRegularExpression(
        frozenset({"foo-1", "foo-2"}), 1, START_MS
    )


def test_kafkas_internal_topics_are_never_matched() -> None:
    ctx = Context()
    records, _ = ctx.heartbeat(join("A", regex=".*"))
    assert regex_records(records) == [
        (".*", ConsumerGroupRegularExpressionValue(("bar", "foo-1", "foo-2"), 1, START_MS))
    ]
    assert OFFSETS not in ctx.assigned("A")


@pytest.mark.parametrize(
    ("pattern", "description"),
    [
        # Kafka's own test: testConsumerHeartbeatRegexValidation.
        ("[", "missing closing ]"),
        ("(foo", "missing closing )"),
        ("foo)", "unexpected )"),
        ("*", "missing argument to repetition operator"),
        ("a**", "invalid nested repetition operator"),
        ("a{2,1}", "invalid repeat count"),
        ("[z-a]", "invalid character class range"),
        # Python's re takes these; RE2's syntax, Kafka's, does not.
        ("(?<=a)b", "invalid or unsupported Perl syntax"),
        (r"(a)\1", "invalid escape sequence"),
        ("foo\\", "trailing backslash at end of expression"),
    ],
)
def test_an_invalid_pattern_is_refused_with_kafkas_message_and_no_record(
    pattern: str, description: str
) -> None:
    ctx = Context()
    records, response = ctx.heartbeat(join("A", regex=pattern))
    assert records == []
    assert response.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION == 128
    assert response.error_message == (
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {description}."
    )
    assert ctx.manager.group(GROUP) is None


def test_a_member_changing_to_an_invalid_pattern_is_refused_and_keeps_its_subscription() -> None:
    ctx = Context()
    ctx.ok(join("A", regex="foo-.*"))
    group = ctx.manager.group(GROUP)
    assert group is not None
    before = group.member("A")
    records, response = ctx.heartbeat(beat("A", 1, ctx.assigned("A"), regex="foo-("))
    assert (records, response.error_code) == ([], ErrorCode.INVALID_REGULAR_EXPRESSION)
    assert group.member("A") == before
    assert ctx.resolved("foo-.*") is not None


def test_a_topic_created_later_is_picked_up_once_the_snapshot_changes() -> None:
    ctx = Context()
    ctx.topics = snapshot(1, foo_1=(FOO_1, 3), bar=(BAR, 4))
    ctx.ok(join("A", regex="foo-.*"))
    assert ctx.settle("A") == {FOO_1: [0, 1, 2]}

    ctx.topics = snapshot(2, foo_1=(FOO_1, 3), foo_2=(FOO_2, 2), bar=(BAR, 4))
    # Within the least interval between two refreshes, the resolution stands.
    ctx.now_ms = START_MS + MIN_INTERVAL_MS
    records, _ = ctx.heartbeat(beat("A", 1, ctx.assigned("A")))
    assert regex_records(records) == []

    ctx.now_ms = START_MS + MIN_INTERVAL_MS + 1
    records, response = ctx.heartbeat(beat("A", 1, ctx.assigned("A")))
    assert regex_records(records) == [
        ("foo-.*", ConsumerGroupRegularExpressionValue(("foo-1", "foo-2"), 2, ctx.now_ms))
    ]
    assert group_epoch_record(records) == ConsumerGroupMetadataValue(
        2, subscribed_topics_hash({"foo-1", "foo-2"}, ctx.topics)
    )
    assert response.member_epoch == 2
    assert ctx.settle("A") == {FOO_1: [0, 1, 2], FOO_2: [0, 1]}


def test_a_deleted_topics_partitions_are_revoked() -> None:
    ctx = Context()
    ctx.ok(join("A", regex="foo-.*"))
    assert ctx.settle("A") == {FOO_1: [0, 1, 2], FOO_2: [0, 1]}

    ctx.topics = snapshot(2, foo_1=(FOO_1, 3), bar=(BAR, 4))
    ctx.now_ms = START_MS + MIN_INTERVAL_MS + 1
    records, _ = ctx.heartbeat(beat("A", 1, ctx.assigned("A")))
    assert regex_records(records) == [
        ("foo-.*", ConsumerGroupRegularExpressionValue(("foo-1",), 2, ctx.now_ms))
    ]
    assert ctx.settle("A") == {FOO_1: [0, 1, 2]}
    group = ctx.manager.group(GROUP)
    assert group is not None
    assert group.target_assignment("A") == {FOO_1: frozenset({0, 1, 2})}


def test_an_unchanged_cluster_is_matched_again_after_the_refresh_interval() -> None:
    config = ConsumerGroupConfig(regex_refresh_interval_ms=60_000)
    ctx = Context(config)
    ctx.ok(join("A", regex="foo-.*"))
    ctx.now_ms = START_MS + 60_000
    records, _ = ctx.heartbeat(beat("A", 1, ctx.assigned("A")))
    assert regex_records(records) == []
    ctx.now_ms = START_MS + 60_001
    records, response = ctx.heartbeat(beat("A", 1, ctx.assigned("A")))
    # The same topics at a new time: recorded, and the group does not move.
    assert regex_records(records) == [
        ("foo-.*", ConsumerGroupRegularExpressionValue(("foo-1", "foo-2"), 1, ctx.now_ms))
    ]
    assert key_kinds(records) == ["RegularExpressionKey"]
    assert response.member_epoch == 1


def test_members_by_name_and_by_pattern_share_the_group() -> None:
    ctx = Context()
    ctx.ok(join("A", topics=["bar"]))
    records, response = ctx.heartbeat(join("B", regex="foo-.*"))
    assert response.error_code == ErrorCode.NONE
    assert group_epoch_record(records) == ConsumerGroupMetadataValue(
        2, subscribed_topics_hash({"bar", "foo-1", "foo-2"}, V1)
    )
    # A member may subscribe by both: it is given the union.
    ctx.ok(join("C", regex="foo-1", topics=["bar"]))
    for member_id in ("A", "B", "C"):
        ctx.settle(member_id)
    group = ctx.manager.group(GROUP)
    assert group is not None
    targets = group.target_assignments()
    assert set(targets["A"]) == {BAR}
    assert set(targets["B"]) <= {FOO_1, FOO_2}
    assert set(targets["C"]) <= {FOO_1, BAR}
    given = [(topic, p) for target in targets.values() for topic, ps in target.items() for p in ps]
    assert sorted(given) == sorted(
        [(FOO_1, p) for p in range(3)]
        + [(FOO_2, p) for p in range(2)]
        + [(BAR, p) for p in range(4)]
    )
    assert group.subscribed_topic_names() == {"bar": 2, "foo-1": 2, "foo-2": 1}


def test_a_pattern_the_group_has_resolved_moves_the_group_without_a_new_resolution() -> None:
    ctx = Context()
    ctx.ok(join("A", regex="foo-.*"))
    records, response = ctx.heartbeat(join("B", regex="foo-.*"))
    assert regex_records(records) == []
    assert response.member_epoch == 2


def test_a_pattern_no_member_uses_any_longer_is_removed() -> None:
    ctx = Context()
    ctx.ok(join("A", regex="foo-.*"))
    ctx.ok(join("B", regex="foo-.*"))
    ctx.ok(join("C", regex="bar"))

    # A moves to a new pattern that B still uses: nothing removed, the new one resolved.
    records, _ = ctx.heartbeat(beat("A", 1, ctx.assigned("A"), regex="ba.*"))
    assert regex_records(records) == [
        ("ba.*", ConsumerGroupRegularExpressionValue(("bar",), 1, START_MS))
    ]
    # B leaves: the last member of `foo-.*`; its tombstone follows B's, before the epoch.
    records, _ = ctx.heartbeat(leave("B"))
    assert key_kinds(records)[:5] == [
        "CurrentMemberAssignmentKey",
        "TargetAssignmentMemberKey",
        "MemberMetadataKey",
        "RegularExpressionKey",
        "MetadataKey",
    ]
    assert regex_records(records) == [("foo-.*", None)]
    assert ctx.resolved("foo-.*") is None
    # C drops its pattern for names: `bar` is A's still, so it stays.
    group = ctx.manager.group(GROUP)
    assert group is not None
    member = group.member("C")
    assert member is not None
    records, _ = ctx.heartbeat(
        ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id="C",
            member_epoch=member.member_epoch,
            subscribed_topic_names=["foo-2"],
            subscribed_topic_regex="",
        )
    )
    assert regex_records(records) == [("bar", None)]
    assert ctx.resolved("ba.*") is not None
    assert group.subscribed_topic_names() == {"bar": 1, "foo-2": 1}


def test_the_groups_log_replays_to_the_same_state() -> None:
    ctx = Context()
    ctx.ok(join("A", regex="foo-.*"))
    ctx.ok(join("B", topics=["bar"]))
    ctx.ok(join("C", regex="foo-.*|bar"))
    for member_id in ("A", "B", "C"):
        ctx.settle(member_id)
    ctx.topics = snapshot(2, foo_1=(FOO_1, 3), bar=(BAR, 4))
    ctx.now_ms = START_MS + MIN_INTERVAL_MS + 1
    for member_id in ("A", "B", "C"):
        ctx.settle(member_id)
    ctx.ok(leave("B"))

    fresh = ConsumerGroupManager(SnapshotRegistry(), 100)
    for record in ctx.log:
        replay(fresh, record)
    live, again = ctx.manager.group(GROUP), fresh.group(GROUP)
    assert live is not None and again is not None
    assert again.members() == live.members()
    assert again.target_assignments() == live.target_assignments()
    assert (again.group_epoch(), again.target_assignment_epoch()) == (
        live.group_epoch(),
        live.target_assignment_epoch(),
    )
    assert again.metadata_hash() == live.metadata_hash()
    assert again.subscribed_topic_names() == live.subscribed_topic_names()
    for regex in ("foo-.*", "foo-.*|bar"):
        assert again.resolved_regular_expression(regex) == live.resolved_regular_expression(regex)
    assert live.resolved_regular_expression("foo-.*|bar") == ResolvedRegularExpression(
        frozenset({"foo-1", "bar"}), 2, ctx.now_ms
    )
    # The hash the group last moved for is the hash of what it subscribes to now.
    assert live.metadata_hash() == subscribed_topics_hash(live.subscribed_topic_names(), ctx.topics)


def test_a_resolution_leaves_out_the_topics_the_heartbeats_principal_may_not_describe() -> None:
    ctx = Context()
    ctx.denied = {"foo-2"}
    records, response = ctx.heartbeat(join("A", regex="foo-.*|bar"))
    assert response.error_code == ErrorCode.NONE
    # Every topic matched is asked about once, whatever the number of patterns.
    assert ctx.asked == [{"foo-1", "foo-2", "bar"}]
    assert regex_records(records) == [
        ("foo-.*|bar", ConsumerGroupRegularExpressionValue(("bar", "foo-1"), 1, START_MS))
    ]
    assert group_epoch_record(records) == ConsumerGroupMetadataValue(
        1, subscribed_topics_hash({"foo-1", "bar"}, V1)
    )
    assert ctx.settle("A") == {FOO_1: [0, 1, 2], BAR: [0, 1, 2, 3]}

    # Allowed later: the topic joins at the next refresh, made with the permissions of the
    # heartbeat that makes it.
    ctx.denied = set()
    ctx.topics = snapshot(2, foo_1=(FOO_1, 3), foo_2=(FOO_2, 2), bar=(BAR, 4))
    ctx.now_ms = START_MS + MIN_INTERVAL_MS + 1
    records, response = ctx.heartbeat(beat("A", 1, ctx.assigned("A")))
    assert regex_records(records) == [
        (
            "foo-.*|bar",
            ConsumerGroupRegularExpressionValue(("bar", "foo-1", "foo-2"), 2, ctx.now_ms),
        )
    ]
    assert response.member_epoch == 2
    assert ctx.settle("A") == {FOO_1: [0, 1, 2], FOO_2: [0, 1], BAR: [0, 1, 2, 3]}


def test_nothing_matched_asks_nothing_and_a_classic_join_resolves_nothing() -> None:
    ctx = Context()
    ctx.ok(join("A", regex="nothing-.*"))
    assert ctx.asked == []
    # A refresh is due (a new snapshot, past the interval), but a classic member's
    # JoinGroup passes no permissions: no resolution is made for it.
    ctx.topics = snapshot(2, foo_1=(FOO_1, 3), nothing_1=(FOO_2, 2))
    ctx.now_ms = START_MS + MIN_INTERVAL_MS + 1
    group = ctx.manager.group(GROUP)
    member = None if group is None else group.member("A")
    assert group is not None and member is not None
    matcher = TopicRegexMatcher(10, 1 << 20)
    config = ConsumerGroupConfig()
    unchanged = update_regular_expressions(
        group, member, member, ctx.topics, ctx.now_ms, config, matcher, None
    )
    assert (unchanged.records, unchanged.bump_group_epoch) == ((), False)
    refreshed = update_regular_expressions(
        group, member, member, ctx.topics, ctx.now_ms, config, matcher, ctx.denied_topics
    )
    assert regex_records(list(refreshed.records)) == [
        ("nothing-.*", ConsumerGroupRegularExpressionValue(("nothing-1",), 2, ctx.now_ms))
    ]


def test_a_pathological_pattern_is_resolved_within_the_heartbeat_in_linear_time() -> None:
    # `(a+)+b` backtracks exponentially in Python's re: ~0.7 s for one name of 24 a's.
    names = [f"{'a' * 30}{i}" for i in range(10_000)]
    ctx = Context()
    ctx.topics = ClusterTopicsSnapshot(
        {name: ClusterTopic(i.to_bytes(16, "big"), 1) for i, name in enumerate(names)}, 1
    )
    started = time.perf_counter()
    records, response = ctx.heartbeat(join("A", regex="(a+)+b"))
    assert time.perf_counter() - started < 2.0
    assert response.error_code == ErrorCode.NONE
    assert regex_records(records) == [
        ("(a+)+b", ConsumerGroupRegularExpressionValue((), 1, START_MS))
    ]
