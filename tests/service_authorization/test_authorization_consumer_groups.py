"""The consumer group protocol's APIs (KIP-848) authorized as Kafka's KafkaApis authorizes
them, and refused when the request alone is too large or invalid:

- ConsumerGroupHeartbeat: READ of the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE of
  every topic subscribed by name (TOPIC_AUTHORIZATION_FAILED), before any state is read; a
  subscription by regular expression is resolved to the topics the member may describe;
- ConsumerGroupDescribe: DESCRIBE of each group, per group (a denied group answers the same
  whether it exists or not), and of the topics its description names.
"""

from __future__ import annotations

import uuid

from authorization_harness import GROUP, TOPIC, Node, Op, acl

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer_groups import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from coordinator_protocol.errors import ErrorCode

G = "orders-app"


def join(
    group: str = G, *topics: str, member_id: str | None = None
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id or str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=list(topics or ("orders",)),
        topic_partitions=[],
    )


async def test_heartbeat_needs_read_of_the_group_then_describe_of_its_topics(node: Node) -> None:
    denied = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join())
    assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    node.allow(acl(GROUP, G, Op.READ))
    denied = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join())
    assert denied.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    node.allow(acl(TOPIC, "orders", Op.DESCRIBE))
    # One topic of two not describable is enough to refuse the whole heartbeat.
    denied = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(G, "orders", "secret"))
    assert denied.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    joined = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join())
    assert (joined.error_code, joined.member_epoch) == (0, 1), joined
    assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1, 2, 3]
    # The refused heartbeats wrote nothing: one member.
    described = await node.admin(
        ApiKey.CONSUMER_GROUP_DESCRIBE, ConsumerGroupDescribeRequest(group_ids=[G])
    )
    assert len(described.groups[0].members) == 1


async def test_a_regex_is_resolved_to_the_topics_the_member_may_describe(node: Node) -> None:
    node.allow(acl(GROUP, G, Op.READ), acl(TOPIC, "orders", Op.DESCRIBE))
    request = join()
    request.subscribed_topic_names = None
    request.subscribed_topic_regex = ".*"
    joined = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, request)
    assert (joined.error_code, joined.member_epoch) == (0, 1), joined
    # "secret" matches too, and Alice may not describe it: only "orders" is assigned.
    (assigned,) = joined.assignment.topic_partitions
    assert sorted(assigned.partitions) == [0, 1, 2, 3]
    described = await node.admin(
        ApiKey.CONSUMER_GROUP_DESCRIBE, ConsumerGroupDescribeRequest(group_ids=[G])
    )
    (member,) = described.groups[0].members
    assert [t.topic_name for t in member.assignment.topic_partitions] == ["orders"]
    assert [t.topic_name for t in member.target_assignment.topic_partitions] == ["orders"]


async def test_describe_is_per_group_and_says_nothing_of_a_denied_group(node: Node) -> None:
    joined = await node.admin(ApiKey.CONSUMER_GROUP_HEARTBEAT, join())
    assert joined.error_code == 0, joined
    request = ConsumerGroupDescribeRequest(group_ids=[G, "absent", "", G])
    described = await node.call(ApiKey.CONSUMER_GROUP_DESCRIBE, request)
    assert [(g.group_id, g.error_code) for g in described.groups] == [
        (G, ErrorCode.GROUP_AUTHORIZATION_FAILED),
        ("absent", ErrorCode.GROUP_AUTHORIZATION_FAILED),
        ("", ErrorCode.INVALID_GROUP_ID),
        (G, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    ]
    node.allow(acl(GROUP, "*", Op.DESCRIBE))
    described = await node.call(ApiKey.CONSUMER_GROUP_DESCRIBE, request)
    # The group's description names "orders", which Alice may not describe.
    assert [(g.group_id, g.error_code) for g in described.groups][:2] == [
        (G, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("absent", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    node.allow(acl(TOPIC, "orders", Op.DESCRIBE))
    described = await node.call(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        ConsumerGroupDescribeRequest(group_ids=[G], include_authorized_operations=True),
    )
    (group,) = described.groups
    assert (group.error_code, group.group_state, len(group.members)) == (0, "Stable", 1)
    # DESCRIBE only: bit 8 (Kafka's AclOperation DESCRIBE code).
    assert group.authorized_operations == 1 << Op.DESCRIBE.value


async def test_requests_too_large_or_invalid_are_refused_before_any_state(node: Node) -> None:
    node.allow(acl(GROUP, "*", Op.READ), acl(TOPIC, "*", Op.DESCRIBE))
    no_group = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(""))
    assert (no_group.error_code, no_group.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "GroupId can't be empty.",
    )
    many = await node.call(
        ApiKey.CONSUMER_GROUP_HEARTBEAT, join(G, *(f"t{i}" for i in range(10_001)))
    )
    assert many.error_code == ErrorCode.INVALID_REQUEST
    assert "max_subscribed_topics" in many.error_message
    long_member = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(G, member_id="m" * 2000))
    assert long_member.error_code == ErrorCode.INVALID_REQUEST
    unknown_assignor = join()
    unknown_assignor.server_assignor = "sticky"
    refused = await node.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, unknown_assignor)
    assert refused.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    described = await node.admin(
        ApiKey.CONSUMER_GROUP_DESCRIBE, ConsumerGroupDescribeRequest(group_ids=[G])
    )
    assert described.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
