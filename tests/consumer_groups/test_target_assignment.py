"""Kafka's `TargetAssignmentBuilderTest`, case by case: same group, same assignor answer, same
records and target expected. As Kafka's mock, a fake assignor answers what the case
prepares and keeps the group spec it was handed, which each case checks like Kafka's
`verify`. Then the uniform assignor run through the builder, and an assignor failure.

Kafka resolves subscriptions against its metadata image inside the builder; ours is given
them resolved, by `resolve_subscription` as Kafka's `TopicIds` would, so "zar" (a topic
the metadata does not know) drops out the same way. Kafka compares the member records
unordered (its members are a hash map); ours come in the group's member order, checked as is.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from coordinator_server.consumer_groups.assignors import ASSIGNORS
from coordinator_server.consumer_groups.assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignorError,
    Partitions,
    SubscribedTopicDescriber,
    SubscribedTopicMetadata,
    SubscriptionType,
)
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.target_assignment import (
    TargetAssignmentBuilder,
    TargetAssignmentResult,
    member_subscription,
    record_partitions,
    resolve_subscription,
)
from coordinator_server.consumer_groups.topics import TopicId
from coordinator_server.records import (
    CoordinatorRecord,
    new_consumer_group_target_assignment_member_record,
    new_consumer_group_target_assignment_metadata_record,
)
from coordinator_server.records.consumer_groups import (
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
)

GROUP = "my-group"
EPOCH = 20

Assignment = dict[TopicId, frozenset[int]]


def assignment(*topics: tuple[TopicId, Iterable[int]]) -> Assignment:
    """Kafka's `mkAssignment(mkTopicAssignment(...), ...)`."""
    return {topic_id: frozenset(indexes) for topic_id, indexes in topics}


def target_record(member_id: str, partitions: Partitions) -> CoordinatorRecord:
    return new_consumer_group_target_assignment_member_record(
        GROUP, member_id, ConsumerGroupTargetAssignmentMemberValue(record_partitions(partitions))
    )


def epoch_record(epoch: int = EPOCH, timestamp_ms: int = 0) -> CoordinatorRecord:
    return new_consumer_group_target_assignment_metadata_record(
        GROUP, ConsumerGroupTargetAssignmentMetadataValue(epoch, timestamp_ms)
    )


@dataclass
class FakeAssignor:
    """Answers the prepared assignment and keeps what it was asked (Kafka's mock)."""

    answer: dict[str, MemberAssignment] = field(default_factory=dict)
    calls: list[tuple[GroupSpec, SubscribedTopicDescriber]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "fake"

    def assign(self, group_spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        self.calls.append((group_spec, topics))
        return GroupAssignment(dict(self.answer))


class Context:
    """Kafka's `TargetAssignmentBuilderTestContext`."""

    def __init__(self) -> None:
        self.assignor = FakeAssignor()
        self.members: dict[str, ConsumerGroupMember] = {}
        self.updated_members: dict[str, ConsumerGroupMember | None] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.static_members: dict[str, str] = {}
        self.topic_ids: dict[str, TopicId] = {}
        self.partition_counts: dict[TopicId, int] = {}
        self.resolved_regular_expressions: dict[str, frozenset[str]] = {}

    def add_topic(self, name: str, partitions: int) -> TopicId:
        topic_id = uuid.uuid4().bytes
        self.topic_ids[name] = topic_id
        self.partition_counts[topic_id] = partitions
        return topic_id

    def add_member(
        self,
        member_id: str,
        topics: list[str],
        target: Assignment,
        instance_id: str | None = None,
        regex: str = "",
    ) -> None:
        self.members[member_id] = ConsumerGroupMember(
            member_id,
            subscribed_topic_names=frozenset(topics),
            subscribed_topic_regex=regex,
            instance_id=instance_id,
        )
        if instance_id is not None:
            self.static_members[instance_id] = member_id
        self.target_assignment[member_id] = target

    def update_member(
        self,
        member_id: str,
        topics: list[str],
        instance_id: str | None = None,
        rack_id: str | None = None,
    ) -> None:
        existing = self.members.get(member_id) or ConsumerGroupMember(member_id)
        self.updated_members[member_id] = existing.maybe_update(
            subscribed_topic_names=topics, instance_id=instance_id, rack_id=rack_id
        )

    def remove_member(self, member_id: str) -> None:
        self.updated_members[member_id] = None

    def prepare(self, member_id: str, partitions: Assignment) -> None:
        self.assignor.answer[member_id] = MemberAssignment(partitions)

    def expected_specs(self) -> dict[str, MemberSubscription]:
        """What Kafka's context computes for its `verify`, independently of the builder."""
        specs = {
            member_id: self._spec(member, self.target_assignment.get(member_id, {}))
            for member_id, member in self.members.items()
        }
        for member_id, updated in self.updated_members.items():
            if updated is None:
                specs.pop(member_id, None)
                continue
            target = self.target_assignment.get(member_id, {})
            if updated.instance_id is not None:
                previous = self.static_members.get(updated.instance_id)
                if previous is not None and previous != member_id:
                    target = self.target_assignment.get(previous, {})
            specs[member_id] = self._spec(updated, target)
        return specs

    def _spec(self, member: ConsumerGroupMember, target: Assignment) -> MemberSubscription:
        return member_subscription(member, target, self._resolve(member))

    def _resolve(self, member: ConsumerGroupMember) -> frozenset[TopicId]:
        return resolve_subscription(member, self.topic_ids, self.resolved_regular_expressions)

    def build(self) -> TargetAssignmentResult:
        every_member = {**self.members, **{k: v for k, v in self.updated_members.items() if v}}
        topics = SubscribedTopicMetadata(self.partition_counts)
        result = TargetAssignmentBuilder(
            group_id=GROUP,
            group_epoch=EPOCH,
            assignor=self.assignor,
            members=self.members,
            target_assignment=self.target_assignment,
            subscribed_topic_ids={
                member_id: self._resolve(member) for member_id, member in every_member.items()
            },
            topics=topics,
            updated_members=self.updated_members,
            static_members=self.static_members,
            subscription_type=SubscriptionType.HOMOGENEOUS,
        ).build()
        # Kafka's verify(assignor, times(1)).assign(groupSpec, subscribedTopicMetadata).
        assert len(self.assignor.calls) == 1
        group_spec, described = self.assignor.calls[0]
        assert dict(group_spec.members) == self.expected_specs()
        assert group_spec.subscription_type is SubscriptionType.HOMOGENEOUS
        assert described is topics
        return result


def targets(result: TargetAssignmentResult) -> dict[str, Mapping[TopicId, object]]:
    return {member_id: a.partitions for member_id, a in result.target_assignment.items()}


def test_create_member_subscription_spec() -> None:
    foo, bar = uuid.uuid4().bytes, uuid.uuid4().bytes
    member = ConsumerGroupMember(
        "member-id",
        subscribed_topic_names=frozenset({"foo", "bar", "zar"}),
        rack_id="rackId",
        instance_id="instanceId",
    )
    target = assignment((foo, (1, 2, 3)), (bar, (1, 2, 3)))

    spec = member_subscription(
        member, target, resolve_subscription(member, {"foo": foo, "bar": bar}, {})
    )

    assert spec == MemberSubscription(
        subscribed_topic_ids=frozenset({foo, bar}),
        assignment=MemberAssignment(target),
        rack_id="rackId",
        instance_id="instanceId",
    )


def test_empty() -> None:
    result = Context().build()

    assert result.records == [epoch_record()]
    assert targets(result) == {}


def test_assignment_has_not_changed() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member(
        "member-1", ["foo", "bar", "zar"], assignment((foo, (1, 2, 3)), (bar, (1, 2, 3)))
    )
    context.add_member(
        "member-2", ["foo", "bar", "zar"], assignment((foo, (4, 5, 6)), (bar, (4, 5, 6)))
    )
    context.prepare("member-1", assignment((foo, (1, 2, 3)), (bar, (1, 2, 3))))
    context.prepare("member-2", assignment((foo, (4, 5, 6)), (bar, (4, 5, 6))))

    result = context.build()

    assert result.records == [epoch_record()]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2, 3)), (bar, (1, 2, 3))),
        "member-2": assignment((foo, (4, 5, 6)), (bar, (4, 5, 6))),
    }


def test_assignment_swapped() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member(
        "member-1", ["foo", "bar", "zar"], assignment((foo, (1, 2, 3)), (bar, (1, 2, 3)))
    )
    context.add_member(
        "member-2", ["foo", "bar", "zar"], assignment((foo, (4, 5, 6)), (bar, (4, 5, 6)))
    )
    context.prepare("member-2", assignment((foo, (1, 2, 3)), (bar, (1, 2, 3))))
    context.prepare("member-1", assignment((foo, (4, 5, 6)), (bar, (4, 5, 6))))

    result = context.build()

    assert result.records == [
        target_record("member-1", assignment((foo, (4, 5, 6)), (bar, (4, 5, 6)))),
        target_record("member-2", assignment((foo, (1, 2, 3)), (bar, (1, 2, 3)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-2": assignment((foo, (1, 2, 3)), (bar, (1, 2, 3))),
        "member-1": assignment((foo, (4, 5, 6)), (bar, (4, 5, 6))),
    }


def test_new_member() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member(
        "member-1", ["foo", "bar", "zar"], assignment((foo, (1, 2, 3)), (bar, (1, 2, 3)))
    )
    context.add_member(
        "member-2", ["foo", "bar", "zar"], assignment((foo, (4, 5, 6)), (bar, (4, 5, 6)))
    )
    context.update_member("member-3", ["foo", "bar", "zar"])
    context.prepare("member-1", assignment((foo, (1, 2)), (bar, (1, 2))))
    context.prepare("member-2", assignment((foo, (3, 4)), (bar, (3, 4))))
    context.prepare("member-3", assignment((foo, (5, 6)), (bar, (5, 6))))

    result = context.build()

    assert result.records == [
        target_record("member-1", assignment((foo, (1, 2)), (bar, (1, 2)))),
        target_record("member-2", assignment((foo, (3, 4)), (bar, (3, 4)))),
        target_record("member-3", assignment((foo, (5, 6)), (bar, (5, 6)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2)), (bar, (1, 2))),
        "member-2": assignment((foo, (3, 4)), (bar, (3, 4))),
        "member-3": assignment((foo, (5, 6)), (bar, (5, 6))),
    }


def test_update_member() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member(
        "member-1", ["foo", "bar", "zar"], assignment((foo, (1, 2, 3)), (bar, (1, 2)))
    )
    context.add_member(
        "member-2", ["foo", "bar", "zar"], assignment((foo, (4, 5, 6)), (bar, (3, 4)))
    )
    context.add_member("member-3", ["bar", "zar"], assignment((bar, (5, 6))))
    context.update_member("member-3", ["foo", "bar", "zar"], "instance-id-3", "rack-0")
    context.prepare("member-1", assignment((foo, (1, 2)), (bar, (1, 2))))
    context.prepare("member-2", assignment((foo, (3, 4)), (bar, (3, 4))))
    context.prepare("member-3", assignment((foo, (5, 6)), (bar, (5, 6))))

    result = context.build()

    assert result.records == [
        target_record("member-1", assignment((foo, (1, 2)), (bar, (1, 2)))),
        target_record("member-2", assignment((foo, (3, 4)), (bar, (3, 4)))),
        target_record("member-3", assignment((foo, (5, 6)), (bar, (5, 6)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2)), (bar, (1, 2))),
        "member-2": assignment((foo, (3, 4)), (bar, (3, 4))),
        "member-3": assignment((foo, (5, 6)), (bar, (5, 6))),
    }
    # The updated member reaches the assignor with its new rack and instance id.
    spec = context.assignor.calls[0][0].member_subscription("member-3")
    assert (spec.rack_id, spec.instance_id) == ("rack-0", "instance-id-3")


def test_partial_assignment_update() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member("member-1", ["foo", "bar", "zar"], assignment((foo, (1, 2)), (bar, (1, 2))))
    context.add_member("member-2", ["foo", "bar", "zar"], assignment((foo, (3, 4)), (bar, (3, 4))))
    context.add_member("member-3", ["bar", "zar"], assignment((foo, (5, 6)), (bar, (5, 6))))
    context.prepare("member-1", assignment((foo, (1, 2)), (bar, (1, 2))))
    context.prepare("member-2", assignment((foo, (3, 4, 5)), (bar, (3, 4, 5))))
    context.prepare("member-3", assignment((foo, (6,)), (bar, (6,))))

    result = context.build()

    # Member 1 has no record: its target did not change.
    assert result.records == [
        target_record("member-2", assignment((foo, (3, 4, 5)), (bar, (3, 4, 5)))),
        target_record("member-3", assignment((foo, (6,)), (bar, (6,)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2)), (bar, (1, 2))),
        "member-2": assignment((foo, (3, 4, 5)), (bar, (3, 4, 5))),
        "member-3": assignment((foo, (6,)), (bar, (6,))),
    }


def test_delete_member() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member("member-1", ["foo", "bar", "zar"], assignment((foo, (1, 2)), (bar, (1, 2))))
    context.add_member("member-2", ["foo", "bar", "zar"], assignment((foo, (3, 4)), (bar, (3, 4))))
    context.add_member("member-3", ["foo", "bar", "zar"], assignment((foo, (5, 6)), (bar, (5, 6))))
    context.remove_member("member-3")
    context.prepare("member-1", assignment((foo, (1, 2, 3)), (bar, (1, 2, 3))))
    context.prepare("member-2", assignment((foo, (4, 5, 6)), (bar, (4, 5, 6))))

    result = context.build()

    # No tombstone for member 3: its removal writes it, as in Kafka.
    assert result.records == [
        target_record("member-1", assignment((foo, (1, 2, 3)), (bar, (1, 2, 3)))),
        target_record("member-2", assignment((foo, (4, 5, 6)), (bar, (4, 5, 6)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2, 3)), (bar, (1, 2, 3))),
        "member-2": assignment((foo, (4, 5, 6)), (bar, (4, 5, 6))),
    }


def test_replace_static_member() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    topics = ["foo", "bar", "zar"]
    context.add_member(
        "member-1", topics, assignment((foo, (1, 2)), (bar, (1, 2))), "instance-member-1"
    )
    context.add_member(
        "member-2", topics, assignment((foo, (3, 4)), (bar, (3, 4))), "instance-member-2"
    )
    context.add_member(
        "member-3", topics, assignment((foo, (5, 6)), (bar, (5, 6))), "instance-member-3"
    )
    # Static member 3 leaves; another joins with the same instance id.
    context.remove_member("member-3")
    context.update_member("member-3-a", topics, "instance-member-3")
    context.prepare("member-1", assignment((foo, (1, 2)), (bar, (1, 2))))
    context.prepare("member-2", assignment((foo, (3, 4)), (bar, (3, 4))))
    context.prepare("member-3-a", assignment((foo, (5, 6)), (bar, (5, 6))))

    result = context.build()

    assert result.records == [
        target_record("member-3-a", assignment((foo, (5, 6)), (bar, (5, 6)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2)), (bar, (1, 2))),
        "member-2": assignment((foo, (3, 4)), (bar, (3, 4))),
        "member-3-a": assignment((foo, (5, 6)), (bar, (5, 6))),
    }
    # The newcomer reaches the assignor holding the departed member's target.
    spec = context.assignor.calls[0][0].member_subscription("member-3-a")
    assert spec.assignment.partitions == assignment((foo, (5, 6)), (bar, (5, 6)))


def test_regular_expressions() -> None:
    context = Context()
    foo = context.add_topic("foo", 6)
    bar = context.add_topic("bar", 6)
    context.add_member("member-1", ["bar", "zar"], {}, regex="foo*")
    context.add_member("member-2", ["foo", "bar", "zar"], {})
    context.add_member("member-3", [], {}, regex="foo*")
    context.resolved_regular_expressions["foo*"] = frozenset({"foo"})
    context.prepare("member-1", assignment((foo, (1, 2)), (bar, (1, 2, 3))))
    context.prepare("member-2", assignment((foo, (3, 4)), (bar, (4, 5, 6))))
    context.prepare("member-3", assignment((foo, (5, 6))))

    result = context.build()

    assert result.records == [
        target_record("member-1", assignment((foo, (1, 2)), (bar, (1, 2, 3)))),
        target_record("member-2", assignment((foo, (3, 4)), (bar, (4, 5, 6)))),
        target_record("member-3", assignment((foo, (5, 6)))),
        epoch_record(),
    ]
    assert targets(result) == {
        "member-1": assignment((foo, (1, 2)), (bar, (1, 2, 3))),
        "member-2": assignment((foo, (3, 4)), (bar, (4, 5, 6))),
        "member-3": assignment((foo, (5, 6))),
    }
    # Names and the expression's topics together; the expression's alone.
    spec = context.assignor.calls[0][0]
    assert spec.member_subscription("member-1").subscribed_topic_ids == {foo, bar}
    assert spec.member_subscription("member-3").subscribed_topic_ids == {foo}


# Beyond Kafka's cases.


def uniform_builder(
    members: dict[str, ConsumerGroupMember],
    target: dict[str, Assignment],
    topic_ids: dict[str, TopicId],
    partition_counts: dict[TopicId, int],
    epoch: int,
) -> TargetAssignmentBuilder:
    return TargetAssignmentBuilder(
        group_id=GROUP,
        group_epoch=epoch,
        assignor=ASSIGNORS["uniform"],
        members=members,
        target_assignment=target,
        subscribed_topic_ids={
            member_id: resolve_subscription(member, topic_ids, {})
            for member_id, member in members.items()
        },
        topics=SubscribedTopicMetadata(partition_counts),
        assignment_timestamp_ms=1234,
    )


def test_uniform_assignor_on_a_small_group_then_unchanged() -> None:
    foo, bar = uuid.uuid4().bytes, uuid.uuid4().bytes
    topic_ids = {"foo": foo, "bar": bar}
    counts = {foo: 3, bar: 3}
    members = {
        "a": ConsumerGroupMember("a", subscribed_topic_names=frozenset({"foo", "bar"})),
        "b": ConsumerGroupMember("b", subscribed_topic_names=frozenset({"foo", "bar"})),
    }

    first = uniform_builder(members, {}, topic_ids, counts, epoch=1).build()

    new_targets = {m: dict(a.partitions) for m, a in first.target_assignment.items()}
    assert set(new_targets) == {"a", "b"}
    every = [(t, p) for a in new_targets.values() for t, ps in a.items() for p in ps]
    assert sorted(every) == sorted([(foo, p) for p in range(3)] + [(bar, p) for p in range(3)])
    assert sorted(sum(map(len, a.values())) for a in new_targets.values()) == [3, 3]
    assert first.records == [
        target_record("a", new_targets["a"]),
        target_record("b", new_targets["b"]),
        epoch_record(1, 1234),
    ]

    # The same group a second time: the sticky assignor keeps every target, so only the
    # epoch moves.
    kept = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in new_targets.items()}
    second = uniform_builder(members, kept, topic_ids, counts, epoch=2).build()

    assert second.records == [epoch_record(2, 1234)]
    assert targets(second) == kept


def test_regular_expression_subscription_adds_to_names() -> None:
    foo, bar, baz = uuid.uuid4().bytes, uuid.uuid4().bytes, uuid.uuid4().bytes
    ids = {"foo": foo, "bar": bar, "baz": baz}
    member = ConsumerGroupMember(
        "m", subscribed_topic_names=frozenset({"foo"}), subscribed_topic_regex="ba.*"
    )

    assert resolve_subscription(member, ids, {"ba.*": frozenset({"bar", "baz"})}) == {
        foo,
        bar,
        baz,
    }
    # An expression not resolved yet adds nothing.
    assert resolve_subscription(member, ids, {}) == {foo}


def test_assignor_failure_propagates() -> None:
    class FailingAssignor(FakeAssignor):
        def assign(
            self, group_spec: GroupSpec, topics: SubscribedTopicDescriber
        ) -> GroupAssignment:
            raise PartitionAssignorError("cannot assign")

    context = Context()
    context.assignor = FailingAssignor()
    context.add_member("member-1", ["foo"], {})

    with pytest.raises(PartitionAssignorError):
        context.build()


@pytest.mark.parametrize(
    ("second_topics", "expected"),
    [
        (frozenset({"foo", "bar"}), SubscriptionType.HOMOGENEOUS),
        (frozenset({"foo"}), SubscriptionType.HETEROGENEOUS),
    ],
)
def test_subscription_type_follows_the_subscriptions_when_not_given(
    second_topics: frozenset[str], expected: SubscriptionType
) -> None:
    foo, bar = uuid.uuid4().bytes, uuid.uuid4().bytes
    topic_ids = {"foo": foo, "bar": bar}
    members = {
        "a": ConsumerGroupMember("a", subscribed_topic_names=frozenset({"foo", "bar"})),
        "b": ConsumerGroupMember("b", subscribed_topic_names=second_topics),
    }
    assignor = FakeAssignor()

    TargetAssignmentBuilder(
        group_id=GROUP,
        group_epoch=EPOCH,
        assignor=assignor,
        members=members,
        target_assignment={},
        subscribed_topic_ids={
            member_id: resolve_subscription(member, topic_ids, {})
            for member_id, member in members.items()
        },
        topics=SubscribedTopicMetadata({foo: 2, bar: 2}),
    ).build()

    assert assignor.calls[0][0].subscription_type is expected
