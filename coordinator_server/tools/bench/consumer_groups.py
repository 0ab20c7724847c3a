"""`bench consumer-groups`: Kafka's consumer group protocol (KIP-848) on our server and on
Apache Kafka's own coordinator, in the same run, on the same CPU budget.

Both sides get the same `group.consumer.*` settings (heartbeat interval, session timeout,
assignment interval and their bounds): our server as `serve --group-consumer-*`, the peer
broker the bench starts as broker settings. Both are given a topic of `--consumer-partitions`
partitions on their data cluster (ours: the broker holding our log, or
`--bootstrap-servers`; the peer: its own broker), which `--members` simulated members
subscribe to (`consumer_members`: a member joins, heartbeats every interval, gives up and
takes partitions as told and acknowledges at once). Each run, on each side:

1. `form_s`: the members join at once; seconds until every partition has one owner and every
   member the same epoch and a balanced share, as the coordinator's ConsumerGroupDescribe
   confirms (Stable).
2. `heartbeats_per_s`: the settled group's steady heartbeats (id and epoch, nothing changed),
   `--inflight` at a time for `--duration` seconds, with latencies and CPU time per
   heartbeat, as the `heartbeats` scenario measures the classic protocol's.
3. `extra_assigned_s`: the members heartbeat on, their first heartbeats spread over an
   interval; one more member joins; seconds until it holds the partitions it holds once the
   group is settled again (`extra_stable_s`: until then). Beside it, the proof that the
   others kept consuming: `lost_elsewhere`, the partitions the others gave up that did not go
   to the newcomer, and `interrupted`, the members that gave up a partition they hold again
   at the end (both 0 when the join moved only what the newcomer took); `most_doubled`, the
   most partitions two members owned at once as their answers said (0 always).

Then two tables of ours alone: the join of one more member to a group of `--members` by our
classic protocol beside the consumer protocol's, with the members each stopped
(`classic_join`: the `rebalance` scenario's measure, whose members rejoin the moment one of
them hears of the rebalance, and members heartbeating at the consumer members' pace); and our
assignor alone on the group Kafka quotes a figure for (`assignor_time`).

Every process started here is stopped by the environment, by its PID, when the bench ends.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from coordinator_server.tools.bench import classic_join, scenarios
from coordinator_server.tools.bench.assignor_time import ASSIGNOR_COLUMNS
from coordinator_server.tools.bench.assignor_time import measure as measure_assignor
from coordinator_server.tools.bench.brokers import BenchApacheKafka, affinity
from coordinator_server.tools.bench.consumer_members import (
    ConsumerSide,
    MemberDriver,
    join_proof,
)
from coordinator_server.tools.bench.consumer_sides import OursConsumerSide, PeerConsumerSide
from coordinator_server.tools.bench.environment import Environment
from coordinator_server.tools.bench.processes import wait_until_quiet
from coordinator_server.tools.bench.scenarios import BenchError
from coordinator_server.tools.bench.stats import median_row, ratio_row
from coordinator_server.tools.bench.targets import OursTarget

NAME = "consumer-groups"
CLASSIC = "consumer-groups classic"
ASSIGNOR = "consumer-groups assignor"
TOPIC = "bench-consumer-groups"
# The members' rebalance timeout (how long the coordinator waits for a revocation).
REBALANCE_TIMEOUT_MS = 60_000

COLUMNS = [
    "target",
    "members",
    "partitions",
    "form_s",
    "extra_assigned_s",
    "extra_stable_s",
    "moved",
    "lost_elsewhere",
    "interrupted",
    "most_doubled",
    "heartbeats_per_s",
    "p50_ms",
    "p99_ms",
    "errors",
    "server_cpu_us",
    "broker_cpu_us",
    "core_cpu_us",
]
RATIO_COLUMNS = [
    "form_s",
    "extra_assigned_s",
    "extra_stable_s",
    "heartbeats_per_s",
    "p50_ms",
    "p99_ms",
    "core_cpu_us",
]
CLASSIC_COLUMNS = ["target", "protocol", "heartbeats", "members", "extra_s", "members_stopped"]
TABLE_COLUMNS = {NAME: COLUMNS, CLASSIC: CLASSIC_COLUMNS, ASSIGNOR: ASSIGNOR_COLUMNS}

# Kafka's defaults of the bounds, widened when a setting falls outside them.
KAFKA_MIN_SESSION_MS, KAFKA_MAX_SESSION_MS = 45_000, 60_000
KAFKA_MIN_HEARTBEAT_MS, KAFKA_MAX_HEARTBEAT_MS = 5_000, 15_000
KAFKA_MAX_ASSIGNMENT_MS = 15_000


def consumer_settings(args: argparse.Namespace) -> dict[str, int]:
    """The group.consumer.* settings both sides run with, by Kafka's names."""
    session = args.group_consumer_session_timeout_ms
    heartbeat = args.group_consumer_heartbeat_interval_ms
    assignment = args.group_consumer_assignment_interval_ms
    return {
        "group.consumer.session.timeout.ms": session,
        "group.consumer.min.session.timeout.ms": min(session, KAFKA_MIN_SESSION_MS),
        "group.consumer.max.session.timeout.ms": max(session, KAFKA_MAX_SESSION_MS),
        "group.consumer.heartbeat.interval.ms": heartbeat,
        "group.consumer.min.heartbeat.interval.ms": min(heartbeat, KAFKA_MIN_HEARTBEAT_MS),
        "group.consumer.max.heartbeat.interval.ms": max(heartbeat, KAFKA_MAX_HEARTBEAT_MS),
        "group.consumer.assignment.interval.ms": assignment,
        "group.consumer.max.assignment.interval.ms": max(assignment, KAFKA_MAX_ASSIGNMENT_MS),
    }


# Our server has no bounds of the assignment interval (Kafka's default minimum is 0).
_NOT_OURS = frozenset({"group.consumer.max.assignment.interval.ms"})


def serve_args(settings: dict[str, int]) -> list[str]:
    """`serve` options of the settings (Kafka's names, dots as dashes)."""
    args: list[str] = []
    for name, value in settings.items():
        if name not in _NOT_OURS:
            args += ["--" + name.replace(".", "-"), str(value)]
    return args


def check_args(args: argparse.Namespace) -> None:
    if args.members < 1:
        raise SystemExit("bench consumer-groups: --members must be at least 1")
    if args.consumer_partitions <= args.members:
        raise SystemExit(
            "bench consumer-groups: --consumer-partitions must exceed --members, so that "
            "one more member is given partitions"
        )
    if args.bootstrap is not None and args.bootstrap_servers is None:
        raise SystemExit(
            "bench consumer-groups: with --bootstrap, give the server's data cluster with "
            "--bootstrap-servers (the bench creates the members' topic there)"
        )
    if args.broker != "kafka" and (
        args.bootstrap_servers is None or (args.peer and args.peer_bootstrap is None)
    ):
        raise SystemExit(
            "bench consumer-groups: Kafka's consumer group protocol needs Apache Kafka "
            "(--broker kafka)"
        )


def _record(env: Environment, role: str, what: str, pid: int, startup_s: float) -> None:
    env.started.append(
        {
            "role": role,
            "what": what,
            "pid": pid,
            "cpus": affinity(pid),
            "startup_s": round(startup_s, 2),
        }
    )


def _start_peer_broker(env: Environment, args: argparse.Namespace) -> None:
    broker = BenchApacheKafka(
        env.cpu,
        args.offsets_topic_partitions,
        args.broker_heap,
        settings={k: str(v) for k, v in consumer_settings(args).items()},
    ).start()
    env.peer_broker = broker
    env.peer_address = broker.bootstrap
    _record(env, "peer broker", broker.description, broker.pid, broker.startup_s)


def _start(env: Environment, args: argparse.Namespace) -> tuple[str, str | None, str]:
    """Start what the bench starts; (our address, the peer's, our data cluster)."""
    starts: list[Callable[[], object]] = []
    if args.bootstrap is None and args.bootstrap_servers is None:
        starts.append(env.kafka)
    if args.peer and args.peer_bootstrap is None and args.bootstrap_servers is None:
        starts.append(lambda: _start_peer_broker(env, args))
    with concurrent.futures.ThreadPoolExecutor(max(1, len(starts))) as pool:
        for future in [pool.submit(start) for start in starts]:
            future.result()
    data_cluster = args.bootstrap_servers or env.kafka()
    if args.bootstrap is None:
        # Ahead of the operator's own --server-arg, which may override them.
        args.server_arg[:0] = serve_args(consumer_settings(args))
    ours = env.ours()
    return ours, env.peer(), data_cluster


async def ensure_topic(bootstrap_servers: str, name: str, partitions: int) -> None:
    """The members' topic on a data cluster, with `partitions` partitions."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=120_000)
    forbid_auto_topic_creation(admin._client)
    await admin.start()
    try:
        if name not in await admin.list_topics():
            await admin.create_topics([NewTopic(name, partitions, 1)])
        deadline = time.monotonic() + 120
        while True:
            (described,) = await admin.describe_topics([name])
            found = len(described.get("partitions") or ())
            if found == partitions and not described.get("error_code"):
                return
            if found > partitions or time.monotonic() > deadline:
                raise BenchError(
                    f"the topic {name} at {bootstrap_servers} has {found} partitions, not "
                    f"{partitions}: delete it or give --consumer-partitions {found}"
                )
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=sys.stderr, flush=True)


def _loop_connections(side: ConsumerSide, args: argparse.Namespace, inflight: int) -> int:
    if side.name == "peer":
        return int(min(args.peer_connections or inflight, inflight))
    return int(min(args.connections, inflight))


async def one_run(
    side: ConsumerSide,
    args: argparse.Namespace,
    run_id: str,
    inflight: int,
    warmup_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """Form a group, measure its steady heartbeats, then the join of one more member."""
    members_count = args.members
    driver = MemberDriver(
        side,
        f"bench-consumer-groups-{run_id}",
        TOPIC,
        args.consumer_partitions,
        args.group_consumer_heartbeat_interval_ms,
        REBALANCE_TIMEOUT_MS,
    )
    members = [driver.add(i) for i in range(members_count)]
    if isinstance(side, PeerConsumerSide):
        await side.open_members(members_count + 1)
    timeout_s = args.rebalance_timeout_s
    try:
        await wait_until_quiet(side.others)
        started = time.perf_counter()
        driver.start(members)
        form_s = await driver.settle(timeout_s) - started

        await driver.stop()
        run = await side.heartbeat_loop(
            driver.group_id,
            [(m.member_id, m.epoch) for m in members],
            inflight,
            _loop_connections(side, args, inflight),
            warmup_s,
            duration_s,
        )
        loop = scenarios.loop_row(run)

        # The members heartbeat on, out of step as members of a while are; one more joins
        # once each has heartbeated.
        interval_s = driver.heartbeat_interval_ms / 1000
        for member in members:
            member.lost.clear()
        driver.start(members, spread_s=interval_s)
        await asyncio.sleep(interval_s)
        newcomer = driver.add(members_count)
        joined = time.perf_counter()
        driver.start([newcomer])
        settled = await driver.settle(timeout_s, extra=lambda: bool(newcomer.owned))
        proof = join_proof(members, newcomer)
    finally:
        await driver.leave()
    row: dict[str, Any] = {
        "members": members_count,
        "partitions": args.consumer_partitions,
        "form_s": round(form_s, 4),
        "extra_assigned_s": round(newcomer.changed_at - joined, 4),
        "extra_stable_s": round(settled - joined, 4),
        "moved": proof.moved,
        "revoking": proof.revoking,
        "lost_elsewhere": proof.lost_elsewhere,
        "interrupted": proof.interrupted,
        "most_doubled": driver.tracker.most_doubled,
        "heartbeats_per_s": loop["requests_per_s"],
        "heartbeat_interval_ms": driver.heartbeat_interval_ms,
    }
    for key in ("p50_ms", "p99_ms", "p999_ms", "connections", "generator_cpu"):
        row[key] = loop[key]
    row["errors"] = loop["errors"] + sum(driver.errors.values())
    if driver.errors:
        row["member_error_codes"] = {str(code): n for code, n in driver.errors.items()}
    if "error_codes" in loop:
        row["error_codes"] = loop["error_codes"]
    row.update({k: v for k, v in loop.items() if k.endswith("_cpu_us")})
    return row


async def _connect(
    env: Environment, args: argparse.Namespace, ours: str, peer: str | None
) -> list[ConsumerSide]:
    sides: list[ConsumerSide] = [await OursConsumerSide.connect(ours, args.connections)]
    running = env.pids()
    if "server" in running:
        sides[0].watched["server"] = running["server"]
    if "broker" in running:
        sides[0].watched["broker"] = running["broker"]
    if peer is not None:
        peer_side = await PeerConsumerSide.connect(peer, args.peer_connections)
        if "peer broker" in running:
            peer_side.watched["broker"] = running["peer broker"]
        elif env.broker is not None and peer == env.broker.bootstrap:
            peer_side.watched["broker"] = env.broker.pid
        sides.append(peer_side)
    for side in sides:
        used = set(side.watched.values())
        side.others = [pid for pid in running.values() if pid not in used]
    return sides


async def _classic(
    ours: str, args: argparse.Namespace, consumer: dict[str, Any]
) -> list[dict[str, Any]]:
    """One more member joins a group of --members by our classic protocol (`classic_join`:
    instantly and paced), beside the consumer protocol's figures."""
    target = await OursTarget.connect(ours)
    timeouts = scenarios.Timeouts(session_ms=args.session_timeout_ms)
    size = args.members
    interval_s = args.group_consumer_heartbeat_interval_ms / 1000
    measured: dict[str, list[dict[str, Any]]] = {"instant": [], "paced": []}
    try:
        for run in range(args.runs):
            group = f"bench-consumer-groups-classic-{os.getpid()}-{run}"
            measured["instant"].append(
                await classic_join.instant(
                    target, f"{group}-instant", size, timeouts, args.rebalance_timeout_s
                )
            )
            measured["paced"].append(
                await classic_join.paced(
                    target, f"{group}-paced", size, timeouts, args.rebalance_timeout_s, interval_s
                )
            )
    finally:
        await target.close()
    modern = {
        "target": "ours",
        "protocol": "consumer",
        "heartbeats": f"every {interval_s:g} s",
        "members": size,
        "extra_s": consumer.get("extra_assigned_s"),
        "members_stopped": consumer.get("interrupted"),
    }
    rows = [modern]
    for how, words in (("instant", "rejoin at once"), ("paced", f"every {interval_s:g} s")):
        classic = {
            "target": "ours",
            "protocol": "classic",
            "heartbeats": words,
            "members": size,
            **median_row(measured[how]),
        }
        ratio = ratio_row(modern, classic, ["extra_s", "members_stopped"])
        ratio.update(target="consumer/classic", protocol="", heartbeats=words)
        rows += [classic, ratio]
    return rows


async def run(env: Environment, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    check_args(args)
    loop = asyncio.get_running_loop()
    ours, peer, data_cluster = await loop.run_in_executor(None, _start, env, args)
    _say(args, f"consumer-groups: a topic of {args.consumer_partitions} partitions")
    await ensure_topic(data_cluster, TOPIC, args.consumer_partitions)
    if peer is not None:
        await ensure_topic(peer, TOPIC, args.consumer_partitions)
    sides = await _connect(env, args, ours, peer)
    inflight = max(args.inflight or [64])
    rows: list[dict[str, Any]] = []
    by_side: dict[str, dict[str, Any]] = {}
    try:
        if args.jit_warmup > 0:
            for side in sides:
                _say(args, f"consumer-groups: {side.name}, warming up")
                await one_run(side, args, f"{os.getpid()}-warmup", inflight, 0.0, args.jit_warmup)
        for side in sides:
            measured = []
            for run_index in range(args.runs):
                _say(args, f"consumer-groups: {side.name}, run {run_index + 1}")
                measured.append(
                    await one_run(
                        side,
                        args,
                        f"{os.getpid()}-{run_index}",
                        inflight,
                        args.warmup,
                        args.duration,
                    )
                )
            row = {"target": side.name, **median_row(measured)}
            if isinstance(side, PeerConsumerSide):
                row["heartbeat_version"] = side.heartbeat_version
            by_side[side.name] = row
            rows.append(row)
    finally:
        for side in sides:
            await side.close()
    if "peer" in by_side:
        rows.append(ratio_row(by_side["ours"], by_side["peer"], RATIO_COLUMNS))
    for row in rows:
        row.update(consumer_settings_row(args))
    _say(args, "consumer-groups: our classic protocol, one more member")
    classic = await _classic(ours, args, by_side["ours"])
    _say(args, "consumer-groups: our assignor alone")
    assignor = await loop.run_in_executor(
        None,
        measure_assignor,
        args.assignor_members,
        args.assignor_topics,
        args.assignor_partitions,
        max(args.runs, 3),
    )
    return {NAME: rows, CLASSIC: classic, ASSIGNOR: assignor}


def consumer_settings_row(args: argparse.Namespace) -> dict[str, int]:
    return {
        "heartbeat_interval_ms": args.group_consumer_heartbeat_interval_ms,
        "session_timeout_ms": args.group_consumer_session_timeout_ms,
        "assignment_interval_ms": args.group_consumer_assignment_interval_ms,
    }


def checks(results: dict[str, list[dict[str, Any]]], peer: str) -> list[dict[str, Any]]:
    """Issue 29's goals: ahead of `peer` on each figure, the others consuming on through a
    join, our assignor under Kafka's published time, and our consumer protocol ahead of our
    classic protocol on the join of one more member."""
    found: list[dict[str, Any]] = []

    def goal(target: str, value: Any, met: bool) -> None:
        found.append({"target": target, "value": value, "met": met})

    for row in results.get(NAME, []):
        name = row["target"]
        if name == "ours/peer":
            members = row.get("members")
            for column, words in (
                ("form_s", f"{members} members reach a stable assignment"),
                ("extra_assigned_s", f"one more member of {members} gets its partitions"),
            ):
                value = row.get(column)
                goal(
                    f"consumer groups: {words} no slower than with {peer}",
                    value,
                    value is not None and value <= 1,
                )
            rate = row.get("heartbeats_per_s")
            goal(
                f"consumer groups: heartbeats of a stable group at least the rate of {peer}",
                rate,
                rate is not None and rate >= 1,
            )
        elif name in ("ours", "peer"):
            kept = (row.get("lost_elsewhere"), row.get("interrupted"), row.get("most_doubled"))
            goal(
                f"consumer groups ({name}): through a join the others keep their partitions "
                "(lost elsewhere, interrupted, owned twice)",
                list(kept),
                kept == (0, 0, 0),
            )
    for row in results.get(ASSIGNOR, []):
        if row["target"].startswith("ours/kafka") and row.get("subscriptions") == "heterogeneous":
            value = row.get("fresh_ms")
            goal(
                "assignor: 1,000 members x 1,000 topics x 50,000 partitions under Kafka's "
                "published 15 ms (KIP-1263)",
                value,
                value is not None and value < 1,
            )
    for row in results.get(CLASSIC, []):
        if row["target"] == "consumer/classic":
            value = row.get("extra_s")
            goal(
                "consumer groups: one more member gets its partitions sooner by our consumer "
                f"protocol than by our classic (classic members' heartbeats: "
                f"{row.get('heartbeats')})",
                value,
                value is not None and value < 1,
            )
    return found
