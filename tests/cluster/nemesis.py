"""The nemesis: a seeded schedule of faults on the nodes of a cluster, and its execution.

The schedule is drawn from the seed alone (never from how the run goes), so a seed replays
the same faults at the same times: kill -9 a node and start it again later, or pause it
(SIGSTOP) for longer than the cluster's session timeout and resume it (SIGCONT). At least one
node is always up (neither killed nor paused, nor started again less than `ready_s` ago).
At the end (`heal`) every node killed is started again and every node paused is resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from history import Recorder
from server_process import ServerProcess

KILL, PAUSE, RESUME, START = "kill", "pause", "resume", "start"


@dataclass(frozen=True, slots=True, order=True)
class Fault:
    at_s: float
    action: str
    node: int


@dataclass(frozen=True, slots=True)
class Timing:
    duration_s: float = 90.0
    # Between two faults.
    gap_s: tuple[float, float] = (3.0, 8.0)
    # How long a killed node stays down, and a paused one paused.
    down_s: tuple[float, float] = (3.0, 15.0)
    pause_s: tuple[float, float] = (7.0, 14.0)
    # A node started again counts as up (may be faulted, may be the one left up) only this
    # long after: it joins the cluster and loads its partitions first.
    ready_s: float = 8.0
    # Faults start after this, when the workload runs.
    first_s: float = 3.0


def schedule(seed: int, nodes: Sequence[int], timing: Timing) -> list[Fault]:
    """The faults of `seed`, in time order, ending with every node back (at `duration_s`)."""
    rng = random.Random(seed)
    up = set(nodes)
    # Faults to undo: (at, action, node).
    recoveries: list[Fault] = []
    # Nodes started again: (when they count as up, node).
    starting: list[tuple[float, int]] = []
    faults: list[Fault] = []
    t = timing.first_s
    while t < timing.duration_s:
        for recovery in sorted(r for r in recoveries if r.at_s <= t):
            recoveries.remove(recovery)
            faults.append(recovery)
            if recovery.action == START:
                starting.append((recovery.at_s + timing.ready_s, recovery.node))
            else:
                up.add(recovery.node)
        for ready in [r for r in starting if r[0] <= t]:
            starting.remove(ready)
            up.add(ready[1])
        if len(up) > 1:
            node = rng.choice(sorted(up))
            up.remove(node)
            if rng.random() < 0.5:
                faults.append(Fault(t, KILL, node))
                back = t + rng.uniform(*timing.down_s)
                recoveries.append(Fault(back, START, node))
            else:
                faults.append(Fault(t, PAUSE, node))
                back = t + rng.uniform(*timing.pause_s)
                recoveries.append(Fault(back, RESUME, node))
        t += rng.uniform(*timing.gap_s)
    # What is still down or paused at the end comes back at the heal.
    faults += [Fault(min(r.at_s, timing.duration_s), r.action, r.node) for r in sorted(recoveries)]
    faults.sort(key=lambda fault: fault.at_s)
    return [Fault(round(f.at_s, 3), f.action, f.node) for f in faults]


class Nodes:
    """The cluster's server processes by node id: started, killed, paused, resumed only by
    their PIDs, and only the ones started here."""

    def __init__(self, args_of: Callable[[int], list[str]], node_ids: Sequence[int]) -> None:
        self._args_of = args_of
        self.node_ids = list(node_ids)
        self.current: dict[int, ServerProcess] = {}
        self.started: list[ServerProcess] = []
        self.paused: set[int] = set()

    def start(self, node: int, timeout: float = 90) -> ServerProcess:
        process = ServerProcess(self._args_of(node))
        self.current[node] = process
        self.started.append(process)
        return process.start(timeout)

    def kill(self, node: int) -> None:
        process = self.current.get(node)
        if process is not None:
            process.kill()
        self.paused.discard(node)

    def pause(self, node: int) -> None:
        process = self.current.get(node)
        if process is not None and process.proc is not None and process.proc.poll() is None:
            os.kill(process.pid, signal.SIGSTOP)
            self.paused.add(node)

    def resume(self, node: int) -> None:
        process = self.current.get(node)
        if process is not None and process.proc is not None and process.proc.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        self.paused.discard(node)

    def stop_all(self) -> None:
        for process in self.started:
            if process.proc is not None and process.proc.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
            process.kill()


async def run_schedule(
    faults: Sequence[Fault], nodes: Nodes, recorder: Recorder, started_at: float
) -> None:
    """Apply each fault at its time (from `started_at`, a `time.monotonic()`), recording
    it. A start runs in the background (a node takes seconds to become ready), so it never
    holds the schedule up; one that fails (the node was killed again while starting) is
    recorded and left."""
    starting: dict[int, asyncio.Task[None]] = {}

    async def start(node: int) -> None:
        op = recorder.invoke("nemesis", START, node=node)
        try:
            await asyncio.to_thread(nodes.start, node)
        except RuntimeError as exc:
            recorder.complete(op, "info", error=str(exc).splitlines()[0])
        else:
            recorder.complete(op, "ok")

    for fault in faults:
        delay = started_at + fault.at_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        node = fault.node
        if fault.action == START:
            starting[node] = asyncio.create_task(start(node))
            continue
        if fault.action == KILL:
            task = starting.pop(node, None)
            if task is not None and not task.done():
                # Killed while starting: the start sees the process die.
                process = nodes.current.get(node)
                if process is not None and process.proc is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGKILL)
                await task
            await asyncio.to_thread(nodes.kill, node)
        elif fault.action == PAUSE:
            nodes.pause(node)
        elif fault.action == RESUME:
            nodes.resume(node)
        recorder.event("nemesis", fault.action, node=node, at_s=fault.at_s)
    if starting:
        await asyncio.gather(*starting.values())
