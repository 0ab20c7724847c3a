"""Several nodes of one coordinator cluster, as the bench starts and drives them (`--nodes`).

`ClusterNodes` starts `serve --cluster on` processes over one log topic, each with a node id
of its own and pinned to its own CPUs, and waits until the cluster is balanced: every node
owns partitions, all of them ACTIVE, and the nodes agree on one view. `ClusterTarget` drives
the first nodes of it: it asks FindCoordinator where each group is coordinated, picks the
groups so that every node coordinates its share, and keeps the requests in flight spread
evenly over the nodes, each over connections of its own.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

from coordinator_client import ClientSecurity
from coordinator_server.tools.bench.loops import Destination, LoopRun, run_loops_to
from coordinator_server.tools.bench.ours import WireConnection, check_ours, parse_ours
from coordinator_server.tools.bench.processes import METRICS, CpuSet, ServerProcess, cpu_list
from coordinator_server.tools.bench.targets import (
    NOT_READY,
    READY_RETRY_S,
    CommitSpec,
    OursTarget,
    commit_template,
)

FIND_COORDINATOR = 10
# How long a grown cluster may take to agree and load: a rebalance of Kafka's group (the
# nodes poll for it every heartbeat interval) and the takeovers.
BALANCE_TIMEOUT_S = 120.0
BALANCE_POLL_S = 0.2
STATUS_TIMEOUT_S = 5.0
# Group ids asked of FindCoordinator in one request.
FIND_BATCH = 100
# Candidates tried per group wanted before giving up on spreading them (a node that owns
# no partition would never get its share).
CANDIDATES_PER_GROUP = 50


def with_option(args: Sequence[str], name: str, value: str) -> list[str]:
    """`args` with option `name` set to `value` (replaced where it was given)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == name:
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        out.append(arg)
    return [*out, name, value]


def balance_problem(statuses: list[dict[str, Any]], partitions: int) -> str | None:
    """Why the nodes' /status documents do not yet show a balanced cluster, or None: every
    node in the cluster with its lease and no error, owning partitions that are all ACTIVE,
    one generation and one set of nodes in every view, and each partition owned by exactly
    one of them."""
    views: list[dict[str, Any]] = []
    for status in statuses:
        view = status.get("cluster")
        if not isinstance(view, dict):
            return "a node runs without the cluster"
        views.append(view)
    node_ids = sorted(view["node_id"] for view in views)
    for status, view in zip(statuses, views, strict=True):
        node = view["node_id"]
        if view.get("error"):
            return f"node {node}: {view['error']}"
        if not view.get("holds_lease"):
            return f"node {node} holds no lease"
        if not view.get("owned"):
            return f"node {node} owns no partition yet"
        states = status.get("partitions") or {}
        loading = [p for p in view["owned"] if states.get(str(p)) != "ACTIVE"]
        if loading:
            return f"node {node}: {len(loading)} owned partitions not ACTIVE yet"
    generations = sorted({view["generation"] for view in views})
    if len(generations) > 1:
        return f"the nodes are at generations {generations}"
    for view in views:
        members = sorted(int(node_id) for node_id in view.get("nodes") or {})
        if members != node_ids:
            return f"node {view['node_id']} sees nodes {members}, not {node_ids}"
    owners: dict[int, int] = {}
    for view in views:
        for partition in view["owned"]:
            if partition in owners:
                both = f"{owners[partition]} and {view['node_id']}"
                return f"partition {partition} owned by nodes {both}"
            owners[partition] = view["node_id"]
    if len(owners) != partitions:
        return f"{partitions - len(owners)} partitions owned by no node"
    return None


def fetch_status(metrics_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{metrics_port}/status", timeout=STATUS_TIMEOUT_S
    ) as reply:
        status: dict[str, Any] = json.loads(reply.read())
    return status


class WorkerNode:
    """One worker of a `serve --workers N` command, as its command's lines describe it."""

    def __init__(
        self, host: str, port: int, pid: int, metrics_port: int, started_at: float
    ) -> None:
        self.host = host
        self.port = port
        self.pid = pid
        self.metrics_port = metrics_port
        self.started_at = started_at
        self.ready_at = time.monotonic()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        """Stopped with its command (`ClusterNodes.stop`)."""


WORKER_SERVES = re.compile(
    r"worker \d+ \(node (?P<node>\d+), pid (?P<pid>\d+)\) serves on "
    r"(?P<host>[0-9.]+):(?P<port>\d+)"
)
WORKERS_READY = re.compile(r"ready on [0-9.]+:\d+ with (?P<count>\d+) workers")


class ClusterNodes:
    """The nodes of one cluster, started one by one (`grow`), node ids 1 to N; or, with
    `workers`, every node at once as the workers of one `serve --workers N` command."""

    def __init__(
        self,
        server_args: Sequence[str],
        cpus: Sequence[CpuSet],
        partitions: int,
        *,
        workers: bool = False,
    ) -> None:
        """`server_args`: `serve`'s arguments for the cluster's log (every node the same);
        `cpus`: each node's CPUs, by node (as many nodes as can be grown to)."""
        self.server_args = with_option(
            with_option(server_args, "--metrics-port", "0"), "--cluster", "on"
        )
        self.cpus = list(cpus)
        self.partitions = partitions
        self.workers = workers
        self.nodes: list[ServerProcess | WorkerNode] = []
        self._command: ServerProcess | None = None

    def grow(self, count: int) -> list[ServerProcess | WorkerNode]:
        """Start nodes until `count` run (each returns once loaded what it was first given);
        the nodes started."""
        if self.workers and count > 1:
            return self._start_workers(count)
        started: list[ServerProcess | WorkerNode] = []
        while len(self.nodes) < count:
            node_id = len(self.nodes) + 1
            node = ServerProcess(
                with_option(self.server_args, "--node-id", str(node_id)),
                self.cpus[node_id - 1],
            )
            self.nodes.append(node.start())
            started.append(node)
        return started

    async def balanced(self, timeout_s: float = BALANCE_TIMEOUT_S) -> float:
        """Wait until the running nodes form a balanced cluster; the seconds it took."""
        started = time.monotonic()
        problem: str | None = "not asked yet"
        while True:
            try:
                statuses = await asyncio.gather(
                    *(asyncio.to_thread(fetch_status, node.metrics_port) for node in self.nodes)
                )
                problem = balance_problem(list(statuses), self.partitions)
            except OSError as error:
                problem = f"a node's /status did not answer: {error}"
            if problem is None:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(
                    f"the cluster of {len(self.nodes)} nodes never balanced within "
                    f"{timeout_s:.0f} s: {problem}"
                )
            await asyncio.sleep(BALANCE_POLL_S)

    def _start_workers(self, count: int) -> list[ServerProcess | WorkerNode]:
        if self.nodes:
            raise RuntimeError("a cluster of workers starts once, with all its nodes")
        every_cpu: set[int] = set()
        for cpus in self.cpus[:count]:
            every_cpu.update(cpu_list(cpus) or ())
        command = ServerProcess(
            with_option(with_option(self.server_args, "--node-id", "1"), "--workers", str(count)),
            sorted(every_cpu) or None,
            ready=WORKERS_READY,
        )
        self._command = command.start()
        lines = "".join(command.lines)
        # By node id, as the cluster's other nodes are (node i + 1 is nodes[i]): the workers
        # tell they serve in the order they are ready.
        matches = sorted(WORKER_SERVES.finditer(lines), key=lambda m: int(m["node"]))
        for match in matches:
            line_end = lines.find("\n", match.end())
            metrics = METRICS.search(lines, match.end(), line_end if line_end >= 0 else len(lines))
            self.nodes.append(
                WorkerNode(
                    match["host"],
                    int(match["port"]),
                    int(match["pid"]),
                    int(metrics["port"]) if metrics else 0,
                    command.started_at,
                )
            )
        if len(self.nodes) != count:
            raise RuntimeError(f"serve --workers {count} told of {len(self.nodes)} workers")
        return list(self.nodes)

    def stop(self) -> None:
        """Stop the nodes, the last started first (each hands its partitions over); the
        workers' command stops them all."""
        while self.nodes:
            self.nodes.pop().stop()
        command, self._command = self._command, None
        if command is not None:
            command.stop()


class ClusterTarget:
    """The first nodes of a cluster, driven as one coordinator."""

    def __init__(self, name: str, nodes: dict[int, OursTarget]) -> None:
        self.name = name
        self._nodes = nodes
        self._coordinator: dict[str, int] = {}
        self.watched: dict[str, int] = {}
        self.others: list[int] = []

    @classmethod
    async def connect(
        cls, name: str, nodes: dict[int, str], security: ClientSecurity | None = None
    ) -> ClusterTarget:
        """`nodes`: node id -> its address."""
        opened = {
            node_id: await OursTarget.connect(address, connections=1, security=security)
            for node_id, address in sorted(nodes.items())
        }
        return cls(name, opened)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    def _any(self) -> OursTarget:
        return self._nodes[self.node_ids[0]]

    async def coordinators(self, groups: list[str]) -> dict[str, int]:
        """The node id FindCoordinator names for each group, asked again while a group's
        coordinator is not ready."""
        found: dict[str, int] = {}
        connection: WireConnection = self._any()._connection(0)
        waiting = list(groups)
        deadline = time.monotonic() + BALANCE_TIMEOUT_S
        while waiting:
            not_ready: list[str] = []
            for start in range(0, len(waiting), FIND_BATCH):
                body = await connection.request(
                    FIND_COORDINATOR, {"key_type": 0, "keys": waiting[start : start + FIND_BATCH]}
                )
                if body.get("error_code"):
                    raise RuntimeError(f"FindCoordinator failed with error {body['error_code']}")
                for answer in body.get("coordinators") or ():
                    code = answer.get("error_code", 0)
                    if code in NOT_READY:
                        not_ready.append(answer["key"])
                    elif code:
                        raise RuntimeError(
                            f"FindCoordinator of {answer['key']} failed with error {code}"
                        )
                    else:
                        found[answer["key"]] = int(answer["node_id"])
            waiting = not_ready
            if waiting:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(waiting)} groups have no coordinator")
                await asyncio.sleep(READY_RETRY_S)
        return found

    async def group_names(self, prefix: str, count: int) -> list[str]:
        """`count` group ids `prefix-i`, as many coordinated by each node as by any other
        (give or take one): the groups hash to log partitions, and the cluster balances the
        partitions, not the groups, over its nodes."""
        node_ids = self.node_ids
        quota = {
            node_id: count // len(node_ids) + (1 if i < count % len(node_ids) else 0)
            for i, node_id in enumerate(node_ids)
        }
        chosen: list[str] = []
        index = 0
        while len(chosen) < count:
            if index > count * CANDIDATES_PER_GROUP:
                short = {node: left for node, left in quota.items() if left}
                raise RuntimeError(f"no groups coordinated by nodes {sorted(short)}")
            candidates = [f"{prefix}-{i}" for i in range(index, index + FIND_BATCH)]
            index += FIND_BATCH
            owners = await self.coordinators(candidates)
            for group in candidates:
                node = owners[group]
                if quota.get(node, 0) > 0 and len(chosen) < count:
                    quota[node] -= 1
                    chosen.append(group)
                    self._coordinator[group] = node
        return chosen

    def groups_by_node(self, groups: list[str]) -> dict[str, int]:
        """How many of `groups` each node coordinates (as FindCoordinator said)."""
        counts = {str(node): 0 for node in self.node_ids}
        for group in groups:
            node = str(self._coordinator.get(group))
            if node in counts:
                counts[node] += 1
        return counts

    async def _owner_of(self, groups: list[str]) -> dict[str, int]:
        missing = [group for group in groups if group not in self._coordinator]
        if missing:
            self._coordinator.update(await self.coordinators(missing))
        return {group: self._coordinator[group] for group in groups}

    async def ready(self, groups: list[str]) -> None:
        by_node: dict[int, list[str]] = {}
        for group, node in (await self._owner_of(groups)).items():
            by_node.setdefault(node, []).append(group)
        for node, mine in by_node.items():
            if node not in self._nodes:
                raise RuntimeError(f"{self.name}: node {node} coordinates groups, not driven")
            await self._nodes[node].ready(mine)

    async def commit_loop(
        self,
        specs: list[CommitSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        """The requests in flight spread evenly over the nodes (each node's over its own
        `connections`), each node sent commits of the groups it coordinates."""
        owners = await self._owner_of([spec.group for spec in specs])
        node_ids = self.node_ids
        destinations: list[Destination] = []
        for i, node in enumerate(node_ids):
            share = inflight // len(node_ids) + (1 if i < inflight % len(node_ids) else 0)
            mine = [commit_template(spec) for spec in specs if owners[spec.group] == node]
            if not share or not mine:
                continue
            target = self._nodes[node]
            destinations.append(
                Destination(
                    target.host,
                    target.port,
                    list(mine),
                    share,
                    min(connections, share),
                    target.security,
                )
            )
        return await run_loops_to(
            destinations,
            parse_ours,
            check_ours,
            warmup_s,
            duration_s,
            self.watched,
            self.others,
        )

    async def close(self) -> None:
        for target in self._nodes.values():
            await target.close()
