"""Kafka's consumer group protocol (KIP-848) through a real server process on the embedded
log, its topics from a topics file: members join, the coordinator assigns, a partition moves
only once its owner revoked it, a member that stops heartbeating is removed after its
session, the group is described and listed, and a restart resumes it where it was."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from server_process import ServerProcess, sqlite_args
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode

T = TypeVar("T")

GROUP = "orders-readers"
SESSION_MS = 1_500


def topics_file(tmp_path: Path, topics: dict[str, int]) -> Path:
    path = tmp_path / "topics.json"
    path.write_text(json.dumps(topics))
    return path


def serve_args(data_dir: Path, topics: Path, *extra: str) -> list[str]:
    return sqlite_args(
        data_dir,
        "--group-consumer-topics-file",
        str(topics),
        "--group-consumer-min-session-timeout-ms",
        "500",
        "--group-consumer-session-timeout-ms",
        str(SESSION_MS),
        "--group-consumer-min-heartbeat-interval-ms",
        "100",
        "--group-consumer-heartbeat-interval-ms",
        "200",
        "--group-consumer-assignment-interval-ms",
        "0",
        *extra,
    )


def join(member_id: str, *topics: str) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": list(topics),
        "topic_partitions": [],
    }


Owned = dict[tuple[bytes, str], list[int]]


def beat(member_id: str, epoch: int, owned: Owned | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"group_id": GROUP, "member_id": member_id, "member_epoch": epoch}
    if owned is not None:
        body["topic_partitions"] = [
            {"topic_id": topic_id, "topic_name": name, "partitions": partitions}
            for (topic_id, name), partitions in owned.items()
        ]
    return body


def assigned(response: dict[str, Any]) -> dict[str, list[int]]:
    assignment = response["assignment"]
    assert assignment is not None, response
    return {tp["topic_name"]: sorted(tp["partitions"]) for tp in assignment["topic_partitions"]}


def owned_ids(response: dict[str, Any]) -> Owned:
    return {
        (tp["topic_id"], tp["topic_name"]): sorted(tp["partitions"])
        for tp in response["assignment"]["topic_partitions"]
    }


async def heartbeating(
    client: WireClient, beats: list[dict[str, Any]], call: Callable[..., T], *args: Any
) -> T:
    """`call(*args)` in a thread while `beats` are sent every heartbeat interval, each
    answered without error."""
    task = asyncio.create_task(asyncio.to_thread(call, *args))
    while not task.done():
        for body in beats:
            response = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
            assert response["error_code"] == 0, response
        await asyncio.wait([task], timeout=0.2)
    return task.result()


def tool(process: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`coordinator-server groups ARGS` against the server, in a process of its own."""
    return subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "groups", *args,
            "--bootstrap-server", f"{process.host}:{process.port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip


def scrape(process: ServerProcess) -> str:
    """The server's /metrics."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=5
    ) as reply:
        return str(reply.read().decode())


async def describe(client: WireClient) -> dict[str, Any]:
    response = await client.call(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [GROUP]})
    (group,) = response["groups"]
    return group


async def test_members_join_revoke_before_assign_time_out_and_resume_after_restart(
    tmp_path: Path,
) -> None:
    topics = topics_file(tmp_path, {"orders": 6, "audit": 2})
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    process = ServerProcess(serve_args(tmp_path / "data", topics)).start()
    try:
        client = await WireClient.connect(process.host, process.port)
        versions = await client.call(ApiKey.API_VERSIONS, {})
        served = {key["api_key"] for key in versions["api_keys"]}
        assert {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE} <= served

        first = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(a, "orders"))
        assert (first["error_code"], first["member_epoch"]) == (0, 1), first
        assert assigned(first) == {"orders": [0, 1, 2, 3, 4, 5]}
        assert first["heartbeat_interval_ms"] == 200
        owned_a = owned_ids(first)

        # B joins: the target splits the topic, but A still owns B's half, so B waits.
        second = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(b, "orders"))
        assert (second["error_code"], second["member_epoch"]) == (0, 2), second
        assert assigned(second) == {}
        # A is told to give up half; until it says it has, B is given nothing.
        revoking = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(a, 1, owned_a))
        assert revoking["error_code"] == 0, revoking
        kept = assigned(revoking)["orders"]
        assert len(kept) == 3
        still_waiting = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(b, 2, {}))
        assert still_waiting["assignment"] is None or assigned(still_waiting) == {}
        # A acknowledges; B gets the other half, never a partition A still owns.
        acked = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(a, 1, owned_ids(revoking)))
        assert (acked["error_code"], acked["member_epoch"]) == (0, 2), acked
        given = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(b, 2, {}))
        assert given["error_code"] == 0, given
        assert sorted([*kept, *assigned(given)["orders"]]) == [0, 1, 2, 3, 4, 5]

        group = await describe(client)
        assert (group["error_code"], group["group_state"], group["group_epoch"]) == (
            0,
            "Stable",
            2,
        ), group
        assert {m["member_id"]: m["member_epoch"] for m in group["members"]} == {a: 2, b: 2}
        # The operator's gauges count it.
        metrics = await asyncio.to_thread(scrape, process)
        assert 'coordinator_consumer_groups{state="Stable"} 1.0' in metrics
        assert "coordinator_consumer_group_members 2.0" in metrics
        listed = await client.call(ApiKey.LIST_GROUPS, {"types_filter": ["consumer"]})
        assert [(g["group_id"], g["group_type"]) for g in listed["groups"]] == [(GROUP, "consumer")]
        # The classic APIs do not describe it, and a classic member of another protocol
        # type than "consumer" cannot join it.
        classic = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": [GROUP]})
        assert classic["groups"][0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        joined_classic = await client.call(
            ApiKey.JOIN_GROUP,
            {
                "group_id": GROUP,
                "session_timeout_ms": 30_000,
                "rebalance_timeout_ms": 30_000,
                "member_id": "",
                "group_instance_id": "static-1",
                "protocol_type": "connect",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        assert joined_classic["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

        # The admin tool shows both members with their epochs and assignments, and refuses
        # to reset the offsets of the active group.
        # Both keep heartbeating meanwhile: a tool's process can take longer than a session
        # to start on a busy machine.
        members = [beat(a, 2, owned_ids(revoking)), beat(b, 2, owned_ids(given))]
        shown = await heartbeating(
            client, members, tool, process, "describe", GROUP, "--members", "--verbose"
        )
        assert shown.returncode == 0, shown.stderr
        assert a in shown.stdout and b in shown.stdout, shown.stdout
        assert "TARGET-ASSIGNMENT" in shown.stdout, shown.stdout
        reset = await heartbeating(
            client,
            members,
            tool,
            process,
            "reset-offsets",
            GROUP,
            "--topic",
            "orders:0",
            "--to-offset",
            "0",
        )
        assert reset.returncode != 0
        assert "the current state is Stable" in reset.stdout + reset.stderr, reset

        # B stops heartbeating: after its session it is removed, and A is given everything.
        deadline = time.monotonic() + SESSION_MS / 1000 * 4
        owned = owned_ids(revoking)
        epoch = 2
        while time.monotonic() < deadline:
            response = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(a, epoch, owned))
            assert response["error_code"] == 0, response
            epoch = response["member_epoch"]
            if response["assignment"] is not None:
                owned = owned_ids(response)
            if sum(len(p) for p in owned.values()) == 6:
                break
            await asyncio.sleep(0.2)
        assert sum(len(p) for p in owned.values()) == 6
        group = await describe(client)
        assert [m["member_id"] for m in group["members"]] == [a]
        await client.close()
    finally:
        process.terminate()

    # A restart resumes the group from the log: A's epoch and partitions as they were.
    process = ServerProcess(serve_args(tmp_path / "data", topics)).start()
    try:
        client = await WireClient.connect(process.host, process.port)
        group = await describe(client)
        (member,) = group["members"]
        assert (member["member_id"], member["member_epoch"]) == (a, epoch)
        response = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(a, epoch, owned))
        assert (response["error_code"], response["member_epoch"]) == (0, epoch), response
        await client.close()
    finally:
        process.terminate()


async def test_without_a_data_cluster_the_protocol_is_not_served(tmp_path: Path) -> None:
    process = ServerProcess(sqlite_args(tmp_path)).start()
    try:
        client = await WireClient.connect(process.host, process.port)
        versions = await client.call(ApiKey.API_VERSIONS, {})
        served = {key["api_key"] for key in versions["api_keys"]}
        assert ApiKey.CONSUMER_GROUP_HEARTBEAT not in served
        assert ApiKey.CONSUMER_GROUP_DESCRIBE not in served
        await client.close()
    finally:
        process.terminate()
        assert any("consumer group protocol" in line for line in process.lines)
