"""ListGroups goes to every node of the cluster: the nodes DescribeCluster names at a
bootstrap server, or the bootstrap servers themselves when the server does not list
DescribeCluster in ApiVersions."""

from __future__ import annotations

from typing import Any

import pytest
from client_fake_server import FakeCoordinator, Received

from coordinator_client import CoordinatorClient
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode, MismatchedEndpointTypeError

pytestmark = pytest.mark.timeout(60)


def versions(*api_keys: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "error_message": None,
        "api_keys": [{"api_key": key, "min_version": 0, "max_version": 0} for key in api_keys],
        "server_name": "fake",
        "server_version": "0",
    }


def groups(*names: str) -> dict[str, Any]:
    return {
        "error_code": 0,
        "error_message": None,
        "groups": [
            {"group_id": n, "protocol_type": "", "group_state": "Empty", "group_type": "classic"}
            for n in names
        ],
    }


def cluster(*nodes: FakeCoordinator, error_code: int = 0) -> dict[str, Any]:
    return {
        "error_code": error_code,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": "c",
        "controller_id": -1,
        "brokers": [
            {"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": None} for n in nodes
        ],
        "cluster_authorized_operations": -(2**31),
    }


async def test_listing_asks_every_node_describe_cluster_names() -> None:
    async with (
        FakeCoordinator(node_id=1) as bootstrap,
        FakeCoordinator(node_id=2) as second,
        FakeCoordinator(node_id=3) as third,
    ):

        def bootstrap_answers(received: Received) -> dict[str, Any] | None:
            if received.api_key == ApiKey.API_VERSIONS:
                return versions(ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_CLUSTER)
            if received.api_key == ApiKey.DESCRIBE_CLUSTER:
                # The bootstrap server names the nodes as the cluster knows them: not
                # necessarily the address the client was given.
                return cluster(second, third)
            raise AssertionError(f"api {received.api_key} reached the bootstrap server")

        bootstrap.handler = bootstrap_answers
        second.handler = lambda received: groups("a", "b")
        third.handler = lambda received: groups("b", "c")
        async with CoordinatorClient(bootstrap.bootstrap) as client:
            listed = await client.list_all_groups()
        assert [group.group_id for group in listed] == ["a", "b", "c"]
        assert len(second.requests(ApiKey.LIST_GROUPS)) == 1
        assert len(third.requests(ApiKey.LIST_GROUPS)) == 1
        (asked,) = bootstrap.requests(ApiKey.DESCRIBE_CLUSTER)
        assert asked.body == {
            "include_cluster_authorized_operations": False,
            "endpoint_type": 1,
            "include_fenced_brokers": False,
        }


async def test_a_server_without_describe_cluster_is_listed_through_the_bootstrap_servers() -> None:
    async with FakeCoordinator() as first, FakeCoordinator() as second:
        for server, name in ((first, "a"), (second, "b")):

            def answer(received: Received, name: str = name) -> dict[str, Any]:
                if received.api_key == ApiKey.API_VERSIONS:
                    return versions(ApiKey.LIST_GROUPS)
                assert received.api_key == ApiKey.LIST_GROUPS
                return groups(name)

            server.handler = answer
        async with CoordinatorClient(f"{first.bootstrap},{second.bootstrap}") as client:
            listed = await client.list_all_groups()
        assert [group.group_id for group in listed] == ["a", "b"]
        assert not first.requests(ApiKey.DESCRIBE_CLUSTER)
        assert not second.requests(ApiKey.DESCRIBE_CLUSTER)


async def test_a_describe_cluster_error_is_raised() -> None:
    async with FakeCoordinator() as server:

        def answer(received: Received) -> dict[str, Any]:
            if received.api_key == ApiKey.API_VERSIONS:
                return versions(ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_CLUSTER)
            return cluster(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE)

        server.handler = answer
        async with CoordinatorClient(server.bootstrap) as client:
            with pytest.raises(MismatchedEndpointTypeError):
                await client.list_all_groups()
        assert not server.requests(ApiKey.LIST_GROUPS)
