"""`coordinator-server groups` and the client against a 2-node cluster on Apache Kafka: a
listing asked of either node has every node's groups (DescribeCluster names the nodes), a
group's commands reach its coordinator through any node, and a client that still has the
former coordinator of a moved group follows its NOT_COORDINATOR."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import node_args
from prometheus_client.parser import text_string_to_metric_families
from server_process import ServerProcess
from wire_client import WireClient

from coordinator_client import CoordinatorClient
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import FindCoordinatorRequest
from coordinator_server.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
GROUPS = [f"cluster-admin-{index}" for index in range(12)]


def address(process: ServerProcess) -> str:
    return f"{process.host}:{process.port}"


def groups_tool(capsys: pytest.CaptureFixture[str], node: ServerProcess, *args: str) -> Any:
    code = main(["groups", *args, "--json", "--bootstrap-server", address(node)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def requests_answered(process: ServerProcess, api: str) -> float:
    """`api` requests the node answered (an error of a group counts inside the answer, not
    in the metric's `error` label)."""
    url = f"http://127.0.0.1:{process.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "coordinator_requests_total" and sample.labels["api"] == api
    )


async def coordinators(node: ServerProcess) -> dict[str, int]:
    """Each group's coordinator as `node` names it."""
    async with CoordinatorClient(address(node)) as client:
        answer = await client.find_coordinator_raw(FindCoordinatorRequest(keys=GROUPS))
    return {c.key: c.node_id for c in answer.coordinators if c.error_code == 0}


async def listed_by_one_node(node: ServerProcess) -> set[str]:
    wire = await WireClient.connect(node.host, node.port)
    try:
        while True:
            answer = await wire.call(ApiKey.LIST_GROUPS, {})
            if answer["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
            await asyncio.sleep(0.1)
    finally:
        await wire.close()
    assert answer["error_code"] == 0, answer
    return {group["group_id"] for group in answer["groups"]}


def test_the_tool_works_against_any_node_and_the_client_follows_a_moved_group(
    kafka_broker: ApacheKafkaBroker,
    unique_topic: str,
    nodes: list[ServerProcess],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = f"events-{uuid.uuid4().hex[:8]}"
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(first)
    first.start()
    client = CoordinatorClient(address(first))
    loop = asyncio.new_event_loop()
    try:
        # Every group is committed while the first node owns every partition: the client
        # remembers that node as the coordinator of each.
        for index, group in enumerate(GROUPS):
            loop.run_until_complete(
                client.commit_offsets(group, {TopicPartition(topic, 0): index + 1})
            )
        assert {client.cached_coordinator(g).node_id for g in GROUPS} == {1}  # type: ignore[union-attr]

        second = ServerProcess(node_args(kafka_broker, unique_topic, 2, PARTITIONS))
        nodes.append(second)
        second.start()
        deadline = time.monotonic() + 30
        while True:
            owners = [asyncio.run(coordinators(node)) for node in (first, second)]
            if owners[0] == owners[1] and set(owners[0].values()) == {1, 2}:
                break
            assert time.monotonic() < deadline, owners
            time.sleep(0.2)
        owner = owners[0]
        moved = [g for g in GROUPS if owner[g] == 2]
        stayed = [g for g in GROUPS if owner[g] == 1]
        assert len(moved) >= 3 and stayed, owner

        # The client still names the first node for the moved groups: each request goes
        # there first, that node answers NOT_COORDINATOR (it cannot answer for a partition
        # it does not own), and the client looks the group up again and gets its answer
        # from the second node.
        apis = ("DescribeGroups", "OffsetFetch", "DeleteGroups")
        answered_before = {
            (api, node_id): requests_answered(node, api)
            for api in apis
            for node_id, node in ((1, first), (2, second))
        }
        described = loop.run_until_complete(client.describe_group(moved[0]))
        assert described.group_state == "Empty"
        fetched = loop.run_until_complete(client.fetch_offsets(moved[1]))
        assert fetched[TopicPartition(topic, 0)].offset == GROUPS.index(moved[1]) + 1
        loop.run_until_complete(client.delete_group(moved[2]))
        for (api, node_id), before in answered_before.items():
            node = first if node_id == 1 else second
            assert requests_answered(node, api) == before + 1, (api, node_id)
        for group in moved[:3]:
            assert client.cached_coordinator(group).node_id == 2  # type: ignore[union-attr]
    finally:
        loop.run_until_complete(client.close())
        loop.close()
    deleted = moved[2]
    remaining = set(GROUPS) - {deleted}

    # One node's ListGroups has its own groups only; the tool asks every node.
    assert asyncio.run(listed_by_one_node(first)) == set(stayed)
    assert asyncio.run(listed_by_one_node(second)) == set(moved) - {deleted}
    for node in (first, second):
        listed = groups_tool(capsys, node, "list")
        assert {group["group_id"] for group in listed} == remaining
        assert {group["state"] for group in listed} == {"Empty"}

    # A group's commands reach its coordinator through the node that does not own it.
    for group, through in ((moved[3], first), (stayed[0], second)):
        assert groups_tool(capsys, through, "describe", group)["state"] == "Empty"
        offsets = groups_tool(capsys, through, "offsets", group)
        assert [(row["topic"], row["partition"], row["committed_offset"]) for row in
                offsets["partitions"]] == [(topic, 0, GROUPS.index(group) + 1)]  # fmt: skip
        assert groups_tool(capsys, through, "delete", group) == {group: "OK"}
    listed = groups_tool(capsys, second, "list")
    assert {group["group_id"] for group in listed} == remaining - {moved[3], stayed[0]}


async def test_describe_cluster_names_every_node_from_either_node(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    for node_id in (1, 2):
        process = ServerProcess(node_args(kafka_broker, unique_topic, node_id, PARTITIONS))
        nodes.append(process)
        await asyncio.to_thread(process.start)
    expected = {(1, nodes[0].port), (2, nodes[1].port)}
    deadline = time.monotonic() + 30
    for node in nodes:
        async with CoordinatorClient(address(node)) as client:
            while True:
                cluster = await client.describe_cluster()
                brokers = {(b.broker_id, b.port) for b in cluster.brokers}
                if brokers == expected:
                    break
                assert time.monotonic() < deadline, brokers
                await asyncio.sleep(0.2)
        assert cluster.cluster_id == f"coordinator-server.{unique_topic}"
        assert {b.host for b in cluster.brokers} == {"127.0.0.1"}
        assert cluster.controller_id == -1
