"""Loads from tansu, the Kafka-protocol broker that is not Apache Kafka: it answers a fetch
that may wait only a moment without records although they are there, so a load must wait
longer for them instead of never finishing."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request

import pytest
from aiokafka import AIOKafkaProducer
from server_process import ServerProcess
from tansu_broker import TansuBroker
from wire_client import WireClient, commit_body, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.hashing import partition_for
from coordinator_server.records import encode_record, new_offset_commit_record

pytestmark = [pytest.mark.tansu, pytest.mark.slow]

PARTITIONS = 4
GROUPS = [f"group-{g}" for g in range(40)]
# In small batches, as a server writes them: tansu answers a fetch of many of them that may
# wait 1 ms empty. Enough that a load meets that at every turn.
RECORDS = 40_000
LOADED = re.compile(r"ready on .*?\((\d+) partitions loaded in [0-9.]+ s: (\d+) records")


def server_args(broker: TansuBroker, topic: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", str(PARTITIONS),
        "--offsets-topic-replication-factor", "1",
        *broker.coordinator_args,
    ]  # fmt: skip


async def write_history(broker: TansuBroker, topic: str) -> dict[str, int]:
    """RECORDS commits written straight to the log in batches of a few records, as a
    long-running server leaves it; each group's last offset."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, max_batch_size=512)
    await producer.start()
    last: dict[str, int] = {}
    try:
        now_ms = int(time.time() * 1000)
        sent = []
        for offset in range(RECORDS):
            group = GROUPS[offset % len(GROUPS)]
            key, value = encode_record(
                new_offset_commit_record(group, "orders", 0, offset, -1, "", now_ms)
            )
            partition = partition_for(group, PARTITIONS)
            sent.append(await producer.send(topic, value, key, partition=partition))
            last[group] = offset
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return last


async def test_a_long_history_loads_from_tansu(
    tansu_broker: TansuBroker, unique_topic: str
) -> None:
    args = server_args(tansu_broker, unique_topic)
    with ServerProcess(args):
        pass  # the log topic, created as the server creates it
    last = await write_history(tansu_broker, unique_topic)
    server = ServerProcess(args)
    started = time.monotonic()
    server.start(timeout=120)
    load_s = time.monotonic() - started
    try:
        (match,) = [m for line in server.lines if (m := LOADED.search(line))]
        print(match[0], f"(ready {load_s:.1f} s after the start)")
        assert (int(match[1]), int(match[2])) == (PARTITIONS, RECORDS), server.output()
        # Under 2 s on 2 cores; with a fetch that always waited 1 ms, not ready in 120 s.
        assert load_s < 30, server.output()
        client = await WireClient.connect(server.host, server.port)
        try:
            for group in GROUPS[:5]:
                fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, None))
                assert fetched_offsets(fetched) == {("orders", 0): last[group]}
        finally:
            await client.close()
    finally:
        server.kill()


RELOADED = re.compile(r"partition=(\d+) loaded (\d+) records .* \((\d+) records/s\)")


def ready(server: ServerProcess) -> bool:
    url = f"http://127.0.0.1:{server.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def test_a_reload_after_a_broker_stall_finishes_on_tansu(
    fresh_tansu_broker: TansuBroker, unique_topic: str
) -> None:
    """A 20 s stall of the broker under commits: every partition's appends fail for longer
    than --append-failure-timeout-ms, so each leaves ACTIVE and is loaded again once the
    log takes writes. Once the broker answers again, those loads finish over the whole
    history, each logged with its records per second, and the groups commit again. They
    stayed LOADING past 135 s when a load's fetches waited 1 ms."""
    args = [
        *server_args(fresh_tansu_broker, unique_topic),
        "--offsets-commit-timeout-ms", "2000",
        "--append-failure-timeout-ms", "5000",
    ]  # fmt: skip
    with ServerProcess(args):
        pass
    await write_history(fresh_tansu_broker, unique_topic)
    # A group on each partition of the log.
    groups = {partition_for(group, PARTITIONS): group for group in GROUPS}
    assert len(groups) == PARTITIONS
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        try:
            loop = asyncio.get_running_loop()
            fresh_tansu_broker.pause()
            try:
                stall_ends = loop.time() + 20
                offset = 0
                while loop.time() < stall_ends:
                    offset += 1
                    await asyncio.gather(
                        *(
                            client.call(
                                ApiKey.OFFSET_COMMIT,
                                commit_body(group, {("orders", 0): offset}),
                                timeout=30,
                            )
                            for group in groups.values()
                        )
                    )
                    await asyncio.sleep(1)
            finally:
                fresh_tansu_broker.resume()
            resumed = time.monotonic()
            deadline = loop.time() + 60
            while not await asyncio.to_thread(ready, server):
                assert loop.time() < deadline, server.output()
                await asyncio.sleep(0.2)
            print(f"ready {time.monotonic() - resumed:.1f} s after the broker resumed")
            reloaded = {
                int(m[1]): (int(m[2]), int(m[3]))
                for line in server.lines
                if (m := RELOADED.search(line))
            }
            print("reloads (records, records/s):", reloaded)
            assert set(reloaded) == set(groups), server.output()[-5000:]
            assert all(records > 0 for records, _ in reloaded.values())
            for group in groups.values():
                committed = await client.call(
                    ApiKey.OFFSET_COMMIT, commit_body(group, {("orders", 0): 10**6})
                )
                assert commit_errors(committed) == {("orders", 0): 0}
        finally:
            await client.close()
