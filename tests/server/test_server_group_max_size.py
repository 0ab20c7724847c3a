"""group.max.size lowered below a group's size, through a real server process restarted with
the lower limit: the group rebalances when loaded, the members that rejoin past the limit
are turned away, and the join completes at once for those that rejoined (Kafka checks the
join phase after a rejection too), not at the rebalance timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from server_process import ServerProcess, sqlite_args
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import ConsumerProtocolSubscription
from coordinator_protocol.errors import ErrorCode

GROUP = "capped"
# Long enough that an answer at the rebalance timeout cannot pass for an answer at once.
REBALANCE_TIMEOUT_MS = 30_000


def join_body(instance_id: str, member_id: str = "") -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ConsumerProtocolSubscription(["t"]).encode()}],
    }


def sync_body(member_id: str, instance_id: str, generation: int, leader: bool) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "assignments": ([{"member_id": member_id, "assignment": b""}] if leader else []),
    }


async def form_group(process: ServerProcess, instances: list[str]) -> dict[str, str]:
    """A Stable group of static members; their member ids by instance id."""
    clients = [await WireClient.connect(process.host, process.port) for _ in instances]
    try:
        joined = await asyncio.gather(
            *(
                client.call(ApiKey.JOIN_GROUP, join_body(instance), timeout=30)
                for client, instance in zip(clients, instances, strict=True)
            )
        )
        assert {j["error_code"] for j in joined} == {0}, joined
        leader = joined[0]["leader"]
        synced = await asyncio.gather(
            *(
                client.call(
                    ApiKey.SYNC_GROUP,
                    sync_body(
                        j["member_id"], instance, j["generation_id"], j["member_id"] == leader
                    ),
                    timeout=30,
                )
                for client, instance, j in zip(clients, instances, joined, strict=True)
            )
        )
        assert {s["error_code"] for s in synced} == {0}, synced
        return {instance: j["member_id"] for instance, j in zip(instances, joined, strict=True)}
    finally:
        for client in clients:
            await client.close()


async def test_members_past_a_lowered_max_size_are_turned_away_and_the_join_completes_at_once(
    tmp_path: Path,
) -> None:
    instances = ["box-0", "box-1", "box-2"]
    common = ("--group-initial-rebalance-delay-ms", "1000", "--group-min-session-timeout-ms", "500")
    with ServerProcess(sqlite_args(tmp_path, *common)) as first:
        members = await form_group(first, instances)
    with ServerProcess(sqlite_args(tmp_path, *common, "--group-max-size", "2")) as second:
        clients = [await WireClient.connect(second.host, second.port) for _ in instances]
        try:
            started = time.monotonic()
            answers = []
            for client, instance in zip(clients, instances, strict=True):
                # One after the other: the last to rejoin is the one left out.
                answers.append(
                    client.send(ApiKey.JOIN_GROUP, join_body(instance, members[instance]))
                )
                await asyncio.sleep(0.2)
            done = await asyncio.wait_for(asyncio.gather(*answers), timeout=10)
            elapsed = time.monotonic() - started
        finally:
            for client in clients:
                await client.close()
    assert done[2]["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED, done[2]
    assert [d["error_code"] for d in done[:2]] == [0, 0], done
    assert done[0]["generation_id"] == done[1]["generation_id"] > 1
    # At once: well before the 30 s rebalance timeout.
    assert elapsed < 10, elapsed
