"""The failover scenario: kill -9 the owner of some partitions of a cluster whose log holds R
committed offsets, and time how long each of its partitions takes to serve again.

A run writes the log (the load scenario's `write_log`), then, for each standby mode asked
for, starts N nodes of one cluster over it (`--cluster on`, a cluster id of the run's own),
waits until every partition has an owner and, with standbys, until every standby has read
its partition to the end, commits once to a group of each partition the first node owns,
and kills that node (SIGKILL). From the moment of the kill, each moved partition is sent an
OffsetCommit of its group at every surviving node every `POLL_S` until one answers without
error: that moment is the partition's failover time.

Kafka notices the death only when the node's session in the cluster's group expires
(`--cluster-session-timeout-ms`, counted from its last heartbeat, so between a heartbeat
interval less and the session timeout after the kill), then rebalances; the time minus the
session timeout is roughly the part that is ours. The survivors' logs say when the view that
moved the partitions came: `view_s` is the time from the kill to then (Kafka's part), and
`after_view_s` from then to each first commit (ours: fencing, the ownership record, the load
of what the standby had not read, and the poll's resolution). The survivor's log line of the
load says how many records the takeover read, and whether it went on from a standby (`warm`:
the assignment gives a dead node's partition to its standby when that node has room, so with
three nodes or more some go to another node and load whole).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import random
import re
import statistics
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator_client import ClientSecurity
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.hashing import partition_for
from coordinator_server.tools.bench.ours import WireConnection, first_error
from coordinator_server.tools.bench.processes import ServerProcess

# How often a moved partition is asked to commit after the kill.
POLL_S = 0.01
# Give up on a partition this long after the kill.
GIVE_UP_S = 120.0
# How long a node may take to start (a node alone loads every partition of the log).
START_TIMEOUT_S = 600.0
# How long the nodes may take to own every partition and warm their standbys.
WARM_TIMEOUT_S = 600.0
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    }
)
LOADED = re.compile(
    r"partition=(?P<partition>\d+) loaded (?P<records>\d+) records"
    r"(?P<warm>.* where its standby was)?"
)
VIEW = re.compile(r"^(?P<time>\S+ \S+) INFO \S+: cluster \S+ generation \d+: node \d+ owns")


@dataclass(frozen=True)
class FailoverSettings:
    nodes: int
    partitions: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    standby: bool
    # How the bench's connections to the nodes are secured (None: PLAINTEXT).
    security: ClientSecurity | None = None


@dataclass
class FailoverRun:
    """One kill: per moved partition, seconds from the kill to its first commit, to it from
    the survivor's new view, and the records the takeover loaded."""

    served_s: dict[int, float]
    after_view_s: dict[int, float]
    takeover_records: dict[int, int]
    # The moved partitions whose takeover went on from a standby's shard.
    warm: set[int]
    errors: int
    # Seconds from the kill to the survivors' first new view (Kafka noticed, and rebalanced).
    view_s: float | None


def node_args(
    base: list[str], cluster_id: str, node_id: int, settings: FailoverSettings
) -> list[str]:
    # The node's status (owned and standby partitions) is read over its HTTP port: the
    # bench's `--metrics-port -1` gives way to a port of its own.
    if "--metrics-port" in base:
        at = base.index("--metrics-port")
        base = base[:at] + base[at + 2 :]
    return [
        *base,
        "--metrics-port",
        "0",
        "--cluster",
        "on",
        "--cluster-id",
        cluster_id,
        "--node-id",
        str(node_id),
        "--cluster-session-timeout-ms",
        str(settings.session_timeout_ms),
        "--cluster-heartbeat-interval-ms",
        str(settings.heartbeat_interval_ms),
        "--cluster-standby",
        "on" if settings.standby else "off",
    ]


def _status(node: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{node.metrics_port}/status", timeout=10
    ) as reply:
        body: dict[str, Any] = json.loads(reply.read())
    cluster: dict[str, Any] = body["cluster"]
    return cluster


def _warm(statuses: list[dict[str, Any]], settings: FailoverSettings) -> bool:
    everything = set(range(settings.partitions))
    owned = [set(status["owned"]) for status in statuses]
    if sum(len(o) for o in owned) != settings.partitions or set().union(*owned) != everything:
        return False
    if max(len(o) for o in owned) - min(len(o) for o in owned) > 1:
        return False
    if not settings.standby:
        return True
    offsets: dict[str, dict[str, int]] = {}
    for status in statuses:
        offsets.update(status["standby_offsets"])
    return {int(p) for p in offsets} == everything and all(
        o["offset"] == o["high_watermark"] > 0 for o in offsets.values()
    )


def groups_of(partitions: list[int], num_partitions: int) -> dict[int, str]:
    """A group of each partition."""
    groups: dict[int, str] = {}
    index = 0
    while len(groups) < len(partitions):
        group = f"bench-failover-{index}"
        partition = partition_for(group, num_partitions)
        if partition in partitions and partition not in groups:
            groups[partition] = group
        index += 1
    return groups


def commit(group: str, offset: int) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "bench-failover",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }


async def start_nodes(
    base: list[str], cluster_id: str, settings: FailoverSettings, cpu: int | None
) -> list[ServerProcess]:
    loop = asyncio.get_running_loop()
    nodes: list[ServerProcess] = []
    try:
        for node_id in range(1, settings.nodes + 1):
            node = ServerProcess(node_args(base, cluster_id, node_id, settings), cpu)
            nodes.append(node)
            await loop.run_in_executor(None, functools.partial(node.start, START_TIMEOUT_S))
        deadline = time.monotonic() + WARM_TIMEOUT_S
        while True:
            statuses = [await asyncio.to_thread(_status, node) for node in nodes]
            if _warm(statuses, settings):
                return nodes
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not settle: {statuses}")
            await asyncio.sleep(0.5)
    except BaseException:
        for node in nodes:
            node.kill()
        raise


async def kill_and_measure(nodes: list[ServerProcess], settings: FailoverSettings) -> FailoverRun:
    """Kill the first node; the run's figures. Stops the survivors."""
    victim, survivors = nodes[0], nodes[1:]
    moved: list[int] = (await asyncio.to_thread(_status, victim))["owned"]
    groups = groups_of(moved, settings.partitions)
    connections = [await WireConnection.open(n.host, n.port, settings.security) for n in nodes]
    try:
        at_victim, at_survivors = connections[0], connections[1:]
        for group in groups.values():
            answer = await at_victim.request(ApiKey.OFFSET_COMMIT, commit(group, 1))
            if first_error(answer):
                raise RuntimeError(f"{group} does not commit before the kill: {answer}")
        for survivor in survivors:
            survivor.lines.clear()
        # Kafka counts the session from the node's last heartbeat: the kill falls anywhere
        # in the heartbeat's period, not at the same point of it in every run (which the
        # steps above would otherwise make it, differently with standbys and without).
        await asyncio.sleep(random.uniform(0, settings.heartbeat_interval_ms / 1000))
        killed_wall = time.time()
        killed = time.monotonic()
        victim.kill()
        errors = [0]
        served = dict(
            zip(
                groups,
                await asyncio.gather(
                    *(
                        first_commit(group, at_survivors, killed, errors)
                        for group in groups.values()
                    )
                ),
                strict=True,
            )
        )
    finally:
        for connection in connections:
            connection.close()
    for survivor in survivors:
        await asyncio.get_running_loop().run_in_executor(None, survivor.stop)
    records: dict[int, int] = {}
    warm: set[int] = set()
    view_at: float | None = None
    for survivor in survivors:
        for line in list(survivor.lines):
            view = VIEW.search(line)
            if view is not None and view_at is None:
                view_at = _wall_time(view["time"]) - killed_wall
            loaded = LOADED.search(line)
            if loaded is not None and int(loaded["partition"]) in served:
                records[int(loaded["partition"])] = int(loaded["records"])
                if loaded["warm"]:
                    warm.add(int(loaded["partition"]))
    after_view = {p: round(s - view_at, 3) for p, s in served.items() if view_at is not None}
    return FailoverRun(
        served, after_view, records, warm, errors[0], None if view_at is None else round(view_at, 3)
    )


async def first_commit(
    group: str, survivors: list[WireConnection], killed: float, errors: list[int]
) -> float:
    offset = 2
    while True:
        answers = await asyncio.gather(
            *(
                connection.request(ApiKey.OFFSET_COMMIT, commit(group, offset))
                for connection in survivors
            )
        )
        now = time.monotonic()
        codes = {first_error(answer) for answer in answers}
        if ErrorCode.NONE in codes:
            return round(now - killed, 3)
        errors[0] += sum(code not in RETRIABLE for code in codes)
        if now - killed > GIVE_UP_S:
            raise RuntimeError(f"{group} did not commit {GIVE_UP_S:.0f} s after the kill")
        offset += 1
        await asyncio.sleep(POLL_S)


def _wall_time(logged: str) -> float:
    """A log line's local time ("2026-01-02 03:04:05,678") as seconds since the epoch."""
    moment = datetime.datetime.strptime(logged, "%Y-%m-%d %H:%M:%S,%f")
    return moment.timestamp()


def summarize(runs: list[FailoverRun], settings: FailoverSettings, records: int) -> dict[str, Any]:
    served = [s for run in runs for s in run.served_s.values()]
    after_view = [s for run in runs for s in run.after_view_s.values()]
    loaded = [n for run in runs for n in run.takeover_records.values()]
    views = [run.view_s for run in runs if run.view_s is not None]
    session_s = settings.session_timeout_ms / 1000
    return {
        "target": "ours",
        "nodes": settings.nodes,
        "standby": "on" if settings.standby else "off",
        "records": records,
        "moved": len(served),
        "warm": sum(len(run.warm) for run in runs),
        "median_s": round(statistics.median(served), 3),
        "max_s": round(max(served), 3),
        "median_view_s": round(statistics.median(views), 3) if views else None,
        "max_view_s": max(views) if views else None,
        "median_over_session_s": round(statistics.median(served) - session_s, 3),
        "max_over_session_s": round(max(served) - session_s, 3),
        "median_after_view_s": round(statistics.median(after_view), 3) if after_view else None,
        "max_after_view_s": round(max(after_view), 3) if after_view else None,
        "takeover_records_median": round(statistics.median(loaded)) if loaded else None,
        "takeover_records_max": max(loaded) if loaded else None,
        "errors": sum(run.errors for run in runs),
        "runs": len(runs),
    }


async def measure(
    base: list[str],
    cluster_id: str,
    settings: FailoverSettings,
    cpu: int | None,
    say: Callable[[str], None],
) -> FailoverRun:
    say(
        f"failover: starting {settings.nodes} nodes (standbys "
        f"{'on' if settings.standby else 'off'})"
    )
    nodes = await start_nodes(base, cluster_id, settings, cpu)
    try:
        say(
            "failover: every partition owned"
            + (", standbys warm" if settings.standby else "")
            + "; killing node 1"
        )
        return await kill_and_measure(nodes, settings)
    finally:
        for node in nodes:
            node.kill()
