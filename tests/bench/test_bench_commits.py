"""`bench commits` against a server and a peer it starts itself: shape, sanity and the CPU
budget (ours and its broker on one core, the peer's broker a second process there)."""

from __future__ import annotations

import os

import pytest
from bench_support import assert_common_shape, rows_of, run_bench

PINNED = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


def assert_commit_rows(document: dict[str, object], inflight: list[int]) -> None:
    for target in ("ours", "peer"):
        rows = rows_of(document, "commits", target)  # type: ignore[arg-type]
        assert [row["inflight"] for row in rows] == inflight
        for row in rows:
            assert row["requests"] > 0
            assert row["requests_per_s"] > 0
            assert row["partition_commits_per_s"] == pytest.approx(
                row["requests_per_s"] * 3, rel=0.01
            )
            assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["p999_ms"]
            assert row["errors"] == 0, row.get("error_codes")
            assert 0 < row["generator_cpu"] <= 1.5
            # Each target's broker serves it; only ours runs in our server too.
            assert row["broker_cpu_us"] > 0
            assert ("server_cpu_us" in row) == (target == "ours")
            assert "others_cpu_us" in row
            if target == "ours":
                assert row["server_cpu_us"] > 0
            # What a request cost the target's core: the server and the broker it uses.
            assert row["core_cpu_us"] == pytest.approx(
                row.get("server_cpu_us", 0) + row["broker_cpu_us"], abs=0.2
            )
    ratios = rows_of(document, "commits", "ours/peer")  # type: ignore[arg-type]
    assert len(ratios) == len(inflight)
    assert all(row["requests_per_s"] > 0 for row in ratios)


@pytest.mark.kafka
@pytest.mark.slow
def test_the_peer_is_apache_kafkas_coordinator_in_a_broker_of_its_own() -> None:
    pinning = ["--server-cpu", "0", "--generator-cpu", "1"] if PINNED else []
    document = run_bench(
        "commits", "--peer", "--groups", "4", "--partitions", "3", "--inflight", "1,64",
        *pinning, pin=bool(pinning),
    )  # fmt: skip
    assert_common_shape(document)
    assert document["settings"]["broker"] == "kafka"
    assert document["peer"].startswith("Apache Kafka 4.")
    assert document["peer"].endswith("group coordinator")
    processes = {process["role"]: process for process in document["processes"]}
    assert set(processes) == {"log broker", "peer broker", "server"}
    assert len({process["pid"] for process in processes.values()}) == 3
    assert processes["log broker"]["what"].startswith("Apache Kafka 4.")
    if pinning:
        # One core for the server and both brokers (measured in turns), the generator apart.
        assert all(process["cpus"] == [0] for process in processes.values())
    assert_commit_rows(document, [1, 64])
    # A Kafka broker handles one request of a connection at a time: a connection each.
    assert [row["connections"] for row in rows_of(document, "commits", "peer")] == [1, 64]
    assert [row["connections"] for row in rows_of(document, "commits", "ours")] == [1, 4]
    # The goals at 1 and 64 in flight are stated against Kafka's own coordinator.
    goals = [check["target"] for check in document["targets"]]
    assert [goal.split(":")[0] for goal in goals] == [
        "commits at 1 in flight",
        "commits at 64 in flight",
        "commits at 64 in flight",
        "commits at 64 in flight",
    ]
    assert all("Apache Kafka 4." in goal for goal in goals)


@pytest.mark.tansu
def test_the_peer_is_tansus_coordinator_with_broker_tansu() -> None:
    document = run_bench(
        "commits", "--broker", "tansu", "--peer", "--groups", "4", "--partitions", "3",
        "--inflight", "1,4",
    )  # fmt: skip
    assert_common_shape(document)
    assert document["settings"]["broker"] == "tansu"
    assert document["peer"] == "tansu's group coordinator"
    roles = sorted(process["role"] for process in document["processes"])
    assert roles == ["log broker", "peer broker", "server"]
    assert_commit_rows(document, [1, 4])
