"""The benchmark scenarios: what each one does and the rows it reports."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from coordinator_server.tools.bench.loops import LoopRun
from coordinator_server.tools.bench.stats import latency_summary_ms
from coordinator_server.tools.bench.targets import (
    ILLEGAL_GENERATION,
    MEMBER_ID_REQUIRED,
    NOT_READY,
    READY_RETRY_S,
    REBALANCE_IN_PROGRESS,
    TOPIC,
    UNKNOWN_MEMBER_ID,
    CommitSpec,
    CommitTarget,
    HeartbeatSpec,
    Target,
)

SUBSCRIPTION = msgpack.packb({"topics": [TOPIC], "user_data": None, "owned_partitions": []})


class BenchError(RuntimeError):
    """A scenario could not run to the end (an unexpected answer, a timeout)."""


def loop_row(run: LoopRun, partitions: int = 0) -> dict[str, Any]:
    result = run.result
    row: dict[str, Any] = {
        "requests_per_s": round(result.requests / run.seconds, 1),
    }
    if partitions:
        row["partition_commits_per_s"] = round(result.requests * partitions / run.seconds, 1)
    row.update(latency_summary_ms(result.latencies))
    row["connections"] = run.connections
    row["requests"] = result.requests
    row["errors"] = result.errors
    if result.error_codes:
        row["error_codes"] = {str(code): count for code, count in result.error_codes.items()}
    row["generator_cpu"] = round(run.generator_cpu, 3)
    row["quiet_wait_s"] = run.quiet_wait_s
    # What a request cost the processes the bench started, in CPU time: our server and the
    # broker share one core, so together they bound the rate; "others" are the started
    # processes the target does not use (on the same core, idle if the budget is fair).
    # `core_cpu_us` is what a request cost the target's core (server and broker): the rate a
    # core given wholly to the target would reach is one second over it, whatever else ran
    # on the machine meanwhile.
    row.update(cpu_per_request(run.process_cpu_s, result.requests))
    return row


def cpu_per_request(process_cpu_s: dict[str, float], requests: int) -> dict[str, float]:
    """Microseconds of CPU time each watched process spent per request (or per
    transaction), `others` apart, and `core_cpu_us`: the watched ones together."""
    row: dict[str, float] = {}
    if not requests:
        return row
    core_s = 0.0
    for name, spent in process_cpu_s.items():
        row[f"{name}_cpu_us"] = round(spent / requests * 1e6, 1)
        if name != "others":
            core_s += spent
    if core_s:
        row["core_cpu_us"] = round(core_s / requests * 1e6, 1)
    return row


# Group membership, as a client does it.


@dataclass
class Member:
    index: int
    member_id: str = ""
    generation_id: int = -1
    assignment: bytes = b""
    synced_at: float = 0.0


def assign_round_robin(member_ids: list[str]) -> list[tuple[str, bytes]]:
    """One partition of the benchmark topic per member (the coordinator never reads it)."""
    return [
        (
            member_id,
            msgpack.packb({"partitions": [{"topic": TOPIC, "partitions": [i]}], "user_data": None}),
        )
        for i, member_id in enumerate(member_ids)
    ]


@dataclass(frozen=True)
class Timeouts:
    session_ms: int = 30000
    rebalance_ms: int = 60000


async def run_member(target: Target, group: str, member: Member, timeouts: Timeouts) -> None:
    """Join and sync until the member holds an assignment, retrying as a client would."""
    for _ in range(100):
        joined = await target.join(
            member.index,
            group,
            member.member_id,
            timeouts.session_ms,
            timeouts.rebalance_ms,
            SUBSCRIPTION,
        )
        code = joined.error_code
        if code == MEMBER_ID_REQUIRED:
            member.member_id = joined.member_id
            continue
        if code == UNKNOWN_MEMBER_ID:
            member.member_id = ""
            continue
        if code == REBALANCE_IN_PROGRESS:
            continue
        if code in NOT_READY:
            # The coordinator is still loading the group's partition (Kafka's own, under a
            # busy core, as much as ours): retriable, after a pause, as clients retry it.
            await asyncio.sleep(READY_RETRY_S)
            continue
        if code:
            raise BenchError(f"{target.name}: JoinGroup of {group} failed with error {code}")
        member.member_id = joined.member_id
        member.generation_id = joined.generation_id
        assignments = (
            assign_round_robin(joined.members) if joined.leader == member.member_id else []
        )
        code, assignment = await target.sync(
            member.index, group, joined.generation_id, member.member_id, assignments
        )
        if code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            continue
        if code in NOT_READY:
            await asyncio.sleep(READY_RETRY_S)
            continue
        if code == UNKNOWN_MEMBER_ID:
            member.member_id = ""
            continue
        if code:
            raise BenchError(f"{target.name}: SyncGroup of {group} failed with error {code}")
        member.assignment = assignment
        member.synced_at = time.perf_counter()
        return
    raise BenchError(f"{target.name}: member {member.index} of {group} never settled")


# While a group forms, members that hold an assignment keep heartbeating, as clients do, so
# that they hear of a rebalance that later members start (a member that stopped would hold up
# the join phase until its rebalance timeout). Often, to measure the coordinator and not a
# client's heartbeat timer.
HEARTBEAT_INTERVAL_S = 0.02


async def settle(
    target: Target, group: str, members: list[Member], pending: list[Member], timeouts: Timeouts
) -> float:
    """Run `pending` members until every member of the group holds an assignment of the same
    generation (each one's heartbeat answers NONE); the time the last one got its assignment.
    A member whose heartbeat answers otherwise joins again."""
    joining = {
        m.index: asyncio.ensure_future(run_member(target, group, m, timeouts)) for m in pending
    }
    try:
        while True:
            running = [task for task in joining.values() if not task.done()]
            if running:
                await asyncio.wait(running, timeout=HEARTBEAT_INTERVAL_S)
            for task in joining.values():
                if task.done():
                    task.result()
            idle = [m for m in members if m.index not in joining or joining[m.index].done()]
            codes = await asyncio.gather(
                *(target.heartbeat(m.index, group, m.generation_id, m.member_id) for m in idle)
            )
            for member, code in zip(idle, codes, strict=True):
                if code != 0:
                    joining[member.index] = asyncio.ensure_future(
                        run_member(target, group, member, timeouts)
                    )
            if len(idle) == len(members) and not any(codes):
                return max(m.synced_at for m in members)
    finally:
        for task in joining.values():
            task.cancel()


async def form_group(
    target: Target, group: str, members: list[Member], timeouts: Timeouts
) -> float:
    """Every member joins at once; seconds until every member holds its assignment."""
    started = time.perf_counter()
    done = await settle(target, group, members, members, timeouts)
    return done - started


async def join_stable_group(
    target: Target, group: str, members: list[Member], extra: Member, timeouts: Timeouts
) -> float:
    """One more member joins a Stable group; seconds until all of them hold an assignment.

    The others learn of the rebalance from a heartbeat, as clients do: one of them polls until
    it hears REBALANCE_IN_PROGRESS (a heartbeat interval close to nothing), then all rejoin.
    """
    started = time.perf_counter()
    extra_task = asyncio.ensure_future(run_member(target, group, extra, timeouts))
    sentinel = members[0]
    deadline = started + timeouts.rebalance_ms / 1000
    while True:
        code = await target.heartbeat(
            sentinel.index, group, sentinel.generation_id, sentinel.member_id
        )
        if code != 0:
            break
        if time.perf_counter() > deadline:
            raise BenchError(f"{target.name}: {group} never started rebalancing")
        await asyncio.sleep(0.001)
    everyone = [*members, extra]
    await asyncio.gather(extra_task, *(run_member(target, group, m, timeouts) for m in members))
    done = await settle(target, group, everyone, [], timeouts)
    return done - started


async def leave(target: Target, group: str, members: list[Member]) -> None:
    """The members leave once measured: a session left to expire would have the coordinator
    work while the next target is measured on the same core."""
    await target.leave(group, [(m.index, m.member_id) for m in members if m.member_id])


# Scenarios.


async def commits(
    target: CommitTarget,
    run_id: str,
    groups: int,
    partitions: int,
    inflight: int,
    connections: int,
    warmup_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """Simple commits (no generation, no member) of `partitions` partitions to G groups."""
    names = await target.group_names(f"bench-commits-{run_id}", groups)
    specs = [CommitSpec(name, "", -1, TOPIC, partitions) for name in names]
    await target.ready([spec.group for spec in specs])
    run = await target.commit_loop(specs, inflight, connections, warmup_s, duration_s)
    return loop_row(run, partitions)


async def heartbeats(
    target: Target,
    run_id: str,
    members: int,
    groups: int,
    inflight: int,
    connections: int,
    warmup_s: float,
    duration_s: float,
    timeouts: Timeouts,
) -> dict[str, Any]:
    """M members in G groups heartbeat; then one more heartbeat each tells who expired."""
    per_group = [members // groups + (1 if g < members % groups else 0) for g in range(groups)]
    group_members: list[tuple[str, list[Member]]] = []
    index = 0
    for g, count in enumerate(per_group):
        group_members.append(
            (f"bench-heartbeats-{run_id}-{g}", [Member(index + i) for i in range(count)])
        )
        index += count
    await target.ready([group for group, _ in group_members])
    await asyncio.gather(
        *(form_group(target, group, ms, timeouts) for group, ms in group_members if ms)
    )
    specs = [
        HeartbeatSpec(group, m.member_id, m.generation_id)
        for group, ms in group_members
        for m in ms
    ]
    run = await target.heartbeat_loop(specs, inflight, connections, warmup_s, duration_s)
    codes = await asyncio.gather(
        *(
            target.heartbeat(m.index, group, m.generation_id, m.member_id)
            for group, ms in group_members
            for m in ms
        )
    )
    await asyncio.gather(*(leave(target, group, ms) for group, ms in group_members))
    row = loop_row(run)
    row["members"] = members
    row["expired"] = sum(1 for code in codes if code != 0)
    return row


async def rebalance(
    target: Target, run_id: str, size: int, timeouts: Timeouts, timeout_s: float
) -> dict[str, Any]:
    group = f"bench-rebalance-{run_id}-{size}"
    members = [Member(i) for i in range(size)]
    extra = Member(size)
    await target.ready([group])
    join_s = await asyncio.wait_for(form_group(target, group, members, timeouts), timeout_s)
    extra_s = await asyncio.wait_for(
        join_stable_group(target, group, members, extra, timeouts), timeout_s
    )
    await leave(target, group, [*members, extra])
    return {"members": size, "join_s": round(join_s, 4), "extra_join_s": round(extra_s, 4)}


Progress = Callable[[str], None]
