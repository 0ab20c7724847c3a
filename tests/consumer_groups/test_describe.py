"""ConsumerGroupDescribe, DescribeGroups and ListGroups about consumer groups, as Kafka's
GroupMetadataManagerTest has them: groups built by heartbeats whose records are replayed and
committed as the shard does, each field of the described group and members, reads as of
the committed offset, topics the cluster no longer has, the filters, the size limit and the
errors."""

from __future__ import annotations

import pytest

from coordinator_protocol.consumer_groups import (
    MEMBER_TYPE_CONSUMER,
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupDescribeResponseTopicPartitions,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from coordinator_protocol.envelope import encode_body
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import DescribeGroupsResponseGroup, ListGroupsResponseGroup
from coordinator_server.consumer_groups.describe import (
    DESCRIBED_CONSUMER_GROUP_MIN_BYTES,
    describe_consumer_groups,
    described_as_classic_group,
    list_consumer_groups,
    listed_consumer_group_bytes,
)
from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopics,
    ClusterTopicsSnapshot,
)
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.groups.admin_views import list_filter
from coordinator_server.records import CoordinatorRecord
from coordinator_server.records.consumer_groups import (
    ConsumerGroupMetadataKey,
    ConsumerGroupRecordKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator_server.runtime.api import RecordRun
from coordinator_server.timeline import SnapshotRegistry

GROUP = "orders-app"
FOO = bytes(range(1, 17))
BAR = bytes(range(17, 33))
TOPICS = ClusterTopicsSnapshot({"foo": ClusterTopic(FOO, 4), "bar": ClusterTopic(BAR, 2)})
NAMES = {FOO: "foo", BAR: "bar"}


class Log:
    """A manager fed its heartbeats' records at the offsets a log gives them, the log
    committing only when told, as the shard and the runtime do."""

    def __init__(self) -> None:
        self.registry = SnapshotRegistry()
        self.manager = ConsumerGroupManager(self.registry, 100)
        self.end = 0

    def heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, client_id: str = "client-a"
    ) -> ConsumerGroupHeartbeatResponse:
        result = self.manager.heartbeat(
            request, client_id=client_id, client_host="/10.0.0.1", topics=TOPICS, now_ms=1_000
        )
        assert result.response is not None
        assert result.response.error_code == ErrorCode.NONE, result.response.error_message
        assert not isinstance(result.records, RecordRun)
        self.append(list(result.records))
        return result.response

    def append(self, records: list[CoordinatorRecord]) -> None:
        self.registry.set_epoch(self.end)
        for record in records:
            key = record.key
            assert isinstance(key, ConsumerGroupRecordKey)
            self.manager.replay(key, record.value)
        self.end += len(records)

    def commit(self) -> int:
        self.registry.commit(self.end)
        return self.end

    def describe(
        self,
        *group_ids: str,
        offset: int | None = None,
        topics: ClusterTopics = TOPICS,
        classic: frozenset[str] = frozenset(),
    ) -> list[ConsumerGroupDescribeResponseGroup]:
        return describe_consumer_groups(
            self.manager,
            list(group_ids),
            self.end if offset is None else offset,
            topics,
            lambda group_id: group_id in classic,
        )

    def list(
        self,
        states: list[str] | None = None,
        types: list[str] | None = None,
        offset: int | None = None,
        max_bytes: int | None = None,
    ) -> tuple[list[ListGroupsResponseGroup], int] | None:
        return list_consumer_groups(
            self.manager,
            list_filter(states or []),
            list_filter(types or []),
            self.end if offset is None else offset,
            max_bytes,
        )


def join(
    member_id: str,
    *topics: str,
    group_id: str = GROUP,
    instance_id: str | None = None,
    rack_id: str | None = None,
    regex: str | None = None,
    assignor: str | None = "range",
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=0,
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=list(topics),
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=[],
    )


def beat(
    member_id: str, epoch: int, owned: dict[bytes, list[int]], group_id: str = GROUP
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        topic_partitions=[
            ConsumerGroupHeartbeatRequestTopicPartitions(
                topic_id=topic_id, topic_name=NAMES[topic_id], partitions=partitions
            )
            for topic_id, partitions in owned.items()
        ],
    )


def owned(response: ConsumerGroupHeartbeatResponse) -> dict[bytes, list[int]]:
    assert response.assignment is not None
    return {tp.topic_id: tp.partitions for tp in response.assignment.topic_partitions}


def assignment(*topics: tuple[bytes, list[int]]) -> ConsumerGroupDescribeResponseAssignment:
    return ConsumerGroupDescribeResponseAssignment(
        topic_partitions=[
            ConsumerGroupDescribeResponseTopicPartitions(
                topic_id=topic_id, topic_name=NAMES[topic_id], partitions=partitions
            )
            for topic_id, partitions in topics
        ]
    )


def one(described: list[ConsumerGroupDescribeResponseGroup]) -> ConsumerGroupDescribeResponseGroup:
    (group,) = described
    assert group.error_code == ErrorCode.NONE, group.error_message
    return group


def test_a_stable_group_is_described_with_each_of_its_members_fields() -> None:
    log = Log()
    a = log.heartbeat(
        join("A", "foo", "bar", instance_id="a-1", rack_id="rack-1"), client_id="client-a"
    )
    assert a.member_epoch == 1
    group = one(log.describe(GROUP))
    assert group.group_id == GROUP
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 1, 1)
    assert group.assignor_name == "range"
    (member,) = group.members
    assert member.member_id == "A"
    assert (member.instance_id, member.rack_id) == ("a-1", "rack-1")
    assert member.member_epoch == 1
    assert (member.client_id, member.client_host) == ("client-a", "/10.0.0.1")
    assert member.subscribed_topic_names == ["bar", "foo"]
    assert member.subscribed_topic_regex is None
    # Topics by name, partitions ascending; current and target are the same once stable.
    everything = assignment((BAR, [0, 1]), (FOO, [0, 1, 2, 3]))
    assert member.assignment == everything
    assert member.target_assignment == everything
    assert member.member_type == MEMBER_TYPE_CONSUMER


def test_a_reconciling_group_shows_each_members_current_and_target_assignment() -> None:
    log = Log()
    a = log.heartbeat(join("A", "foo"))
    b = log.heartbeat(join("B", "foo", regex="none-.*"), client_id="client-b")
    # B is at the new epoch but waits for A to give up the partitions it is given.
    assert b.member_epoch == 2
    group = one(log.describe(GROUP))
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Reconciling", 2, 2)
    described_a, described_b = group.members
    target = log.manager.group(GROUP)
    assert target is not None
    target_a, target_b = target.target_assignment("A"), target.target_assignment("B")
    assert sorted(target_a[FOO] | target_b[FOO]) == [0, 1, 2, 3]
    assert described_a.member_epoch == 1
    assert described_a.assignment == assignment((FOO, [0, 1, 2, 3]))
    assert described_a.target_assignment == assignment((FOO, sorted(target_a[FOO])))
    assert described_b.member_epoch == 2
    assert described_b.client_id == "client-b"
    assert described_b.subscribed_topic_regex == "none-.*"
    assert described_b.assignment == assignment()
    assert described_b.target_assignment == assignment((FOO, sorted(target_b[FOO])))

    # A revokes what B is given, B gets it: the group is stable again.
    a = log.heartbeat(beat("A", 1, owned(a)))
    a = log.heartbeat(beat("A", a.member_epoch, owned(a)))
    b = log.heartbeat(beat("B", 2, {}))
    group = one(log.describe(GROUP))
    assert group.group_state == "Stable"
    for member in group.members:
        assert member.member_epoch == 2
        assert member.assignment == member.target_assignment
    assert [m.assignment for m in group.members] == [
        assignment((FOO, sorted(target_a[FOO]))),
        assignment((FOO, sorted(target_b[FOO]))),
    ]


def test_a_read_sees_the_group_as_of_the_committed_offset() -> None:
    log = Log()
    log.heartbeat(join("A", "foo"))
    committed = log.commit()
    log.heartbeat(join("B", "foo"))
    # B's join is not committed: the group is read as it was before it.
    group = one(log.describe(GROUP, offset=committed))
    assert [m.member_id for m in group.members] == ["A"]
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 1, 1)
    # A's target as of then: everything, not its part of the target B's join computed.
    assert group.members[0].target_assignment == assignment((FOO, [0, 1, 2, 3]))
    assert [m.member_id for m in one(log.describe(GROUP, offset=log.commit())).members] == [
        "A",
        "B",
    ]


def test_a_group_created_by_an_uncommitted_write_does_not_exist_yet() -> None:
    log = Log()
    committed = log.commit()
    log.heartbeat(join("A", "foo"))
    (group,) = log.describe(GROUP, offset=committed)
    assert group.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert group.error_message == f"Group {GROUP} not found."
    assert log.list(offset=committed) == ([], 0)


def test_a_topic_the_cluster_no_longer_has_is_left_out_of_the_assignments() -> None:
    log = Log()
    log.heartbeat(join("A", "foo", "bar"))
    without_bar = ClusterTopicsSnapshot({"foo": ClusterTopic(FOO, 4)})
    (member,) = one(log.describe(GROUP, topics=without_bar)).members
    assert member.assignment == assignment((FOO, [0, 1, 2, 3]))
    assert member.target_assignment == assignment((FOO, [0, 1, 2, 3]))
    # The subscription is the member's own: it still names the topic.
    assert member.subscribed_topic_names == ["bar", "foo"]


def test_unknown_and_classic_group_ids_are_answered_group_id_not_found() -> None:
    log = Log()
    log.heartbeat(join("A", "foo"))
    unknown, classic, known = log.describe(
        "nope", "classic-app", GROUP, classic=frozenset({"classic-app"})
    )
    assert unknown == ConsumerGroupDescribeResponseGroup(
        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
        error_message="Group nope not found.",
        group_id="nope",
    )
    assert classic == ConsumerGroupDescribeResponseGroup(
        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
        error_message="Group classic-app is not a consumer group.",
        group_id="classic-app",
    )
    assert known.error_code == ErrorCode.NONE and known.group_id == GROUP


def test_the_assignor_is_the_one_most_members_name_else_the_default() -> None:
    log = Log()
    log.heartbeat(join("A", "foo", assignor=None))
    # No member names one: the configuration's first.
    assert one(log.describe(GROUP)).assignor_name == "uniform"
    log.heartbeat(join("B", "foo", assignor="range"))
    assert one(log.describe(GROUP)).assignor_name == "range"
    log.heartbeat(join("C", "foo", assignor="uniform"))
    log.heartbeat(join("D", "foo", assignor="uniform"))
    assert one(log.describe(GROUP)).assignor_name == "uniform"


def test_a_group_deleted_by_an_uncommitted_write_is_still_described_and_listed() -> None:
    log = Log()
    a = log.heartbeat(join("A", "foo"))
    log.heartbeat(beat("A", -1, owned(a)))
    log.append(
        [
            CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(GROUP), None),
            CoordinatorRecord(ConsumerGroupMetadataKey(GROUP), None),
        ]
    )
    before_deletion = log.end - 2
    log.registry.commit(before_deletion)
    assert log.manager.group(GROUP) is None
    group = one(log.describe(GROUP, offset=before_deletion))
    assert (group.group_state, group.members) == ("Empty", [])
    listed = log.list(offset=before_deletion)
    assert listed is not None
    assert [(g.group_id, g.group_state) for g in listed[0]] == [(GROUP, "Empty")]
    (gone,) = log.describe(GROUP)
    assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_groups_answers_a_consumer_group_as_one_it_does_not_have() -> None:
    assert described_as_classic_group(GROUP) == DescribeGroupsResponseGroup(
        error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=GROUP, group_state="Dead"
    )


# ListGroups.


def two_groups(log: Log) -> int:
    """`stable-app` Stable and `busy-app` Reconciling, committed; the offset."""
    log.heartbeat(join("A", "foo", group_id="stable-app"))
    log.heartbeat(join("B", "foo", group_id="busy-app"))
    log.heartbeat(join("C", "foo", group_id="busy-app"))
    return log.commit()


def listed_states(listed: tuple[list[ListGroupsResponseGroup], int] | None) -> dict[str, str]:
    assert listed is not None
    return {group.group_id: group.group_state for group in listed[0]}


def test_groups_are_listed_as_consumer_groups_with_their_state() -> None:
    log = Log()
    two_groups(log)
    listed = log.list()
    assert listed is not None
    groups, size = listed
    assert sorted(groups, key=lambda g: g.group_id) == [
        ListGroupsResponseGroup(
            group_id="busy-app",
            protocol_type="consumer",
            group_state="Reconciling",
            group_type="consumer",
        ),
        ListGroupsResponseGroup(
            group_id="stable-app", protocol_type="consumer", group_state="Stable",
            group_type="consumer",
        ),
    ]  # fmt: skip
    # Without a limit the size is not counted.
    assert size == 0


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], {"stable-app": "Stable", "busy-app": "Reconciling"}),
        (["Stable"], {"stable-app": "Stable"}),
        (["STABLE", " reconciling "], {"stable-app": "Stable", "busy-app": "Reconciling"}),
        (["assigning", "empty"], {}),
        (["PreparingRebalance"], {}),
    ],
)
def test_the_states_filter_is_kafkas_case_insensitive_one(
    states: list[str], expected: dict[str, str]
) -> None:
    log = Log()
    two_groups(log)
    assert listed_states(log.list(states=states)) == expected


@pytest.mark.parametrize(
    ("types", "listed"),
    [
        ([], True),
        (["consumer"], True),
        (["Consumer", "classic"], True),
        (["classic"], False),
        (["share"], False),
        (["nonsense"], False),
    ],
)
def test_the_types_filter_lists_consumer_groups_only_when_it_names_them(
    types: list[str], listed: bool
) -> None:
    log = Log()
    two_groups(log)
    assert bool(listed_states(log.list(types=types))) is listed


def test_the_state_listed_and_filtered_is_the_committed_one() -> None:
    log = Log()
    committed = two_groups(log)
    # stable-app starts reconciling in a write not committed yet.
    log.heartbeat(join("D", "foo", group_id="stable-app"))
    assert listed_states(log.list(offset=committed))["stable-app"] == "Stable"
    assert "stable-app" not in listed_states(log.list(["reconciling"], offset=committed))
    assert listed_states(log.list(offset=log.end))["stable-app"] == "Reconciling"


def test_the_listing_counts_its_bytes_and_is_refused_past_the_limit() -> None:
    log = Log()
    two_groups(log)
    everything = log.list()
    assert everything is not None
    exact = sum(len(encode_body(group)) for group in everything[0])
    assert exact == sum(
        listed_consumer_group_bytes(g.group_id, g.group_state) for g in everything[0]
    )
    assert log.list(max_bytes=exact) == (everything[0], exact)
    assert log.list(max_bytes=exact - 1) is None
    # The groups filtered out take nothing.
    stable = log.list(["stable"], max_bytes=listed_consumer_group_bytes("stable-app", "Stable"))
    assert listed_states(stable) == {"stable-app": "Stable"}
    assert log.list(types=["classic"], max_bytes=0) == ([], 0)


def test_every_described_group_takes_at_least_the_least_a_group_costs() -> None:
    log = Log()
    log.heartbeat(join("A", "foo", "bar", instance_id="a-1"))
    answers = log.describe(GROUP, "x", "", "nope", classic=frozenset({"x"}))
    sizes = [len(encode_body(group)) for group in answers]
    assert min(sizes) >= DESCRIBED_CONSUMER_GROUP_MIN_BYTES
