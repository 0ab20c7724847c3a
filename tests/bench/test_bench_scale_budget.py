"""The scale figures' pieces that need no broker: where each process runs in each phase, when
a cluster counts as balanced, and how the ratio is decided and said."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator_server.tools.bench import add_parser
from coordinator_server.tools.bench.cluster import balance_problem, with_option
from coordinator_server.tools.bench.processes import repin
from coordinator_server.tools.bench.runner import check_targets
from coordinator_server.tools.bench.scale import (
    FOLLOW_NODES,
    parse_cpus,
    ratio_row,
    scale_budget,
    scale_summary,
)
from coordinator_server.tools.bench.stats import format_table


def bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["bench", "commits", *argv])


def test_cpu_lists_read_as_taskset_writes_them() -> None:
    assert parse_cpus("0") == [0]
    assert parse_cpus("2,0") == [0, 2]
    assert parse_cpus("1-3,5") == [1, 2, 3, 5]
    for bad in ("", "a", "-1"):
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            parse_cpus(bad)


def test_the_options_default_to_one_node_and_read_cpu_sets() -> None:
    args = bench_args()
    assert args.nodes == 1 and args.node_cpus is None
    args = bench_args(
        "--nodes", "2", "--node-cpus", "0,1", "2,3", "--cluster-broker-cpus", "nodes",
        "--cluster-generator-cpus", "4",
    )  # fmt: skip
    assert args.node_cpus == [[0, 1], [2, 3]]
    assert args.cluster_broker_cpus == FOLLOW_NODES
    assert args.cluster_generator_cpus == [4]


def test_on_two_cpus_broker_and_generator_follow_the_phases_nodes() -> None:
    budget = scale_budget(2, None, None, None, [0, 1])
    one, two = budget.phase(1), budget.phase(2)
    # The whole system on one CPU, then on two.
    assert (one.nodes, one.broker, one.generator) == ([[0]], [0], [0])
    assert (two.nodes, two.broker, two.generator) == ([[0], [1]], [0, 1], [0, 1])


def test_with_cpus_to_spare_broker_and_generator_keep_theirs_in_both_phases() -> None:
    budget = scale_budget(2, None, None, None, [0, 1, 2, 3, 4, 5])
    for phase in (budget.phase(1), budget.phase(2)):
        assert phase.generator == [2] and phase.broker == [3]
    assert budget.phase(2).nodes == [[0], [1]]
    # One CPU to spare goes to the generator; the broker follows the nodes.
    budget = scale_budget(2, None, None, None, [0, 1, 2])
    assert budget.phase(1).generator == [2] == budget.phase(2).generator
    assert budget.phase(1).broker == [0] and budget.phase(2).broker == [0, 1]


def test_given_cpus_are_kept_and_must_name_every_node() -> None:
    budget = scale_budget(2, [[2, 3], [4, 5]], [0], FOLLOW_NODES, [0, 1, 2, 3, 4, 5])
    two = budget.phase(2)
    assert two.nodes == [[2, 3], [4, 5]] and two.broker == [0]
    assert two.generator == [2, 3, 4, 5]
    assert budget.phase(1).generator == [2, 3]
    with pytest.raises(SystemExit, match="2 CPU sets for --nodes 3"):
        scale_budget(3, [[0], [1]], None, None, [0, 1, 2])
    # Unpinned: nothing placed.
    unpinned = scale_budget(2, None, None, None, [0, 1], pin=False).phase(2)
    assert (unpinned.nodes, unpinned.broker, unpinned.generator) == (None, None, None)


def test_an_option_is_replaced_not_repeated() -> None:
    args = ["--metrics-port", "-1", "--cluster=off", "--node-id", "3"]
    assert with_option(args, "--metrics-port", "0") == [
        "--cluster=off", "--node-id", "3", "--metrics-port", "0",
    ]  # fmt: skip
    assert with_option(args, "--cluster", "on")[-2:] == ["--cluster", "on"]
    assert "--cluster=off" not in with_option(args, "--cluster", "on")


def status(
    node_id: int, owned: list[int], *, generation: int = 5, nodes: tuple[int, ...] = (1, 2),
    loading: tuple[int, ...] = (), error: str | None = None, lease: bool = True,
) -> dict[str, Any]:  # fmt: skip
    return {
        "partitions": {str(p): "LOADING" if p in loading else "ACTIVE" for p in owned},
        "cluster": {
            "node_id": node_id,
            "generation": generation,
            "error": error,
            "holds_lease": lease,
            "owned": owned,
            "standby": [],
            "nodes": {str(n): f"127.0.0.1:{9000 + n}" for n in nodes},
        },
    }


def test_a_cluster_is_balanced_once_every_node_owns_its_share_active_in_one_view() -> None:
    assert balance_problem([status(1, [0, 1]), status(2, [2, 3])], 4) is None
    cases = {
        "owns no partition": [status(1, [0, 1, 2, 3]), status(2, [])],
        "not ACTIVE": [status(1, [0, 1]), status(2, [2, 3], loading=(3,))],
        "generations": [status(1, [0, 1]), status(2, [2, 3], generation=6)],
        "sees nodes [1]": [status(1, [0, 1], nodes=(1,)), status(2, [2, 3])],
        "owned by nodes 1 and 2": [status(1, [0, 1, 2]), status(2, [2, 3])],
        "1 partitions owned by no node": [status(1, [0, 1]), status(2, [2])],
        "node id 2 is taken": [status(1, [0, 1]), status(2, [2, 3], error="node id 2 is taken")],
        "holds no lease": [status(1, [0, 1]), status(2, [2, 3], lease=False)],
    }
    for expected, statuses in cases.items():
        problem = balance_problem(statuses, 4)
        assert problem is not None and expected in problem, (expected, problem)
    assert balance_problem([{"cluster": None}], 4) == "a node runs without the cluster"


def rows(one_rate: float, two_rate: float) -> list[dict[str, Any]]:
    def row(name: str, nodes: int, inflight: int, rate: float, cpu: float) -> dict[str, Any]:
        return {
            "target": name, "nodes": nodes, "inflight": inflight, "requests_per_s": rate,
            "p99_ms": 5.0, "core_cpu_us": cpu, "generator_cpu": 0.2, "broker_cpu": 0.9,
        }  # fmt: skip

    out = []
    for inflight, scale in ((1, 0.1), (64, 1.0)):
        one = row("1 node", 1, inflight, one_rate * scale, 60.0)
        two = row("2 nodes", 2, inflight, two_rate * scale, 62.0)
        out += [one, two, ratio_row(two, one)]
    return out


def test_the_ratio_is_throughput_against_throughput_and_said_in_one_line() -> None:
    summary = scale_summary(rows(10_000, 19_000))
    assert summary is not None
    assert summary["inflight"] == 64 and summary["ratio"] == 1.9 and summary["met"]
    assert summary["cpu_ratio"] == round(2 * 60 / 62, 2)
    line = summary["line"]
    assert line.startswith("scale: 2 nodes commit at 1.9x the rate of 1 node, each at its most")
    assert "19,000 OffsetCommit requests/s at 64 in flight" in line
    assert "vs 10,000 at 64" in line and "goal at least 1.8x: met" in line
    assert "at each number in flight 1: 1.9x, 64: 1.9x" in line
    # A saturated broker is named as what may limit the nodes.
    assert "broker used 0.9 of a core" in line
    missed = scale_summary(rows(10_000, 17_000))
    assert missed is not None and not missed["met"] and "MISSED" in missed["line"]
    (check,) = [c for c in check_targets({"scale": rows(10_000, 17_000)}) if "scale" in c["target"]]
    assert check["value"] == 1.7 and check["met"] is False
    assert scale_summary([]) is None and check_targets({}) == []


def test_each_phase_is_taken_at_its_most_whatever_the_number_in_flight() -> None:
    """One node still gaining from larger batches where two have filled their CPUs: the
    ratio is of the most each reached, not of the rates at the most in flight."""
    out = rows(10_000, 19_000)
    one_more = dict(out[0], inflight=128, requests_per_s=11_000, core_cpu_us=55.0)
    two_less = dict(out[1], inflight=128, requests_per_s=18_000)
    out += [one_more, two_less, ratio_row(two_less, one_more)]
    summary = scale_summary(out)
    assert summary is not None
    assert (summary["inflight"], summary["one_node_inflight"]) == (64, 128)
    assert summary["ratio"] == 1.73 and not summary["met"]
    assert summary["by_inflight"] == {"1": 1.9, "64": 1.9, "128": 1.64}
    assert "19,000 OffsetCommit requests/s at 64 in flight" in summary["line"]
    assert "vs 11,000 at 128" in summary["line"]
    assert summary["cpu_ratio"] == round(2 * 55 / 62, 2)


def test_runs_taken_in_turn_are_also_compared_pair_by_pair() -> None:
    """A machine that slows down between the pairs moves both phases' runs of a pair: each
    pair's ratio stays, and their median is said beside the ratio of the medians."""
    one = {"target": "1 node", "nodes": 1, "inflight": 64, "requests_per_s": 10_000,
           "requests_per_s_runs": [12_000, 10_000, 8_000], "p99_ms": 5.0}  # fmt: skip
    two = {"target": "2 nodes", "nodes": 2, "inflight": 64, "requests_per_s": 17_000,
           "requests_per_s_runs": [23_000, 17_000, 15_000], "p99_ms": 5.0}  # fmt: skip
    ratio = ratio_row(two, one)
    assert ratio["requests_per_s"] == 1.7
    assert ratio["requests_per_s_runs"] == [1.917, 1.7, 1.875]
    assert ratio["paired_ratio"] == 1.88
    summary = scale_summary([one, two, ratio])
    assert summary is not None and summary["paired_by_inflight"] == {"64": 1.88}
    assert "run by run, in turn, 64: 1.88x (1.70 to 1.92)" in summary["line"]
    # The goal is decided on the ratio of the medians, as the table shows it.
    assert summary["ratio"] == 1.7 and not summary["met"]
    # Runs that cannot be paired give no paired ratio.
    del one["requests_per_s_runs"][0]
    assert "paired_ratio" not in ratio_row(two, one)


def test_each_nodes_cpu_share_prints_in_one_cell() -> None:
    table = format_table([{"target": "2 nodes", "node_cpu": {"1": 0.97, "2": 0.95}}],
                         ["target", "node_cpu"])  # fmt: skip
    assert table.splitlines()[-1].split() == ["2", "nodes", "0.97", "0.95"]


def test_repeated_runs_report_the_median_of_each_nodes_share() -> None:
    from coordinator_server.tools.bench.stats import median_row

    merged = median_row(
        [{"requests_per_s": r, "node_cpu": {"1": r / 10, "2": r / 20}} for r in (3.0, 1.0, 2.0)]
    )
    assert merged["requests_per_s"] == 2.0 and merged["runs"] == 3
    assert merged["requests_per_s_runs"] == [3.0, 1.0, 2.0]
    assert merged["node_cpu"] == {"1": 0.2, "2": 0.1}


def test_a_run_that_served_nothing_leaves_the_others_cpu_per_request() -> None:
    from coordinator_server.tools.bench.stats import median_row

    served = {"requests": 10, "broker_cpu_us": 40.0, "server_cpu_us": 50.0}
    merged = median_row([{"requests": 0}, served, {**served, "broker_cpu_us": 60.0}])
    assert merged["requests"] == 10
    assert (merged["broker_cpu_us"], merged["server_cpu_us"]) == (50.0, 50.0)


# Three threads besides the main one, each a task of its own with its own affinity.
THREADS = (
    "import threading, time\n"
    "for _ in range(3): threading.Thread(target=time.sleep, args=(60,)).start()\n"
    "time.sleep(60)"
)


def test_a_running_process_is_moved_to_other_cpus_with_every_thread() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", THREADS])
    try:
        tasks = Path(f"/proc/{child.pid}/task")
        deadline = time.monotonic() + 10
        while len(list(tasks.iterdir())) < 4:
            assert time.monotonic() < deadline, "the threads never started"
            time.sleep(0.02)
        for target in ([cpus[-1]], cpus):
            repin(child.pid, target)
            for task in tasks.iterdir():
                assert sorted(os.sched_getaffinity(int(task.name))) == target
    finally:
        child.kill()
        child.wait(10)


def test_nodes_with_another_scenario_is_refused_in_one_line() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "bench", "heartbeats", "--nodes", "2",
         "--no-pin"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    assert completed.stderr.strip() == (
        "bench: --nodes measures commits or failover: run `bench commits` (or all) "
        "or `bench failover`"
    )
