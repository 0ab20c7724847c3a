"""The group APIs authorized as Kafka's KafkaApis handlers authorize them: the operation and
resource each checks, the error code of a denial (per item where Kafka answers per item), and
that a denial says nothing of the state (a denied group answers the same whether it exists or
not, and is left as it was)."""

from __future__ import annotations

import logging

import pytest
from authorization_harness import (
    CLUSTER,
    DENY,
    GROUP,
    PREFIXED,
    TOPIC,
    TXN_ID,
    Node,
    Op,
    acl,
    commit_request,
    fetch_request,
    join_request,
)

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
    AUTHORIZED_OPERATIONS_OMITTED,
    DeleteGroupsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    LeaveGroupRequest,
    LeaveGroupRequestMember,
    ListGroupsRequest,
    Message,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    SyncGroupRequest,
)
from coordinator_server.authorizer.acls import CLUSTER_NAME
from coordinator_server.service.authorization import AUTHORIZER_LOGGER

G = "orders-app"
OTHER = "billing-app"


def codes_by_partition(response: Message) -> dict[tuple[str, int], int]:
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in response.topics  # type: ignore[attr-defined]
        for p in topic.partitions
    }


# JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ of the group.


def member_requests(group: str, member_id: str) -> dict[ApiKey, Message]:
    return {
        ApiKey.JOIN_GROUP: join_request(group, member_id),
        ApiKey.SYNC_GROUP: SyncGroupRequest(
            group_id=group, generation_id=1, member_id=member_id, assignments=[]
        ),
        ApiKey.HEARTBEAT: HeartbeatRequest(group_id=group, generation_id=1, member_id=member_id),
        ApiKey.LEAVE_GROUP: LeaveGroupRequest(
            group_id=group, members=[LeaveGroupRequestMember(member_id=member_id)]
        ),
    }


@pytest.mark.parametrize(
    "api_key", [ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP]
)
async def test_a_member_request_needs_read_of_its_group(node: Node, api_key: ApiKey) -> None:
    member = await node.join_as_admin(G)
    request = member_requests(G, member)[api_key]
    denied = await node.call(api_key, request)
    assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    # Nothing happened to the group: its one member is still there, stable.
    assert await node.group_state_as_admin(G) in {"CompletingRebalance", "Stable"}
    describe = DescribeGroupsRequest(groups=[G])
    (group,) = (await node.admin(ApiKey.DESCRIBE_GROUPS, describe)).groups
    assert [m.member_id for m in group.members] == [member]

    # DESCRIBE is not enough; READ is.
    node.allow(acl(GROUP, G, Op.DESCRIBE))
    assert (await node.call(api_key, request)).error_code == (ErrorCode.GROUP_AUTHORIZATION_FAILED)
    node.allow(acl(GROUP, G, Op.READ))
    allowed = await node.call(api_key, request)
    assert allowed.error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_a_join_denied_creates_no_group_and_looks_like_any_denial(node: Node) -> None:
    denied = await node.call(ApiKey.JOIN_GROUP, join_request(G))
    assert denied == await node.call(ApiKey.JOIN_GROUP, join_request(OTHER))
    assert (denied.error_code, denied.generation_id, denied.member_id) == (
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        -1,
        "",
    )
    assert await node.group_state_as_admin(G) == "Dead"


# OffsetCommit: READ of the group, then READ of each topic.


async def test_offset_commit_without_read_of_the_group_refuses_every_partition(
    node: Node,
) -> None:
    node.allow(acl(TOPIC, "*", Op.READ))
    response = await node.call(ApiKey.OFFSET_COMMIT, commit_request(G, {("a", 0): 5, ("b", 1): 6}))
    assert codes_by_partition(response) == {
        ("a", 0): ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ("b", 1): ErrorCode.GROUP_AUTHORIZATION_FAILED,
    }
    assert await node.group_state_as_admin(G) == "Dead"


async def test_offset_commit_refuses_the_topics_it_may_not_read_and_commits_the_rest(
    node: Node,
) -> None:
    node.allow(acl(GROUP, G, Op.READ), acl(TOPIC, "a", Op.READ))
    request = commit_request(G, {("a", 0): 5, ("a", 1): 6, ("b", 0): 7, ("b", 3): 8})
    response = await node.call(ApiKey.OFFSET_COMMIT, request)
    assert codes_by_partition(response) == {
        ("a", 0): ErrorCode.NONE,
        ("a", 1): ErrorCode.NONE,
        ("b", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ("b", 3): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    assert await node.offsets_as_admin(G) == {("a", 0): 5, ("a", 1): 6}


async def test_offset_commit_of_no_topic_it_may_read_asks_nothing_of_the_group(
    node: Node,
) -> None:
    """As Kafka's handler: nothing left to commit, the coordinator is not asked, so a
    member's commit with a wrong generation is not even checked."""
    node.allow(acl(GROUP, G, Op.READ))
    request = commit_request(G, {("a", 0): 5}, generation_id_or_member_epoch=7, member_id="nobody")
    response = await node.call(ApiKey.OFFSET_COMMIT, request)
    assert codes_by_partition(response) == {("a", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert await node.group_state_as_admin(G) == "Dead"
    node.allow(acl(TOPIC, "a", Op.READ))
    checked = await node.call(ApiKey.OFFSET_COMMIT, request)
    assert codes_by_partition(checked) != {("a", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}


# OffsetFetch: DESCRIBE of each group, then of each topic.


async def test_offset_fetch_of_a_group_it_may_not_describe_looks_the_same_whether_it_exists(
    node: Node,
) -> None:
    await node.commit_as_admin(G, {("a", 0): 5})
    node.allow(acl(TOPIC, "*", Op.DESCRIBE))
    for topics in (None, {"a": [0]}):
        existing = (await node.call(ApiKey.OFFSET_FETCH, fetch_request(G, topics))).groups[0]
        missing = (await node.call(ApiKey.OFFSET_FETCH, fetch_request(OTHER, topics))).groups[0]
        assert existing.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert existing.topics == [] == missing.topics
        assert existing.replace(group_id="") == missing.replace(group_id="")


async def test_offset_fetch_answers_a_listed_topic_it_may_not_describe_per_partition(
    node: Node,
) -> None:
    await node.commit_as_admin(G, {("a", 0): 5, ("b", 0): 6, ("b", 1): 7})
    node.allow(acl(GROUP, G, Op.DESCRIBE), acl(TOPIC, "a", Op.READ))
    response = await node.call(ApiKey.OFFSET_FETCH, fetch_request(G, {"a": [0], "b": [0, 1]}))
    (group,) = response.groups
    assert group.error_code == ErrorCode.NONE
    answered = {
        (topic.name, p.partition_index): (p.committed_offset, p.error_code)
        for topic in group.topics
        for p in topic.partitions
    }
    assert answered == {
        ("a", 0): (5, ErrorCode.NONE),
        ("b", 0): (-1, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("b", 1): (-1, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    }


async def test_offset_fetch_of_every_topic_leaves_out_those_it_may_not_describe(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    await node.commit_as_admin(G, {("a", 0): 5, ("b", 0): 6, ("team-c", 2): 7})
    node.allow(acl(GROUP, G, Op.DESCRIBE), acl(TOPIC, "team-", Op.DESCRIBE, pattern=PREFIXED))
    node.allow(acl(TOPIC, "a", Op.WRITE))
    with caplog.at_level(logging.INFO, logger=AUTHORIZER_LOGGER):
        (group,) = (await node.call(ApiKey.OFFSET_FETCH, fetch_request(G, None))).groups
    assert group.error_code == ErrorCode.NONE
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in group.topics] == [
        ("a", [5]),
        ("team-c", [7]),
    ]
    # Kafka's handler logs what it leaves out (its filter keeps logIfDenied).
    assert [r.getMessage().split(" for request")[0] for r in caplog.records] == [
        "Principal = User:alice is Denied operation = DESCRIBE from host = 127.0.0.1 "
        "on resource = Topic:LITERAL:b"
    ]


# DescribeGroups: DESCRIBE of each group.


async def test_describe_groups_answers_each_group_it_may_not_describe_with_its_error_alone(
    node: Node,
) -> None:
    await node.join_as_admin(G)
    await node.join_as_admin("visible")
    node.allow(acl(GROUP, "visible", Op.DESCRIBE))
    request = DescribeGroupsRequest(groups=[G, "visible", OTHER, G])
    existing, visible, missing, again = (await node.call(ApiKey.DESCRIBE_GROUPS, request)).groups
    assert visible.error_code == ErrorCode.NONE and visible.members
    assert existing.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert (existing.group_id, missing.group_id) == (G, OTHER)
    assert existing.replace(group_id="") == missing.replace(group_id="")
    assert (existing.group_state, existing.protocol_type, existing.members) == ("", "", [])
    assert again == existing


# ListGroups: every group with DESCRIBE of the cluster, else those it may describe.


async def test_list_groups_lists_only_the_groups_it_may_describe_unless_it_may_describe_the_cluster(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    for group in (G, "team-a", "team-b", OTHER):
        await node.join_as_admin(group)
    node.allow(acl(GROUP, "team-", Op.READ, pattern=PREFIXED), acl(GROUP, G, Op.DELETE))
    node.allow(acl(GROUP, "team-b", Op.DESCRIBE, DENY))
    with caplog.at_level(logging.INFO, logger=AUTHORIZER_LOGGER):
        listed = await node.call(ApiKey.LIST_GROUPS, ListGroupsRequest())
    assert listed.error_code == ErrorCode.NONE
    assert sorted(g.group_id for g in listed.groups) == [G, "team-a"]
    assert caplog.records == [], "Kafka's ListGroups logs no denial"

    node.allow(acl(CLUSTER, CLUSTER_NAME, Op.DESCRIBE))
    everything = await node.call(ApiKey.LIST_GROUPS, ListGroupsRequest())
    assert sorted(g.group_id for g in everything.groups) == sorted([G, "team-a", "team-b", OTHER])


# DeleteGroups: DELETE of each group.


async def test_delete_groups_deletes_only_the_groups_it_may_delete(node: Node) -> None:
    await node.commit_as_admin(G, {("a", 0): 1})
    await node.commit_as_admin("deletable", {("a", 0): 1})
    node.allow(acl(GROUP, "deletable", Op.DELETE), acl(GROUP, G, Op.READ))
    request = DeleteGroupsRequest(groups_names=[G, "deletable", OTHER])
    results = (await node.call(ApiKey.DELETE_GROUPS, request)).results
    assert [(r.group_id, r.error_code) for r in results] == [
        (G, ErrorCode.GROUP_AUTHORIZATION_FAILED),
        ("deletable", ErrorCode.NONE),
        (OTHER, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    ]
    assert await node.offsets_as_admin(G) == {("a", 0): 1}
    assert await node.group_state_as_admin("deletable") == "Dead"


# OffsetDelete: DELETE of the group, then READ of each topic.


def offset_delete_request(group: str, topics: dict[str, list[int]]) -> OffsetDeleteRequest:
    return OffsetDeleteRequest(
        group_id=group,
        topics=[
            OffsetDeleteRequestTopic(
                name=name,
                partitions=[OffsetDeleteRequestPartition(partition_index=i) for i in indexes],
            )
            for name, indexes in topics.items()
        ],
    )


async def test_offset_delete_needs_delete_of_the_group_then_read_of_each_topic(
    node: Node,
) -> None:
    await node.commit_as_admin(G, {("a", 0): 1, ("b", 0): 2})
    request = offset_delete_request(G, {"a": [0], "b": [0]})
    node.allow(acl(GROUP, G, Op.READ), acl(TOPIC, "*", Op.READ))
    refused = await node.call(ApiKey.OFFSET_DELETE, request)
    assert (refused.error_code, refused.topics) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    missing = await node.call(ApiKey.OFFSET_DELETE, offset_delete_request(OTHER, {"a": [0]}))
    assert missing == refused
    assert await node.offsets_as_admin(G) == {("a", 0): 1, ("b", 0): 2}

    node.remove(acl(TOPIC, "*", Op.READ))
    node.allow(acl(GROUP, G, Op.DELETE), acl(TOPIC, "a", Op.READ))
    response = await node.call(ApiKey.OFFSET_DELETE, request)
    assert response.error_code == ErrorCode.NONE
    assert codes_by_partition(response) == {
        ("a", 0): ErrorCode.NONE,
        ("b", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    assert await node.offsets_as_admin(G) == {("b", 0): 2}


# FindCoordinator: DESCRIBE of each group (key type 0) or transactional id (1).


async def test_find_coordinator_answers_each_key_it_may_not_describe_with_no_node(
    node: Node,
) -> None:
    node.allow(acl(GROUP, G, Op.READ))
    groups = await node.call(
        ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key_type=0, keys=[G, OTHER])
    )
    found, refused = groups.coordinators
    assert (found.key, found.error_code) == (G, ErrorCode.NONE)
    assert found.port == node.app.address[1]  # type: ignore[index]
    assert (refused.key, refused.error_code) == (OTHER, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    assert (refused.node_id, refused.host, refused.port) == (-1, "", -1)

    ids = await node.call(
        ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key_type=1, keys=[G, "txn"])
    )
    assert [c.error_code for c in ids.coordinators] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ]
    node.allow(acl(TXN_ID, "txn", Op.WRITE))
    ids = await node.call(
        ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key_type=1, keys=[G, "txn"])
    )
    assert [c.error_code for c in ids.coordinators] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.NONE,
    ]


# DescribeCluster: the nodes whoever asks.


async def test_describe_cluster_answers_the_nodes_to_anyone_and_the_operations_as_kafka_does(
    node: Node,
) -> None:
    plain = DescribeClusterRequest()
    assert await node.call(ApiKey.DESCRIBE_CLUSTER, plain) == await node.call_open(
        ApiKey.DESCRIBE_CLUSTER, plain
    )
    asking = DescribeClusterRequest(include_cluster_authorized_operations=True)
    assert (await node.call(ApiKey.DESCRIBE_CLUSTER, asking)).cluster_authorized_operations == 0
    assert (
        await node.call_open(ApiKey.DESCRIBE_CLUSTER, asking)
    ).cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    node.allow(acl(CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE))
    assert (await node.call(ApiKey.DESCRIBE_CLUSTER, asking)).cluster_authorized_operations == 0
    node.allow(acl(CLUSTER, CLUSTER_NAME, Op.ALTER))
    # ALTER allows DESCRIBE too.
    operations = (await node.call(ApiKey.DESCRIBE_CLUSTER, asking)).cluster_authorized_operations
    assert operations == (1 << Op.IDEMPOTENT_WRITE) | (1 << Op.ALTER) | (1 << Op.DESCRIBE)
