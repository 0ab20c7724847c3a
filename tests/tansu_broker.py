"""tansu, a Kafka-protocol broker that is not Apache Kafka, run as a child process for tests.

It keeps the log working with such brokers (the `tansu` compatibility tests). The broker keeps
its data in memory, listens on 127.0.0.1 only, and is stopped by the PID this class started,
never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

# The bench starts its broker the same way; the binary's resolution and the port helpers are
# shared.
from coordinator_server.tools.bench.brokers import tansu_binary
from coordinator_server.tools.bench.processes import free_port, port_accepts_connections

LOOPBACK = "127.0.0.1"


class TansuStartError(RuntimeError):
    pass


class TansuBroker:
    """One tansu broker process with in-memory storage.

    `start()` returns once the port accepts TCP connections; `stop()` is idempotent and
    escalates from SIGTERM to SIGKILL. Usable as a (synchronous) context manager.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        startup_timeout_s: float = 15.0,
        stop_timeout_s: float = 5.0,
        start_attempts: int = 3,
    ) -> None:
        self._binary = binary
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._start_attempts = start_attempts
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._port: int | None = None

    @property
    def coordinator_args(self) -> list[str]:
        # No transactions: the server cannot fence partitions to an owner, so it writes the
        # log alone.
        return ["--cluster", "off", "--transactions", "off"]

    @property
    def bootstrap(self) -> str:
        if self._port is None:
            raise RuntimeError("broker not started")
        return f"{LOOPBACK}:{self._port}"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("broker not started")
        return self._port

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("broker not started")
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The end of the broker's own output, for diagnosing a failed test."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        data = self._log_path.read_bytes()[-max_bytes:]
        return data.decode("utf-8", errors="replace")

    def start(self) -> TansuBroker:
        if self._process is not None:
            raise RuntimeError("broker already started")
        binary = self._binary or tansu_binary()
        failures: list[str] = []
        for _ in range(self._start_attempts):
            if self._try_start(binary, free_port()):
                return self
            failures.append(self.log_tail())
            self._discard_log()
        raise TansuStartError(
            f"tansu did not start after {self._start_attempts} attempts; last output:\n"
            + failures[-1]
        )

    def _try_start(self, binary: str, port: int) -> bool:
        url = f"tcp://{LOOPBACK}:{port}"
        fd, log_name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
        self._log_path = Path(log_name)
        with os.fdopen(fd, "wb") as log_file:
            # The explicit storage engine keeps a STORAGE_ENGINE variable in the
            # environment from pointing the test broker at real storage.
            self._process = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self._port = port
        deadline = time.monotonic() + self._startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if port_accepts_connections(port):
                return True
            time.sleep(0.05)
        self._terminate()
        self._port = None
        return False

    def stop(self) -> None:
        self._terminate()
        self._discard_log()

    def restart_empty(self) -> None:
        """Stop the broker and start a new one on the same port: with in-memory storage,
        the broker comes back with no topics, as a cluster that lost its data would."""
        port = self.port
        self._terminate()
        self._discard_log()
        binary = self._binary or tansu_binary()
        # The port was just released; a restart may briefly find it still bound.
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._try_start(binary, port):
            if time.monotonic() > deadline:
                raise TansuStartError(f"tansu did not restart on port {port}")
            self._discard_log()
            time.sleep(0.2)

    def pause(self) -> None:
        """SIGSTOP: the broker holds its connections and answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        # A paused broker would not act on SIGTERM.
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=self._stop_timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=self._stop_timeout_s)

    def _discard_log(self) -> None:
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
