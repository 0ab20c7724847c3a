"""`bench heartbeats` against a running server (--bootstrap) and a peer (--peer-bootstrap)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_support import assert_common_shape, rows_of, run_bench
from kafka_broker import KafkaBroker
from server_process import ServerProcess
from wire_client import WireClient


@pytest.fixture
def server(kafka_broker: KafkaBroker, tmp_path: Path) -> Iterator[ServerProcess]:
    # A topic of its own, so that it does not meet other tests' servers on the broker; no
    # initial rebalance delay, as the servers the bench starts itself have none (each phase
    # forms its groups anew, and would wait 3 s for late members).
    with ServerProcess(
        [
            "--port", "0",
            "--group-initial-rebalance-delay-ms", "0",
            "--bootstrap-servers", kafka_broker.bootstrap,
            "--offsets-topic", f"__bench_heartbeats_{tmp_path.name}",
            "--offsets-topic-partitions", "4",
            "--offsets-topic-replication-factor", "1",
        ]
    ) as process:  # fmt: skip
        yield process


def assert_heartbeat_row(row: dict[str, object]) -> None:
    assert row["members"] == 12
    assert isinstance(row["requests"], int) and row["requests"] > 0
    assert isinstance(row["requests_per_s"], float) and row["requests_per_s"] > 0
    assert isinstance(row["p50_ms"], float) and isinstance(row["p999_ms"], float)
    assert 0 < row["p50_ms"] <= row["p999_ms"]
    assert row["errors"] == 0
    assert row["expired"] == 0


def test_heartbeats_attached_to_a_running_server(server: ServerProcess) -> None:
    document = run_bench(
        "heartbeats",
        "--bootstrap", f"{server.host}:{server.port}",
        "--members", "12",
        "--groups", "3",
        "--inflight", "8",
        "--connections", "2",
    )  # fmt: skip
    assert_common_shape(document)
    (row,) = rows_of(document, "heartbeats", "ours")
    assert_heartbeat_row(row)
    assert rows_of(document, "heartbeats", "peer") == []
    assert any(check["target"].startswith("heartbeats: no member") for check in document["targets"])


def test_heartbeats_side_by_side_with_kafkas_coordinator(
    server: ServerProcess, kafka_broker: KafkaBroker
) -> None:
    # The peer is the group coordinator of the Apache Kafka broker the server's log is on.
    document = run_bench(
        "heartbeats",
        "--bootstrap", f"{server.host}:{server.port}",
        "--peer-bootstrap", kafka_broker.bootstrap,
        "--members", "12",
        "--groups", "3",
        "--inflight", "8",
        "--connections", "2",
    )  # fmt: skip
    for target in ("ours", "peer"):
        (row,) = rows_of(document, "heartbeats", target)
        assert_heartbeat_row(row)
    (ratio,) = rows_of(document, "heartbeats", "ours/peer")
    assert ratio["requests_per_s"] > 0
    assert document["peer"] == f"the group coordinator at {kafka_broker.bootstrap}"


async def test_the_members_leave_once_measured(server: ServerProcess) -> None:
    # A member left to expire would have the coordinator work later, while the next target
    # is measured on the same core.
    run_bench(
        "heartbeats",
        "--bootstrap", f"{server.host}:{server.port}",
        "--members", "12",
        "--groups", "3",
        "--inflight", "8",
        "--connections", "2",
        "--session-timeout-ms", "600000",
    )  # fmt: skip
    client = await WireClient.connect(server.host, server.port)
    try:
        listed = await client.call(16, {"states_filter": [], "types_filter": []})
        groups = sorted(
            group["group_id"]
            for group in listed["groups"]
            if group["group_id"].startswith("bench-heartbeats-")
        )
        # The three measured groups and the three the warm-up formed.
        assert len(groups) == 6
        described = await client.call(15, {"groups": groups})
    finally:
        await client.close()
    assert [(group["group_state"], group["members"]) for group in described["groups"]] == [
        ("Empty", [])
    ] * 6
