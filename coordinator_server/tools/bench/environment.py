"""What a benchmark measures and on what CPU budget: the brokers and the server it starts (or
is given), and the peer.

The CPU budget. Our server and the broker holding its log run on one core (`--server-cpu`);
the load generator runs on another. With `--peer`, the peer is the group coordinator inside a
broker of the same kind, configured as ours is, started as a second broker process on that
same core. The targets are measured in turns, so each has the core alone while it is
measured: our server and its broker while ours runs, the peer's broker while the peer runs
(the idle processes' CPU time is reported as `others_cpu_us`). A second broker rather than the
log's broker used in turns keeps the peer's broker from holding our log: its cleaner, its
segments and its page cache stay out of the peer's figures, and its JVM warms up on the
peer's work alone. A broker given with `--bootstrap-servers` serves both, in turns.

With `--security scram-acls` (see `security.py`) a second server of ours (a log topic of its
own on the same broker) and a second peer broker run secured beside the others, on the same
core, and are measured in the same turns.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coordinator_client import ClientSecurity
from coordinator_server.storage.kafka.security import KafkaSecurity
from coordinator_server.tools.bench.brokers import (
    BenchApacheKafka,
    BenchBroker,
    SaslListener,
    affinity,
    start_broker,
)
from coordinator_server.tools.bench.cluster import ClusterNodes
from coordinator_server.tools.bench.processes import ServerProcess, pin_self, repin
from coordinator_server.tools.bench.security import (
    BENCH_USER,
    NONE,
    SCRAM_ACLS,
    BenchCredentials,
    peer_broker_config,
    serve_args,
    set_up_ours,
    set_up_peer,
)
from coordinator_server.tools.kafka_options import kafka_security_from_args, serve_settings

# The scenarios that drive a running server (and the peer); `load` starts servers of its own.
TARGET_SCENARIOS = frozenset({"commits", "heartbeats", "rebalance", "transactions"})
# The scenarios whose peer is a group coordinator (in a broker of its own with `--peer`);
# the transactions' peer is the transaction coordinator of the broker holding our log.
GROUP_SCENARIOS = frozenset({"commits", "heartbeats", "rebalance"})


class Environment:
    """The broker, our server and the peer a run uses, started here or given."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cpu = None if args.no_pin else args.server_cpu
        self.broker_kind: str = getattr(args, "broker", "kafka")
        self.broker_heap: str = getattr(args, "broker_heap", "1g")
        self.broker: BenchBroker | None = None
        self.peer_broker: BenchBroker | None = None
        self.server: ServerProcess | None = None
        # The clusters of the scale figures (`--nodes`), by name, while their phases run.
        self.clusters: dict[str, ClusterNodes] = {}
        self.bootstrap_servers: str | None = args.bootstrap_servers
        self.ours_address: str | None = args.bootstrap
        self.peer_address: str | None = args.peer_bootstrap
        # Which of the peer's coordinators a scenario measures, for the report.
        self.peer_coordinator = "group coordinator"
        # Our server serves transactions (`--transactions on`: it refuses to start when the
        # Kafka cluster cannot take its markers).
        self.transactions = getattr(args, "scenario", None) == "transactions"
        # What was started, for the report: role, what, pid, CPUs, seconds to start.
        self.started: list[dict[str, Any]] = []
        self.security = _kafka_security(args)
        # How the bench's connections to our server are secured (`--command-config`, read
        # by `bench.main`); the servers it starts take their listener's settings through
        # --server-arg.
        self.coordinator_security: ClientSecurity | None = getattr(
            args, "coordinator_security", None
        )
        self._security_args, security_environment = serve_settings(self.security)
        # `--security`: the modes measured; for `scram-acls` the run's passwords, and the
        # secured server and peer broker (each started on first use and set up once).
        self.security_modes: list[str] = list(getattr(args, "security", None) or [NONE])
        self.credentials = BenchCredentials() if SCRAM_ACLS in self.security_modes else None
        self.secured_server: ServerProcess | None = None
        self.secured_peer_broker: BenchApacheKafka | None = None
        self._secured_dir: Path | None = None
        self._secured_ours_address: str | None = None
        self._secured_peer_set_up = False
        # The servers started here read the passwords from their environment, as inherited.
        os.environ.update(security_environment)
        if security_environment:
            os.environ.pop("COORDINATOR_KAFKA_SASL_PASSWORD_FILE", None)

    def _start_broker(self, role: str) -> BenchBroker:
        broker = start_broker(
            self.broker_kind, self.cpu, self.args.offsets_topic_partitions, self.broker_heap
        )
        self._record(role, broker.description, broker.pid, broker.startup_s)
        return broker

    def _record(self, role: str, what: str, pid: int, startup_s: float) -> None:
        self.started.append(
            {
                "role": role,
                "what": what,
                "pid": pid,
                "cpus": affinity(pid),
                "startup_s": round(startup_s, 2),
            }
        )

    def prepare(self, scenarios: list[str]) -> None:
        """Start the brokers the scenarios will drive, side by side (two JVM starts overlap
        what they wait on)."""
        if not TARGET_SCENARIOS.intersection(scenarios):
            return
        starts: list[Callable[[], object]] = []
        if self.ours_address is None and self.bootstrap_servers is None:
            starts.append(self.kafka)
        if self._peer_needs_broker() and GROUP_SCENARIOS.intersection(scenarios):
            if NONE in self.security_modes:
                starts.append(self.peer)
            if SCRAM_ACLS in self.security_modes:
                starts.append(self._secured_peer_broker)
        if len(starts) < 2:
            for start in starts:
                start()
            return
        with concurrent.futures.ThreadPoolExecutor(len(starts)) as pool:
            for future in [pool.submit(start) for start in starts]:
                future.result()

    def kafka(self) -> str:
        """The bootstrap servers of the broker holding our log (started on first use)."""
        if self.bootstrap_servers is None:
            self.broker = self._start_broker("log broker")
            self.bootstrap_servers = self.broker.bootstrap
        return self.bootstrap_servers

    @contextlib.contextmanager
    def broker_of_its_own(self) -> Iterator[str]:
        """A broker for one scenario alone, when the bench starts its brokers; the given
        one otherwise."""
        if self.args.bootstrap_servers is not None:
            yield self.args.bootstrap_servers
            return
        broker = self._start_broker("load broker")
        try:
            yield broker.bootstrap
        finally:
            broker.stop()

    def server_args(
        self, topic: str | None = None, bootstrap_servers: str | None = None
    ) -> list[str]:
        args = [
            "--bootstrap-servers",
            bootstrap_servers or self.kafka(),
            "--offsets-topic-partitions",
            str(self.args.offsets_topic_partitions),
            "--offsets-topic-replication-factor",
            "1",
            "--group-initial-rebalance-delay-ms",
            "0",
            "--metrics-port",
            "-1",
        ]
        if topic is not None:
            args += ["--offsets-topic", topic]
        if self.args.broker == "tansu":
            # tansu has no transactions, so it cannot fence partitions to their owner: the
            # server writes its log alone.
            args += ["--cluster", "off"]
        return [*args, *self._security_args, *self.args.server_arg]

    def ours(self) -> str:
        if self.ours_address is None:
            server_args = self.server_args()
            if self.transactions:
                server_args += ["--transactions", "on"]
            self.server = ServerProcess(server_args, self.cpu).start()
            self._record(
                "server",
                "coordinator-server",
                self.server.pid,
                self.server.ready_at - self.server.started_at,
            )
            self.ours_address = self.server.bootstrap
        return self.ours_address

    # The sides under each `--security` mode.

    def client_security(self, mode: str) -> ClientSecurity | None:
        """How the load's connections to our server are secured under `mode`."""
        if mode == NONE:
            return self.coordinator_security
        assert self.credentials is not None
        return self.credentials.bench

    def peer_security(self, mode: str) -> ClientSecurity | None:
        """How the load's connections to the peer are secured under `mode`."""
        if mode == NONE:
            return None
        assert self.credentials is not None
        return self.credentials.bench

    async def ours_of(self, mode: str) -> str:
        """Our server's address under `mode`: for `scram-acls` a server of its own, started
        with a SASL listener and an authorizer and given User:bench's credential and ACLs."""
        if mode == NONE:
            return self.ours()
        if self._secured_ours_address is None:
            assert self.credentials is not None
            self._secured_dir = Path(tempfile.mkdtemp(prefix="coordinator-bench-security-"))
            topic = f"__coordinator_bench_secured_{os.getpid()}"
            server_args = [
                *self.server_args(topic),
                *serve_args(self._secured_dir, self.credentials),
            ]
            self.secured_server = server = ServerProcess(server_args, self.cpu).start()
            self._record(
                "secured server",
                "coordinator-server (SASL_PLAINTEXT, --authorizer acls)",
                server.pid,
                server.ready_at - server.started_at,
            )
            await set_up_ours(server.bootstrap, self.credentials)
            self._secured_ours_address = server.bootstrap
        return self._secured_ours_address

    def _secured_peer_broker(self) -> BenchApacheKafka:
        if self.secured_peer_broker is None:
            assert self.credentials is not None
            sasl = SaslListener(BENCH_USER, self.credentials.bench_password, peer_broker_config())
            broker = BenchApacheKafka(
                self.cpu, self.args.offsets_topic_partitions, self.broker_heap, sasl
            ).start()
            self._record(
                "secured peer broker",
                f"{broker.description} (SASL_PLAINTEXT, StandardAuthorizer)",
                broker.pid,
                broker.startup_s,
            )
            self.secured_peer_broker = broker
        return self.secured_peer_broker

    async def peer_of(self, mode: str) -> str | None:
        """The peer's address under `mode` (None: no peer): for `scram-acls` the SASL
        listener of a broker of its own, given the same ACLs as ours."""
        if mode == NONE:
            return self.peer()
        # The secured peer is always a broker the bench starts (`security.check_args`).
        if not self.args.peer or self.args.bootstrap_servers is not None:
            return None
        broker = self._secured_peer_broker()
        if not self._secured_peer_set_up:
            await set_up_peer(broker.bootstrap)
            self._secured_peer_set_up = True
        return broker.sasl_bootstrap

    def peer_admin_address(self, mode: str) -> str | None:
        """Where the peer's own principal creates the benchmark's topic under `mode` (None:
        the peer's address)."""
        if mode == NONE or self.secured_peer_broker is None:
            return None
        return self.secured_peer_broker.bootstrap

    def has_peer(self) -> bool:
        return self.peer_address is not None or self.secured_peer_broker is not None

    def start_cluster(self, name: str, node_cpus: list[list[int]] | None) -> ClusterNodes:
        """The nodes of a cluster named `name` on a log topic of its own (none started yet),
        node i on `node_cpus[i - 1]` (None: anywhere)."""
        if self.broker_kind == "tansu" and self.args.bootstrap_servers is None:
            raise SystemExit(
                "bench: --nodes needs Kafka's transactions (each node fences its partitions "
                "with a transactional producer id): use --broker kafka"
            )
        topic = f"__coordinator_bench_cluster_{os.getpid()}_{len(self.clusters) + 1}"
        cpus: list[list[int] | None] = (
            [None] * self.args.nodes if node_cpus is None else list(node_cpus)
        )
        cluster = self.clusters[name] = ClusterNodes(
            self.server_args(topic),
            cpus,
            self.args.offsets_topic_partitions,
            workers=getattr(self.args, "workers", False),
        )
        return cluster

    def grow_cluster(self, name: str, count: int) -> None:
        """Start nodes of the cluster `name` until `count` run, each recorded as a started
        process ("<name>: node <id>")."""
        cluster = self.clusters[name]
        for node in cluster.grow(count):
            self._record(
                f"{name}: node {cluster.nodes.index(node) + 1}",
                "coordinator-server --cluster on"
                + (" (a worker of serve --workers)" if cluster.workers and count > 1 else ""),
                node.pid,
                node.ready_at - node.started_at,
            )

    def stop_clusters(self) -> None:
        while self.clusters:
            _, cluster = self.clusters.popitem()
            cluster.stop()

    def place_broker(self, cpus: list[int] | None) -> None:
        """Move the log's broker (every thread of it) to `cpus` for a phase of the scale
        figures; `restore_pins` puts it back."""
        if self.broker is not None and cpus is not None:
            repin(self.broker.pid, cpus)

    def restore_pins(self) -> None:
        """The broker on `--server-cpu` and this process on `--generator-cpu` again."""
        if self.cpu is None:
            return
        if self.broker is not None:
            repin(self.broker.pid, self.cpu)
        pin_self(self.args.generator_cpu)

    def _peer_needs_broker(self) -> bool:
        return self.args.peer and self.peer_address is None and self.args.bootstrap_servers is None

    def peer(self) -> str | None:
        """The peer's address: a broker of its own when the bench starts its brokers, the
        given broker's coordinator with `--bootstrap-servers`, or `--peer-bootstrap`."""
        if self.peer_address is None and self.args.peer:
            if self.args.bootstrap_servers is None:
                self.peer_broker = self._start_broker("peer broker")
                self.peer_address = self.peer_broker.bootstrap
            elif not self.security.is_plaintext:
                raise SystemExit(
                    "bench: the peer is measured over PLAINTEXT: give the broker's PLAINTEXT "
                    "listener with --peer-bootstrap instead of --peer"
                )
            else:
                self.peer_address = self.args.bootstrap_servers
        return self.peer_address

    def peer_description(self) -> str:
        """Whose group coordinator the peer is, for the report."""
        broker = self.peer_broker or self.secured_peer_broker
        if broker is not None:
            return f"{broker.description}'s {self.peer_coordinator}"
        if self.broker is not None and self.peer_address == self.broker.bootstrap:
            return f"{self.broker.description}'s {self.peer_coordinator}"
        return f"the {self.peer_coordinator} at {self.peer_address}"

    def peer_is_apache_kafka(self) -> bool:
        return self.peer_description().startswith("Apache Kafka")

    def pids(self) -> dict[str, int]:
        """The started processes that run while targets are measured, by role."""
        running: dict[str, int] = {}
        if self.server is not None:
            running["server"] = self.server.pid
        if self.broker is not None:
            running["broker"] = self.broker.pid
        if self.peer_broker is not None:
            running["peer broker"] = self.peer_broker.pid
        if self.secured_server is not None:
            running["secured server"] = self.secured_server.pid
        if self.secured_peer_broker is not None:
            running["secured peer broker"] = self.secured_peer_broker.pid
        for name, cluster in self.clusters.items():
            for i, node in enumerate(cluster.nodes):
                running[f"{name}: node {i + 1}"] = node.pid
        return running

    def close(self) -> None:
        self.stop_clusters()
        for server in (self.server, self.secured_server):
            if server is not None:
                server.stop()
        self.server = self.secured_server = None
        for broker in (self.broker, self.peer_broker, self.secured_peer_broker):
            if broker is not None:
                broker.stop()
        self.broker = self.peer_broker = self.secured_peer_broker = None
        if self._secured_dir is not None:
            shutil.rmtree(self._secured_dir, ignore_errors=True)
            self._secured_dir = None


def _kafka_security(args: argparse.Namespace) -> KafkaSecurity:
    try:
        security = kafka_security_from_args(args)
    except ValueError as error:
        raise SystemExit(f"bench: kafka security: {error}") from None
    if not security.is_plaintext and args.bootstrap_servers is None:
        raise SystemExit(
            f"bench: {security.security_protocol} needs --bootstrap-servers (the broker the "
            "bench starts takes PLAINTEXT only)"
        )
    return security
