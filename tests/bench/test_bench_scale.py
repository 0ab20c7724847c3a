"""`bench commits --nodes 2` on Apache Kafka: a cluster of one node and one of two on CPUs of
their own, both balanced before measured, their runs in turn, each node coordinating its share
of the groups, the ratio said beside the single-node rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_support import BRIEF, assert_common_shape

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TWO_CPUS = hasattr(os, "sched_getaffinity") and sorted(os.sched_getaffinity(0)) == [0, 1]


def bench_two_nodes(tmp_path: Path, *arguments: str) -> tuple[dict[str, Any], str]:
    """`bench commits --nodes 2` on a small load with `arguments`: its JSON document and what
    it printed."""
    out = tmp_path / "bench.json"
    brief = [arg for arg in BRIEF if arg != "--json"]
    completed = subprocess.run(
        [
            sys.executable, "-m", "coordinator_server", "bench", "commits", "--nodes", "2",
            "--groups", "4", "--partitions", "3", "--inflight", "8", *arguments, *brief,
            "--json-file", str(out), *([] if TWO_CPUS else ["--no-pin"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    document: dict[str, Any] = json.loads(out.read_text())
    return document, completed.stdout


def test_two_nodes_are_measured_beside_one_and_their_ratio_is_said(tmp_path: Path) -> None:
    document, printed = bench_two_nodes(tmp_path, "--runs", "2")
    assert_common_shape(document)
    assert document["settings"]["nodes"] == 2
    processes = {process["role"]: process for process in document["processes"]}
    node_roles = ["1 node: node 1", "2 nodes: node 1", "2 nodes: node 2"]
    assert set(processes) == {"log broker", "server", *node_roles}
    assert len({process["pid"] for process in processes.values()}) == 5
    if TWO_CPUS:
        assert [processes[role]["cpus"] for role in node_roles] == [[0], [0], [1]]

    # The single-node rows are there as before, beside the cluster's.
    (ours,) = [row for row in document["results"]["commits"] if row["target"] == "ours"]
    assert ours["requests"] > 0 and ours["errors"] == 0
    one, two, ratio = document["results"]["scale"]
    assert [one["target"], two["target"], ratio["target"]] == [
        "1 node",
        "2 nodes",
        "2 nodes/1 node",
    ]
    for row, nodes in ((one, ["1"]), (two, ["1", "2"])):
        assert row["inflight"] == 8 and row["nodes"] == len(nodes)
        assert row["requests"] > 0 and row["errors"] == 0, row.get("error_codes")
        # Each phase's runs (taken in turn with the other's), each rate kept.
        assert len(row["requests_per_s_runs"]) == 2
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        # Every node coordinates its share of the groups and serves while measured.
        assert list(row["node_cpu"]) == nodes and all(row["node_cpu"][n] > 0 for n in nodes)
        assert row["groups_by_node"] == {n: 4 // len(nodes) for n in nodes}
        assert row["connections"] == 4 * len(nodes)
        assert row["broker_cpu_us"] > 0 and row["server_cpu_us"] > 0
        assert row["core_cpu_us"] == pytest.approx(
            row["server_cpu_us"] + row["broker_cpu_us"], abs=0.2
        )
    if TWO_CPUS:
        # No CPU to spare: the broker and the generator run on the phase's nodes' CPUs.
        assert (one["node_cpus"], one["broker_cpus"], one["generator_cpus"]) == ("0", "0", "0")
        assert (two["node_cpus"], two["broker_cpus"], two["generator_cpus"]) == (
            "0 1", "0,1", "0,1",
        )  # fmt: skip
    assert ratio["requests_per_s"] == pytest.approx(
        two["requests_per_s"] / one["requests_per_s"], rel=0.01
    )

    summary = document["scale"]
    assert summary["nodes"] == 2 and summary["inflight"] == 8 and summary["goal"] == 1.8
    assert summary["ratio"] == ratio["requests_per_s"]
    assert summary["line"].startswith(
        f"scale: 2 nodes commit at {ratio['requests_per_s']}x the rate of 1 node, each at its most"
    )
    assert summary["paired_by_inflight"] == {"8": ratio["paired_ratio"]}
    # The table and the line are printed.
    assert summary["line"] in printed
    assert "2 nodes/1 node" in printed
    goals = [check for check in document["targets"] if check["target"].startswith("scale:")]
    assert len(goals) == 1 and goals[0]["value"] == summary["ratio"]
    # The clusters are stopped with the bench: their nodes are gone.
    for role in node_roles:
        assert not Path(f"/proc/{processes[role]['pid']}").exists()


def test_the_nodes_of_one_serve_workers_command_are_measured_beside_one_node(
    tmp_path: Path,
) -> None:
    document, _ = bench_two_nodes(tmp_path, "--workers", "--runs", "1")
    processes = {process["role"]: process for process in document["processes"]}
    workers = [processes["2 nodes: node 1"], processes["2 nodes: node 2"]]
    assert all("a worker of serve --workers" in worker["what"] for worker in workers)
    assert workers[0]["pid"] != workers[1]["pid"]
    _, two, _ = document["results"]["scale"]
    assert two["nodes"] == 2 and two["requests"] > 0 and two["errors"] == 0
    # Each worker is a node coordinating its share of the groups, and serves while measured.
    assert two["groups_by_node"] == {"1": 2, "2": 2}
    assert all(two["node_cpu"][n] > 0 for n in ("1", "2"))

    # Without --nodes, or for the failover bench, --workers is refused in one line.
    refused = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "bench", "commits", "--workers"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "--workers starts the nodes" in refused.stderr
