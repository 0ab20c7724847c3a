"""Consumer lag on /metrics, from real server processes over Apache Kafka: each group's
committed offset against the data partition's log end offset, growing as records arrive; a
topic the data cluster does not know is left out and not created; the bound on series with
its counter and one WARNING; lag over a SASL_SSL data cluster beside the embedded log; and
lag off without a data cluster. The same scrapes check the process and GC families, groups
by state with every state present, and committed offsets per log partition."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from apache_kafka import ApacheKafkaBroker
from kafka_broker import cluster_topics
from prometheus_client.parser import text_string_to_metric_families
from server_process import ServerProcess, sqlite_args
from wire_client import WireClient, commit_body, commit_errors

from coordinator_protocol.api_keys import ApiKey

pytestmark = pytest.mark.timeout(180)

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
LAG = "coordinator_consumer_group_lag"
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
WARNING_TEXT = "left out of coordinator_consumer_group_lag"


def scrape(server: ServerProcess) -> Samples:
    """Sample name -> {labels: value}; every family's name is a key, samples or not."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        # A family twice would be a broken exposition (the lag's is rendered apart).
        assert family.name not in samples, family.name
        samples.setdefault(family.name, {})
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def lag_of(samples: Samples) -> dict[tuple[str, str, int], float]:
    return {
        (dict(labels)["group"], dict(labels)["topic"], int(dict(labels)["partition"])): value
        for labels, value in samples.get(LAG, {}).items()
    }


def single(samples: Samples, name: str) -> float:
    return samples[name][()]


async def eventually(
    server: ServerProcess, check: Callable[[Samples], bool], timeout: float = 30
) -> Samples:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        samples = await loop.run_in_executor(None, scrape, server)
        if check(samples):
            return samples
        assert loop.time() < deadline, f"never reached; last lag {lag_of(samples)}"
        await asyncio.sleep(0.1)


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, count in counts.items():
            for index in range(count):
                await producer.send_and_wait(topic, f"{index}".encode(), partition=partition)
    finally:
        await producer.stop()


async def commit(server: ServerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    client = await WireClient.connect(server.host, server.port)
    try:
        response = await client.call(ApiKey.OFFSET_COMMIT, commit_body(group, offsets), timeout=30)
        assert commit_errors(response) == dict.fromkeys(offsets, 0)
    finally:
        await client.close()


@pytest.mark.kafka
async def test_lag_is_the_end_offset_minus_the_committed_offset_and_grows_with_the_topic(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    bootstrap = kafka_broker.bootstrap
    topic, missing = f"lag-{suffix}", f"lag-missing-{suffix}"
    await create_topic(bootstrap, topic, 2)
    await produce(bootstrap, topic, {0: 10, 1: 4})
    args = [
        "--port", "0",
        "--bootstrap-servers", bootstrap,
        "--offsets-topic", f"__lag_{suffix}",
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--lag-refresh-interval-ms", "300",
        *kafka_broker.coordinator_args,
    ]  # fmt: skip
    with ServerProcess(args) as server:
        await commit(server, "g", {(topic, 0): 3, (topic, 1): 4, (missing, 0): 5})
        await commit(server, "g2", {(topic, 0): 10})
        expected = {("g", topic, 0): 7, ("g", topic, 1): 0, ("g2", topic, 0): 0}
        samples = await eventually(server, lambda s: lag_of(s) == expected)
        assert single(samples, "coordinator_consumer_group_lag_series_dropped_total") == 0
        assert single(samples, "coordinator_consumer_group_lag_refresh_failures_total") == 0
        # Committed offsets per log partition: g's three and g2's one, wherever they hash.
        committed = samples["coordinator_committed_offsets"]
        assert sum(committed.values()) == 4
        assert {dict(labels)["partition"] for labels in committed} == {"0", "1", "2", "3"}
        # Every group state has its series: the two groups hold offsets only (Empty).
        groups = {
            dict(labels)["state"]: value for labels, value in samples["coordinator_groups"].items()
        }
        assert groups == {**dict.fromkeys(GROUP_STATES, 0.0), "Empty": 2.0}
        # The process and the garbage collector.
        assert single(samples, "process_cpu_seconds_total") > 0
        assert single(samples, "process_resident_memory_bytes") > 10 * 2**20
        assert single(samples, "process_open_fds") > 0
        assert samples["python_gc_collections_total"]
        assert single(samples, "coordinator_event_processing_time_seconds_count") >= 2
        # The loop-lag timer is due every 0.5 s from the start, and a fast start may be
        # scraped before it first fired.
        await eventually(
            server, lambda s: single(s, "coordinator_event_loop_lag_seconds_count") >= 1
        )

        # Records arrive on partition 1: g falls behind there.
        await produce(bootstrap, topic, {1: 5})
        await eventually(server, lambda s: lag_of(s).get(("g", topic, 1)) == 5)
        # g catches up on partition 0.
        await commit(server, "g", {(topic, 0): 10})
        await eventually(server, lambda s: lag_of(s).get(("g", topic, 0)) == 0)
        assert server.terminate() == 0
    # Reading the lag of a topic the data cluster lacks did not create it.
    assert missing not in await cluster_topics(bootstrap)
    assert WARNING_TEXT not in server.output()


@pytest.mark.kafka
async def test_the_lag_series_are_bounded_over_a_sasl_ssl_data_cluster(
    kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    """The embedded log, lag read from the data cluster through its SASL_SSL listener with
    the --kafka-* settings: at most --lag-max-series series, the rest counted at every
    refresh and said in one WARNING."""
    suffix = uuid.uuid4().hex[:8]
    topic = f"lag-bound-{suffix}"
    await create_topic(kafka_broker.bootstrap, topic, 5)
    await produce(kafka_broker.bootstrap, topic, dict.fromkeys(range(5), 2))
    args = sqlite_args(
        tmp_path,
        "--lag-bootstrap-servers", kafka_broker.sasl_ssl_bootstrap,
        "--kafka-security-protocol", "SASL_SSL",
        "--kafka-sasl-mechanism", "SCRAM-SHA-256",
        "--kafka-sasl-username", kafka_broker.sasl_username,
        "--kafka-ssl-ca-location", str(kafka_broker.ca_file),
        "--lag-refresh-interval-ms", "200",
        "--lag-max-series", "3",
    )  # fmt: skip
    env = {"COORDINATOR_KAFKA_SASL_PASSWORD": kafka_broker.sasl_password}
    with ServerProcess(args, env) as server:
        await commit(server, "bounded", {(topic, p): 1 for p in range(5)})
        dropped = "coordinator_consumer_group_lag_series_dropped_total"
        # Two left out at each refresh: three refreshes' worth.
        samples = await eventually(server, lambda s: single(s, dropped) >= 6)
        assert single(samples, dropped) % 2 == 0
        lag = lag_of(samples)
        assert len(lag) == 3
        assert set(lag.values()) == {1}
        assert {group for group, _, _ in lag} == {"bounded"}
        assert single(samples, "coordinator_consumer_group_lag_refresh_failures_total") == 0
        assert server.terminate() == 0
    warnings = [line for line in server.lines if WARNING_TEXT in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings
    assert "--lag-max-series 3" in warnings[0]
    assert kafka_broker.sasl_password not in server.output()


async def test_without_a_data_cluster_lag_is_off_and_the_rest_is_there(tmp_path: Path) -> None:
    with ServerProcess(sqlite_args(tmp_path)) as server:
        await commit(server, "alone", {("t", 0): 5})
        samples = await asyncio.get_running_loop().run_in_executor(None, scrape, server)
        # The families are there, without samples.
        for name in (
            LAG,
            "coordinator_consumer_group_lag_series_dropped",
            "coordinator_consumer_group_lag_refresh_failures",
        ):
            assert samples[name] == {}, name
        assert sum(samples["coordinator_committed_offsets"].values()) == 1
        assert single(samples, "process_open_fds") > 0
        assert samples["python_gc_objects_collected_total"]
        assert server.terminate() == 0
