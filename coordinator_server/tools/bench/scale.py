"""The scale figures (`bench commits --nodes N`): OffsetCommit throughput of one node of a
cluster on its CPUs, then of N nodes on N times the CPUs, in the same run, and their ratio.

The CPU budget. Each node runs on CPUs of its own (`--node-cpus`). The log's broker and the
load generator serve both phases, so a fair comparison gives them the same room in both:
on a machine with two CPUs to spare beyond the nodes', the broker gets one and the generator
the other, in both phases (the ratio is then the nodes' alone, as long as neither of the two
is saturated: their CPU shares are reported). With fewer CPUs they run on the CPUs of the
phase's nodes (`nodes`): one node shares its CPU with them, N nodes share N CPUs with them,
so both phases fit the whole system into their CPUs and the ratio is the system's. The
ratio of CPU time a commit (nodes and broker) says what N nodes would reach with their CPUs
to themselves, whatever else ran on the machine.

The phases are two clusters, each on a log topic of its own, started side by side and
balanced before anything is measured: one node alone (it owns every partition), and N nodes.
Their runs take turns, one phase's run then the other's, the first of each pair swapped from
run to run, so that a machine whose speed drifts over the minutes of a bench (a shared
host's other tenants, the broker's log cleaner) moves both phases alike; the cluster not
being measured idles meanwhile, and its CPU time is reported as the others'. Measured one
after the other, the same command's ratio moved from 1.62x to 2.16x between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator_server.tools.bench import scenarios
from coordinator_server.tools.bench.cluster import ClusterTarget
from coordinator_server.tools.bench.loops import LoopRun
from coordinator_server.tools.bench.processes import pin_self, usable_cpus
from coordinator_server.tools.bench.stats import median_row
from coordinator_server.tools.bench.targets import TOPIC, CommitSpec

if TYPE_CHECKING:
    from coordinator_server.tools.bench.environment import Environment

# The goal: N nodes on N cores at least this many times the rate of one node.
GOAL_PER_NODE = 0.9
# A process the phase needs that used more of a core than this may be what limits it.
SATURATED_SHARE = 0.85
FOLLOW_NODES = "nodes"

SCALE_COLUMNS = [
    "target",
    "inflight",
    "requests_per_s",
    "partition_commits_per_s",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "errors",
    "connections",
    "node_cpu",
    "broker_cpu",
    "generator_cpu",
    "server_cpu_us",
    "broker_cpu_us",
    "core_cpu_us",
    "others_cpu_us",
]
RATIO_COLUMNS = [
    "requests_per_s",
    "partition_commits_per_s",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "core_cpu_us",
]


def parse_cpus(text: str) -> list[int]:
    """A CPU set as taskset's list takes it: "0", "0,1", "2-3"."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        if high:
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(low))
    if not cpus or min(cpus) < 0:
        raise argparse.ArgumentTypeError(f"not a CPU list: {text!r}")
    return sorted(cpus)


def parse_cpus_or_nodes(text: str) -> list[int] | str:
    return FOLLOW_NODES if text == FOLLOW_NODES else parse_cpus(text)


@dataclass(frozen=True)
class Phase:
    """Where the processes of one phase run (None: anywhere)."""

    nodes: list[list[int]] | None
    broker: list[int] | None
    generator: list[int] | None

    def describe(self) -> dict[str, str]:
        def cpus(value: list[int] | None) -> str:
            return "any" if value is None else ",".join(map(str, value))

        return {
            "node_cpus": " ".join(cpus(n) for n in self.nodes) if self.nodes else "any",
            "broker_cpus": cpus(self.broker),
            "generator_cpus": cpus(self.generator),
        }


@dataclass(frozen=True)
class ScaleBudget:
    """Each node's CPUs, and the broker's and the generator's: fixed CPUs, or those of the
    phase's nodes (`FOLLOW_NODES`); nothing pinned when `nodes` is None."""

    nodes: list[list[int]] | None
    broker: list[int] | str
    generator: list[int] | str

    def phase(self, count: int) -> Phase:
        if self.nodes is None:
            return Phase(None, None, None)
        nodes = self.nodes[:count]
        union = sorted({cpu for cpus in nodes for cpu in cpus})

        def place(value: list[int] | str) -> list[int]:
            return union if isinstance(value, str) else value

        return Phase(nodes, place(self.broker), place(self.generator))


def scale_budget(
    nodes: int,
    node_cpus: Sequence[list[int]] | None,
    broker: list[int] | str | None,
    generator: list[int] | str | None,
    allowed: Sequence[int],
    pin: bool = True,
) -> ScaleBudget:
    """The budget from the options, the rest derived from the CPUs this process may use:
    node i on the i-th of them unless told; then a CPU to spare each for the generator and
    the broker (the generator first), else they follow the phase's nodes."""
    if not pin:
        return ScaleBudget(None, FOLLOW_NODES, FOLLOW_NODES)
    allowed = sorted(allowed)
    if node_cpus:
        if len(node_cpus) != nodes:
            raise SystemExit(
                f"bench: --node-cpus gives {len(node_cpus)} CPU sets for --nodes {nodes}"
            )
        chosen = [list(cpus) for cpus in node_cpus]
    else:
        chosen = [[allowed[i % len(allowed)]] for i in range(nodes)]
    taken = {cpu for cpus in chosen for cpu in cpus}
    spare = [cpu for cpu in allowed if cpu not in taken]
    if generator is None:
        generator = [spare.pop(0)] if spare else FOLLOW_NODES
    if broker is None:
        broker = [spare.pop(0)] if spare else FOLLOW_NODES
    return ScaleBudget(chosen, broker, generator)


def budget_of(args: argparse.Namespace) -> ScaleBudget:
    allowed = getattr(args, "usable_cpus", None) or usable_cpus()
    return scale_budget(
        args.nodes,
        args.node_cpus,
        args.cluster_broker_cpus,
        args.cluster_generator_cpus,
        allowed,
        pin=not args.no_pin,
    )


def target_name(count: int) -> str:
    return "1 node" if count == 1 else f"{count} nodes"


def cluster_row(run: LoopRun, partitions: int, node_ids: list[int]) -> dict[str, Any]:
    """The commits row of a cluster: the nodes' CPU per request summed as the server's, and
    each node's and the broker's share of a core while measured."""
    row = scenarios.loop_row(run, partitions)
    spent = run.process_cpu_s
    if run.result.requests:
        nodes_s = sum(spent.get(f"node{node}", 0.0) for node in node_ids)
        row["server_cpu_us"] = round(nodes_s / run.result.requests * 1e6, 1)
        for node in node_ids:
            row.pop(f"node{node}_cpu_us", None)
    # Four places: a node that served a few requests of a short run is not rounded to 0.
    row["node_cpu"] = {
        str(node): round(spent.get(f"node{node}", 0.0) / run.seconds, 4) for node in node_ids
    }
    if "broker" in spent:
        row["broker_cpu"] = round(spent["broker"] / run.seconds, 2)
    return row


def ratio_row(bigger: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """The ratio of each column's medians; and, when the phases' runs took turns, the ratio
    of each pair of runs (`requests_per_s_runs`, in the order run) and their median
    (`paired_ratio`): what the machine's drift cannot move, since the two runs of a pair
    are minutes closer than the phases' medians."""
    row: dict[str, Any] = {
        "target": f"{bigger['target']}/{one['target']}",
        "inflight": bigger["inflight"],
    }
    for column in RATIO_COLUMNS:
        a, b = bigger.get(column), one.get(column)
        if isinstance(a, int | float) and isinstance(b, int | float) and b:
            row[column] = float(f"{a / b:.3g}")
    runs_a, runs_b = bigger.get("requests_per_s_runs"), one.get("requests_per_s_runs")
    if isinstance(runs_a, list) and isinstance(runs_b, list) and len(runs_a) == len(runs_b):
        pairs = [a / b for a, b in zip(runs_a, runs_b, strict=True) if a and b]
        if pairs:
            row["requests_per_s_runs"] = [round(pair, 3) for pair in pairs]
            row["paired_ratio"] = round(statistics.median(pairs), 2)
    return row


async def _commits(
    target: ClusterTarget, run_id: str, args: argparse.Namespace, inflight: int, warmup_s: float,
    duration_s: float,
) -> dict[str, Any]:  # fmt: skip
    names = await target.group_names(f"bench-commits-{run_id}", args.groups)
    specs = [CommitSpec(name, "", -1, TOPIC, args.partitions) for name in names]
    await target.ready(names)
    connections = min(args.connections, inflight)
    run = await target.commit_loop(specs, inflight, connections, warmup_s, duration_s)
    row = cluster_row(run, args.partitions, target.node_ids)
    row["groups_by_node"] = target.groups_by_node(names)
    return row


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=sys.stderr, flush=True)


async def run_scale(env: Environment, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Rows of 1 node and of `--nodes` nodes at each number in flight, with their ratio."""
    if args.groups < args.nodes:
        raise SystemExit(f"bench: --nodes {args.nodes} needs at least as many --groups")
    budget = budget_of(args)
    counts = (1, args.nodes)
    phases = {count: budget.phase(count) for count in counts}
    loop = asyncio.get_running_loop()
    targets: dict[int, ClusterTarget] = {}
    by_phase: dict[int, dict[int, dict[str, Any]]] = {count: {} for count in counts}
    try:
        # The clusters start side by side: each node start waits mostly on Kafka (its
        # group's rebalance, its takeovers).
        _say(args, f"scale: starting {' and '.join(map(target_name, counts))}")
        for count in counts:
            env.start_cluster(target_name(count), phases[count].nodes)
        await asyncio.gather(
            *(loop.run_in_executor(None, env.grow_cluster, target_name(c), c) for c in counts)
        )
        for count in counts:
            waited = await env.clusters[target_name(count)].balanced()
            _say(args, f"scale: {target_name(count)} balanced after {waited:.1f} s")
        for count in counts:
            targets[count] = await _connect(env, count)
        if args.jit_warmup > 0:
            heaviest = max(args.inflight or [64])
            for count in counts:
                _say(args, f"scale: {target_name(count)}, warming up")
                _place(env, phases[count])
                await _commits(targets[count], f"{os.getpid()}-n{count}-warmup", args, heaviest,
                               0.0, args.jit_warmup)  # fmt: skip
        for inflight in args.inflight or [1, 16, 64]:
            _say(args, f"scale: {inflight} in flight, the phases in turn")
            runs: dict[int, list[dict[str, Any]]] = {count: [] for count in counts}
            for run in range(args.runs):
                # In turn, the first of each pair swapped every run: a machine that slows
                # down or speeds up over the runs moves both phases alike.
                for count in counts if run % 2 == 0 else counts[::-1]:
                    _place(env, phases[count])
                    runs[count].append(
                        await _commits(
                            targets[count], f"{os.getpid()}-n{count}-{inflight}-{run}", args,
                            inflight, args.warmup, args.duration,
                        )
                    )  # fmt: skip
            for count in counts:
                by_phase[count][inflight] = {
                    "target": target_name(count),
                    "nodes": count,
                    "inflight": inflight,
                    **median_row(runs[count]),
                    **phases[count].describe(),
                }
    finally:
        for target in targets.values():
            await target.close()
        env.restore_pins()
        await loop.run_in_executor(None, env.stop_clusters)
    rows: list[dict[str, Any]] = []
    for inflight in args.inflight or [1, 16, 64]:
        one, bigger = by_phase[1][inflight], by_phase[args.nodes][inflight]
        rows += [one, bigger, ratio_row(bigger, one)]
    return rows


def _place(env: Environment, phase: Phase) -> None:
    """The broker and the generator (this process) on the phase's CPUs."""
    env.place_broker(phase.broker)
    pin_self(phase.generator)


async def _connect(env: Environment, count: int) -> ClusterTarget:
    """The cluster of `count` nodes as one target; the CPU time of its nodes and the broker
    is its own, that of every other process started (the other cluster's nodes idle among
    them) is the others'."""
    name = target_name(count)
    nodes = env.clusters[name].nodes
    target = await ClusterTarget.connect(
        name,
        {i + 1: node.bootstrap for i, node in enumerate(nodes)},
        security=env.coordinator_security,
    )
    target.watched = {f"node{i + 1}": node.pid for i, node in enumerate(nodes)}
    running = env.pids()
    if "broker" in running:
        target.watched["broker"] = running["broker"]
    used = set(target.watched.values())
    target.others = [pid for pid in running.values() if pid not in used]
    return target


def scale_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Throughput against throughput: the most each phase reached over the numbers in flight
    measured (the median of its runs at each), their ratio against the goal, and the line
    that says it with the ratio at each number in flight.

    Peak against peak, since a phase's rate at a number in flight is not its throughput
    until it stops growing, and the phases stop at different numbers: N nodes hold 1/N of
    the requests in flight each, so at the same number they fill smaller batches than one
    node does (a commit costs them more), and one node goes on gaining from larger batches
    long after N nodes have filled their CPUs."""
    ratios = sorted((row for row in rows if "/" in row["target"]), key=lambda r: r["inflight"])
    if not ratios:
        return None
    bigger_name, one_name = ratios[0]["target"].split("/")

    def peak(name: str) -> dict[str, Any]:
        phase = [row for row in rows if row["target"] == name]
        return max(phase, key=lambda row: row.get("requests_per_s") or 0.0)

    one, bigger = peak(one_name), peak(bigger_name)
    nodes = bigger["nodes"]
    goal = round(GOAL_PER_NODE * nodes, 2)
    one_rate, bigger_rate = one.get("requests_per_s"), bigger.get("requests_per_s")
    rate = float(f"{bigger_rate / one_rate:.3g}") if one_rate and bigger_rate else None
    met = rate is not None and rate >= goal
    cpu_ratio = None
    if one.get("core_cpu_us") and bigger.get("core_cpu_us"):
        cpu_ratio = round(nodes * one["core_cpu_us"] / bigger["core_cpu_us"], 2)
    line = (
        f"scale: {bigger_name} commit at {rate}x the rate of {one_name}, each at its most "
        f"({bigger_rate or 0:,.0f} OffsetCommit requests/s at {bigger['inflight']} in flight, "
        f"p99 {bigger['p99_ms']} ms, vs {one_rate or 0:,.0f} at {one['inflight']}, p99 "
        f"{one['p99_ms']} ms); goal at least {goal}x: {'met' if met else 'MISSED'}"
    )
    if len(ratios) > 1:
        line += "; at each number in flight " + ", ".join(
            f"{row['inflight']}: {row.get('requests_per_s')}x" for row in ratios
        )
    paired = [row for row in ratios if row.get("paired_ratio") is not None]
    if paired:
        line += "; run by run, in turn, " + ", ".join(
            f"{row['inflight']}: {row['paired_ratio']}x "
            f"({min(row['requests_per_s_runs']):.2f} to {max(row['requests_per_s_runs']):.2f})"
            for row in paired
        )
    if cpu_ratio is not None:
        line += f"; by CPU time a commit at the peaks (nodes and broker) {cpu_ratio}x"
    busy = [
        f"the {name} used {share} of a core"
        for name, share in (
            ("generator", bigger.get("generator_cpu")),
            ("broker", bigger.get("broker_cpu")),
        )
        if isinstance(share, int | float) and share >= SATURATED_SHARE
    ]
    if busy:
        line += f" (with {nodes} nodes {', '.join(busy)}: it may be what limits them)"
    return {
        "nodes": nodes,
        "inflight": bigger["inflight"],
        "one_node_inflight": one["inflight"],
        "ratio": rate,
        "goal": goal,
        "met": met,
        # Keyed by the number in flight as text, as the JSON document has it.
        "by_inflight": {str(row["inflight"]): row.get("requests_per_s") for row in ratios},
        "paired_by_inflight": {str(row["inflight"]): row["paired_ratio"] for row in paired},
        "cpu_ratio": cpu_ratio,
        "line": line,
    }


def scale_checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    summary = scale_summary(rows)
    if summary is None:
        return []
    return [
        {
            "target": f"scale: OffsetCommit throughput of {summary['nodes']} nodes on their "
            f"CPUs at least {summary['goal']}x that of 1 node on its (each at its most)",
            "value": summary["ratio"],
            "met": summary["met"],
        }
    ]
