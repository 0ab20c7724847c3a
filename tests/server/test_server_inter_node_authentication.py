"""A node reaches another as `--inter-node-command-config` says: authenticated, as its own
principal, with what that principal may do; a node that does not authenticate is not
served. In process, on an in-memory log, over real sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.security import DescribeAclsRequest, DescribeAclsResponse
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.node_address import NodeAddress
from coordinator_server.node_client import (
    UNREACHABLE,
    NodeClient,
    SecureNodeConnector,
    TcpNodeConnector,
)
from coordinator_server.starting import StartError
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 2
EVERY_ACL = DescribeAclsRequest(
    resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[CoordinatorApp]:
    users = tmp_path / "users"
    users.write_text("coordinator-node:node-secret\napp:app-secret\n")
    config = CoordinatorConfig(
        port=0,
        metrics_port=-1,
        offsets_topic_partitions=PARTITIONS,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_plain_users_file=users,
        authorizer="acls",
        super_users="User:coordinator-node",
    )
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    await app.start()
    yield app
    await app.shutdown()


def plain(user: str, password: str) -> ClientSecurity:
    return ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }
    )


def address(app: CoordinatorApp) -> NodeAddress:
    assert app.address is not None
    return NodeAddress(2, *app.address)


async def test_a_node_authenticates_as_its_principal(node: CoordinatorApp) -> None:
    client = NodeClient(1, SecureNodeConnector(plain("coordinator-node", "node-secret")))
    answer = await client.send(address(node), EVERY_ACL)
    assert isinstance(answer, DescribeAclsResponse)
    assert answer.error_code == ErrorCode.NONE
    assert node.server_metrics.authentications["PLAIN", "success"] == 1


async def test_what_the_principal_may_not_do_is_refused(node: CoordinatorApp) -> None:
    client = NodeClient(1, SecureNodeConnector(plain("app", "app-secret")))
    answer = await client.send(address(node), EVERY_ACL)
    assert isinstance(answer, DescribeAclsResponse)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_a_node_that_does_not_authenticate_is_not_served(node: CoordinatorApp) -> None:
    client = NodeClient(1, TcpNodeConnector(), timeout_s=5)
    with pytest.raises(UNREACHABLE):
        await client.send(address(node), EVERY_ACL)
    assert node.server_metrics.connections_closed["not_authenticated"] == 1


async def test_wrong_node_credentials_are_refused(node: CoordinatorApp) -> None:
    client = NodeClient(1, SecureNodeConnector(plain("coordinator-node", "wrong")), timeout_s=5)
    with pytest.raises(Exception, match="Invalid username or password"):
        await client.send(address(node), EVERY_ACL)


def test_the_node_credentials_file_is_read_at_start(tmp_path: Path) -> None:
    properties = tmp_path / "node.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="coordinator-node" password="node-secret";\n'
    )
    config = CoordinatorConfig(port=0, metrics_port=-1, inter_node_command_config=properties)
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    assert isinstance(app.node_connector, SecureNodeConnector)
    properties.write_text("security.protocol=SASL_PLAINTEXT\n")
    with pytest.raises(StartError, match="inter-node-command-config"):
        CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
