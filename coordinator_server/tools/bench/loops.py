"""The measured loops: C requests kept in flight over connections of their own, to one
server or to several (the nodes of a cluster), started, measured and stopped together, with
the CPU time the watched processes spent meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator_client import ClientSecurity
from coordinator_server.tools.bench.ours import Checker, ClosedLoop, Opener, Parser, Template
from coordinator_server.tools.bench.processes import cpu_seconds, wait_until_quiet
from coordinator_server.tools.bench.stats import LoadResult


@dataclass
class LoopRun:
    """A measured loop: what it saw, how long it measured, the generator's CPU share, and
    the CPU seconds each watched process (our server, the broker) spent meanwhile; "others"
    is the CPU seconds of the started processes the target does not use (they share its
    core, and should be idle)."""

    result: LoadResult
    seconds: float
    generator_cpu: float
    process_cpu_s: dict[str, float] = field(default_factory=dict)
    connections: int = 0
    # Seconds waited for the others to be quiet before the loop started.
    quiet_wait_s: float = 0.0


async def measure(
    start: Callable[[], None],
    set_measuring: Callable[[bool], None],
    stop: Callable[[], list[asyncio.Future[None]]],
    warmup_s: float,
    duration_s: float,
    watched: dict[str, int],
    others: list[int],
) -> tuple[float, float, dict[str, float], float]:
    """Run a loop through warm-up and measurement, once the others are quiet; (seconds
    measured, generator CPU share, CPU seconds of each watched process while measuring, and
    of the others together, seconds waited for the others)."""
    waited = await wait_until_quiet(others)
    start()
    await asyncio.sleep(warmup_s)
    set_measuring(True)
    cpu_started = time.process_time()
    watched_started = {name: cpu_seconds(pid) for name, pid in watched.items()}
    others_started = sum(cpu_seconds(pid) for pid in others)
    wall_started = time.perf_counter()
    await asyncio.sleep(duration_s)
    set_measuring(False)
    seconds = time.perf_counter() - wall_started
    cpu = time.process_time() - cpu_started
    spent = {name: cpu_seconds(pid) - watched_started[name] for name, pid in watched.items()}
    if others:
        spent["others"] = sum(cpu_seconds(pid) for pid in others) - others_started
    waiters = stop()
    await asyncio.wait_for(asyncio.gather(*waiters), 60)
    return seconds, cpu / seconds, spent, waited


@dataclass(frozen=True)
class Destination:
    """A server the measured loops drive: `inflight` requests of `templates` kept outstanding
    over `connections` connections of their own."""

    host: str
    port: int
    templates: list[Template]
    inflight: int
    connections: int
    # How the connections are secured (None: PLAINTEXT), and who opens them (None: our
    # server's `open_secured`; a Kafka broker's connections authenticate in its protocol).
    security: ClientSecurity | None = None
    opener: Opener | None = None


async def run_loops(
    host: str,
    port: int,
    templates: list[Template],
    parse: Parser,
    check: Checker,
    inflight: int,
    connections: int,
    warmup_s: float,
    duration_s: float,
    watched: dict[str, int],
    others: list[int],
    security: ClientSecurity | None = None,
    opener: Opener | None = None,
) -> LoopRun:
    """`inflight` requests kept outstanding over `connections` connections of their own."""
    return await run_loops_to(
        [Destination(host, port, templates, inflight, connections, security, opener)],
        parse,
        check,
        warmup_s,
        duration_s,
        watched,
        others,
    )


async def run_loops_to(
    destinations: list[Destination],
    parse: Parser,
    check: Checker,
    warmup_s: float,
    duration_s: float,
    watched: dict[str, int],
    others: list[int],
) -> LoopRun:
    """The loops of every destination (the nodes of a cluster), started, measured and
    stopped together."""
    results: list[LoadResult] = []
    loops: list[ClosedLoop] = []
    try:
        for destination in destinations:
            connections = destination.connections
            inflight = destination.inflight
            templates = destination.templates
            for i in range(connections):
                share = inflight // connections + (1 if i < inflight % connections else 0)
                if share:
                    mine = templates[i::connections] or templates
                    result = LoadResult()
                    results.append(result)
                    loops.append(
                        await ClosedLoop.open(
                            destination.host,
                            destination.port,
                            mine,
                            share,
                            result,
                            parse,
                            check,
                            destination.security,
                            destination.opener,
                        )
                    )

        def start() -> None:
            for loop in loops:
                loop.start()

        def set_measuring(on: bool) -> None:
            for loop in loops:
                loop.measuring = on

        def stop() -> list[asyncio.Future[None]]:
            for loop in loops:
                loop.stop()
            return [loop.done for loop in loops]

        seconds, cpu, spent, waited = await measure(
            start, set_measuring, stop, warmup_s, duration_s, watched, others
        )
    finally:
        for loop in loops:
            loop.close()
    total = LoadResult()
    for result in results:
        total.merge(result)
    return LoopRun(total, seconds, cpu, spent, len(loops), round(waited, 1))
