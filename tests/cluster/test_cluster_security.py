"""ACLs in a two-node cluster on Apache Kafka, both nodes in process: an ACL created through
either node (the one that owns the security partition, or the other, which sends the
request on) is in the other node's image within a second, and stays in both the log and
the images when the security partition is handed over at a planned stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import SESSION_TIMEOUT_MS
from wire_client import WireClient

from coordinator_client import CoordinatorClient
from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.security import CreateAclsRequest, CreateAclsRequestCreation
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 4
VISIBLE_WITHIN_S = 1.0
ANY_ACL = {
    "resource_type_filter": 1,
    "pattern_type_filter": 1,
    "operation": 1,
    "permission_type": 1,
}


def group_read(name: str) -> dict[str, Any]:
    return {
        "resource_type": 3,
        "resource_name": name,
        "resource_pattern_type": 3,
        "principal": "User:alice",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }


def settings(broker: ApacheKafkaBroker, topic: str, node_id: int) -> CoordinatorConfig:
    return CoordinatorConfig(
        port=0,
        metrics_port=-1,
        bootstrap_servers=broker.bootstrap,
        offsets_topic=topic,
        offsets_topic_partitions=PARTITIONS,
        offsets_topic_replication_factor=1,
        cluster="on",
        cluster_session_timeout_ms=SESSION_TIMEOUT_MS,
        cluster_heartbeat_interval_ms=1000,
        node_id=node_id,
        transactions="off",
        # The nodes reach each other, and the tests reach them, unauthenticated.
        super_users="User:ANONYMOUS",
        authorizer="acls",
    )


async def start_node(broker: ApacheKafkaBroker, topic: str, node_id: int) -> CoordinatorApp:
    app = CoordinatorApp(settings(broker, topic, node_id))
    await asyncio.wait_for(app.start(), 120)
    return app


def acl_names(app: CoordinatorApp) -> set[str]:
    return {acl.resource_name for acl in app.security.image.acls}


async def created_through(app: CoordinatorApp, name: str) -> float:
    """CreateAcls of `name` through `app`, retried while the partition moves; the time its
    answer came."""
    assert app.address is not None
    wire = await WireClient.connect(*app.address)
    try:
        deadline = time.monotonic() + 60
        while True:
            answer = await wire.call(ApiKey.CREATE_ACLS, {"creations": [group_read(name)]})
            (result,) = answer["results"]
            if result["error_code"] == 0:
                return time.monotonic()
            assert result["error_code"] in (7, 41), result  # REQUEST_TIMED_OUT, NOT_CONTROLLER
            assert time.monotonic() < deadline, result
            await asyncio.sleep(0.2)
    finally:
        await wire.close()


async def seen_after(app: CoordinatorApp, name: str, since: float) -> float:
    """How long after `since` the ACL `name` is in `app`'s image (polled every 5 ms)."""
    deadline = since + 10
    while name not in acl_names(app):
        assert time.monotonic() < deadline, f"{name} never reached node {app.config.node_id}"
        await asyncio.sleep(0.005)
    return time.monotonic() - since


async def described(app: CoordinatorApp) -> set[str]:
    assert app.address is not None
    wire = await WireClient.connect(*app.address)
    try:
        deadline = time.monotonic() + 60
        while True:
            answer = await wire.call(ApiKey.DESCRIBE_ACLS, ANY_ACL)
            if answer["error_code"] == 0:
                return {resource["resource_name"] for resource in answer["resources"]}
            assert answer["error_code"] in (7, 41), answer
            assert time.monotonic() < deadline, answer
            await asyncio.sleep(0.2)
    finally:
        await wire.close()


@pytest.fixture
async def apps() -> AsyncIterator[list[CoordinatorApp]]:
    started: list[CoordinatorApp] = []
    yield started
    for app in reversed(started):
        await app.shutdown()


async def settled(first: CoordinatorApp, second: CoordinatorApp) -> int:
    """Until both nodes name the same owner of every partition, each owning some; the node
    id of the security partition's owner."""
    assert first.cluster is not None and second.cluster is not None
    deadline = time.monotonic() + 60
    while True:
        owners = [
            [
                None if (o := app.cluster.placement(p)) is None else o.node_id
                for p in range(PARTITIONS)
            ]  # type: ignore[union-attr]
            for app in (first, second)
        ]
        if owners[0] == owners[1] and set(owners[0]) == {1, 2}:
            owner = owners[0][0]
            assert owner is not None
            return owner
        assert time.monotonic() < deadline, owners
        await asyncio.sleep(0.1)


async def test_acls_reach_the_other_node_within_a_second_and_survive_a_handover(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, apps: list[CoordinatorApp]
) -> None:
    first = await start_node(kafka_broker, unique_topic, 1)
    apps.append(first)
    second = await start_node(kafka_broker, unique_topic, 2)
    apps.append(second)
    owner_id = await settled(first, second)
    owner, other = (first, second) if owner_id == 1 else (second, first)

    delays: list[float] = []
    # Through the node that does not own the security partition: sent on to the owner.
    answered = await created_through(other, "through-the-other")
    delays.append(await seen_after(owner, "through-the-other", answered))
    delays.append(await seen_after(other, "through-the-other", answered))
    assert other.security.service is not None and other.security.service.forwarded >= 1
    # Through the owner.
    answered = await created_through(owner, "through-the-owner")
    delays.append(await seen_after(other, "through-the-owner", answered))
    print(f"ACL visibility delays on the nodes (s): {[round(d, 3) for d in delays]}")
    assert max(delays) < VISIBLE_WITHIN_S, delays
    assert await described(other) == {"through-the-other", "through-the-owner"}

    # A planned stop hands the owner's partitions, the security partition among them, over.
    apps.remove(owner)
    await owner.shutdown()
    assert other.cluster is not None
    deadline = time.monotonic() + 60
    while (placed := other.cluster.placement(0)) is None or placed.node_id != other.config.node_id:
        assert time.monotonic() < deadline, "the security partition was never taken over"
        await asyncio.sleep(0.1)
    # The new owner's shard loaded the ACLs from the log; its image kept them throughout.
    assert await described(other) == {"through-the-other", "through-the-owner"}
    assert acl_names(other) == {"through-the-other", "through-the-owner"}
    answered = await created_through(other, "after-the-handover")
    assert await seen_after(other, "after-the-handover", answered) < VISIBLE_WITHIN_S


async def test_on_an_authenticating_listener_nodes_send_on_as_themselves(
    kafka_broker: ApacheKafkaBroker,
    unique_topic: str,
    apps: list[CoordinatorApp],
    tmp_path: Path,
) -> None:
    """SASL on the listener: the node that does not own the security partition sends the
    admin's CreateAcls on to the owner authenticated as itself (--inter-node-command-config),
    and a node without credentials could not."""
    users = tmp_path / "users"
    users.write_text("coordinator-node:node-secret\nadmin:admin-secret\n")
    node_properties = tmp_path / "node.properties"
    node_properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=coordinator-node\nsasl.password=node-secret\n"
    )
    secured = {
        "listener_security_protocol": "SASL_PLAINTEXT",
        "sasl_plain_users_file": users,
        "super_users": "User:coordinator-node;User:admin",
        "inter_node_command_config": node_properties,
    }
    nodes = []
    for node_id in (1, 2):
        config = settings(kafka_broker, unique_topic, node_id).model_copy(update=secured)
        app = CoordinatorApp(config)
        await asyncio.wait_for(app.start(), 120)
        apps.append(app)
        nodes.append(app)
    owner_id = await settled(nodes[0], nodes[1])
    owner, other = (nodes[0], nodes[1]) if owner_id == 1 else (nodes[1], nodes[0])
    assert other.address is not None
    admin = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        }
    )
    async with CoordinatorClient(
        f"{other.address[0]}:{other.address[1]}", security=admin
    ) as client:
        created = await client.create_acls(
            CreateAclsRequest(creations=[CreateAclsRequestCreation(**group_read("secured"))])
        )
    assert [result.error_code for result in created.results] == [0]
    assert other.security.service is not None and other.security.service.forwarded >= 1
    answered = time.monotonic()
    assert await seen_after(owner, "secured", answered) < VISIBLE_WITHIN_S
    # The owner authenticated the other node as a node: a PLAIN success beside the admin's.
    assert owner.server_metrics.authentications["PLAIN", "success"] >= 1
