"""`bench consumer-groups` at a tiny size, against our server and Apache Kafka's own
coordinator (KIP-848), both started by the bench with the same consumer group settings."""

from __future__ import annotations

import pytest
from bench_support import assert_common_shape, rows_of, run_bench

# The bench starts Apache Kafka brokers of its own for these.
pytestmark = pytest.mark.kafka

TINY = [
    "--members", "20",
    "--consumer-partitions", "40",
    "--runs", "1",
    "--inflight", "8",
    "--group-consumer-heartbeat-interval-ms", "200",
    "--group-consumer-assignment-interval-ms", "200",
    "--assignor-members", "50",
    "--assignor-topics", "10",
    "--assignor-partitions", "500",
]  # fmt: skip


def assert_side(row: dict[str, object]) -> None:
    assert row["members"] == 20 and row["partitions"] == 40
    for column in ("form_s", "extra_assigned_s", "extra_stable_s"):
        value = row[column]
        assert isinstance(value, float) and 0 < value < 30, (column, row)
    assert row["extra_assigned_s"] <= row["extra_stable_s"]  # type: ignore[operator]
    # One more of 21 members on 40 partitions takes one or two of them, and nothing else
    # moves: no member gave up a partition that did not go to the newcomer, nobody stopped
    # consuming a partition it kept, and no partition was ever owned twice.
    assert row["moved"] in (1, 2)
    assert (row["lost_elsewhere"], row["interrupted"], row["most_doubled"]) == (0, 0, 0)
    assert isinstance(row["heartbeats_per_s"], float) and row["heartbeats_per_s"] > 0
    assert row["errors"] == 0
    assert row["heartbeat_interval_ms"] == 200


@pytest.mark.slow
def test_consumer_groups_side_by_side_with_kafkas_coordinator() -> None:
    document = run_bench("consumer-groups", "--peer", *TINY, timeout=600)
    assert_common_shape(document)
    assert document["peer"].startswith("Apache Kafka")
    roles = sorted(p["role"] for p in document["processes"])
    assert roles == ["log broker", "peer broker", "server"]
    (ours,) = rows_of(document, "consumer-groups", "ours")
    (peer,) = rows_of(document, "consumer-groups", "peer")
    assert_side(ours)
    assert_side(peer)
    assert ours["server_cpu_us"] > 0 and peer["broker_cpu_us"] > 0
    # Kafka 4's ConsumerGroupHeartbeat version 1: the members made up their own ids.
    assert peer["heartbeat_version"] == 1
    (ratio,) = rows_of(document, "consumer-groups", "ours/peer")
    assert ratio["form_s"] > 0 and ratio["heartbeats_per_s"] > 0

    classic = document["results"]["consumer-groups classic"]
    protocols = [(row["target"], row["protocol"], row["heartbeats"]) for row in classic]
    assert protocols == [
        ("ours", "consumer", "every 0.2 s"),
        ("ours", "classic", "rejoin at once"),
        ("consumer/classic", "", "rejoin at once"),
        ("ours", "classic", "every 0.2 s"),
        ("consumer/classic", "", "every 0.2 s"),
    ]
    # Every classic member rejoined, giving all its partitions up (eager); none of the
    # consumer protocol's stopped.
    assert [row["members_stopped"] for row in classic if row["protocol"]] == [0, 20, 20]
    assert all(row["extra_s"] > 0 for row in classic if row["protocol"])

    assignor = document["results"]["consumer-groups assignor"]
    assert [row["target"] for row in assignor] == ["ours", "ours", "ours", "kafka (KIP-1263)"]
    assert [row["subscriptions"] for row in assignor[:3]] == [
        "homogeneous",
        "heterogeneous",
        "overlapping",
    ]
    assert all(row["fresh_ms"] > 0 for row in assignor[:3])

    goals = {check["target"] for check in document["targets"]}
    assert any("keep their partitions" in goal for goal in goals)
    assert any("heartbeats of a stable group" in goal for goal in goals)
