"""Our server as a benchmark starts it, pinned to a CPU (or a set of them), and what the
bench reads of the processes it starts (ports, CPU time, memory).

The server is stopped by the PID this module started it with, never by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"
READY = re.compile(
    r"ready on (?P<host>[0-9.]+):(?P<port>\d+) "
    r"\((?P<partitions>\d+) partitions loaded in (?P<seconds>[0-9.]+) s"
    r"(?:: (?P<records>\d+) records in [0-9.]+ s, (?P<rate>\d+) records/s)?"
)
METRICS = re.compile(r"metrics: http://[0-9.]+:(?P<port>\d+)/metrics")
# The server's latest lines kept (a failed start shows the last of them).
KEPT_LINES = 2000


CpuSet = int | Iterable[int] | None
"""One CPU, a set of CPUs, or None: not pinned."""


def cpu_list(cpu: CpuSet) -> list[int] | None:
    """The CPUs of `cpu`, sorted; None when not pinned."""
    if cpu is None:
        return None
    if isinstance(cpu, int):
        return [cpu]
    cpus = sorted(set(cpu))
    return cpus or None


def pinned(command: Sequence[str], cpu: CpuSet) -> list[str]:
    """`command` run on `cpu` (one CPU or a set) through taskset, when there is a CPU to pin
    to and taskset."""
    cpus = cpu_list(cpu)
    if cpus is None:
        return list(command)
    taskset = shutil.which("taskset")
    if taskset is None:
        return list(command)
    return [taskset, "-c", ",".join(map(str, cpus)), *command]


def pin_self(cpu: CpuSet) -> None:
    cpus = cpu_list(cpu)
    if cpus is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


def usable_cpus() -> list[int]:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def repin(pid: int, cpu: CpuSet) -> None:
    """Move every thread of a running process to `cpu` (a JVM's threads are tasks of their
    own, each with its affinity): the threads it starts later inherit it from theirs. A thread
    that ends meanwhile is skipped."""
    cpus = cpu_list(cpu)
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        return
    try:
        tasks = [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        tasks = [pid]
    for task in tasks:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(task, cpus)


def free_port() -> int:
    """A port that was free a moment ago (whoever binds it next may race another process)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def resident_bytes(pid: int) -> int:
    """The resident set size of a process (Linux), 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (Linux), 0 when unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# The started processes a target does not use count as quiet below this share of a core:
# an idle Kafka broker spends 1 to 3 % of one (its controller, its timers).
QUIET_SHARE = 0.05
QUIET_WINDOW_S = 1.0
QUIET_TIMEOUT_S = 60.0


async def wait_until_quiet(pids: list[int], timeout_s: float = QUIET_TIMEOUT_S) -> float:
    """Wait until the processes spend together under QUIET_SHARE of a core over a window:
    a JVM broker compiles the code the previous target ran (its JIT's queue) for seconds
    after it stops serving, on the core the next target is measured on. The seconds waited
    (at most `timeout_s`: a process that never quiets down is reported, not waited out)."""
    started = time.monotonic()
    if not pids:
        return 0.0
    while True:
        before = sum(cpu_seconds(pid) for pid in pids)
        await asyncio.sleep(QUIET_WINDOW_S)
        share = (sum(cpu_seconds(pid) for pid in pids) - before) / QUIET_WINDOW_S
        waited = time.monotonic() - started
        if share < QUIET_SHARE or waited >= timeout_s:
            return waited


class ServerProcess:
    """`coordinator-server serve` as a child process, ready once it logs its address."""

    def __init__(
        self, args: Sequence[str], cpu: CpuSet, *, ready: re.Pattern[str] | None = None
    ) -> None:
        """`ready`: the line that says the server is ready, when not a node's own ready line
        (`serve --workers N` says it once for all its workers)."""
        self.args = list(args)
        self.cpu = cpu
        self._ready_line = ready
        self.host = ""
        self.port = 0
        # The operator's HTTP port (/status), when the server was started with one.
        self.metrics_port = 0
        self.started_at = 0.0
        self.ready_at = 0.0
        self.reported_load_s = 0.0
        # Records the server loaded per second of its partitions' loads, as its ready
        # line says.
        self.reported_records_per_s = 0
        self.process: subprocess.Popen[str] | None = None
        self.lines: deque[str] = deque(maxlen=KEPT_LINES)
        self._ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 120.0) -> ServerProcess:
        command = [sys.executable, "-m", "coordinator_server", "serve", "--port", "0", *self.args]
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            pinned(command, self.cpu),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.01):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    "the server did not become ready:\n" + "".join(list(self.lines)[-30:])
                )
        return self

    def _pump(self) -> None:
        process = self.process
        assert process is not None and process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)
            if self._ready_line is not None:
                if self._ready_line.search(line) and not self._ready.is_set():
                    self.ready_at = time.monotonic()
                    self._ready.set()
                continue
            match = READY.search(line)
            if match and not self._ready.is_set():
                self.ready_at = time.monotonic()
                self.host, self.port = match["host"], int(match["port"])
                metrics = METRICS.search(line)
                self.metrics_port = int(metrics["port"]) if metrics else 0
                self.reported_load_s = float(match["seconds"])
                if match["rate"] is not None:
                    self.reported_records_per_s = int(match["rate"])
                self._ready.set()

    def kill(self) -> None:
        """kill -9, by the pid this started: no chance to flush or close anything."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stderr is not None:
            with contextlib.suppress(OSError):
                process.stderr.close()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if process.stderr is not None:
            with contextlib.suppress(OSError):
                process.stderr.close()
