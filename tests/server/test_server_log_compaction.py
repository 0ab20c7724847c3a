"""The log topic compacted by Apache Kafka's own cleaner, as `__consumer_offsets` is: the
topic is created with the settings Kafka gives its own, and after the cleaner has run over a
history of overwritten offsets, deleted groups (DeleteGroups) and deleted offsets
(OffsetDelete), a restarted server has exactly the state it had, no deleted group or offset
comes back, and it reads fewer records to get there.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_body, commit_errors, fetch_body

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.hashing import partition_for
from coordinator_server.storage.kafka.log import KafkaLog, offsets_topic_configs

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 2
TOPICS = ["orders", "payments"]
GROUPS = [f"group-{i}" for i in range(6)]
DELETED_GROUPS = GROUPS[:2]
# Offsets of this group deleted with OffsetDelete: all of "orders".
TRIMMED_GROUP = GROUPS[2]
ROUNDS = 10
# The cleaner works on closed segments only: a segment closes at the first append after it
# is this old.
SEGMENT_MS = 100
# DescribeConfigs' source of a setting made for the topic itself.
DYNAMIC_TOPIC_CONFIG = 1
LOADED = re.compile(r"partitions loaded in [0-9.]+ s: (\d+) records")


# Until the test lets the cleaner in, every record is too young to be compacted: the session
# broker's cleaner looks for work every second and would otherwise clean the history before
# the test has counted the records a load of it reads.
NOT_YET_MS = 3_600_000


def compacted_quickly(min_compaction_lag_ms: int) -> dict[str, str]:
    """The log topic's own configuration, with segments that close at once and a cleaner
    that cleans records older than `min_compaction_lag_ms` as soon as anything is dirty and
    drops tombstones on its next pass."""
    return {
        **offsets_topic_configs(),
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": str(min_compaction_lag_ms),
        "delete.retention.ms": "0",
    }


async def create_topic(broker: ApacheKafkaBroker, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs=compacted_quickly(NOT_YET_MS))]
        )
    finally:
        await admin.close()


async def let_the_cleaner_in(broker: ApacheKafkaBroker, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, compacted_quickly(0))]
        )
    finally:
        await admin.close()


async def count_records(broker: ApacheKafkaBroker, topic: str) -> tuple[int, int]:
    """The records in the topic, and how many of them are tombstones."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        count = tombstones = 0
        deadline = time.monotonic() + 60
        while [p for p in partitions if await consumer.position(p) < ends[p]]:
            assert time.monotonic() < deadline, "the log could not be read back"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                count += len(records)
                tombstones += sum(1 for record in records if record.value is None)
        return count, tombstones
    finally:
        await consumer.stop()


def server_args(broker: ApacheKafkaBroker, topic: str) -> list[str]:
    """A node alone: a cluster node writes a takeover record per partition at every start
    (compacted to the latest, but only once its segment is closed), which would blur the
    counts of the groups' records these tests make."""
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", str(PARTITIONS),
        "--offsets-topic-replication-factor", "1",
        "--cluster", "off",
    ]  # fmt: skip


def loaded_records(server: ServerProcess) -> int:
    (count,) = [int(m[1]) for line in server.lines if (m := LOADED.search(line))]
    return count


async def commit(client: WireClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    response = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, offsets))
    assert set(commit_errors(response).values()) == {0}, response


async def write_history(client: WireClient) -> None:
    """Every group commits three partitions of two topics ten times over; two groups are
    deleted, and one has the offsets of a topic deleted."""
    for round_ in range(1, ROUNDS + 1):
        for group in GROUPS:
            await commit(
                client,
                group,
                {(topic, p): 100 * round_ + p for topic in TOPICS for p in range(3)},
            )
    response = await client.call(ApiKey.DELETE_GROUPS, {"groups_names": DELETED_GROUPS})
    assert [r["error_code"] for r in response["results"]] == [0, 0], response
    response = await client.call(
        ApiKey.OFFSET_DELETE,
        {
            "group_id": TRIMMED_GROUP,
            "topics": [
                {"name": "orders", "partitions": [{"partition_index": p} for p in range(3)]}
            ],
        },
    )
    assert response["error_code"] == 0, response


async def close_segments(client: WireClient) -> None:
    """An append to every partition after SEGMENT_MS: what came before is in closed
    segments, which the cleaner may clean."""
    await asyncio.sleep(3 * SEGMENT_MS / 1000)
    for partition in range(PARTITIONS):
        group = next(
            f"roller-{i}"
            for i in range(1000)
            if partition_for(f"roller-{i}", PARTITIONS) == partition
        )
        await commit(client, group, {("rolls", 0): int(time.time())})


async def state(server: ServerProcess) -> dict[str, Any]:
    """Every group's listing and description and every committed offset, as clients see
    them."""
    client = await WireClient.connect(server.host, server.port)
    try:
        listed = await client.call(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        assert listed["error_code"] == 0, listed
        names = sorted(g["group_id"] for g in listed["groups"])
        described = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": [*GROUPS, *names]})
        offsets = {}
        for group in [*GROUPS, *names]:
            (fetched,) = (await client.call(ApiKey.OFFSET_FETCH, fetch_body(group, None)))["groups"]
            assert fetched["error_code"] == 0, fetched
            offsets[group] = sorted(
                (t["name"], p["partition_index"], p["committed_offset"])
                for t in fetched["topics"]
                for p in t["partitions"]
            )
        return {
            "groups": names,
            "described": {d["group_id"]: d for d in described["groups"]},
            "offsets": offsets,
        }
    finally:
        await client.close()


def without_rollers(items: Any) -> Any:
    if isinstance(items, dict):
        return {k: v for k, v in items.items() if not k.startswith("roller-")}
    return [g for g in items if not g.startswith("roller-")]


@pytest.mark.slow
async def test_a_log_compacted_by_kafka_loads_the_same_state_from_fewer_records(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    await create_topic(kafka_broker, unique_topic)
    with ServerProcess(server_args(kafka_broker, unique_topic)) as server:
        client = await WireClient.connect(server.host, server.port)
        await write_history(client)
        await close_segments(client)
        await client.close()
        before = await state(server)
    written, tombstones = await count_records(kafka_broker, unique_topic)
    assert tombstones == 2 * (1 + 3 * len(TOPICS)) + 3

    # What the state is made of: the last offsets of every group but the deleted ones.
    assert not set(DELETED_GROUPS) & set(before["groups"])
    assert all(not before["offsets"][g] for g in DELETED_GROUPS)
    assert before["offsets"][TRIMMED_GROUP] == [("payments", p, 100 * ROUNDS + p) for p in range(3)]
    assert before["offsets"][GROUPS[3]] == sorted(
        (t, p, 100 * ROUNDS + p) for t in TOPICS for p in range(3)
    )

    with ServerProcess(server_args(kafka_broker, unique_topic)) as server:
        loaded_before = loaded_records(server)
        assert await state(server) == before

    # The cleaner keeps the latest record of each key; a later pass (after more appends,
    # the session broker's cleaner looking again every second when idle) drops the
    # tombstones too. Then nothing in the log says the deleted groups and offsets ever were.
    await let_the_cleaner_in(kafka_broker, unique_topic)
    deadline = time.monotonic() + 150
    remaining = written
    with ServerProcess(server_args(kafka_broker, unique_topic)) as server:
        client = await WireClient.connect(server.host, server.port)
        while tombstones or remaining >= written // 2:
            assert time.monotonic() < deadline, (
                f"not cleaned: {remaining} records, {tombstones} tombstones"
            )
            await asyncio.sleep(1)
            await close_segments(client)
            remaining, tombstones = await count_records(kafka_broker, unique_topic)
        await client.close()

    with ServerProcess(server_args(kafka_broker, unique_topic)) as server:
        loaded_after = loaded_records(server)
        after = await state(server)
    # The rollers committed meanwhile; everything else is as it was.
    for part in ("described", "offsets"):
        assert without_rollers(after[part]) == without_rollers(before[part]), part
    assert without_rollers(after["groups"]) == without_rollers(before["groups"])
    assert loaded_after < loaded_before / 2, (loaded_before, loaded_after)


async def test_the_log_topic_is_created_with_the_settings_kafka_gives_consumer_offsets(
    kafka_broker: ApacheKafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 2, 1)
    await log.start()
    await log.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        # The broker creates __consumer_offsets when a group coordinator is first looked up.
        deadline = time.monotonic() + 60
        while True:
            try:
                await admin.find_coordinator(unique_topic)
                break
            except Exception:
                assert time.monotonic() < deadline, "no __consumer_offsets"
                await asyncio.sleep(0.2)
        responses = await admin.describe_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, unique_topic),
                ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets"),
            ]
        )
    finally:
        await admin.close()
    settings = {
        resource[3]: {
            name: value
            for name, value, _read_only, source, *_ in resource[4]
            if source == DYNAMIC_TOPIC_CONFIG
        }
        for response in responses
        for resource in response.resources
    }
    assert settings[unique_topic] == settings["__consumer_offsets"] == offsets_topic_configs()
