"""One more member joins a classic group of N (our server's classic protocol, eager, as the
client library's members are), measured two ways for the consumer group scenario:

- `instant`: the `rebalance` scenario's own measure (`scenarios.join_stable_group`): one
  member polls its heartbeat every millisecond and every member rejoins the moment it hears of
  the rebalance: the classic protocol at its quickest;
- `paced`: every member heartbeats every heartbeat interval, as the consumer protocol's
  members do in the same scenario (and Kafka's classic consumer does), and rejoins when its
  heartbeat answers that a rebalance is under way; the newcomer holds its assignment once
  every member has rejoined and the leader's assignment is synced.

Either way every member rejoins, and under the eager protocol it gives up all its partitions
before it does: `members_stopped` counts the members that went through the new generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from coordinator_server.tools.bench import scenarios
from coordinator_server.tools.bench.targets import (
    ILLEGAL_GENERATION,
    NOT_READY,
    READY_RETRY_S,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    Target,
)

# How long the members' heartbeats (and a rejoin under way) may take to end once stopped.
STOP_TIMEOUT_S = 60.0
# What a classic heartbeat answers a member that must join again.
_REJOIN = frozenset({REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID})


async def _formed(
    target: Target, group: str, size: int, timeouts: scenarios.Timeouts, timeout_s: float
) -> list[scenarios.Member]:
    members = [scenarios.Member(i) for i in range(size)]
    await target.ready([group])
    await asyncio.wait_for(scenarios.form_group(target, group, members, timeouts), timeout_s)
    return members


async def instant(
    target: Target, group: str, size: int, timeouts: scenarios.Timeouts, timeout_s: float
) -> dict[str, Any]:
    members = await _formed(target, group, size, timeouts, timeout_s)
    extra = scenarios.Member(size)
    before = {m.index: m.generation_id for m in members}
    try:
        extra_s = await asyncio.wait_for(
            scenarios.join_stable_group(target, group, members, extra, timeouts), timeout_s
        )
    finally:
        await scenarios.leave(target, group, [*members, extra])
    stopped = sum(1 for m in members if m.generation_id != before[m.index])
    return {"extra_s": round(extra_s, 4), "members_stopped": stopped}


async def paced(
    target: Target,
    group: str,
    size: int,
    timeouts: scenarios.Timeouts,
    timeout_s: float,
    interval_s: float,
) -> dict[str, Any]:
    members = await _formed(target, group, size, timeouts, timeout_s)
    extra = scenarios.Member(size)
    before = {m.index: m.generation_id for m in members}
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    async def beat(member: scenarios.Member, delay_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), delay_s)
        while not stopping.is_set():
            sent = loop.time()
            code = await target.heartbeat(
                member.index, group, member.generation_id, member.member_id
            )
            if code in _REJOIN:
                await scenarios.run_member(target, group, member, timeouts)
                continue
            if code in NOT_READY:
                await asyncio.sleep(READY_RETRY_S)
                continue
            if code:
                raise scenarios.BenchError(f"{target.name}: Heartbeat of {group}: error {code}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), sent + interval_s - loop.time())

    # Out of step, as members of a while are; the newcomer comes once each has heartbeated.
    tasks = [
        asyncio.ensure_future(beat(member, interval_s * i / size))
        for i, member in enumerate(members)
    ]
    try:
        await asyncio.sleep(interval_s)
        started = time.perf_counter()
        joining = asyncio.ensure_future(scenarios.run_member(target, group, extra, timeouts))
        done, _ = await asyncio.wait(
            [joining, *tasks], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if joining not in done:
            for task in done:
                task.result()
            joining.cancel()
            raise scenarios.BenchError(f"{target.name}: one more member of {group} never joined")
        joining.result()
        extra_s = extra.synced_at - started
        # Every member hears of the rebalance before the newcomer is synced (the join waits
        # for all of them); their own syncs come right after its.
        stopped = sum(1 for m in members if m.generation_id != before[m.index])
    finally:
        stopping.set()
        _, late = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        for task in late:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.wait_for(scenarios.leave(target, group, [*members, extra]), STOP_TIMEOUT_S)
    return {"extra_s": round(extra_s, 4), "members_stopped": stopped}
