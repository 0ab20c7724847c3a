"""A node of a cluster as an operator runs it: refused settings, a taken node id, a planned
shutdown that hands the partitions over at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import SESSION_TIMEOUT_MS, node_args
from kafka_broker import KafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_server.tools.bench.processes import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4


def http_json(process: ServerProcess, path: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{process.metrics_port}{path}", timeout=5
        ) as reply:
            body: dict[str, Any] = json.loads(reply.read())
    except urllib.error.HTTPError as error:
        body = json.loads(error.read())
    return body


def test_a_session_timeout_the_broker_refuses_stops_the_start_with_one_line(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    args = node_args(kafka_broker, unique_topic, 1, PARTITIONS)
    args[args.index("--cluster-session-timeout-ms") + 1] = "3000"
    process = ServerProcess(args)
    with pytest.raises(RuntimeError, match="server did not become ready"):
        process.start(timeout=60)
    assert process.proc is not None and process.proc.wait(10) == 1
    (line,) = [line for line in process.lines if "cannot start:" in line]
    assert "InvalidSessionTimeout" in line, line
    assert not any("Traceback" in line for line in process.lines), "".join(process.lines)


def test_two_nodes_with_one_node_id_never_both_own_and_the_second_says_why(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    first = ServerProcess(node_args(kafka_broker, unique_topic, 7, PARTITIONS))
    nodes.append(first)
    first.start()
    second = ServerProcess(node_args(kafka_broker, unique_topic, 7, PARTITIONS))
    nodes.append(second)
    second.start()
    deadline = time.monotonic() + 30
    while True:
        status_first = http_json(first, "/status")["cluster"]
        status_second = http_json(second, "/status")["cluster"]
        errors = [s["error"] for s in (status_first, status_second) if s["error"]]
        if errors or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(errors) == 1, (status_first, status_second)
    assert "node id" in errors[0]
    owned = [set(s["owned"]) for s in (status_first, status_second)]
    assert owned[0].isdisjoint(owned[1])
    assert owned[0] | owned[1] == set(range(PARTITIONS))
    refused = first if status_first["error"] else second
    readiness = http_json(refused, "/readyz")
    assert readiness["ready"] is False and "node id" in readiness["reason"], readiness
    assert any("owns no partition" in line for line in refused.lines)


async def test_a_planned_shutdown_hands_the_partitions_over_before_the_session_ends(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(first)
    first.start()
    second = ServerProcess(node_args(kafka_broker, unique_topic, 2, PARTITIONS))
    nodes.append(second)
    second.start()
    client = await WireClient.connect(second.host, second.port)
    try:
        groups = [f"group-{i}" for i in range(16)]

        async def owners() -> set[int]:
            response = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": groups})
            return {c["node_id"] for c in response["coordinators"]}

        deadline = time.monotonic() + 30
        while await owners() != {1, 2}:
            assert time.monotonic() < deadline, "both nodes never owned partitions"
            await asyncio.sleep(0.2)
        stopping = time.monotonic()
        assert first.terminate() == 0
        while await owners() != {2}:
            assert time.monotonic() - stopping < SESSION_TIMEOUT_MS / 1000 / 2, (
                "the partitions waited for the session to expire"
            )
            await asyncio.sleep(0.05)
        # Every group commits at the node that took the partitions over, after at most
        # retriable errors while they load.
        for group in groups:
            while True:
                response = await client.call(
                    ApiKey.OFFSET_COMMIT, commit_body(group, {("events", 0): 7})
                )
                (code,) = set(commit_errors(response).values())
                if code == ErrorCode.NONE:
                    break
                assert code in (
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    ErrorCode.NOT_COORDINATOR,
                ), code
                assert time.monotonic() - stopping < 20
                await asyncio.sleep(0.05)
    finally:
        await client.close()


@pytest.mark.tansu
def test_a_broker_without_transactions_stops_a_cluster_node_with_one_line(
    tansu_broker: KafkaBroker, unique_topic: str
) -> None:
    args = [
        "--port", "0",
        "--bootstrap-servers", tansu_broker.bootstrap,
        "--offsets-topic", unique_topic,
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
    ]  # fmt: skip
    process = ServerProcess(args)
    with pytest.raises(RuntimeError, match="server did not become ready"):
        process.start(timeout=60)
    assert process.proc is not None and process.proc.wait(10) == 1
    (line,) = [line for line in process.lines if "cannot start:" in line]
    assert "--cluster off" in line, line
    # Alone, the same node serves.
    with ServerProcess([*args, *tansu_broker.coordinator_args]) as alone:
        assert alone.port > 0


async def test_a_node_cut_off_from_kafka_serves_nothing_until_it_is_a_member_again(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    """A split: the node still has its clients but has lost Kafka. Past its session it may
    have been replaced, so it answers nothing from its state (reads included), says so in
    /readyz, and serves again once Kafka has it back."""
    node = ServerProcess(node_args(pausable_kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(node)
    node.start()
    client = await WireClient.connect(node.host, node.port)
    try:
        ok = await client.call(ApiKey.OFFSET_COMMIT, commit_body("g", {("events", 0): 3}))
        assert set(commit_errors(ok).values()) == {ErrorCode.NONE}
        pausable_kafka_broker.pause()
        try:
            await asyncio.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
            fetched = await client.call(
                ApiKey.OFFSET_FETCH, fetch_body("g", {"events": [0]}), timeout=30
            )
            assert fetched["groups"][0]["error_code"] == ErrorCode.NOT_COORDINATOR, fetched
            readiness = http_json(node, "/readyz")
            assert readiness["ready"] is False and "lease" in readiness["reason"], readiness
            assert http_json(node, "/status")["cluster"]["holds_lease"] is False
        finally:
            pausable_kafka_broker.resume()
        deadline = time.monotonic() + 60
        while True:
            fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("g", {"events": [0]}))
            if fetched["groups"][0]["error_code"] == ErrorCode.NONE:
                break
            assert fetched["groups"][0]["error_code"] in (
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ), fetched
            assert time.monotonic() < deadline, "the node never served again"
            await asyncio.sleep(0.2)
        assert fetched_offsets(fetched) == {("events", 0): 3}
    finally:
        await client.close()


async def test_a_node_that_does_not_know_what_it_owns_never_lists_nothing_as_all(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    """A group and a transactional id are in the log. A second node starts while the first
    is paused: it listens, but the cluster's rebalance waits for the paused member until its
    session ends, and gives the second node its partitions only then. Meanwhile ListGroups
    and ListTransactions answer it COORDINATOR_NOT_AVAILABLE, then
    COORDINATOR_LOAD_IN_PROGRESS while its partitions load, then list both; never an empty
    list that says there is nothing. /readyz says 503 and why until it is ready."""
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(first)
    first.start()
    client = await WireClient.connect(first.host, first.port)
    committed = await client.call(ApiKey.OFFSET_COMMIT, commit_body("listed", {("t", 0): 5}))
    assert commit_errors(committed) == {("t", 0): 0}
    init = {"transactional_id": "listed-txn", "transaction_timeout_ms": 60_000}
    initialised = await client.call(ApiKey.INIT_PRODUCER_ID, init)
    assert initialised["error_code"] == 0
    await client.close()
    os.kill(first.pid, signal.SIGSTOP)

    port, metrics_port = free_port(), free_port()
    args = node_args(kafka_broker, unique_topic, 2, PARTITIONS, "--metrics-port", str(metrics_port))
    args[args.index("--port") + 1] = str(port)
    second = ServerProcess(args)
    nodes.append(second)
    second.launch()
    second.metrics_port = metrics_port
    groups: list[tuple[int, list[str]]] = []
    transactions: list[tuple[int, list[str]]] = []
    reasons: list[str] = []
    deadline = time.monotonic() + 60
    while not second.ready:
        assert time.monotonic() < deadline, second.output()
        try:
            client = await WireClient.connect("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        try:
            listed = await client.call(ApiKey.LIST_GROUPS, {})
            groups.append((listed["error_code"], [g["group_id"] for g in listed["groups"]]))
            listed = await client.call(ApiKey.LIST_TRANSACTIONS, {})
            ids = [t["transactional_id"] for t in listed["transaction_states"]]
            transactions.append((listed["error_code"], ids))
        finally:
            await client.close()
        readiness = await asyncio.to_thread(http_json, second, "/readyz")
        if not second.ready and not readiness["ready"]:
            reasons.append(readiness["reason"])
        await asyncio.sleep(0.1)
    busy = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    # The node listened for a while before it owned anything.
    assert (ErrorCode.COORDINATOR_NOT_AVAILABLE, []) in groups, groups
    assert any("no partition assignment yet" in reason for reason in reasons), reasons
    for code, names in groups:
        assert code in busy or (code == 0 and "listed" in names), groups
    for code, names in transactions:
        assert code in busy or (code == 0 and "listed-txn" in names), transactions
    # Once ready, it lists both.
    client = await WireClient.connect(second.host, second.port)
    listed = await client.call(ApiKey.LIST_GROUPS, {})
    assert "listed" in [g["group_id"] for g in listed["groups"]], listed
    listed = await client.call(ApiKey.LIST_TRANSACTIONS, {})
    assert "listed-txn" in [t["transactional_id"] for t in listed["transaction_states"]], listed
    await client.close()
