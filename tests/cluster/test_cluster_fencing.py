"""Fencing across nodes: an owner paused across a handover never acknowledges a write again.

Two real `coordinator-server serve` processes share a log topic on Apache Kafka. The owner of
a group's partition is paused (SIGSTOP) while a client keeps writing to it; the other node
takes the partition over once Kafka's session of the paused one expires; then the paused one
resumes and finds the requests that waited in its socket. Kafka's producer fencing must make
every one of them fail: none is acknowledged and none is in the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import SESSION_TIMEOUT_MS, node_args
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
TOPIC = "events"


def status(process: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{process.metrics_port}/status", timeout=5
    ) as reply:
        body: dict[str, Any] = json.loads(reply.read())
    return body


async def coordinator_of(client: WireClient, group: str) -> int:
    response = await client.call(ApiKey.FIND_COORDINATOR, {"key_type": 0, "keys": [group]})
    (coordinator,) = response["coordinators"]
    if coordinator["error_code"] != ErrorCode.NONE:
        return -1
    node_id: int = coordinator["node_id"]
    return node_id


async def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_a_paused_owner_never_acknowledges_a_write_after_its_partition_moved(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(first)
    first.start()
    second = ServerProcess(node_args(kafka_broker, unique_topic, 2, PARTITIONS))
    nodes.append(second)
    second.start()
    at_first = await WireClient.connect(first.host, first.port)
    at_second = await WireClient.connect(second.host, second.port)
    try:
        # Both nodes own a partition once the second has joined; pick a group of the first's.
        async def balanced() -> bool:
            return {await coordinator_of(at_first, f"g{i}") for i in range(8)} == {1, 2}

        await wait_until(balanced, 30, "both nodes owning a partition")
        owned_by_first = [
            g for g in (f"g{i}" for i in range(8)) if await coordinator_of(at_first, g) == 1
        ]
        group = owned_by_first[0]
        ok = await at_first.call(ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): 1}))
        assert set(commit_errors(ok).values()) == {ErrorCode.NONE}, ok

        os.kill(first.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        # These wait in the paused node's socket; each names an offset only it would write.
        stale = [
            at_first.send(ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): 1000 + i}))
            for i in range(20)
        ]

        async def moved() -> bool:
            return await coordinator_of(at_second, group) == 2

        await wait_until(moved, SESSION_TIMEOUT_MS / 1000 + 20, "the partition to move")
        moved_after = time.monotonic() - paused_at

        async def committed_at_second() -> bool:
            response = await at_second.call(
                ApiKey.OFFSET_COMMIT, commit_body(group, {(TOPIC, 0): 500})
            )
            return set(commit_errors(response).values()) == {ErrorCode.NONE}

        await wait_until(committed_at_second, 20, "the new owner to take a commit")

        os.kill(first.pid, signal.SIGCONT)
        answers = await asyncio.wait_for(asyncio.gather(*stale, return_exceptions=True), 30)
        acknowledged = [
            a
            for a in answers
            if isinstance(a, dict) and ErrorCode.NONE in commit_errors(a).values()
        ]
        assert acknowledged == [], f"the paused owner acknowledged {len(acknowledged)} commits"
        codes = {code for a in answers if isinstance(a, dict) for code in commit_errors(a).values()}
        assert codes <= {
            ErrorCode.NOT_COORDINATOR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.REQUEST_TIMED_OUT,
        }, codes

        # The new owner still has its own commit, none of the stale ones.
        fetched = await at_second.call(ApiKey.OFFSET_FETCH, fetch_body(group, {TOPIC: [0]}))
        assert fetched_offsets(fetched) == {(TOPIC, 0): 500}
        # And after the paused node is gone for good, a fresh node loads the same from the log.
        first.kill()
        third = ServerProcess(node_args(kafka_broker, unique_topic, 3, PARTITIONS))
        nodes.append(third)
        second.terminate()
        third.start()
        at_third = await WireClient.connect(third.host, third.port)
        try:

            async def third_owns() -> bool:
                return await coordinator_of(at_third, group) == 3

            await wait_until(third_owns, 30, "the third node to own the partition")
            fetched = await at_third.call(ApiKey.OFFSET_FETCH, fetch_body(group, {TOPIC: [0]}))
            assert fetched_offsets(fetched) == {(TOPIC, 0): 500}
        finally:
            await at_third.close()
        assert moved_after < SESSION_TIMEOUT_MS / 1000 + 10
        assert status(third)["cluster"]["owned"] == list(range(PARTITIONS))
    finally:
        await at_first.close()
        await at_second.close()
