"""A cluster under a nemesis, its history checked.

Three `coordinator-server serve` nodes share a log on Apache Kafka. Commit writers (one per
group, over the bare wire client), offset readers and consumer groups (the client library's
`GroupMember`) work against them while a seeded nemesis kills (-9), pauses (SIGSTOP, past
the session timeout) and restarts nodes, always leaving one up. Then every node comes back,
the workload runs on, the writers stop, every key is read once more, and the checker
(`checker.py`) verifies the history against the log itself.

`HISTORY_SEED` replays a run's faults (the seed is printed first); `HISTORY_FAULTS_S` makes
the healed part longer. The history is written, one JSON line per attempt, to the path the
test prints.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_kafka import ApacheKafkaBroker
from checker import GroupSpec, check
from cluster_log import read_log
from cluster_workload import (
    CommitWriter,
    MemberRunner,
    OffsetReader,
    RecordingClient,
    WireSession,
    churn,
    final_reads,
    rebalance,
)
from history import Recorder
from nemesis import Nodes, Timing, run_schedule, schedule

from coordinator_protocol.hashing import partition_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

NODE_IDS = (1, 2, 3)
LOG_PARTITIONS = 6
# The broker's group.min.session.timeout.ms.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
FAULTS_S = float(os.environ.get("HISTORY_FAULTS_S", "90"))
AFTER_HEAL_S = 20.0
REBALANCE_BOUND_S = 20.0
WRITER_TOPIC = "orders"
WRITER_PARTITIONS = (0, 1)
CONSUMER_TOPIC = "events"
CONSUMER_PARTITIONS = 6
CONSUMER_GROUPS = ("cg-a", "cg-b")
MEMBERS_PER_GROUP = 3
READERS = 3
# A random consumer group rebalances this often while the faults go on.
CHURN_EVERY_S = (8.0, 16.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def node_args(broker: ApacheKafkaBroker, topic: str, node_id: int, port: int) -> list[str]:
    return [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--bootstrap-servers",
        broker.bootstrap,
        "--offsets-topic",
        topic,
        "--offsets-topic-partitions",
        str(LOG_PARTITIONS),
        "--offsets-topic-replication-factor",
        "1",
        "--cluster",
        "on",
        "--cluster-session-timeout-ms",
        str(SESSION_TIMEOUT_MS),
        "--cluster-heartbeat-interval-ms",
        str(HEARTBEAT_INTERVAL_MS),
        "--node-id",
        str(node_id),
    ]


def writer_groups() -> list[str]:
    """One group per log partition, so that every partition has a writer."""
    groups: dict[int, str] = {}
    for i in itertools.count():
        group = f"writer-{i}"
        groups.setdefault(partition_for(group, LOG_PARTITIONS), group)
        if len(groups) == LOG_PARTITIONS:
            return [groups[p] for p in range(LOG_PARTITIONS)]
    raise AssertionError("unreachable")


def status(metrics_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/status", timeout=2) as reply:
        body: dict[str, Any] = json.loads(reply.read())
    return body


async def until_every_partition_is_owned(nodes: Nodes, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        owned: list[int] = []
        for process in nodes.current.values():
            try:
                cluster = (await asyncio.to_thread(status, process.metrics_port))["cluster"]
            except OSError:
                continue
            owned += cluster["owned"]
        if sorted(owned) == list(range(LOG_PARTITIONS)):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the partitions are not all owned once: {sorted(owned)}")
        await asyncio.sleep(0.5)


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("HISTORY_SEED") or random.randrange(2**32))
    print(f"\nHISTORY_SEED={value}", file=sys.stderr)
    return value


@pytest.fixture
def cluster(kafka_broker: ApacheKafkaBroker, unique_topic: str) -> Iterator[Nodes]:
    ports = {node: free_port() for node in NODE_IDS}
    nodes = Nodes(lambda node: node_args(kafka_broker, unique_topic, node, ports[node]), NODE_IDS)
    yield nodes
    nodes.stop_all()


@pytest.mark.timeout(420)
async def test_a_cluster_under_kills_and_pauses_keeps_its_history_valid(
    kafka_broker: ApacheKafkaBroker,
    unique_topic: str,
    cluster: Nodes,
    seed: int,
    tmp_path: Path,
) -> None:
    faults = schedule(seed, NODE_IDS, Timing(duration_s=FAULTS_S))
    print(f"faults: {[(f.at_s, f.action, f.node) for f in faults]}", file=sys.stderr)
    await asyncio.gather(*(asyncio.to_thread(cluster.start, node) for node in NODE_IDS))
    await until_every_partition_is_owned(cluster, 60)
    addresses = {node: (p.host, p.port) for node, p in cluster.current.items()}
    bootstrap = ",".join(f"{host}:{port}" for host, port in addresses.values())

    path = tmp_path / "history.jsonl"
    print(f"history: {path}", file=sys.stderr)
    recorder = Recorder(path)
    rng = random.Random(seed)

    def session(process: str) -> WireSession:
        return WireSession(
            process, recorder, addresses, timeout_s=3.0, rng=random.Random(rng.random())
        )

    writers = [
        CommitWriter(session(f"w{i}"), group, WRITER_TOPIC, WRITER_PARTITIONS, pause_s=0.05)
        for i, group in enumerate(writer_groups())
    ]
    keys = {w.group: (WRITER_TOPIC, WRITER_PARTITIONS) for w in writers} | {
        g: (CONSUMER_TOPIC, tuple(range(CONSUMER_PARTITIONS))) for g in CONSUMER_GROUPS
    }
    readers = [OffsetReader(session(f"r{i}"), keys, pause_s=0.05) for i in range(READERS)]
    members = []
    group_specs = {}
    for group in CONSUMER_GROUPS:
        counters: dict[tuple[str, int], Any] = {
            (CONSUMER_TOPIC, p): itertools.count(1).__next__ for p in range(CONSUMER_PARTITIONS)
        }
        names = [f"{group}/m{j}" for j in range(MEMBERS_PER_GROUP)]
        group_specs[group] = GroupSpec(
            frozenset(names), frozenset((CONSUMER_TOPIC, p) for p in range(CONSUMER_PARTITIONS))
        )
        for name in names:
            client = RecordingClient(
                bootstrap,
                process=name,
                recorder=recorder,
                nodes=addresses,
                client_id=name,
                request_timeout_ms=5000,
            )
            members.append(
                MemberRunner(
                    client,
                    group,
                    CONSUMER_TOPIC,
                    CONSUMER_PARTITIONS,
                    counters,
                    session_timeout_ms=SESSION_TIMEOUT_MS,
                    pause_s=0.5,
                )
            )

    stop = asyncio.Event()
    healed = asyncio.Event()
    clients = [
        *(asyncio.create_task(w.run(stop)) for w in writers),
        *(asyncio.create_task(r.run(stop)) for r in readers),
        *(asyncio.create_task(m.run(stop)) for m in members),
    ]
    by_group = {g: [m for m in members if m.member.group_id == g] for g in CONSUMER_GROUPS}
    churning = asyncio.create_task(churn(by_group, random.Random(seed), CHURN_EVERY_S, healed))
    try:
        await run_schedule(faults, cluster, recorder, time.monotonic())
        healed.set()
        await churning
        heal_ns = recorder.event("nemesis", "heal").invoke_ns
        # Every group must complete a rebalance now that the faults stopped.
        for group_members in by_group.values():
            rebalance(group_members, "the faults stopped")
        await asyncio.sleep(AFTER_HEAL_S)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 30)
        reader = session("final")
        unread = await final_reads(reader, keys, timeout_s=30)
        await reader.close()
        for s in (*(w.session for w in writers), *(r.session for r in readers)):
            await s.close()
    finally:
        stop.set()
        healed.set()
        churning.cancel()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        for member in members:
            await member.close()
        recorder.close()

    log = await read_log(kafka_broker.bootstrap, unique_topic, LOG_PARTITIONS)
    result = check(
        recorder.ops,
        log,
        group_specs,
        heal_ns=heal_ns,
        rebalance_bound_ns=int(REBALANCE_BOUND_S * 1e9),
    )
    print(result.summary(), file=sys.stderr)
    print(f"HISTORY_SEED={seed} history: {path}", file=sys.stderr)
    assert not unread, f"groups never read after the faults: {unread}"
    assert result.counts["ops"]["commit"].get("ok", 0) > 100, result.counts
    assert result.valid, result.summary()
