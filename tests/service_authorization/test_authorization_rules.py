"""What holds for every API: Kafka's rule (a DENY beats an ALLOW, PREFIXED ACLs, super
users), ACLs changed taking effect on the next request, no change at all without an
authorizer, and the denials logged in Kafka's words, at a bounded rate."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from authorization_harness import (
    ADMIN,
    ALICE,
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
    running_node,
)

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import (
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
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from coordinator_server.authorizer.acls import CLUSTER_NAME
from coordinator_server.service.authorization import AUTHORIZER_LOGGER

G = "orders-app"


async def heartbeat_code(node: Node, group: str, principal: str = ALICE) -> int:
    request = HeartbeatRequest(group_id=group, generation_id=1, member_id="m")
    response = await node.call(ApiKey.HEARTBEAT, request, principal)
    return int(response.error_code)


async def test_a_deny_wins_over_any_allow(node: Node) -> None:
    node.allow(acl(GROUP, "*", Op.ALL), acl(GROUP, "orders-", Op.READ, pattern=PREFIXED))
    assert await heartbeat_code(node, G) != ErrorCode.GROUP_AUTHORIZATION_FAILED
    node.allow(acl(GROUP, G, Op.READ, DENY))
    assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    # Denying READ does not deny DESCRIBE (an ALLOW of ALL still grants it).
    (described,) = (
        await node.call(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[G]))
    ).groups
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_a_prefixed_acl_covers_the_names_it_starts(node: Node) -> None:
    node.allow(acl(GROUP, "orders-", Op.READ, pattern=PREFIXED))
    assert await heartbeat_code(node, "orders-app") != ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert await heartbeat_code(node, "orders-") != ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert await heartbeat_code(node, "orders") == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert await heartbeat_code(node, "billing-orders-") == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_an_acl_of_another_principal_or_host_does_not_apply(node: Node) -> None:
    node.allow(
        acl(GROUP, G, Op.READ, principal="User:bob"), acl(GROUP, G, Op.READ, host="10.9.9.9")
    )
    assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert await heartbeat_code(node, G, "User:bob") != ErrorCode.GROUP_AUTHORIZATION_FAILED
    node.allow(acl(GROUP, G, Op.READ, host="127.0.0.1"))
    assert await heartbeat_code(node, G) != ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_a_super_user_may_do_anything_whatever_the_acls_deny(node: Node) -> None:
    node.allow(
        acl(GROUP, "*", Op.ALL, DENY, principal="User:*"),
        acl(CLUSTER, CLUSTER_NAME, Op.ALL, DENY, principal="User:*"),
    )
    assert await heartbeat_code(node, G, ADMIN) != ErrorCode.GROUP_AUTHORIZATION_FAILED
    listed = await node.call(ApiKey.LIST_GROUPS, ListGroupsRequest(), ADMIN)
    assert listed.error_code == ErrorCode.NONE
    assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_everyone_is_allowed_a_resource_without_acls_when_the_authorizer_says_so() -> None:
    async with running_node(allow_everyone_if_no_acl_found=True) as node:
        assert await heartbeat_code(node, G) != ErrorCode.GROUP_AUTHORIZATION_FAILED
        node.allow(acl(GROUP, G, Op.READ, principal="User:bob"))
        assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_acls_changed_take_effect_on_the_next_request(node: Node) -> None:
    reads = acl(GROUP, G, Op.READ)
    node.allow(reads)
    assert await heartbeat_code(node, G) != ErrorCode.GROUP_AUTHORIZATION_FAILED
    # The decision is cached until the authorizer hears of the change...
    assert node.data.remove(reads)
    assert await heartbeat_code(node, G) != ErrorCode.GROUP_AUTHORIZATION_FAILED
    # ... which it does with every change the log's ACL records make.
    node.authorizer.acls_changed()
    assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    node.allow(reads)
    assert await heartbeat_code(node, G) != ErrorCode.GROUP_AUTHORIZATION_FAILED
    node.allow(acl(GROUP, G, Op.READ, DENY))
    assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_a_removed_acl_no_longer_lets_an_idempotent_producer_in(node: Node) -> None:
    """The decision by resource type is cached too, and forgotten with the others."""
    writes = acl(TOPIC, "orders", Op.WRITE)
    node.allow(writes)
    idempotent = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1)
    assert (await node.call(ApiKey.INIT_PRODUCER_ID, idempotent)).error_code == ErrorCode.NONE
    node.remove(writes)
    assert (await node.call(ApiKey.INIT_PRODUCER_ID, idempotent)).error_code == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )


# Without an authorizer, nothing changes; with every ACL allowing, neither.


def member_requests(member_id: str, generation: int) -> list[tuple[ApiKey, Message]]:
    return [
        (
            ApiKey.SYNC_GROUP,
            SyncGroupRequest(
                group_id=G, generation_id=generation, member_id=member_id, assignments=[]
            ),
        ),
        (
            ApiKey.HEARTBEAT,
            HeartbeatRequest(group_id=G, generation_id=generation, member_id=member_id),
        ),
    ]


async def scenario(node: Node, principal: str, *, authorized: bool) -> list[Any]:
    """Every API once or more on a fresh node, as `principal`: the answers, with what varies
    between two runs (generated member ids, producer ids) replaced by what it stands for."""
    call = node.call if authorized else node.call_open
    answers: list[Any] = []

    async def ask(api_key: ApiKey, request: Message) -> Any:
        response = await call(api_key, request, principal)
        answers.append(response)
        return response

    first = await ask(ApiKey.JOIN_GROUP, join_request(G))
    joined = await ask(ApiKey.JOIN_GROUP, join_request(G, first.member_id))
    member, generation = joined.member_id, joined.generation_id
    for api_key, request in member_requests(member, generation):
        await ask(api_key, request)
    await ask(
        ApiKey.OFFSET_COMMIT,
        commit_request(
            G,
            {("a", 0): 5, ("b", 1): 6},
            generation_id_or_member_epoch=generation,
            member_id=member,
        ),
    )
    await ask(ApiKey.OFFSET_FETCH, fetch_request(G, None))
    await ask(ApiKey.OFFSET_FETCH, fetch_request(G, {"a": [0, 1], "c": [0]}))
    await ask(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[G, "missing", None]))
    await ask(ApiKey.LIST_GROUPS, ListGroupsRequest())
    await ask(ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key_type=0, keys=[G, ""]))
    await ask(ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key_type=1, keys=["t"]))
    await ask(ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest())
    await ask(
        ApiKey.OFFSET_DELETE,
        OffsetDeleteRequest(
            group_id=G,
            topics=[
                OffsetDeleteRequestTopic(
                    name="a", partitions=[OffsetDeleteRequestPartition(partition_index=0)]
                )
            ],
        ),
    )
    await ask(
        ApiKey.LEAVE_GROUP,
        LeaveGroupRequest(group_id=G, members=[LeaveGroupRequestMember(member_id=member)]),
    )
    await ask(ApiKey.DELETE_GROUPS, DeleteGroupsRequest(groups_names=[G, "missing"]))

    producer = await ask(
        ApiKey.INIT_PRODUCER_ID,
        InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=30_000),
    )
    ids = {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch}
    await ask(
        ApiKey.ADD_OFFSETS_TO_TXN, AddOffsetsToTxnRequest(transactional_id="t", group_id=G, **ids)
    )
    await ask(
        ApiKey.TXN_OFFSET_COMMIT,
        TxnOffsetCommitRequest(
            transactional_id="t",
            group_id=G,
            topics=[
                TxnOffsetCommitRequestTopic(
                    name="a",
                    partitions=[
                        TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=9)
                    ],
                )
            ],
            **ids,
        ),
    )
    await ask(ApiKey.DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest(transactional_ids=["t"]))
    await ask(ApiKey.LIST_TRANSACTIONS, ListTransactionsRequest())
    await ask(ApiKey.END_TXN, EndTxnRequest(transactional_id="t", committed=False, **ids))
    # A transaction of data partitions last: without a Kafka cluster it would never end.
    await ask(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        AddPartitionsToTxnRequest(
            transactional_id="t",
            topics=[AddPartitionsToTxnRequestTopic(name="out", partitions=[0])],
            **ids,
        ),
    )
    await ask(
        ApiKey.INIT_PRODUCER_ID,
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1),
    )
    return [normalized(answer, node, member, producer.producer_id) for answer in answers]


def normalized(answer: Any, node: Node, member: str, producer_id: int) -> Any:
    port = node.app.address[1]  # type: ignore[index]
    text = (
        repr(answer)
        .replace(member, "<member>")
        .replace(str(producer_id), "<producer>")
        .replace(f"port={port}", "port=<port>")
    )
    # The transaction's start time is the clock's.
    return re.sub(r"transaction_start_time_ms=\d+", "transaction_start_time_ms=<time>", text)


async def test_without_an_authorizer_the_principal_changes_no_answer() -> None:
    async with running_node() as anonymous, running_node() as admin:
        assert await scenario(anonymous, "User:nobody", authorized=False) == await scenario(
            admin, ADMIN, authorized=True
        )


async def test_a_principal_allowed_everything_gets_the_answers_of_no_authorizer() -> None:
    async with running_node() as allowed, running_node() as open_node:
        allowed.allow(
            acl(GROUP, "*", Op.ALL),
            acl(TOPIC, "*", Op.ALL),
            acl(TXN_ID, "*", Op.ALL),
            acl(CLUSTER, CLUSTER_NAME, Op.ALL),
        )
        assert await scenario(allowed, ALICE, authorized=True) == await scenario(
            open_node, ALICE, authorized=False
        )


async def test_the_scenario_sees_a_denial(node: Node) -> None:
    """The scenario above can tell an authorizer that refuses from one that does not."""
    async with running_node() as open_node:
        node.allow(acl(GROUP, "*", Op.ALL), acl(TXN_ID, "*", Op.ALL), acl(TOPIC, "a", Op.ALL))
        assert await scenario(node, ALICE, authorized=True) != await scenario(
            open_node, ALICE, authorized=False
        )


# The denials in Kafka's words, at a bounded rate.


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == AUTHORIZER_LOGGER]


async def test_a_denial_is_logged_in_kafkas_words(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.allow(acl(GROUP, G, Op.READ, DENY), acl(GROUP, G, Op.DESCRIBE))
    with caplog.at_level(logging.INFO, logger=AUTHORIZER_LOGGER):
        await heartbeat_code(node, G)
        await heartbeat_code(node, "other")
        await node.call(
            ApiKey.OFFSET_COMMIT, commit_request("other", {("a", 0): 1}), ADMIN
        )  # a super user: nothing logged
        node.allow(acl(GROUP, "other", Op.READ))
        await node.call(ApiKey.OFFSET_COMMIT, commit_request("other", {("b", 0): 1, ("b", 1): 2}))
    assert messages(caplog) == [
        "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource = "
        "Group:LITERAL:orders-app for request = Heartbeat with resourceRefCount = 1 based on "
        "rule MatchingAcl(acl=StandardAcl(resourceType=GROUP, resourceName=orders-app, "
        "patternType=LITERAL, principal=User:alice, host=*, operation=READ, "
        "permissionType=DENY))",
        "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource = "
        "Group:LITERAL:other for request = Heartbeat with resourceRefCount = 1 based on rule "
        "DefaultDeny",
        "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource = "
        "Topic:LITERAL:b for request = OffsetCommit with resourceRefCount = 1 based on rule "
        "DefaultDeny",
    ]
    assert node.authorizer.denials == {"Heartbeat": 2, "OffsetCommit": 1}


async def test_denials_are_logged_at_a_bounded_rate_the_rest_counted() -> None:
    clock = Clock()
    async with running_node(log_per_second=2, clock=clock) as node:
        caplog_records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = caplog_records.append  # type: ignore[method-assign]
        logger = logging.getLogger(AUTHORIZER_LOGGER)
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            for _ in range(5):
                assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert len(caplog_records) == 2
            clock.now += 1.0
            assert await heartbeat_code(node, G) == ErrorCode.GROUP_AUTHORIZATION_FAILED
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
    lines = [record.getMessage() for record in caplog_records]
    assert len(lines) == 3
    assert lines[2].endswith("based on rule DefaultDeny (3 more denials not logged)")
    assert node.authorizer.denials["Heartbeat"] == 6
