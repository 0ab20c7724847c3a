"""Run `coordinator-server serve` as a real process, as an operator would."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

READY = re.compile(r"ready on (?P<host>[0-9.]+):(?P<port>\d+)")
METRICS = re.compile(r"metrics: http://[0-9.]+:(?P<port>\d+)/metrics")


class ServerProcess:
    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.host = ""
        self.port = 0
        self.metrics_port = 0
        self._ready = threading.Event()

    def start(self, timeout: float = 60) -> ServerProcess:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> ServerProcess:
        """Start the process without waiting for it to be ready."""
        # Tests run servers side by side: any free metrics port unless the test picks one.
        args = self.args if "--metrics-port" in self.args else [*self.args, "--metrics-port", "0"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator_server", "serve", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()
        return self

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float = 60) -> ServerProcess:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("server did not become ready:\n" + "".join(self.lines))
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            match = READY.search(line)
            if match and not self._ready.is_set():
                self.host, self.port = match["host"], int(match["port"])
                metrics = METRICS.search(line)
                self.metrics_port = int(metrics["port"]) if metrics else 0
                self._ready.set()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """kill -9: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._release()

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._release()
        return code

    def _release(self) -> None:
        if self.proc is None or self.proc.poll() is None:
            return
        self._pump_thread.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def output(self) -> str:
        return "".join(self.lines)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def sqlite_args(data_dir: Path, *extra: str) -> list[str]:
    return ["--port", "0", "--data-dir", str(data_dir), "--offsets-topic-partitions", "8", *extra]
