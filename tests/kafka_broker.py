"""What the tests need of a Kafka-protocol broker they start, whichever broker it is.

Apache Kafka (`apache_kafka.ApacheKafkaBroker`, the `kafka_broker` fixtures) is the broker
the tests run against; tansu (`tansu_broker.TansuBroker`, the `tansu_broker` fixtures) keeps
the log working with Kafka-protocol brokers that are not Apache Kafka. Tests written against
`KafkaBroker` run on either.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Protocol

from aiokafka.admin import AIOKafkaAdminClient

# Tests take ports from here as well; the bench starts its brokers with the same helpers.
from coordinator_server.tools.bench.processes import free_port, port_accepts_connections

__all__ = [
    "BrokerThrottle",
    "KafkaBroker",
    "cluster_topics",
    "free_port",
    "port_accepts_connections",
]


class KafkaBroker(Protocol):
    """One broker process on 127.0.0.1, started and stopped by the test's fixture."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def pid(self) -> int:
        """The process that serves (for Apache Kafka the JVM, not its launcher)."""
        ...

    @property
    def coordinator_args(self) -> list[str]:
        """What `coordinator-server serve` needs besides the bootstrap servers to use this
        broker for its log (a broker without transactions: `--cluster off`)."""
        ...

    @property
    def running(self) -> bool: ...

    def pause(self) -> None:
        """SIGSTOP: the broker holds its connections and answers nothing."""

    def resume(self) -> None: ...

    def restart_empty(self) -> None:
        """The broker comes back on the same port with no topics, as a cluster that lost
        its data would."""

    def stop(self) -> None: ...


class BrokerThrottle:
    """A slow broker without a proxy: a thread stops the broker for `stopped_fraction` of
    every `period_s` (SIGSTOP, then SIGCONT), until stopped. The broker is left running."""

    def __init__(self, broker: KafkaBroker, stopped_fraction: float, period_s: float) -> None:
        if not 0 <= stopped_fraction < 1:
            raise ValueError("stopped_fraction must be in [0, 1)")
        self._broker = broker
        self._stopped_s = period_s * stopped_fraction
        self._running_s = period_s - self._stopped_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._cycle, daemon=True)

    def _cycle(self) -> None:
        pid = self._broker.pid
        try:
            while not self._done.is_set():
                os.kill(pid, signal.SIGSTOP)
                self._done.wait(self._stopped_s)
                os.kill(pid, signal.SIGCONT)
                self._done.wait(self._running_s)
        except ProcessLookupError:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def __enter__(self) -> BrokerThrottle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)


async def cluster_topics(bootstrap: str) -> set[str]:
    """The cluster's topics, asked for without naming one (which creates none): how the tests
    that a topic was not created look."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()
