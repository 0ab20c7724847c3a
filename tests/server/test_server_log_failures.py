"""A log that fails loudly, and loads that always finish, against the real server process and
Apache Kafka: the log's topic lost (the broker came back empty) or resized, appends that
keep failing (the broker stopped), and a long history loaded from a slow broker."""

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
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kafka_broker import BrokerThrottle, KafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.records import encode_record, new_offset_commit_record
from coordinator_server.storage.kafka.log import offsets_topic_configs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PARTITIONS = 8
GROUPS = [f"group-{i}" for i in range(16)]
STOPPED = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}


def server_args(broker: KafkaBroker, topic: str, *extra: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", str(PARTITIONS),
        "--offsets-topic-replication-factor", "1",
        *extra,
    ]  # fmt: skip


async def http_get(port: int, path: str) -> tuple[int, Any]:
    def get() -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    status, body = await asyncio.get_running_loop().run_in_executor(None, get)
    return status, body.decode() if path == "/metrics" else json.loads(body)


async def eventually(probe: Any, timeout: float, what: str, server: ServerProcess) -> Any:
    """Poll the async `probe` until it returns something true; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout} s; server log:\n" + tail(server))
        await asyncio.sleep(0.1)


def tail(server: ServerProcess, lines: int = 40) -> str:
    return "".join(server.lines[-lines:])


async def commit_all(client: WireClient, offset: int, partition: int = 0) -> dict[str, int]:
    """Commit `offset` of orders-`partition` for every group at once; the groups whose
    commit was acknowledged."""
    futures = {
        group: client.send(
            ApiKey.OFFSET_COMMIT, commit_body(group, {("orders", partition): offset})
        )
        for group in GROUPS
    }
    acknowledged: dict[str, int] = {}
    for group, future in futures.items():
        errors = commit_errors(await asyncio.wait_for(future, 60))
        if errors == {("orders", partition): 0}:
            acknowledged[group] = offset
    return acknowledged


async def topics_on(broker: KafkaBroker) -> dict[str, int]:
    """The broker's topics and their partition counts (asking for every topic creates none)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        names = await admin.list_topics()
        if not names:
            return {}
        return {d["topic"]: len(d["partitions"]) for d in await admin.describe_topics(names)}
    finally:
        await admin.close()


async def assert_stopped_for_good(server: ServerProcess, reason: str) -> None:
    """Unready with the reason, shown in /status and the metric, an ERROR in the log, and
    every group answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE."""

    async def unready() -> Any:
        status, body = await http_get(server.metrics_port, "/readyz")
        return body if status == 503 and "log stopped" in body.get("reason", "") else None

    readiness = await eventually(unready, 30, "/readyz 503 for the stopped log", server)
    assert reason in readiness["reason"], readiness
    assert any(
        " ERROR " in line and "the log stopped" in line and reason in line for line in server.lines
    ), tail(server)
    _, status = await http_get(server.metrics_port, "/status")
    assert reason in status["log_failure"]
    assert set(status["partitions"].values()) == {"FAILED"}, status
    _, metrics = await http_get(server.metrics_port, "/metrics")
    assert "coordinator_log_failed 1.0" in metrics

    client = await WireClient.connect(server.host, server.port)
    try:
        for group in GROUPS:
            (fetched,) = (await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, None)))["groups"]
            assert fetched["error_code"] in STOPPED, fetched
            committed = await client.call(
                ApiKey.OFFSET_COMMIT, commit_body(group, {("orders", 0): 99})
            )
            assert set(commit_errors(committed).values()) <= STOPPED, committed
    finally:
        await client.close()


async def test_a_lost_topic_stops_every_partition_and_is_not_created_again(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    args = server_args(fresh_kafka_broker, unique_topic, "--metadata-max-age-ms", "500")
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        assert len(await commit_all(client, 7)) == len(GROUPS)
        await client.close()

        # The broker comes back with nothing: the topic and every offset are gone.
        fresh_kafka_broker.restart_empty()

        await assert_stopped_for_good(server, f"topic {unique_topic} no longer exists")
        # Several metadata intervals later, and after commits that would have looked up the
        # partitions' leaders, nothing has created the topic again with the broker's
        # defaults, and the server still refuses to serve.
        client = await WireClient.connect(server.host, server.port)
        for offset in range(8, 12):
            assert await commit_all(client, offset) == {}
            await asyncio.sleep(0.5)
        await client.close()
        assert unique_topic not in await topics_on(fresh_kafka_broker)
        status, _ = await http_get(server.metrics_port, "/readyz")
        assert status == 503


async def test_a_resized_topic_stops_every_partition(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    args = server_args(fresh_kafka_broker, unique_topic, "--metadata-max-age-ms", "500")
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        assert len(await commit_all(client, 7)) == len(GROUPS)
        await client.close()

        # While the server is paused, the topic comes back with 4 partitions instead of 8
        # (what a broker that auto-creates topics with its defaults makes of it); so the
        # server sees the resized topic, never a missing one.
        os.kill(server.pid, signal.SIGSTOP)
        try:
            fresh_kafka_broker.restart_empty()
            admin = AIOKafkaAdminClient(bootstrap_servers=fresh_kafka_broker.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(unique_topic, 4, 1)])
            finally:
                await admin.close()
        finally:
            os.kill(server.pid, signal.SIGCONT)

        await assert_stopped_for_good(
            server,
            f"topic {unique_topic} has 4 partitions, not the {PARTITIONS} it had when the "
            "server started",
        )
        assert (await topics_on(fresh_kafka_broker))[unique_topic] == 4


# A node alone keeps a partition ACTIVE through failed appends for append-failure-timeout-ms;
# a cluster node's log stops the partition at the first append whose fate is unknown (its
# producer, fenced to the owner, can only go on at a new epoch: the partition is taken over
# again and reloaded).
STOPPED_LINES = {"off": "every append has failed", "on": "stops: "}


@pytest.mark.parametrize("cluster", ["off", "on"])
async def test_partitions_whose_appends_keep_failing_leave_active_and_come_back(
    pausable_kafka_broker: KafkaBroker, unique_topic: str, cluster: str
) -> None:
    # The broker is only paused and resumed: the shared pausable one does, as no other
    # test's broker is held up and everything here is named after the unique topic.
    args = server_args(
        pausable_kafka_broker,
        unique_topic,
        "--offsets-commit-timeout-ms", "1000",
        "--append-failure-timeout-ms", "1500",
        "--cluster", cluster,
    )  # fmt: skip
    with ServerProcess(args) as server:
        client = await WireClient.connect(server.host, server.port)
        acknowledged = await commit_all(client, 0)
        assert len(acknowledged) == len(GROUPS)
        owned = {partition_for(group, PARTITIONS) for group in GROUPS}

        pausable_kafka_broker.pause()
        try:
            # Clients keep committing; every append fails (times out) until the partitions
            # give up being ACTIVE.
            offset = 1

            async def unready() -> Any:
                nonlocal offset
                acknowledged.update(await commit_all(client, offset))
                offset += 1
                status, body = await http_get(server.metrics_port, "/readyz")
                return body if status == 503 else None

            readiness = await eventually(unready, 60, "/readyz 503 while appends fail", server)
            not_active = {int(p) for p in readiness["not_active"]}
            assert not_active and not_active <= owned, readiness
            assert any(
                " ERROR " in line and STOPPED_LINES[cluster] in line for line in server.lines
            ), tail(server)
        finally:
            pausable_kafka_broker.resume()

        async def ready() -> bool:
            status, _ = await http_get(server.metrics_port, "/readyz")
            return status == 200

        await eventually(ready, 60, "/readyz 200 once the broker runs again", server)

        # The partitions take writes again. The broker wrote, once running again, some of
        # the appends that had timed out (and were undone): the first append of such a
        # partition finds the log ahead of its state and the partition loads again, so the
        # first commits may be refused.
        async def all_acknowledged() -> bool:
            return len(await commit_all(client, 1, partition=1)) == len(GROUPS)

        await eventually(all_acknowledged, 60, "commits acknowledged again", server)
        # Every acknowledged commit is still there (a later one, unacknowledged but written
        # before the broker stopped answering, may have replaced it).
        for group, committed in acknowledged.items():
            response = await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, {"orders": [0]}))
            (fetched,) = response["groups"]
            assert fetched["error_code"] == 0, fetched
            (topic,) = fetched["topics"]
            (partition,) = topic["partitions"]
            assert committed <= partition["committed_offset"] < offset, (group, partition)
        await client.close()


async def write_history(broker: KafkaBroker, topic: str, records: int) -> None:
    """`records` offset commits, ten to a batch as a consumer's commits come, over the log's
    partitions: a long history of small batches, which a broker serves more slowly than the
    same records in large ones."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs=offsets_topic_configs())]
        )
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=False, linger_ms=0
    )
    await producer.start()
    try:
        sends: list[asyncio.Future[Any]] = []
        for start in range(0, records, 10):
            group = f"history-{start // 10 % 1000}"
            batch = producer.create_batch()
            for partition in range(10):
                key, value = encode_record(
                    new_offset_commit_record(group, "orders", partition, start, -1, "", 0)
                )
                batch.append(key=key, value=value, timestamp=None)
            batch.close()
            sends.append(
                await producer.send_batch(batch, topic, partition=partition_for(group, PARTITIONS))
            )
            if len(sends) >= 500:
                await asyncio.gather(*sends)
                sends.clear()
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


@pytest.mark.slow
async def test_a_long_history_loads_from_a_slow_broker(
    fresh_kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    records = 300_000
    await write_history(fresh_kafka_broker, unique_topic, records)
    # Fetches time out: the broker is stopped 200 ms of every 250, longer than a request
    # may take. A load that started over after a timeout never got through.
    args = server_args(fresh_kafka_broker, unique_topic, "--offsets-commit-timeout-ms", "200")
    server = ServerProcess(args)
    with BrokerThrottle(fresh_kafka_broker, stopped_fraction=0.8, period_s=0.25):
        try:
            server.start(timeout=150)
        finally:
            server.kill()
    output = server.output()
    assert "got no answer within" in output, output[-4000:]
    assert "load failed" not in output and "could not be loaded" not in output, output[-4000:]
    ready = next(line for line in server.lines if "ready on" in line)
    # The history, and the node's takeover record of each partition, written before it loads.
    loaded = records + PARTITIONS
    assert f"{PARTITIONS} partitions loaded" in ready and f": {loaded} records" in ready, ready
