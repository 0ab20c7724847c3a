"""What every admin command shares: the connection options, the clients of coordinator-server
and of the Kafka cluster, the first connection's check, and the output (tables, JSON)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TextIO

from coordinator_client import (
    ClientError,
    ClientSecurity,
    ClientSecurityError,
    CoordinatorClient,
    KafkaLogReader,
    build_ssl_context,
    read_properties_file,
)
from coordinator_client.rpc.connection import Connection
from coordinator_server.storage.kafka.sasl import KafkaConnector
from coordinator_server.storage.kafka.security import KafkaSecurity
from coordinator_server.tools.kafka_options import (
    add_kafka_security_options,
    kafka_security_from_args,
)

__all__ = [
    "BOOTSTRAP_SERVER_ENV",
    "KAFKA_BOOTSTRAP_SERVERS_ENV",
    "AdminError",
    "Context",
    "UsageError",
    "check_kafka",
    "check_reachable",
    "command_config",
    "connection_options",
    "coordinator_options",
    "kafka_cluster",
    "new_coordinator_client",
    "open_coordinator",
]

BOOTSTRAP_SERVER_ENV: Final = "COORDINATOR_BOOTSTRAP_SERVER"
KAFKA_BOOTSTRAP_SERVERS_ENV: Final = "COORDINATOR_KAFKA_BOOTSTRAP_SERVERS"
# How long the first connection to a bootstrap server may take before the tool gives up on
# it: a refused connection fails at once, an unanswered one (a host that drops packets) here,
# instead of being retried for the whole --timeout-ms.
CONNECT_CHECK_S: Final = 5.0


class AdminError(Exception):
    """A failure to report in one line, exit status 1."""


class UsageError(AdminError):
    """Options that do not go together, exit status 2."""


def configure_tool_logging(err: TextIO) -> None:
    """The tools' log: WARNING and above on `err`, without aiokafka's, which logs every retry
    while its failures reach the tools as exceptions."""
    logging.basicConfig(
        level=logging.WARNING, stream=err, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def connection_options() -> argparse.ArgumentParser:
    """The options of every admin sub-command: where coordinator-server and the Kafka cluster
    are, how to reach them, and the output's form (a parent parser)."""
    common = coordinator_options()
    common.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOST:PORT",
        help=f"the Kafka cluster [env {KAFKA_BOOTSTRAP_SERVERS_ENV}]",
    )
    add_kafka_security_options(common)
    return common


def coordinator_options() -> argparse.ArgumentParser:
    """The options of a command that talks to coordinator-server alone (`acls`, `users`):
    where it is, how to reach it, and the output's form (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="coordinator-server to connect to, host:port[,host:port] "
        f"[env {BOOTSTRAP_SERVER_ENV}]",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument(
        "--timeout-ms", type=int, default=30_000, help="bound of each request [default 30000]"
    )
    common.add_argument("--tls", action="store_true", help="connect with TLS (system CAs)")
    common.add_argument("--tls-cafile", help="CA certificates to verify the server with")
    common.add_argument("--tls-certfile", help="client certificate (PEM), for mutual TLS")
    common.add_argument("--tls-keyfile", help="key of --tls-certfile")
    common.add_argument("--tls-server-hostname", help="name to verify the certificate against")
    add_command_config_option(common)
    return common


def add_command_config_option(parser: argparse.ArgumentParser) -> None:
    """Kafka tools' `--command-config`: how the connections to coordinator-server are secured."""
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="a properties file of Kafka's client security settings for coordinator-server "
        "(security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*), as Kafka's tools take "
        "it; other client properties in it are ignored with a warning",
    )


def command_config(args: argparse.Namespace) -> ClientSecurity | None:
    """The security settings of `--command-config`, None without it.

    Raises:
        UsageError: the file cannot be read or its settings cannot be used (the message
            names the property, never a secret).
    """
    path = getattr(args, "command_config", None)
    if path is None:
        return None
    try:
        return ClientSecurity.from_properties(read_properties_file(path))
    except ClientSecurityError as error:
        raise UsageError(f"--command-config {path}: {error}") from None


def new_coordinator_client(args: argparse.Namespace, client_id: str) -> CoordinatorClient:
    """A client of the coordinator-server that `connection_options` name."""
    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_SERVER_ENV)
    if not bootstrap:
        raise AdminError(f"give --bootstrap-server or set {BOOTSTRAP_SERVER_ENV}")
    security = command_config(args)
    tls_options = [args.tls, args.tls_cafile, args.tls_certfile, args.tls_keyfile]
    if security is not None and any(tls_options):
        raise UsageError(
            "give TLS in --command-config (ssl.* properties) or with the --tls options, not both"
        )
    if security is not None:
        return CoordinatorClient(
            bootstrap,
            client_id=client_id,
            request_timeout_ms=args.timeout_ms,
            security=security,
            ssl_server_hostname=args.tls_server_hostname,
        )
    ssl_context = None
    if args.tls and not (args.tls_cafile or args.tls_certfile):
        ssl_context = build_ssl_context()
    return CoordinatorClient(
        bootstrap,
        client_id=client_id,
        request_timeout_ms=args.timeout_ms,
        ssl_context=ssl_context,
        ssl_cafile=args.tls_cafile,
        ssl_certfile=args.tls_certfile,
        ssl_keyfile=args.tls_keyfile,
        ssl_server_hostname=args.tls_server_hostname,
    )


async def check_reachable(client: CoordinatorClient, timeout_s: float) -> None:
    """Raise AdminError at once, naming each address and why, when no bootstrap server of
    `client` accepts a connection.

    The client retries a connection that fails (a server restarting, a node of a cluster
    moving) for its whole deadline; a person at a terminal who mistyped a port wants to know
    now. One that connects is closed again: the client opens its own on first use.
    """
    failures = []
    for host, port in client.bootstrap_servers:
        try:
            connection = await Connection.open(
                host,
                port,
                ssl_context=client.ssl_context,
                server_hostname=client.ssl_server_hostname,
                connect_timeout_s=timeout_s,
            )
        except ClientError as error:
            cause = error.__cause__
            if isinstance(cause, OSError):
                # "Connection refused", not asyncio's "Connect call failed (address)".
                failures.append(f"cannot connect to {host}:{port}: {_reason(cause)}")
            else:
                failures.append(str(error))
            continue
        connection.close()
        await connection.wait_closed()
        return
    raise AdminError("; ".join(failures))


async def check_kafka(
    bootstrap: str, security: KafkaSecurity, timeout_s: float, client_id: str
) -> KafkaConnector:
    """Connect to the Kafka cluster's bootstrap servers in turn (authenticated as `security`
    says) until one answers; raise AdminError naming the cluster and why none did, at once,
    rather than aiokafka's "Unable to bootstrap" without a cause. KafkaSecurityError (refused
    credentials, an untrusted certificate) passes as it is."""
    connector = KafkaConnector(security, client_id)
    try:
        await connector.check_bootstrap(bootstrap, timeout_s)
    except TimeoutError:
        raise AdminError(
            f"cannot connect to the Kafka cluster at {bootstrap}: no answer within {timeout_s:g} s"
        ) from None
    except OSError as error:
        raise AdminError(
            f"cannot connect to the Kafka cluster at {bootstrap}: {_reason(error)}"
        ) from None
    return connector


def _reason(error: OSError) -> str:
    """An OSError's cause in words: "Connection refused", "Name or service not known"."""
    if error.errno is not None and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or str(error)


@contextlib.asynccontextmanager
async def open_coordinator(
    args: argparse.Namespace, client_id: str
) -> AsyncIterator[CoordinatorClient]:
    """A client of coordinator-server, once a bootstrap server accepts a connection."""
    client = new_coordinator_client(args, client_id)
    async with client:
        await check_reachable(client, min(CONNECT_CHECK_S, args.timeout_ms / 1000))
        yield client


def kafka_cluster(args: argparse.Namespace) -> tuple[str | None, KafkaSecurity]:
    """The Kafka cluster that `connection_options` name (None: not given) and its security."""
    bootstrap = args.kafka_bootstrap_servers or os.environ.get(KAFKA_BOOTSTRAP_SERVERS_ENV)
    try:
        security = kafka_security_from_args(args)
    except ValueError as error:
        raise AdminError(f"kafka security: {error}") from None
    return bootstrap or None, security


@dataclass
class Context:
    """One run of a `groups` command: its options, output and clients."""

    args: argparse.Namespace
    out: TextIO
    err: TextIO
    client: CoordinatorClient
    kafka_bootstrap_servers: str | None
    kafka_security: KafkaSecurity
    prog: str

    @contextlib.asynccontextmanager
    async def kafka(self) -> AsyncIterator[KafkaLogReader]:
        bootstrap = self.kafka_bootstrap_servers
        if not bootstrap:
            raise AdminError(
                f"this needs the Kafka cluster: give --kafka-bootstrap-servers or set "
                f"{KAFKA_BOOTSTRAP_SERVERS_ENV}"
            )
        security = self.kafka_security
        timeout_s = min(CONNECT_CHECK_S, self.args.timeout_ms / 1000)
        connector = await check_kafka(bootstrap, security, timeout_s, "coordinator-server-groups")
        options = {}
        if not security.is_plaintext:
            options = security.aiokafka_options(connector.ssl_context)
        async with KafkaLogReader(bootstrap, timeout_ms=self.args.timeout_ms, **options) as reader:
            yield reader

    def emit(self, value: object) -> None:
        json.dump(value, self.out, indent=2, sort_keys=False)
        self.out.write("\n")

    def warn(self, message: str) -> None:
        print(f"{self.prog}: {message}", file=self.err)

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        cells = [[_cell(value) for value in row] for row in rows]
        widths = [len(header) for header in headers]
        for row in cells:
            widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
        for row in [list(headers), *cells]:
            line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            print(line.rstrip(), file=self.out)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
