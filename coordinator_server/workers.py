"""`serve --workers N`: N processes on one machine, each a node of the coordinator cluster.

Why processes: one server is one Python process, and one Python process runs on one core; a
machine with 16 cores gives Kafka's coordinator 16 and a single server one. The cluster
already spreads the log's partitions over its nodes (the cluster's own assignment, fenced
takeovers, warm standbys), and FindCoordinator already sends each group to its partition's
owner, so N workers are N nodes that one command starts, supervises and stops.

What the parent does:
- starts worker i (0 to N-1) as `python -m coordinator_server serve` with the parent's own
  arguments and environment, and `--workers 1 --node-id NODE+i --port PORT+i --metrics-port
  METRICS+i` (with `--port 0`, each picks a free port; with `--metrics-port 0` or -1, each
  the same way; METRICS is `--metrics-port`, or when not given the port after the
  listeners', PORT+N);
- passes each worker's log lines on, prefixed with `worker i: `, except its ready line, for
  which it says which node and address the worker serves; once every worker is ready, one
  line `... ready on HOST:PORT with N workers (...)`, the first worker's address first;
- starts a worker that exits again, after a pause that doubles while it keeps exiting
  (`restart_backoff_s` to `max_restart_backoff_s`, reset once it has served a minute); its
  partitions fail over to the other workers meanwhile, as any node's do;
- on SIGTERM or SIGINT, stops every worker with SIGTERM (each leaves the cluster as a node
  does), SIGKILL after `stop_timeout_s`, and exits 0; a parent killed with -9 has its workers
  sent SIGTERM by the kernel (Linux's parent-death signal);
- a worker that exits before it was ever ready ends the start: every worker has the same
  settings, so the others would fail alike; the parent stops them and exits with its code.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator_server import __version__
from coordinator_server.config import CoordinatorConfig
from coordinator_server.event_loop import stopping_on_signals

__all__ = ["WorkerSupervisor", "worker_arguments"]

log = logging.getLogger("coordinator_server.workers")
ready_log = logging.getLogger("coordinator_server.ready")

_READY = re.compile(r"ready on (?P<host>\S+):(?P<port>\d+)")
_STEADY_S = 60.0
"""A worker that has served this long and exits is started again after the shortest pause."""


def worker_arguments(config: CoordinatorConfig, arguments: Sequence[str], index: int) -> list[str]:
    """Worker `index`'s command line: the parent's `serve` arguments, then its own node id,
    ports and one worker (later options win)."""
    port = config.port + index if config.port else 0
    first_metrics = config.workers_metrics_port()
    metrics = first_metrics + index if first_metrics > 0 else first_metrics
    return [
        *arguments,
        "--workers", "1",
        "--node-id", str(config.node_id + index),
        "--port", str(port),
        "--metrics-port", str(metrics),
    ]  # fmt: skip


def _stop_with_parent() -> None:
    """In the worker, before it runs: SIGTERM when the parent dies (Linux's
    PR_SET_PDEATHSIG), so that a parent killed with -9 leaves no worker behind: each then
    stops as on SIGTERM, leaving the cluster."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


@dataclass
class _Worker:
    index: int
    node_id: int
    process: asyncio.subprocess.Process | None = None
    address: str | None = None
    started_at: float = 0.0
    # Set at the worker's first ready line, never cleared.
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class WorkerSupervisor:
    """Runs `config.workers` workers from the parent's `serve` `arguments` until stopped."""

    def __init__(
        self,
        config: CoordinatorConfig,
        arguments: Sequence[str],
        *,
        restart_backoff_s: float = 1.0,
        max_restart_backoff_s: float = 30.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self._config = config
        self._arguments = list(arguments)
        self._restart_backoff_s = restart_backoff_s
        self._max_restart_backoff_s = max_restart_backoff_s
        self._stop_timeout_s = stop_timeout_s
        self._workers = [_Worker(i, config.node_id + i) for i in range(config.workers)]
        self._stopping = asyncio.Event()
        self._failed_start: int | None = None

    async def run(self) -> int:
        """Start the workers, supervise them until SIGTERM or SIGINT, stop them; the exit
        code: 0, or that of a worker that could not start."""
        with stopping_on_signals(self._stopping.set):
            tasks = [
                asyncio.create_task(self._supervise(worker), name=f"worker {worker.index}")
                for worker in self._workers
            ]
            announce = asyncio.create_task(self._announce_ready())
            try:
                await self._stopping.wait()
            finally:
                announce.cancel()
                await self._stop_all()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, announce, return_exceptions=True)
        return self._failed_start or 0

    async def _announce_ready(self) -> None:
        for worker in self._workers:
            await worker.ready.wait()
        first = self._workers[0]
        assert first.address is not None
        nodes = ", ".join(f"node {w.node_id} at {w.address}" for w in self._workers)
        ready_log.info(
            "coordinator-server %s ready on %s with %d workers (%s)",
            __version__,
            first.address,
            len(self._workers),
            nodes,
        )

    async def _supervise(self, worker: _Worker) -> None:
        pause = self._restart_backoff_s
        while not self._stopping.is_set():
            code = await self._run_once(worker)
            if self._stopping.is_set():
                return
            if not worker.ready.is_set():
                log.error(
                    "worker %d (node %d) exited with code %s before it was ready: stopping "
                    "every worker",
                    worker.index,
                    worker.node_id,
                    code,
                )
                self._failed_start = code or 1
                self._stopping.set()
                return
            if time.monotonic() - worker.started_at >= _STEADY_S:
                pause = self._restart_backoff_s
            log.warning(
                "worker %d (node %d) exited with code %s; starting it again in %.1f s (its "
                "partitions move to the other workers meanwhile)",
                worker.index,
                worker.node_id,
                code,
                pause,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), pause)
            pause = min(pause * 2, self._max_restart_backoff_s)

    async def _run_once(self, worker: _Worker) -> int | None:
        command = [
            sys.executable,
            "-m",
            "coordinator_server",
            "serve",
            *worker_arguments(self._config, self._arguments, worker.index),
        ]
        worker.started_at = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=dict(os.environ),
            preexec_fn=_stop_with_parent,
        )
        worker.process = process
        log.info("worker %d (node %d) started, pid %d", worker.index, worker.node_id, process.pid)
        assert process.stderr is not None
        await self._pass_lines_on(worker, process.stderr)
        return await process.wait()

    async def _pass_lines_on(self, worker: _Worker, lines: asyncio.StreamReader) -> None:
        out = sys.stderr
        prefix = f"worker {worker.index}: "
        while True:
            try:
                line = await lines.readline()
            except ValueError:
                # A line longer than the stream's limit: its rest is skipped.
                continue
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            match = _READY.search(text)
            if match is not None:
                # A restarted worker's ready line says it serves again, perhaps elsewhere
                # (with --port 0); the first one makes the worker count as ready.
                again = worker.ready.is_set()
                worker.address = f"{match['host']}:{match['port']}"
                worker.ready.set()
                assert worker.process is not None
                log.info(
                    "worker %d (node %d, pid %d) serves %son %s%s",
                    worker.index,
                    worker.node_id,
                    worker.process.pid,
                    "again " if again else "",
                    worker.address,
                    text[match.end() :],
                )
                continue
            out.write(prefix + text + "\n")
            out.flush()

    async def _stop_all(self) -> None:
        running = [
            w.process
            for w in self._workers
            if w.process is not None and w.process.returncode is None
        ]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(
                asyncio.gather(*(p.wait() for p in running)), self._stop_timeout_s
            )
        except TimeoutError:
            for process in running:
                if process.returncode is None:
                    log.warning("worker pid %d did not stop in time: killed", process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            await asyncio.gather(*(p.wait() for p in running), return_exceptions=True)
