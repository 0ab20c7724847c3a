"""A consumer group (KIP-848) across a failover, on Apache Kafka with two real nodes: a
heartbeat for a group another node owns is NOT_COORDINATOR, and after kill -9 of the owner
in the middle of a reconciliation (a member told to revoke half its partitions, the other
waiting for them) the node that takes the partition over resumes the group where it was:
the same epochs, the revocation still asked for, the waiting member given the partitions
only once they are released, never a partition owned by two members."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import SESSION_TIMEOUT_MS, node_args
from server_process import ServerProcess
from test_cluster_fencing import status, wait_until
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

Owned = dict[tuple[bytes, str], list[int]]


def beat(group: str, member_id: str, epoch: int, owned: Owned | None) -> dict[str, Any]:
    body: dict[str, Any] = {"group_id": group, "member_id": member_id, "member_epoch": epoch}
    if owned is not None:
        body["topic_partitions"] = [
            {"topic_id": topic_id, "topic_name": name, "partitions": partitions}
            for (topic_id, name), partitions in owned.items()
        ]
    return body


def join(group: str, member_id: str, topic: str) -> dict[str, Any]:
    return {
        **beat(group, member_id, 0, {}),
        "rebalance_timeout_ms": 60_000,
        "subscribed_topic_names": [topic],
    }


def owned_of(response: dict[str, Any]) -> Owned:
    return {
        (tp["topic_id"], tp["topic_name"]): sorted(tp["partitions"])
        for tp in response["assignment"]["topic_partitions"]
    }


def count(owned: Owned) -> int:
    return sum(len(partitions) for partitions in owned.values())


async def test_a_group_mid_reconciliation_resumes_at_the_node_that_takes_it_over(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 6, 1)])
    finally:
        await admin.close()
    extra = ("--group-consumer-assignment-interval-ms", "0")
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS, *extra))
    nodes.append(first)
    first.start(timeout=120)
    second = ServerProcess(node_args(kafka_broker, unique_topic, 2, PARTITIONS, *extra))
    nodes.append(second)
    second.start(timeout=120)

    async def split() -> bool:
        return (
            len(status(first)["cluster"]["owned"])
            == PARTITIONS // 2
            == len(status(second)["cluster"]["owned"])
        )

    await wait_until(split, 120, "each node owning half of the log")
    owned_by_first: list[int] = status(first)["cluster"]["owned"]
    group = next(
        f"cg-{index}"
        for index in range(1000)
        if partition_for(f"cg-{index}", PARTITIONS) in owned_by_first
    )
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    at_first = await WireClient.connect(first.host, first.port)
    at_second = await WireClient.connect(second.host, second.port)
    try:
        elsewhere = await at_second.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(group, a, topic))
        assert elsewhere["error_code"] == ErrorCode.NOT_COORDINATOR, elsewhere

        joined = await at_first.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(group, a, topic))
        assert (joined["error_code"], joined["member_epoch"]) == (0, 1), joined
        owned_a = owned_of(joined)
        assert count(owned_a) == 6
        waiting = await at_first.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, join(group, b, topic))
        assert (waiting["error_code"], waiting["member_epoch"]) == (0, 2), waiting
        told = await at_first.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(group, a, 1, owned_a))
        assert told["error_code"] == 0, told
        keep = owned_of(told)
        assert count(keep) == 3
        # A has not acknowledged: it still owns all six when its node dies.

        first.kill()
        killed = time.monotonic()
        while True:
            again = await at_second.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(group, b, 2, {}))
            if again["error_code"] not in RETRIABLE:
                break
            assert time.monotonic() - killed < SESSION_TIMEOUT_MS / 1000 + 30, again
        # B still waits: A has not released its half.
        assert again["error_code"] == 0, again
        assert again["member_epoch"] == 2
        assert again["assignment"] is None or count(owned_of(again)) == 0
        # A, still at epoch 1 and owning everything, is asked again for the same revocation.
        asked = await at_second.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(group, a, 1, owned_a))
        assert asked["error_code"] == 0, asked
        assert asked["assignment"] is None or owned_of(asked) == keep
        acked = await at_second.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(group, a, 1, keep))
        assert (acked["error_code"], acked["member_epoch"]) == (0, 2), acked
        given = await at_second.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, beat(group, b, 2, {}))
        assert given["error_code"] == 0, given
        got = owned_of(given)
        assert count(got) == 3
        for key, partitions in got.items():
            assert not set(partitions) & set(keep.get(key, [])), (got, keep)
    finally:
        await at_first.close()
        await at_second.close()
