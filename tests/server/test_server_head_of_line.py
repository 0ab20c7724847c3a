"""A request that waits holds back none of the others of its connection, against the real
server process and Apache Kafka, which the test pauses (SIGSTOP of every thread).

An OffsetFetch with require_stable reads through the write path: it is answered once every
write of its group's partition is acknowledged by the broker. With the broker paused it
waits; the Heartbeat and the plain OffsetFetch sent after it on the same connection are
answered meanwhile, and it is answered once the broker runs again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import ConsumerProtocolSubscription
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

PARTITIONS = 4
TOPIC = "orders"
STABLE_GROUP = "stable"
# A group of another partition of the log: its heartbeat waits for no write of STABLE_GROUP's
# (a write without records, as a heartbeat is, is answered once its partition's writes are).
MEMBER_GROUP = next(
    f"members-{i}"
    for i in range(1000)
    if partition_for(f"members-{i}", PARTITIONS) != partition_for(STABLE_GROUP, PARTITIONS)
)
# How long the requests behind the waiting one may take: they wait for nothing.
ANSWERED_WITHIN_S = 5.0


def server_args(broker: ApacheKafkaBroker, topic: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", str(PARTITIONS),
        "--offsets-topic-replication-factor", "1",
        "--cluster", "off",
        "--group-initial-rebalance-delay-ms", "0",
        # The waiting write outlasts the pause: it is answered by the broker, not timed out.
        "--offsets-commit-timeout-ms", "60000",
    ]  # fmt: skip


async def join_and_sync(client: WireClient, group: str) -> dict[str, Any]:
    """A member of `group`, alone, with its assignment: the Heartbeat body it sends."""
    subscription = ConsumerProtocolSubscription([TOPIC]).encode()
    join = {
        "group_id": group,
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription}],
        "reason": None,
    }
    response = await client.call(ApiKey.JOIN_GROUP, join, timeout=30)
    # KIP-394: the first join only hands out the member id.
    assert response["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, response
    join["member_id"] = response["member_id"]
    response = await client.call(ApiKey.JOIN_GROUP, join, timeout=30)
    assert response["error_code"] == 0, response
    member = {
        "group_id": group,
        "generation_id": response["generation_id"],
        "member_id": response["member_id"],
        "group_instance_id": None,
    }
    sync = {
        **member,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": response["member_id"], "assignment": b""}],
    }
    assert (await client.call(ApiKey.SYNC_GROUP, sync, timeout=30))["error_code"] == 0
    return member


async def test_a_stable_fetch_waiting_for_the_broker_holds_back_no_request_behind_it(
    pausable_kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    with ServerProcess(server_args(pausable_kafka_broker, unique_topic)) as server:
        client = await WireClient.connect(server.host, server.port)
        try:
            member = await join_and_sync(client, MEMBER_GROUP)
            first = commit_body(STABLE_GROUP, {(TOPIC, 0): 1})
            assert commit_errors(await client.call(ApiKey.OFFSET_COMMIT, first)) == {(TOPIC, 0): 0}
            pausable_kafka_broker.pause()
            try:
                # The commit waits for the broker, and the stable fetch for the commit (the
                # connection dispatches them in order; the partition runs them in order).
                commit = client.send(
                    ApiKey.OFFSET_COMMIT, commit_body(STABLE_GROUP, {(TOPIC, 0): 2})
                )
                stable = client.send(
                    ApiKey.OFFSET_FETCH, fetch_body(STABLE_GROUP, {TOPIC: [0]}, require_stable=True)
                )
                heartbeat = await client.call(ApiKey.HEARTBEAT, member, timeout=ANSWERED_WITHIN_S)
                plain = await client.call(
                    ApiKey.OFFSET_FETCH,
                    fetch_body(STABLE_GROUP, {TOPIC: [0]}),
                    timeout=ANSWERED_WITHIN_S,
                )
                assert heartbeat["error_code"] == 0, heartbeat
                # The committed state: the second commit is not acknowledged yet.
                assert fetched_offsets(plain) == {(TOPIC, 0): 1}
                # Still waiting for the broker: the two above did not wait for it.
                assert not stable.done() and not commit.done()
            finally:
                pausable_kafka_broker.resume()
            assert commit_errors(await asyncio.wait_for(commit, 30)) == {(TOPIC, 0): 0}
            assert fetched_offsets(await asyncio.wait_for(stable, 30)) == {(TOPIC, 0): 2}
        finally:
            await client.close()
