"""What the admin APIs answer about consumer groups (KIP-848): ConsumerGroupDescribe's group
(Kafka's `ConsumerGroup.asDescribedGroup` and `GroupMetadataManager.consumerGroupDescribe`),
DescribeGroups' answer for a consumer group's id (Kafka's `describeGroups`), and the
ListGroups entries of a partition's consumer groups (Kafka's `listGroups`).

Everything is read as of the committed offset, as Kafka's reads are: a group created, a
member that joined or a target computed by a write the log has not committed yet is not
shown, and a group deleted by such a write still is.

A member's assignments name each topic by id and by the name the data cluster has for it
now; a topic the cluster no longer has is left out of them, as Kafka leaves it out.

The sizes are the entries' msgpack sizes, measured by encoding them: exact, and cheap next
to what builds them. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Final

from coordinator_protocol.consumer_groups import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseGroup,
    ConsumerGroupDescribeResponseMember,
    ConsumerGroupDescribeResponseTopicPartitions,
)
from coordinator_protocol.envelope import encode_body
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import DescribeGroupsResponseGroup, ListGroupsResponseGroup
from coordinator_server.consumer_groups.assignors import preferred_assignor
from coordinator_server.consumer_groups.group import ConsumerGroup, ConsumerGroupState
from coordinator_server.consumer_groups.heartbeat import ClusterTopics
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.consumer_groups.member import ConsumerGroupMember
from coordinator_server.consumer_groups.topics import TopicPartitions

__all__ = [
    "CONSUMER_GROUP_TYPE",
    "CONSUMER_PROTOCOL_TYPE",
    "DESCRIBED_CONSUMER_GROUP_MIN_BYTES",
    "describe_consumer_groups",
    "described_as_classic_group",
    "group_not_found_message",
    "list_consumer_groups",
    "listed_consumer_group_bytes",
    "not_a_classic_group_message",
    "not_a_consumer_group_message",
]

CONSUMER_GROUP_TYPE: Final = "consumer"
"""The group type ListGroups answers and filters on (Kafka's `GroupType.CONSUMER`)."""

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
"""A consumer group's protocol type (Kafka's `ConsumerProtocol.PROTOCOL_TYPE`)."""

DESCRIBED_CONSUMER_GROUP_MIN_BYTES: Final = len(encode_body(ConsumerGroupDescribeResponseGroup()))
"""A ConsumerGroupDescribe group with every field empty: what each group named costs at
least, besides its id (a described group's own size is its encoded size)."""


def group_not_found_message(group_id: str) -> str:
    """ConsumerGroupDescribe's message for an id no group has (Kafka's `group`)."""
    return f"Group {group_id} not found."


def not_a_consumer_group_message(group_id: str) -> str:
    """ConsumerGroupDescribe's message for a classic group's id (Kafka's `consumerGroup`)."""
    return f"Group {group_id} is not a consumer group."


def not_a_classic_group_message(group_id: str) -> str:
    """Kafka's DescribeGroups message (version 6 on) for a consumer group's id (Kafka's
    `classicGroup`); the contract's DescribeGroups has no error message to carry it."""
    return f"Group {group_id} is not a classic group."


# ConsumerGroupDescribe (69).


def describe_consumer_groups(
    manager: ConsumerGroupManager,
    group_ids: Iterable[str],
    committed_offset: int,
    topics: ClusterTopics,
    is_classic_group: Callable[[str], bool],
) -> list[ConsumerGroupDescribeResponseGroup]:
    """Each group as of `committed_offset`, in the order named: GROUP_ID_NOT_FOUND for an id
    that is not a consumer group's, with Kafka's message saying whether a classic group has
    it (`is_classic_group`, as of the same offset). `topics` names the assignments' topics."""
    described: list[ConsumerGroupDescribeResponseGroup] = []
    for group_id in group_ids:
        group = manager.group(group_id, committed_offset)
        if group is not None:
            described.append(_described(manager, group, committed_offset, topics))
            continue
        message = (
            not_a_consumer_group_message(group_id)
            if is_classic_group(group_id)
            else group_not_found_message(group_id)
        )
        described.append(
            ConsumerGroupDescribeResponseGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message, group_id=group_id
            )
        )
    return described


def _described(
    manager: ConsumerGroupManager, group: ConsumerGroup, offset: int, topics: ClusterTopics
) -> ConsumerGroupDescribeResponseGroup:
    members = group.members(offset)
    config = manager.config
    # The assignor the group's next target is computed with, as the heartbeat chooses it: a
    # member's assignor no longer configured counts for none (Kafka counts it, having
    # refused it at the heartbeat; a log older than the configuration may still hold it).
    assignor = preferred_assignor(
        (member for member in members.values() if member.server_assignor in config.assignors),
        config.default_assignor,
    )
    return ConsumerGroupDescribeResponseGroup(
        group_id=group.group_id,
        group_state=group.state(offset).value,
        group_epoch=group.group_epoch(offset),
        assignment_epoch=group.target_assignment_epoch(offset),
        assignor_name=assignor,
        members=[
            _described_member(
                members[member_id], group.target_assignment(member_id, offset), topics
            )
            for member_id in sorted(members)
        ],
    )


def _described_member(
    member: ConsumerGroupMember, target: TopicPartitions, topics: ClusterTopics
) -> ConsumerGroupDescribeResponseMember:
    """Kafka's `asConsumerGroupDescribeMember`."""
    return ConsumerGroupDescribeResponseMember(
        member_id=member.member_id,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        member_epoch=member.member_epoch,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=sorted(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex or None,
        assignment=_described_assignment(member.assigned_partitions, topics),
        target_assignment=_described_assignment(target, topics),
        member_type=MEMBER_TYPE_CLASSIC if member.use_classic_protocol else MEMBER_TYPE_CONSUMER,
    )


def _described_assignment(
    partitions: TopicPartitions, topics: ClusterTopics
) -> ConsumerGroupDescribeResponseAssignment:
    named = []
    for topic_id, indexes in partitions.items():
        name = topics.topic_name(topic_id)
        # A topic deleted from the cluster is left out, as Kafka's `topicPartitionsFromMap`
        # leaves out a topic its image no longer has.
        if name is not None:
            named.append((name, topic_id, indexes))
    named.sort()
    return ConsumerGroupDescribeResponseAssignment(
        topic_partitions=[
            ConsumerGroupDescribeResponseTopicPartitions(
                topic_id=topic_id, topic_name=name, partitions=sorted(indexes)
            )
            for name, topic_id, indexes in named
        ]
    )


# DescribeGroups (15).


def described_as_classic_group(group_id: str) -> DescribeGroupsResponseGroup:
    """DescribeGroups' answer for a consumer group's id: the classic API does not describe
    it, and says so as for a group that does not exist (Kafka's `describeGroups` from
    version 6: GROUP_ID_NOT_FOUND, state Dead, and `not_a_classic_group_message`, which the
    contract's DescribeGroups has no field for)."""
    return DescribeGroupsResponseGroup(
        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
        group_id=group_id,
        group_state=ConsumerGroupState.DEAD.value,
    )


# ListGroups (16).


def list_consumer_groups(
    manager: ConsumerGroupManager,
    states: Collection[str],
    types: Collection[str],
    committed_offset: int,
    max_bytes: int | None = None,
) -> tuple[list[ListGroupsResponseGroup], int] | None:
    """The consumer groups as of `committed_offset` in one of `states` and of one of `types`
    (each trimmed and in lower case, as the classic groups' `list_filter` makes them;
    empty: any), with their state as of that offset, and the bytes they take in the
    answer; None once they would take more than `max_bytes`."""
    if types and CONSUMER_GROUP_TYPE not in types:
        return [], 0
    listed: list[ListGroupsResponseGroup] = []
    size = 0
    for group_id, group in manager.groups_at(committed_offset):
        state = group.state(committed_offset).value
        if states and state.lower() not in states:
            continue
        entry = ListGroupsResponseGroup(
            group_id=group_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            group_state=state,
            group_type=CONSUMER_GROUP_TYPE,
        )
        if max_bytes is not None:
            size += len(encode_body(entry))
            if size > max_bytes:
                return None
        listed.append(entry)
    return listed, size


def listed_consumer_group_bytes(group_id: str, state: str) -> int:
    """The msgpack size of a consumer group's ListGroups entry (for a caller that filters
    the entries after listing them, as the answer to a principal that sees only some)."""
    return len(
        encode_body(
            ListGroupsResponseGroup(
                group_id=group_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                group_state=state,
                group_type=CONSUMER_GROUP_TYPE,
            )
        )
    )
