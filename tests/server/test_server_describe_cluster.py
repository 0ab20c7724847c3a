"""DescribeCluster over real sockets, in process: a node alone names itself; the endpoint
types Kafka's brokers refuse are refused the same way. (A cluster's nodes: see
tests/client/test_admin_cluster.py.)"""

from __future__ import annotations

import pytest
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4


async def describe(body: dict[str, object], **settings: object) -> dict[str, object]:
    config = CoordinatorConfig(
        port=0, metrics_port=-1, offsets_topic_partitions=PARTITIONS, **settings
    )
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    await app.start()
    try:
        assert app.address is not None
        client = await WireClient.connect(*app.address)
        try:
            versions = await client.call(ApiKey.API_VERSIONS, {})
            assert ApiKey.DESCRIBE_CLUSTER in {k["api_key"] for k in versions["api_keys"]}
            answer: dict[str, object] = await client.call(ApiKey.DESCRIBE_CLUSTER, body)
        finally:
            await client.close()
        answer["port"] = app.address[1]
        return answer
    finally:
        await app.shutdown()


async def test_a_node_alone_names_itself() -> None:
    answer = await describe({}, node_id=5, advertised_host="coordinator.example", cluster_id="c1")
    port = answer.pop("port")
    assert answer == {
        "error_code": 0,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": "c1",
        "controller_id": -1,
        "brokers": [
            {
                "broker_id": 5,
                "host": "coordinator.example",
                "port": port,
                "rack": None,
                "is_fenced": False,
            }
        ],
        "cluster_authorized_operations": -(2**31),
    }


async def test_asked_for_authorized_operations_it_says_it_has_none_to_tell() -> None:
    answer = await describe({"include_cluster_authorized_operations": True})
    assert answer["error_code"] == 0
    assert answer["cluster_authorized_operations"] == -(2**31)
    assert answer["cluster_id"] == "coordinator-server.__coordinator_offsets"


@pytest.mark.parametrize(
    ("endpoint_type", "code"),
    [(2, ErrorCode.MISMATCHED_ENDPOINT_TYPE), (3, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)],
)
async def test_an_endpoint_type_other_than_brokers_is_refused(
    endpoint_type: int, code: ErrorCode
) -> None:
    answer = await describe({"endpoint_type": endpoint_type})
    assert answer["error_code"] == code
    assert answer["error_message"]
    assert answer["endpoint_type"] == endpoint_type
    assert answer["brokers"] == []
