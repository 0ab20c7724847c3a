"""The ACL and SCRAM credential APIs over real sockets, in process: CreateAcls, DescribeAcls
and DeleteAcls round trip into every node's image; the authorizer's Cluster checks and
SECURITY_DISABLED without one; SCRAM credentials upserted, described without their keys,
and good for a SCRAM exchange; both survive a restart on the SQLite log; and a request for
the security partition sent on to the node that owns it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import scramp
from wire_client import WireClient, until

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode, NotCoordinatorError
from coordinator_protocol.security import (
    CreateAclsRequest,
    CreateAclsRequestCreation,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
)
from coordinator_server.app import CoordinatorApp
from coordinator_server.authentication.scram import ScramSaslServer, salted_password
from coordinator_server.authorizer.acls import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.config import CoordinatorConfig
from coordinator_server.node_address import NodeAddress
from coordinator_server.node_client import NodeClient, TcpNodeConnector, node_client_id
from coordinator_server.runtime.api import RequestContext
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.replies import PendingReply, Reply
from coordinator_server.service.security_service import SecurityService
from coordinator_server.storage.memory import InMemoryLog

pytestmark = pytest.mark.timeout(60)

PARTITIONS = 4
SECURITY_APIS = {29, 30, 31, 50, 51}

GROUP_READ = {
    "resource_type": 3,
    "resource_name": "orders-consumers",
    "resource_pattern_type": 3,
    "principal": "User:alice",
    "host": "*",
    "operation": 3,
    "permission_type": 3,
}
ANY_ACL = {
    "resource_type_filter": 1,
    "pattern_type_filter": 1,
    "operation": 1,
    "permission_type": 1,
}


def config(**settings: Any) -> CoordinatorConfig:
    return CoordinatorConfig(
        port=0, metrics_port=-1, offsets_topic_partitions=PARTITIONS, **settings
    )


async def started(
    settings: CoordinatorConfig, *, authorizer: bool, log: InMemoryLog | None = None
) -> CoordinatorApp:
    """A node; with `authorizer`, one that checks requests against the ACLs of its image
    (as the wiring of --authorizer acls does), its cache dropped at every change."""
    if authorizer:
        settings = settings.model_copy(update={"authorizer": "acls"})
    app = CoordinatorApp(settings, log=log)
    await app.start()
    return app


@pytest.fixture
async def node() -> AsyncIterator[CoordinatorApp]:
    # Nobody authenticates over plain TCP: the tests' client is User:ANONYMOUS, a super user.
    app = await started(
        config(super_users="User:ANONYMOUS"), authorizer=True, log=InMemoryLog(PARTITIONS)
    )
    yield app
    await app.shutdown()


@pytest.fixture
async def client(node: CoordinatorApp) -> AsyncIterator[WireClient]:
    assert node.address is not None
    wire = await WireClient.connect(*node.address)
    yield wire
    await wire.close()


def acl_names(app: CoordinatorApp) -> list[str]:
    return sorted(acl.resource_name for acl in app.security.image.acls)


async def test_acls_round_trip_and_reach_the_image_within_a_second(
    node: CoordinatorApp, client: WireClient
) -> None:
    versions = await client.call(ApiKey.API_VERSIONS, {})
    assert {key["api_key"] for key in versions["api_keys"]} >= SECURITY_APIS
    assert node.security.authorizer is not None
    dropped: list[int] = []
    node.security.add_listener(lambda: dropped.append(1))

    created = await client.call(
        ApiKey.CREATE_ACLS,
        {
            "creations": [
                GROUP_READ,
                {**GROUP_READ, "resource_name": "orders-", "resource_pattern_type": 4},
            ]
        },
    )
    answered = time.monotonic()
    assert created["results"] == [
        {"error_code": 0, "error_message": None},
        {"error_code": 0, "error_message": None},
    ]
    await until(lambda: len(acl_names(node)) == 2, timeout=1)
    assert time.monotonic() - answered < 1
    assert dropped, "the authorizer's cache is told of the change"

    described = await client.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
    assert described["error_code"] == 0
    assert [(r["resource_name"], r["pattern_type"]) for r in described["resources"]] == [
        ("orders-", 4),
        ("orders-consumers", 3),
    ]
    assert described["resources"][1]["acls"] == [
        {"principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}
    ]

    deleted = await client.call(
        ApiKey.DELETE_ACLS, {"filters": [{**ANY_ACL, "pattern_type_filter": 4}, ANY_ACL]}
    )
    assert [len(result["matching_acls"]) for result in deleted["filter_results"]] == [1, 2]
    await until(lambda: acl_names(node) == [], timeout=1)
    described = await client.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
    assert described["resources"] == []


async def test_a_refused_creation_is_answered_alone(client: WireClient) -> None:
    created = await client.call(
        ApiKey.CREATE_ACLS, {"creations": [GROUP_READ, {**GROUP_READ, "principal": "alice"}]}
    )
    codes = [result["error_code"] for result in created["results"]]
    assert codes == [0, ErrorCode.INVALID_REQUEST]


async def test_without_an_authorizer_the_acl_apis_are_security_disabled() -> None:
    app = await started(config(), authorizer=False, log=InMemoryLog(PARTITIONS))
    try:
        assert app.address is not None
        wire = await WireClient.connect(*app.address)
        try:
            created = await wire.call(ApiKey.CREATE_ACLS, {"creations": [GROUP_READ]})
            assert created["results"][0]["error_code"] == ErrorCode.SECURITY_DISABLED
            assert created["results"][0]["error_message"] == "No Authorizer is configured."
            described = await wire.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
            assert described["error_code"] == ErrorCode.SECURITY_DISABLED
            deleted = await wire.call(ApiKey.DELETE_ACLS, {"filters": [ANY_ACL]})
            assert deleted["filter_results"][0]["error_code"] == ErrorCode.SECURITY_DISABLED
            # The SCRAM APIs need no authorizer (Kafka's allow every request without one).
            upserted = await wire.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, upsertion("bob"))
            assert upserted["results"] == [{"user": "bob", "error_code": 0, "error_message": None}]
        finally:
            await wire.close()
    finally:
        await app.shutdown()


async def test_every_api_needs_its_cluster_operation() -> None:
    # No super user, no ACL: User:ANONYMOUS may do nothing.
    app = await started(config(), authorizer=True, log=InMemoryLog(PARTITIONS))
    try:
        assert app.address is not None
        wire = await WireClient.connect(*app.address)
        try:
            failed = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            created = await wire.call(ApiKey.CREATE_ACLS, {"creations": [GROUP_READ, GROUP_READ]})
            assert [r["error_code"] for r in created["results"]] == [failed, failed]
            described = await wire.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
            assert described["error_code"] == failed
            deleted = await wire.call(ApiKey.DELETE_ACLS, {"filters": [ANY_ACL]})
            assert deleted["filter_results"][0]["error_code"] == failed
            users = await wire.call(
                ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": "bob"}]}
            )
            assert users["error_code"] == failed
            assert users["results"][0]["user"] == "bob"
            altered = await wire.call(
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                {**upsertion("zed"), "deletions": [{"name": "amy", "mechanism": 1}]},
            )
            assert [(r["user"], r["error_code"]) for r in altered["results"]] == [
                ("amy", failed),
                ("zed", failed),
            ]
        finally:
            await wire.close()
        assert app.security.authorizer is not None
        assert app.security.authorizer.denials["CreateAcls"] == 1
        assert app.security.authorizer.denials["AlterUserScramCredentials"] == 1
    finally:
        await app.shutdown()


def upsertion(user: str, password: str = "bob-secret", mechanism: int = 1) -> dict[str, Any]:
    salt = b"0123456789abcdef"
    name = "SCRAM-SHA-256" if mechanism == 1 else "SCRAM-SHA-512"
    return {
        "upsertions": [
            {
                "name": user,
                "mechanism": mechanism,
                "iterations": 4096,
                "salt": salt,
                "salted_password": salted_password(name, password, salt, 4096),
            }
        ]
    }


async def test_scram_credentials_are_described_without_keys_and_authenticate(
    node: CoordinatorApp, client: WireClient
) -> None:
    altered = await client.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, upsertion("bob"))
    assert altered["results"] == [{"user": "bob", "error_code": 0, "error_message": None}]
    altered = await client.call(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, upsertion("bob", "other", mechanism=2)
    )
    assert altered["results"][0]["error_code"] == 0
    described = await client.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
    assert described == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "results": [
            {
                "user": "bob",
                "error_code": 0,
                "error_message": None,
                "credential_infos": [
                    {"mechanism": 1, "iterations": 4096},
                    {"mechanism": 2, "iterations": 4096},
                ],
            }
        ],
    }
    missing = await client.call(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": "nobody"}]}
    )
    assert missing["results"][0]["error_code"] == ErrorCode.RESOURCE_NOT_FOUND

    # The image holds what the SASL mechanism checks a client's proof against.
    await until(
        lambda: node.security.image.scram_users() == {"bob": ["SCRAM-SHA-256", "SCRAM-SHA-512"]},
        timeout=1,
    )
    for mechanism, password in (("SCRAM-SHA-256", "bob-secret"), ("SCRAM-SHA-512", "other")):
        scram = scramp.ScramClient([mechanism], "bob", password)
        sasl = ScramSaslServer(mechanism, node.security.image)
        scram.set_server_first(sasl.evaluate(scram.get_client_first().encode()).decode())
        scram.set_server_final(sasl.evaluate(scram.get_client_final().encode()).decode())
        assert sasl.complete and sasl.principal == "User:bob"

    deleted = await client.call(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [{"name": "bob", "mechanism": 1}]}
    )
    assert deleted["results"][0]["error_code"] == 0
    await until(lambda: node.security.image.scram_users() == {"bob": ["SCRAM-SHA-512"]}, timeout=1)


async def test_acls_and_credentials_survive_a_restart_on_the_sqlite_log(tmp_path: Path) -> None:
    settings = config(data_dir=tmp_path, super_users="User:ANONYMOUS")
    app = await started(settings, authorizer=True)
    try:
        assert app.address is not None
        wire = await WireClient.connect(*app.address)
        try:
            created = await wire.call(ApiKey.CREATE_ACLS, {"creations": [GROUP_READ]})
            assert created["results"][0]["error_code"] == 0
            altered = await wire.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, upsertion("bob"))
            assert altered["results"][0]["error_code"] == 0
        finally:
            await wire.close()
    finally:
        await app.shutdown()

    again = await started(settings, authorizer=True)
    try:
        # The start waits for the image: it holds them by the time the node is ready.
        assert acl_names(again) == ["orders-consumers"]
        assert again.security.image.scram_credential("bob", "SCRAM-SHA-256") is not None
        assert again.address is not None
        wire = await WireClient.connect(*again.address)
        try:
            described = await wire.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
            assert [r["resource_name"] for r in described["resources"]] == ["orders-consumers"]
            users = await wire.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {})
            assert [r["user"] for r in users["results"]] == ["bob"]
        finally:
            await wire.close()
    finally:
        await again.shutdown()


# Forwarding: a node that does not own the security partition sends the request on.


class Elsewhere:
    """A runtime that must never be asked: the security partition is another node's."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the runtime was asked for {name}")


def other_node(
    owner: Callable[[int], NodeAddress | None], *, timeout_s: float = 5.0
) -> SecurityService:
    """Node 2's security service, its runtime unused: partition 0 is placed elsewhere."""
    return SecurityService(
        Elsewhere(),  # type: ignore[arg-type]
        node_id=2,
        placement=owner,
        peers=NodeClient(2, TcpNodeConnector(), timeout_s=timeout_s),
        authorizer=None,
    )


async def answer_of(reply: Reply) -> Any:
    if isinstance(reply, PendingReply):
        return await asyncio.wait_for(reply.future, 10)
    return reply


CLIENT = RequestContext("admin", "/127.0.0.1")
EVERY_USER = DescribeUserScramCredentialsRequest(users=None)


async def test_a_request_is_sent_on_to_the_owner_and_its_answer_relayed(
    node: CoordinatorApp,
) -> None:
    assert node.address is not None
    owner = NodeAddress(0, *node.address)
    service = other_node(lambda partition: owner if partition == 0 else None)
    # Node 2 has no authorizer: the ACL APIs are refused there, before anything is sent.
    refused = await answer_of(
        service.create_acls(
            CreateAclsRequest(creations=[CreateAclsRequestCreation(**GROUP_READ)]), CLIENT
        )
    )
    assert refused.results[0].error_code == ErrorCode.SECURITY_DISABLED
    service.authorizer = node.security.authorizer
    created = await answer_of(
        service.create_acls(
            CreateAclsRequest(creations=[CreateAclsRequestCreation(**GROUP_READ)]), CLIENT
        )
    )
    assert isinstance(created, CreateAclsResponse)
    assert created.results[0].error_code == 0
    assert service.forwarded == 1
    await until(lambda: acl_names(node) == ["orders-consumers"], timeout=1)
    described = await answer_of(service.describe_acls(DescribeAclsRequest(**ANY_ACL), CLIENT))
    assert isinstance(described, DescribeAclsResponse)
    assert [r.resource_name for r in described.resources] == ["orders-consumers"]


async def test_a_request_another_node_sent_on_is_not_sent_on_again() -> None:
    service = other_node(lambda partition: NodeAddress(7, "127.0.0.1", 1))
    forwarded_ctx = RequestContext(node_client_id(5), "/127.0.0.1")
    answer = await answer_of(service.describe_user_scram_credentials(EVERY_USER, forwarded_ctx))
    assert answer.error_code == ErrorCode.NOT_CONTROLLER
    assert service.forwarded == 0


async def test_no_owner_or_an_owner_that_does_not_answer_is_request_timed_out() -> None:
    nobody = other_node(lambda partition: None)
    answer = await answer_of(nobody.describe_user_scram_credentials(EVERY_USER, CLIENT))
    assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT
    # A port nothing listens on: refused at once.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    gone = other_node(lambda partition: NodeAddress(1, "127.0.0.1", port))
    answer = await answer_of(gone.describe_user_scram_credentials(EVERY_USER, CLIENT))
    assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert "did not answer" in (answer.error_message or "")


async def test_a_write_is_answered_and_seen_only_once_the_log_commits_it() -> None:
    log = InMemoryLog(PARTITIONS, auto_commit=False)
    app = await started(config(super_users="User:ANONYMOUS"), authorizer=True, log=log)
    try:
        assert app.address is not None
        wire = await WireClient.connect(*app.address)
        try:
            answer = wire.send(ApiKey.CREATE_ACLS, {"creations": [GROUP_READ]})
            await asyncio.sleep(0.3)
            assert not answer.done()
            assert acl_names(app) == []
            log.writer.commit(0)
            assert (await asyncio.wait_for(answer, 5))["results"][0]["error_code"] == 0
            await until(lambda: acl_names(app) == ["orders-consumers"], timeout=1)
        finally:
            await wire.close()
    finally:
        await app.shutdown()


async def test_a_security_partition_not_served_here_is_not_controller(
    node: CoordinatorApp, client: WireClient
) -> None:
    assert node.runtime is not None
    node.runtime.fail_partition(0, NotCoordinatorError("the partition moved"))
    created = await client.call(ApiKey.CREATE_ACLS, {"creations": [GROUP_READ]})
    assert created["results"][0]["error_code"] == ErrorCode.NOT_CONTROLLER
    described = await client.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
    assert described["error_code"] == ErrorCode.NOT_CONTROLLER
    users = await client.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": "a"}]})
    assert users["error_code"] == ErrorCode.NOT_CONTROLLER
    assert users["results"] == [
        {
            "user": "a",
            "error_code": ErrorCode.NOT_CONTROLLER,
            "error_message": users["error_message"],
            "credential_infos": [],
        }
    ]


async def test_with_the_data_clusters_acls_describe_answers_them_and_writes_are_refused() -> None:
    """--authorizer kafka: the ACLs in force are the data cluster's. DescribeAcls answers
    them, without the log; CreateAcls and DeleteAcls are refused, the ACLs being changed
    where they come from."""
    data = StandardAuthorizerData()
    data.add(
        StandardAcl(
            ResourceType.GROUP,
            "billing",
            PatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    admin = RequestContext("admin", "/127.0.0.1", "User:admin")
    service = SecurityService(
        Elsewhere(),  # type: ignore[arg-type]
        node_id=2,
        authorizer=RequestAuthorizer(StandardAuthorizerData(["User:admin"])),
        external_acls=data,
    )
    described = await answer_of(
        service.describe_acls(
            DescribeAclsRequest(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            ),
            admin,
        )
    )
    assert described.error_code == ErrorCode.NONE
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [
        ("billing", ["User:alice"])
    ]
    created = await answer_of(
        service.create_acls(
            CreateAclsRequest(creations=[CreateAclsRequestCreation(**GROUP_READ)]), admin
        )
    )
    assert [r.error_code for r in created.results] == [ErrorCode.INVALID_REQUEST]
    assert "kafka-acls.sh" in (created.results[0].error_message or "")
    deleted = await answer_of(
        service.delete_acls(
            DeleteAclsRequest(
                filters=[
                    DeleteAclsRequestFilter(
                        resource_type_filter=1,
                        pattern_type_filter=1,
                        operation=1,
                        permission_type=1,
                    )
                ]
            ),
            admin,
        )
    )
    assert [r.error_code for r in deleted.filter_results] == [ErrorCode.INVALID_REQUEST]
    assert len(data) == 1
