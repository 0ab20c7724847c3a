"""Apache Kafka run as a child process for tests, through `deploy/kafka/run.sh`.

One KRaft node (broker and controller in one JVM) on 127.0.0.1, with a PLAINTEXT listener and
a SASL_SSL one (a CA of its own in `ca_file`; PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for
`sasl_username`). It is stopped by the PID this class started, never by name; `pause` stops
the JVM itself (SIGSTOP) by the PID the launcher wrote.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from coordinator_server.bench.processes import free_port

LOOPBACK = "127.0.0.1"
RUN_SH = Path(__file__).resolve().parents[1] / "deploy" / "kafka" / "run.sh"
SASL_USERNAME = "coordinator"
SASL_PASSWORD = "coordinator-secret"


# Maven fetches Kafka's jars (~45 MB) on a machine's first start: minutes on a slow network.
FETCH_TIMEOUT_S = 900.0

_fetched = False
_fetch_lock = threading.Lock()

# The SASL_SSL listener's CA and certificate, made by the first broker and copied to every later
# one: the launcher makes them with eight runs of keytool, each a JVM start (about 4 s of a
# broker's start on a 2-core machine). One CA for every test broker is all the tests need.
_tls_template: Path | None = None


class ApacheKafkaStartError(RuntimeError):
    pass


def fetch_apache_kafka(timeout_s: float = FETCH_TIMEOUT_S) -> None:
    """Fetch Kafka's jars into the launcher's cache unless there already, once per process:
    a broker's start-up timeout then bounds the start alone, not a download."""
    global _fetched
    with _fetch_lock:
        if _fetched:
            return
        try:
            completed = subprocess.run(
                ["bash", str(RUN_SH), "--fetch-only"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as expired:
            raise ApacheKafkaStartError(
                f"fetching Apache Kafka's jars took over {timeout_s:.0f} s"
            ) from expired
        if completed.returncode != 0:
            raise ApacheKafkaStartError(
                "fetching Apache Kafka's jars failed (Java 17 and Maven, and Maven Central, are"
                " needed):\n" + (completed.stdout + completed.stderr)[-6000:]
            )
        _fetched = True


def _keep_tls_template(tls: Path) -> None:
    global _tls_template
    if _tls_template is not None:
        return
    template = Path(tempfile.mkdtemp(prefix="apache-kafka-tls-")) / "tls"
    shutil.copytree(tls, template)
    atexit.register(shutil.rmtree, template.parent, ignore_errors=True)
    _tls_template = template


class ApacheKafkaBroker:
    """`start()` returns once the broker says it started (the launcher's `ready` line);
    `stop()` is idempotent and escalates from SIGTERM to SIGKILL. Usable as a (synchronous)
    context manager. `config` adds broker settings (`--config KEY=VALUE`)."""

    def __init__(
        self,
        *,
        config: Mapping[str, str] | None = None,
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 20.0,
        ssl_listener: bool = False,
        sasl_plaintext_listener: bool = False,
    ) -> None:
        """`ssl_listener`: also an SSL listener that requires a client certificate
        (`client_certificate`, `client_key`); `sasl_plaintext_listener`: also SASL without
        TLS, for the same user."""
        self._config = dict(config or {})
        self._ssl_port: int | None = free_port() if ssl_listener else None
        self._sasl_plaintext_port: int | None = free_port() if sasl_plaintext_listener else None
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._dir: Path | None = None
        self._process: subprocess.Popen[str] | None = None
        self._port: int | None = None
        self._sasl_ssl_port: int | None = None
        self._output: list[str] = []
        self._ready = threading.Event()
        self._pump_thread: threading.Thread | None = None
        self.startup_s = 0.0

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("broker not started")
        return self._port

    @property
    def sasl_ssl_bootstrap(self) -> str:
        if self._sasl_ssl_port is None:
            raise RuntimeError("broker not started")
        return f"{LOOPBACK}:{self._sasl_ssl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        if self._ssl_port is None:
            raise RuntimeError("no SSL listener")
        return f"{LOOPBACK}:{self._ssl_port}"

    @property
    def sasl_plaintext_bootstrap(self) -> str:
        if self._sasl_plaintext_port is None:
            raise RuntimeError("no SASL_PLAINTEXT listener")
        return f"{LOOPBACK}:{self._sasl_plaintext_port}"

    @property
    def client_certificate(self) -> Path:
        """The SSL listener's client certificate (PEM), signed by `ca_file`'s CA."""
        if self._dir is None:
            raise RuntimeError("broker not started")
        return self._dir / "tls" / "client.pem"

    @property
    def client_key(self) -> Path:
        if self._dir is None:
            raise RuntimeError("broker not started")
        return self._dir / "tls" / "client.key"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the SASL_SSL listener's certificate."""
        if self._dir is None:
            raise RuntimeError("broker not started")
        return self._dir / "tls" / "ca.pem"

    @property
    def sasl_username(self) -> str:
        return SASL_USERNAME

    @property
    def sasl_password(self) -> str:
        return SASL_PASSWORD

    @property
    def pid(self) -> int:
        """The JVM's PID (not the launcher's)."""
        if self._dir is None:
            raise RuntimeError("broker not started")
        return int((self._dir / "broker.pid").read_text())

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def output(self) -> str:
        return "".join(self._output)

    def start(self) -> ApacheKafkaBroker:
        if self._process is not None:
            raise RuntimeError("broker already started")
        fetch_apache_kafka()
        self._dir = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
        self._port = free_port()
        self._sasl_ssl_port = free_port()
        if _tls_template is not None:
            shutil.copytree(_tls_template, self._dir / "tls")
        self._launch()
        _keep_tls_template(self._dir / "tls")
        return self

    def _launch(self) -> None:
        assert self._dir is not None and self._port is not None
        args = [
            "bash",
            str(RUN_SH),
            "--port",
            str(self._port),
            "--sasl-ssl-port",
            str(self._sasl_ssl_port),
            "--dir",
            str(self._dir),
            "--sasl-user",
            SASL_USERNAME,
            "--sasl-password",
            SASL_PASSWORD,
        ]
        if self._ssl_port is not None:
            args += ["--ssl-port", str(self._ssl_port)]
        if self._sasl_plaintext_port is not None:
            args += ["--sasl-plaintext-port", str(self._sasl_plaintext_port)]
        for key, value in self._config.items():
            args += ["--config", f"{key}={value}"]
        self._output = []
        self._ready.clear()
        started = time.monotonic()
        self._process = process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._pump_thread = threading.Thread(target=self._pump, args=(process,), daemon=True)
        self._pump_thread.start()
        deadline = started + self._startup_timeout_s
        while not self._ready.wait(0.1):
            if process.poll() is not None or time.monotonic() > deadline:
                self._terminate()
                raise ApacheKafkaStartError(
                    "Apache Kafka did not start; its output:\n" + self.output()[-6000:]
                )
        self.startup_s = time.monotonic() - started

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._output.append(line)
            if len(self._output) > 2000:
                del self._output[:1000]
            if " ready on " in line:
                self._ready.set()

    def pause(self) -> None:
        """SIGSTOP: the broker holds its connections and answers nothing. Returns once every
        thread of the JVM has stopped: a signal to another process takes effect a moment
        later, and a request sent meanwhile could still be answered."""
        pid = self.pid
        os.kill(pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{pid}/task")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = []
            for task in tasks.iterdir():
                with contextlib.suppress(OSError):
                    # The state follows the command name, which is in parentheses.
                    states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            if states and all(state in ("T", "t") for state in states):
                return
            time.sleep(0.005)
        raise ApacheKafkaStartError(f"the broker (pid {pid}) did not stop")

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Stop the broker and start it again on the same ports with its data."""
        self._terminate()
        self._launch()

    def restart_empty(self) -> None:
        """Stop the broker, forget its data and start it again on the same ports: the
        cluster comes back with no topics, as one that lost its data would."""
        self._terminate()
        assert self._dir is not None
        shutil.rmtree(self._dir / "data", ignore_errors=True)
        self._launch()

    def stop(self) -> None:
        self._terminate()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            self._end(process)
        finally:
            if self._pump_thread is not None:
                self._pump_thread.join(10)
                self._pump_thread = None
            if process.stdout is not None:
                process.stdout.close()

    def _end(self, process: subprocess.Popen[str]) -> None:
        if process.poll() is not None:
            return
        # A paused broker would not act on SIGTERM.
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            os.kill(self.pid, signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=self._stop_timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                os.kill(self.pid, signal.SIGKILL)
            process.kill()
            process.wait(timeout=self._stop_timeout_s)

    def __enter__(self) -> ApacheKafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
