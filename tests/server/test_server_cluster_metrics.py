"""The cluster's metrics on a real 2-node cluster on Apache Kafka: what each node owns and
stands by for, its generation, lease and producer epochs, and the takeovers and handovers
as a second node joins."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from cluster_nodes import node_args
from prometheus_client.parser import text_string_to_metric_families
from server_process import ServerProcess

from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4


def http_get(process: ServerProcess, path: str) -> bytes:
    url = f"http://127.0.0.1:{process.metrics_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        body: bytes = reply.read()
    return body


def scrape(process: ServerProcess) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """family or sample name -> {labels: value}, for the cluster's families."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(http_get(process, "/metrics").decode()):
        if not family.name.startswith("coordinator_cluster_"):
            continue
        samples.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def value(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> float:
    (only,) = samples[name].values()
    return only


def epochs(samples: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> dict[int, int]:
    return {
        int(dict(labels)["partition"]): int(epoch)
        for labels, epoch in samples["coordinator_cluster_producer_epoch"].items()
    }


def status(process: ServerProcess) -> dict[str, Any]:
    cluster: dict[str, Any] = json.loads(http_get(process, "/status"))["cluster"]
    return cluster


@pytest.mark.kafka
@pytest.mark.slow
def test_each_node_exports_its_share_of_the_cluster_and_the_moves_it_made(
    kafka_broker: ApacheKafkaBroker, unique_topic: str, nodes: list[ServerProcess]
) -> None:
    first = ServerProcess(node_args(kafka_broker, unique_topic, 1, PARTITIONS))
    nodes.append(first)
    first.start()
    alone = scrape(first)
    assert value(alone, "coordinator_cluster_owned_partitions") == PARTITIONS
    assert value(alone, "coordinator_cluster_standby_partitions") == 0
    assert value(alone, "coordinator_cluster_nodes") == 1
    assert value(alone, "coordinator_cluster_lease_held") == 1
    assert value(alone, "coordinator_cluster_assignment_error") == 0
    assert value(alone, "coordinator_cluster_generation") >= 1
    assert value(alone, "coordinator_cluster_takeovers_total") == PARTITIONS
    assert value(alone, "coordinator_cluster_takeover_failures_total") == 0
    assert value(alone, "coordinator_cluster_handovers_total") == 0
    epochs_alone = epochs(alone)
    assert set(epochs_alone) == set(range(PARTITIONS))
    assert epochs_alone == {int(p): e["producer_epoch"] for p, e in status(first)["epochs"].items()}

    second = ServerProcess(node_args(kafka_broker, unique_topic, 2, PARTITIONS))
    nodes.append(second)
    second.start()
    deadline = time.monotonic() + 30
    while True:
        shares = [scrape(first), scrape(second)]
        owned = [value(s, "coordinator_cluster_owned_partitions") for s in shares]
        moved = [value(s, "coordinator_cluster_takeovers_total") for s in shares]
        if owned == [PARTITIONS / 2, PARTITIONS / 2] and moved[1] == PARTITIONS / 2:
            break
        assert time.monotonic() < deadline, shares
        time.sleep(0.2)
    on_first, on_second = shares
    for samples, process in ((on_first, first), (on_second, second)):
        report = status(process)
        assert value(samples, "coordinator_cluster_nodes") == 2
        assert value(samples, "coordinator_cluster_lease_held") == 1
        assert value(samples, "coordinator_cluster_generation") == report["generation"]
        assert value(samples, "coordinator_cluster_owned_partitions") == len(report["owned"])
        # Two nodes: every partition has its standby on the node that does not own it.
        assert value(samples, "coordinator_cluster_standby_partitions") == PARTITIONS / 2
        assert set(epochs(samples)) == set(report["owned"])
    assert value(on_first, "coordinator_cluster_generation") == value(
        on_second, "coordinator_cluster_generation"
    )
    assert value(on_first, "coordinator_cluster_generation") > value(
        alone, "coordinator_cluster_generation"
    )
    # The first node handed over what the second took over, at newer producer epochs.
    assert value(on_first, "coordinator_cluster_handovers_total") == PARTITIONS / 2
    assert value(on_second, "coordinator_cluster_handovers_total") == 0
    assert value(on_first, "coordinator_cluster_takeovers_total") == PARTITIONS
    taken = epochs(on_second)
    assert set(taken).isdisjoint(epochs(on_first))
    for partition, epoch in taken.items():
        assert epoch > epochs_alone[partition], (partition, epoch, epochs_alone)
    for partition, epoch in epochs(on_first).items():
        assert epoch == epochs_alone[partition]
    assert status(second)["takeovers"] == PARTITIONS / 2
    assert status(first)["handovers"] == PARTITIONS / 2


async def test_a_node_alone_exports_the_cluster_families_without_samples() -> None:
    config = CoordinatorConfig(port=0, metrics_port=0, offsets_topic_partitions=PARTITIONS)
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    await app.start()
    try:
        assert app.metrics_port is not None
        url = f"http://127.0.0.1:{app.metrics_port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        families = {
            family.name: family.samples
            for family in text_string_to_metric_families(body.decode())
            if family.name.startswith("coordinator_cluster_")
        }
        assert len(families) == 10
        assert all(samples == [] for samples in families.values()), families
    finally:
        await app.shutdown()
