"""A node's group and transaction services with an authorizer, in process on the in-memory
log.

`running_node` starts the server's own wiring (CoordinatorApp: its runtime, shards and
partitions, a log that commits each append) and builds, on its runtime, the two services
twice: with a `RequestAuthorizer` over ACLs the test chooses (`Node.call`), and without one
(`Node.call_open`), as `app.py` builds them. A request goes to the handler of its API as a
connection hands it over, with a `RequestContext` of the principal the test names, and its
answer is awaited the way the connection awaits it.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.messages import (
    DescribeGroupsRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    Message,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
)
from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    DescribeTransactionsRequest,
    InitProducerIdRequest,
)
from coordinator_server.app import CoordinatorApp
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.config import CoordinatorConfig
from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.node_address import NodeAddress
from coordinator_server.runtime.api import RequestContext
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.consumer_group_service import ConsumerGroupService
from coordinator_server.service.group_service import GroupCoordinatorService
from coordinator_server.service.replies import Handler, PendingReply, Reply
from coordinator_server.service.transaction_service import TransactionCoordinatorService
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4
LOG_TOPIC = "__coordinator_offsets"
ALICE = "User:alice"
ADMIN = "User:admin"
"""A super user: may do anything, whatever the ACLs."""
HOST = "/127.0.0.1"
DATA_TOPICS = {"orders": 4, "secret": 2}
"""The data cluster's topics, which consumer groups are assigned from."""

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
GROUP = ResourceType.GROUP
TOPIC = ResourceType.TOPIC
CLUSTER = ResourceType.CLUSTER
TXN_ID = ResourceType.TRANSACTIONAL_ID
Op = AclOperation

# How long an answer may take: the in-memory log commits at once.
_ANSWER_TIMEOUT_S = 10.0


def acl(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    principal: str = ALICE,
    pattern: PatternType = LITERAL,
    host: str = "*",
) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern, principal, host, operation, permission)


def context(principal: str = ALICE) -> RequestContext:
    return RequestContext("authorization-test", HOST, principal)


async def answer(reply: Reply) -> Any:
    """What the connection would write: the response, or its future's result, or what
    `on_error` makes of its failure."""
    if not isinstance(reply, PendingReply):
        return reply
    try:
        return await asyncio.wait_for(asyncio.shield(reply.future), _ANSWER_TIMEOUT_S)
    except Exception as error:
        if reply.on_error is None:
            raise
        return reply.on_error(error)


class Node:
    def __init__(
        self,
        app: CoordinatorApp,
        data: StandardAuthorizerData,
        authorizer: RequestAuthorizer,
        handlers: Mapping[int, Handler],
        open_handlers: Mapping[int, Handler],
        groups: GroupCoordinatorService,
    ) -> None:
        self.app = app
        self.data = data
        self.authorizer = authorizer
        self._handlers = handlers
        self._open_handlers = open_handlers
        self.groups = groups

    async def call(self, api_key: ApiKey, request: Message, principal: str = ALICE) -> Any:
        """The request, as `principal` sends it, to the services with the authorizer."""
        return await answer(self._handlers[api_key](request, context(principal)))

    async def call_open(self, api_key: ApiKey, request: Message, principal: str = ALICE) -> Any:
        """The request, as `principal` sends it, to the services without an authorizer."""
        return await answer(self._open_handlers[api_key](request, context(principal)))

    async def admin(self, api_key: ApiKey, request: Message) -> Any:
        """The request as the super user sends it: what the state is, whoever may see it."""
        return await self.call(api_key, request, ADMIN)

    def allow(self, *acls: StandardAcl) -> None:
        """The ACLs added, and the authorizer told (as the log's ACL records tell it)."""
        for each in acls:
            self.data.add(each)
        self.authorizer.acls_changed()

    def remove(self, *acls: StandardAcl) -> None:
        for each in acls:
            assert self.data.remove(each)
        self.authorizer.acls_changed()

    def partition_for(self, key: str) -> int:
        return self.groups.partition_for(key)

    # Requests the tests share.

    async def commit_as_admin(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        response = await self.admin(ApiKey.OFFSET_COMMIT, commit_request(group, offsets))
        codes = {p.error_code for t in response.topics for p in t.partitions}
        assert codes == {0}, response

    async def offsets_as_admin(self, group: str) -> dict[tuple[str, int], int]:
        every = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group)])
        response = await self.admin(ApiKey.OFFSET_FETCH, every)
        (fetched,) = response.groups
        assert fetched.error_code == 0, fetched
        return {
            (topic.name, p.partition_index): p.committed_offset
            for topic in fetched.topics
            for p in topic.partitions
        }

    async def group_state_as_admin(self, group: str) -> str:
        response = await self.admin(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[group]))
        (described,) = response.groups
        return str(described.group_state)

    async def join_as_admin(self, group: str) -> str:
        """A member of `group` (a new group: its leader); its member id."""
        first = await self.admin(ApiKey.JOIN_GROUP, join_request(group))
        if first.error_code == 0:
            return str(first.member_id)
        # Kafka's JoinGroup v4+: a new member is given its id and joins again with it.
        again = await self.admin(ApiKey.JOIN_GROUP, join_request(group, first.member_id))
        assert again.error_code == 0, again
        return str(again.member_id)

    async def init_as_admin(self, transactional_id: str) -> tuple[int, int]:
        response = await self.admin(
            ApiKey.INIT_PRODUCER_ID,
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=30_000),
        )
        assert response.error_code == 0, response
        return response.producer_id, response.producer_epoch

    async def open_transaction_as_admin(
        self, transactional_id: str, *, topics: dict[str, list[int]], group: str | None = None
    ) -> tuple[int, int]:
        """An ongoing transaction of `transactional_id` holding `topics` (and `group`'s
        offsets); the producer's id and epoch."""
        producer_id, epoch = await self.init_as_admin(transactional_id)
        if topics:
            added = await self.admin(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                AddPartitionsToTxnRequest(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    topics=[
                        AddPartitionsToTxnRequestTopic(name=name, partitions=partitions)
                        for name, partitions in topics.items()
                    ],
                ),
            )
            assert added.reported_error_code() == 0, added
        if group is not None:
            offsets = await self.admin(
                ApiKey.ADD_OFFSETS_TO_TXN,
                AddOffsetsToTxnRequest(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    group_id=group,
                ),
            )
            assert offsets.error_code == 0, offsets
        return producer_id, epoch

    async def transaction_as_admin(self, transactional_id: str) -> Any:
        response = await self.admin(
            ApiKey.DESCRIBE_TRANSACTIONS,
            DescribeTransactionsRequest(transactional_ids=[transactional_id]),
        )
        (state,) = response.transaction_states
        return state


def commit_request(
    group: str, offsets: dict[tuple[str, int], int], **fields: Any
) -> OffsetCommitRequest:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    return OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitRequestTopic(name=name, partitions=partitions)
            for name, partitions in by_topic.items()
        ],
        **fields,
    )


def fetch_request(group: str, topics: dict[str, list[int]] | None) -> OffsetFetchRequest:
    return OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup(
                group_id=group,
                topics=None
                if topics is None
                else [
                    OffsetFetchRequestTopic(name=name, partition_indexes=indexes)
                    for name, indexes in topics.items()
                ],
            )
        ]
    )


def join_request(group: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=1_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


@asynccontextmanager
async def running_node(
    *, allow_everyone_if_no_acl_found: bool = False, **authorizer_settings: Any
) -> AsyncIterator[Node]:
    topics = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115
    with topics:
        json.dump(DATA_TOPICS, topics)
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        offsets_topic_partitions=PARTITIONS,
        transaction_max_timeout_ms=60_000,
        # A new group's first member joins at once, not after Kafka's 3 s of waiting for
        # others.
        group_initial_rebalance_delay_ms=0,
        group_consumer_topics_file=topics.name,
        group_consumer_assignment_interval_ms=0,
    )
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS, auto_commit=True))
    await app.start()
    try:
        assert app.runtime is not None and app.service is not None and app.address is not None
        data = StandardAuthorizerData(
            [ADMIN], allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found
        )
        authorizer = RequestAuthorizer(data, **authorizer_settings)
        node = NodeAddress(config.node_id, config.advertised, app.address[1])
        completions = TxnMarkerChannel(app.runtime, None, coordinator_epoch=lambda _: 0)
        handlers: dict[int, Handler] = {}
        open_handlers: dict[int, Handler] = {}
        authorized_groups = None
        for held, given in ((handlers, authorizer), (open_handlers, None)):
            groups = GroupCoordinatorService(
                app.runtime,
                PARTITIONS,
                node,
                limits=app.service.limits,
                cluster_id=config.cluster_name,
                authorizer=given,
            )
            groups.serve_transactions()
            transactions = TransactionCoordinatorService(
                app.runtime,
                groups.routing,
                limits=groups.limits,
                sliced=groups.sliced,
                log_topic=LOG_TOPIC,
                completions=completions,
                max_id_length=config.max_id_length,
                authorizer=given,
            )
            held.update(groups.handlers)
            held.update(transactions.handlers)
            held.update(
                ConsumerGroupService(app.runtime, groups.routing, groups.limits, given).handlers
            )
            if given is not None:
                authorized_groups = groups
        assert authorized_groups is not None
        completions.start()
        try:
            yield Node(app, data, authorizer, handlers, open_handlers, authorized_groups)
        finally:
            await completions.stop()
    finally:
        await app.shutdown()
        await asyncio.to_thread(Path(topics.name).unlink)
