"""Apache Kafka run as a child process through the repository's `deploy/kafka/run.sh`: the
one launcher in Python, for the bench and the tests.

One KRaft node (broker and controller in one JVM) on 127.0.0.1, with a PLAINTEXT listener and,
unless told otherwise, a SASL_SSL one (a CA of its own in `ca_file`; PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 for `sasl_username`). It is stopped by the PID this class started, never by
name; `pause` stops the JVM itself (SIGSTOP) by the PID the launcher wrote.

The launcher and Maven's project file that pins Kafka's version live in the repository, not
in the installed package: run from an install without the repository, `start` says so.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from coordinator_server.tools.bench.processes import LOOPBACK, free_port, pinned

# The repository's root when this package runs from a checkout (an editable install or
# PYTHONPATH); an installed copy has no deploy/ beside it.
REPOSITORY = Path(__file__).resolve().parents[3]
RUN_SH = REPOSITORY / "deploy" / "kafka" / "run.sh"
SASL_USERNAME = "coordinator"
SASL_PASSWORD = "coordinator-secret"
log = logging.getLogger(__name__)

# The launcher's line once clients can connect: "kafka 4.4.0 ready on 127.0.0.1:PORT in N ms".
READY = re.compile(r"kafka (?P<version>\S+) ready on ")

# Maven fetches Kafka's jars (~45 MB) on a machine's first start: minutes on a slow network.
FETCH_TIMEOUT_S = 900.0
# Starts on fresh ports after a port was taken before the broker bound it.
BIND_ATTEMPTS = 3

_fetched = False
_fetch_lock = threading.Lock()

# The SASL_SSL listener's CA and certificate, made by the first broker and copied to every later
# one: the launcher makes them with eight runs of keytool, each a JVM start (about 4 s of a
# broker's start on a 2-core machine). One CA for every broker of a process is all it needs.
_tls_template: Path | None = None


class ApacheKafkaStartError(RuntimeError):
    pass


def launcher(run_sh: Path | None = None) -> Path:
    """The repository's `deploy/kafka/run.sh`, or a clear error when it is not there."""
    path = RUN_SH if run_sh is None else run_sh
    if not path.is_file():
        raise ApacheKafkaStartError(
            f"starting Apache Kafka needs the repository's deploy/kafka/run.sh, not found at "
            f"{path}: this copy of coordinator_server was installed without its repository. "
            "Run it from a checkout of the repository, or give a running broker with "
            "--bootstrap-servers (and the peer with --peer-bootstrap)"
        )
    return path


def fetch_apache_kafka(timeout_s: float = FETCH_TIMEOUT_S) -> None:
    """Fetch Kafka's jars into the launcher's cache unless there already, once per process:
    a broker's start-up timeout then bounds the start alone, not a download."""
    global _fetched
    with _fetch_lock:
        if _fetched:
            return
        try:
            completed = subprocess.run(
                ["bash", str(launcher()), "--fetch-only"],
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
    if _tls_template is not None or not tls.is_dir():
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
        sasl_ssl_listener: bool = True,
        ssl_listener: bool = False,
        sasl_plaintext_listener: bool = False,
        cpu: int | None = None,
        heap: str | None = None,
        sasl_username: str = SASL_USERNAME,
        sasl_password: str = SASL_PASSWORD,
    ) -> None:
        """`sasl_ssl_listener`: a SASL_SSL listener beside the PLAINTEXT one (its certificates
        cost a start some seconds of keytool the first time); `ssl_listener`: also an SSL
        listener that requires a client certificate (`client_certificate`, `client_key`);
        `sasl_plaintext_listener`: also SASL without TLS, for the same user. `cpu`: the one
        CPU the broker runs on (taskset; its JVM then sizes its threads for one CPU);
        `heap`: the JVM's heap (the launcher's default otherwise). `sasl_username` and
        `sasl_password`: the SASL listeners' user (PLAIN, and SCRAM credentials added when
        the storage is formatted)."""
        self._config = dict(config or {})
        self._sasl_username = sasl_username
        self._sasl_password = sasl_password
        self._with_sasl_ssl = sasl_ssl_listener
        self._ssl_port: int | None = free_port() if ssl_listener else None
        self._sasl_plaintext_port: int | None = free_port() if sasl_plaintext_listener else None
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self.cpu = cpu
        self._heap = heap
        self._dir: Path | None = None
        self._process: subprocess.Popen[str] | None = None
        self._port: int | None = None
        self._sasl_ssl_port: int | None = None
        self._output: list[str] = []
        self._ready = threading.Event()
        self._pump_thread: threading.Thread | None = None
        self.startup_s = 0.0
        # Kafka's version, from the ready line.
        self.version = ""

    @property
    def coordinator_args(self) -> list[str]:
        """What `coordinator-server serve` needs besides the bootstrap servers (nothing:
        Apache Kafka has all a cluster of coordinators needs)."""
        return []

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
            raise RuntimeError("broker not started, or started without a SASL_SSL listener")
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
        return self._sasl_username

    @property
    def sasl_password(self) -> str:
        return self._sasl_password

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
        # The ports were free a moment before the broker binds them: another process (a
        # broker or server started beside this one) may take one first. Then the broker
        # starts again on other ports.
        for attempt in range(1, BIND_ATTEMPTS + 1):
            self._dir = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
            self._port = free_port()
            if self._with_sasl_ssl:
                self._sasl_ssl_port = free_port()
            if attempt > 1:
                self._ssl_port = free_port() if self._ssl_port is not None else None
                if self._sasl_plaintext_port is not None:
                    self._sasl_plaintext_port = free_port()
            if _tls_template is not None and self._with_tls:
                shutil.copytree(_tls_template, self._dir / "tls")
            try:
                self._launch()
            except ApacheKafkaStartError as error:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
                if attempt == BIND_ATTEMPTS or "Address already in use" not in str(error):
                    raise
                log.warning("Apache Kafka: a port was taken before it bound it; again")
                continue
            except BaseException:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
                raise
            break
        assert self._dir is not None
        _keep_tls_template(self._dir / "tls")
        return self

    @property
    def _with_tls(self) -> bool:
        return self._with_sasl_ssl or self._ssl_port is not None

    def _launch(self) -> None:
        assert self._dir is not None and self._port is not None
        args = [
            "bash",
            str(launcher()),
            "--port",
            str(self._port),
            "--dir",
            str(self._dir),
        ]
        if self._sasl_ssl_port is not None:
            args += ["--sasl-ssl-port", str(self._sasl_ssl_port)]
        if self._with_sasl_ssl or self._sasl_plaintext_port is not None:
            args += ["--sasl-user", self._sasl_username, "--sasl-password", self._sasl_password]
        if self._ssl_port is not None:
            args += ["--ssl-port", str(self._ssl_port)]
        if self._sasl_plaintext_port is not None:
            args += ["--sasl-plaintext-port", str(self._sasl_plaintext_port)]
        if self._heap is not None:
            args += ["--heap", self._heap]
        for key, value in self._config.items():
            args += ["--config", f"{key}={value}"]
        self._output = []
        self._ready.clear()
        started = time.monotonic()
        # Pinned through taskset, the launcher's children (keytool, the storage tool and the
        # broker's JVM) inherit the CPU.
        self._process = process = subprocess.Popen(
            pinned(args, self.cpu),
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
            ready = READY.search(line)
            if ready is not None:
                self.version = ready["version"]
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

    def restart(self, config: Mapping[str, str] | None = None) -> None:
        """Stop the broker and start it again on the same ports with its data, and with
        `config`'s settings changed (a user's password, a listener's option)."""
        self._config.update(config or {})
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
