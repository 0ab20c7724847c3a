"""Failover to a warm standby: after kill -9 of an owner, its partitions serve commits at the
node that stood by for them within the session timeout and two seconds, and the takeover
reads only the records its standby had not read, however long the log.

Two real `coordinator-server serve` processes share a log topic on Apache Kafka that holds
a few hundred thousand committed offsets before they start.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import SESSION_TIMEOUT_MS, node_args
from server_process import ServerProcess
from test_cluster_fencing import status, wait_until
from wire_client import WireClient, commit_body, commit_errors

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.tools.bench.load import write_log

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
RECORDS = 200_000
# What the takeover may read past its standby: the node's own ownership record and the few
# commits made just before the kill, not the partition's tens of thousands of records.
TAIL_RECORDS = 50
LOADED = re.compile(
    r"partition=(?P<partition>\d+) loaded (?P<records>\d+) records .* "
    r"from offset (?P<offset>\d+) where its standby was"
)


def group_of_each(partitions: list[int]) -> dict[int, str]:
    groups: dict[int, str] = {}
    index = 0
    while len(groups) < len(partitions):
        group = f"failover-{index}"
        partition = partition_for(group, PARTITIONS)
        if partition in partitions and partition not in groups:
            groups[partition] = group
        index += 1
    return groups


async def test_a_killed_owners_partitions_serve_at_their_standby_soon_after_the_session(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    await write_log(kafka_broker.bootstrap, unique_topic, PARTITIONS, RECORDS, 10, 100)
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(first)
    first.start(timeout=120)
    second = ServerProcess(node_args(kafka_broker, unique_topic, 2, PARTITIONS))
    nodes.append(second)
    second.start(timeout=120)

    async def warm() -> bool:
        """Each node owns half and the second's standbys have read all of the first's."""
        mine, theirs = status(second)["cluster"], status(first)["cluster"]
        if len(mine["owned"]) != PARTITIONS // 2 or len(theirs["owned"]) != PARTITIONS // 2:
            return False
        offsets = mine["standby_offsets"]
        return {int(p) for p in offsets} == set(theirs["owned"]) and all(
            o["offset"] == o["high_watermark"] > 0 for o in offsets.values()
        )

    await wait_until(warm, 120, "the second node standing by for the first's partitions")
    moved: list[int] = status(first)["cluster"]["owned"]
    groups = group_of_each(moved)
    at_first = await WireClient.connect(first.host, first.port)
    at_second = await WireClient.connect(second.host, second.port)
    try:
        # A commit per group just before the kill: records the standby follows at once.
        for group in groups.values():
            response = await at_first.call(
                ApiKey.OFFSET_COMMIT, commit_body(group, {("events", 0): 1})
            )
            assert set(commit_errors(response).values()) == {ErrorCode.NONE}, response
        await asyncio.sleep(0.5)
        lines_before = len(second.lines)

        first.kill()
        killed = time.monotonic()
        served: dict[str, float] = {}
        while len(served) < len(groups):
            for group in groups.values():
                if group in served:
                    continue
                response = await at_second.call(
                    ApiKey.OFFSET_COMMIT, commit_body(group, {("events", 0): 2})
                )
                (code,) = set(commit_errors(response).values())
                if code == ErrorCode.NONE:
                    served[group] = time.monotonic() - killed
                    continue
                assert code in (
                    ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ), code
            assert time.monotonic() - killed < 60, f"not served 60 s after the kill: {served}"
            await asyncio.sleep(0.02)
    finally:
        await at_first.close()
        await at_second.close()

    limit_s = SESSION_TIMEOUT_MS / 1000 + 2
    assert max(served.values()) <= limit_s, served
    loads = {
        int(match["partition"]): (int(match["records"]), int(match["offset"]))
        for line in second.lines[lines_before:]
        if (match := LOADED.search(line))
    }
    assert set(loads) == set(moved), "".join(second.lines[lines_before:])
    for partition, (records, offset) in loads.items():
        assert records <= TAIL_RECORDS, (partition, records)
        assert offset > RECORDS // PARTITIONS // 2, (partition, offset)
