"""`bench --security`: what authentication and authorization cost each side, measured in
the same run as the same scenarios without them.

`none` is the bench as it always ran: PLAINTEXT listeners, no authorizer. `scram-acls` runs
each side as a tenant of a shared cluster would meet it:

- ours: a second `coordinator-server serve` (a log topic of its own on the same broker) with
  a SASL_PLAINTEXT listener, SCRAM-SHA-512 for the users whose credentials its log keeps and
  PLAIN for an administrator listed in a users file the bench writes, `--authorizer acls`
  and `--super-users User:admin`. As the administrator, the bench gives `User:bench` a
  SCRAM-SHA-512 credential (AlterUserScramCredentials) and the tenant's ACLs (CreateAcls).
  The broker holding the log stays PLAINTEXT: the log is not what is measured.
- the peer: a second Apache Kafka broker with a SASL_PLAINTEXT listener for clients
  (SCRAM-SHA-512; `User:bench`'s credential added when its storage is formatted) and KRaft's
  StandardAuthorizer. Its super user is `User:ANONYMOUS`, the principal of its PLAINTEXT
  listener, which the broker and its controller use between themselves and the bench uses to
  create the same ACLs (and the benchmark's topic).

On both sides the load then logs in as `User:bench` with SCRAM-SHA-512. It is not a super
user: a super user skips the ACLs, and the ACLs' evaluation is what is measured. The
passwords are made for each run and never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Final

from coordinator_client import ClientSecurity, CoordinatorClient
from coordinator_client.rpc.sasl import scram_upsertion
from coordinator_client.rpc.security import Password
from coordinator_protocol.errors import (
    ApiError,
    ErrorCode,
    SaslAuthenticationFailedError,
    error_for_code,
)
from coordinator_protocol.messages import OffsetFetchRequest, OffsetFetchRequestGroup
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreateAclsRequestCreation,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequestUser,
)
from coordinator_server.authorizer.acls import (
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator_server.tools.bench.targets import TOPIC, parse_address

NONE: Final = "none"
SCRAM_ACLS: Final = "scram-acls"
MODES: Final = (NONE, SCRAM_ACLS)
MECHANISM: Final = "SCRAM-SHA-512"
BENCH_USER: Final = "bench"
ADMIN_USER: Final = "admin"
# Every group the scenarios make and the key the peer's FindCoordinator asks for begin with
# it; so do the transactional ids of a tenant's producers.
RESOURCE_PREFIX: Final = "bench"
# The scenarios `scram-acls` covers: those of the group coordinator, on both sides.
SCENARIOS: Final = frozenset({"commits", "heartbeats", "rebalance"})
# Kafka's authorizer, and its super user: the principal of the broker's PLAINTEXT listener.
KAFKA_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
KAFKA_SUPER_USER: Final = "User:ANONYMOUS"
# How long a side may take to show the ACLs and the credential it was given.
SETUP_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True)
class TenantAcl:
    """An ALLOW ACL of `User:bench` from any host."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    operation: AclOperation

    def __str__(self) -> str:
        return (
            f"{self.resource_type.name.title().replace('_', '')}:{self.pattern.name}:"
            f"{self.name} {self.operation.name}"
        )


# What a tenant running consumer groups and transactional producers is given, the same on
# both sides: READ on its groups (DESCRIBE implied: FindCoordinator, DescribeGroups), READ
# on the topic it commits offsets of, and for its transactional producers WRITE on their
# transactional ids and on the topic they write to. None is needed for the idempotent
# producer's Cluster IDEMPOTENT_WRITE: the scenarios have no idempotent producer.
TENANT_ACLS: Final = (
    TenantAcl(ResourceType.GROUP, RESOURCE_PREFIX, PatternType.PREFIXED, AclOperation.READ),
    TenantAcl(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, AclOperation.READ),
    TenantAcl(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, AclOperation.WRITE),
    TenantAcl(
        ResourceType.TRANSACTIONAL_ID, RESOURCE_PREFIX, PatternType.PREFIXED, AclOperation.WRITE
    ),
)


def parse_modes(text: str) -> list[str]:
    """`--security`'s comma list, in its order, each once."""
    modes: list[str] = []
    for part in text.split(","):
        mode = part.strip()
        if mode not in MODES:
            raise argparse.ArgumentTypeError(
                f"{mode!r} is not a security ({', '.join(MODES)}, or a comma list of them)"
            )
        if mode not in modes:
            modes.append(mode)
    if not modes:
        raise argparse.ArgumentTypeError(f"name a security: {', '.join(MODES)}")
    return modes


def check_args(args: argparse.Namespace, scenarios: Sequence[str]) -> None:
    """Refuse, before anything starts, what `scram-acls` cannot measure."""
    if SCRAM_ACLS not in (getattr(args, "security", None) or [NONE]):
        return
    refusal = None
    others = sorted(set(scenarios) - SCENARIOS)
    if others:
        refusal = (
            f"secures the group scenarios ({', '.join(sorted(SCENARIOS))}), not {', '.join(others)}"
        )
    elif args.nodes > 1:
        refusal = "measures one node: leave out --nodes"
    elif args.bootstrap is not None:
        refusal = (
            "secures the server it starts: leave out --bootstrap (a running server's "
            "credentials go in --command-config)"
        )
    elif getattr(args, "command_config", None) is not None:
        refusal = "logs in as User:bench itself: leave out --command-config"
    elif args.peer_bootstrap is not None:
        refusal = "secures the peer broker it starts: leave out --peer-bootstrap"
    elif args.peer and args.bootstrap_servers is not None:
        refusal = "secures the peer broker it starts: leave out --bootstrap-servers"
    elif args.peer and args.broker != "kafka":
        refusal = "compares with Apache Kafka's authorizer: --broker kafka"
    if refusal is not None:
        raise SystemExit(f"bench: --security {SCRAM_ACLS} {refusal}")


@dataclass(frozen=True)
class BenchCredentials:
    """The run's passwords: made here, never printed."""

    bench_password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    # One ClientSecurity for every connection of the load: its SCRAM exchanges share the
    # salted password, derived once.
    @cached_property
    def bench(self) -> ClientSecurity:
        """How the load logs in: SCRAM-SHA-512 as User:bench."""
        return ClientSecurity(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=MECHANISM,
            sasl_username=BENCH_USER,
            sasl_password=Password(self.bench_password),
        )

    @cached_property
    def admin(self) -> ClientSecurity:
        """How the bench sets our server up: PLAIN as User:admin, a super user."""
        return ClientSecurity(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_username=ADMIN_USER,
            sasl_password=Password(self.admin_password),
        )


def serve_args(directory: Path, credentials: BenchCredentials) -> list[str]:
    """`serve`'s listener and authorizer settings, with the administrator's PLAIN users file
    written in `directory` (readable by its owner alone)."""
    users = directory / "plain-users"
    users.touch(mode=0o600)
    users.write_text(f"{ADMIN_USER}:{credentials.admin_password}\n", encoding="utf-8")
    return [
        "--listener-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", f"PLAIN,{MECHANISM}",
        "--sasl-plain-users-file", str(users),
        "--authorizer", "acls",
        "--super-users", f"User:{ADMIN_USER}",
    ]  # fmt: skip


def peer_broker_config() -> dict[str, str]:
    """The peer broker's authorizer and super users (`brokers.SaslListener.config`)."""
    return {"authorizer.class.name": KAFKA_AUTHORIZER, "super.users": KAFKA_SUPER_USER}


def describe(mode: str, peer: str | None) -> dict[str, str]:
    """What each side runs with under `mode`, for the report; `peer` is whose coordinator
    the peer is (None: no peer)."""
    acls = "; ".join(str(acl) for acl in TENANT_ACLS)
    if mode == NONE:
        sides = {"ours": "PLAINTEXT listener, no authorizer"}
        if peer is not None:
            sides["peer"] = "PLAINTEXT listener, no authorizer"
        return sides
    sides = {
        "ours": f"SASL_PLAINTEXT listener, {MECHANISM} as User:{BENCH_USER} (not a super "
        f"user), --authorizer acls with User:{BENCH_USER}'s ACLs ({acls}); the broker holding "
        "its log PLAINTEXT (not measured)"
    }
    if peer is not None:
        sides["peer"] = (
            f"{peer}: SASL_PLAINTEXT listener, {MECHANISM} as User:{BENCH_USER}, "
            f"StandardAuthorizer with the same ACLs; super.users {KAFKA_SUPER_USER} (its "
            "PLAINTEXT listener, between the broker and its controller, and the set-up)"
        )
    return sides


async def set_up_ours(
    address: str, credentials: BenchCredentials, timeout_s: float = SETUP_TIMEOUT_S
) -> None:
    """As the administrator: User:bench's SCRAM credential and the tenant's ACLs; returns
    once User:bench logs in and is let into its groups."""
    async with CoordinatorClient(
        address,
        security=credentials.admin,
        client_id="bench-setup",
        request_timeout_ms=int(timeout_s * 1000),
    ) as client:
        altered = await client.alter_user_scram_credentials(
            AlterUserScramCredentialsRequest(
                upsertions=[scram_upsertion(BENCH_USER, MECHANISM, credentials.bench_password)]
            )
        )
        for result in altered.results:
            _raise(result.error_code, result.error_message, f"user {result.user}")
        created = await client.create_acls(
            CreateAclsRequest(
                creations=[
                    CreateAclsRequestCreation(
                        resource_type=acl.resource_type,
                        resource_name=acl.name,
                        resource_pattern_type=acl.pattern,
                        principal=f"User:{BENCH_USER}",
                        host=WILDCARD,
                        operation=acl.operation,
                        permission_type=AclPermissionType.ALLOW,
                    )
                    for acl in TENANT_ACLS
                ]
            )
        )
        for acl, outcome in zip(TENANT_ACLS, created.results, strict=True):
            _raise(outcome.error_code, outcome.error_message, f"ACL {acl}")
        # The credential and the ACLs are state the server applies once its log has them,
        # a moment after it answers: the credential first, so that User:bench's first login
        # does not fail (and say so).
        deadline = time.monotonic() + timeout_s
        wanted = DescribeUserScramCredentialsRequest(
            users=[DescribeUserScramCredentialsRequestUser(name=BENCH_USER)]
        )
        while True:
            described = await client.describe_user_scram_credentials(wanted)
            if all(result.error_code == ErrorCode.NONE for result in described.results):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{address} never showed User:{BENCH_USER}'s credential")
            await asyncio.sleep(0.05)
    await _until_let_in(address, credentials, deadline)


async def _until_let_in(address: str, credentials: BenchCredentials, deadline: float) -> None:
    """Ask as User:bench until it is let into its groups (the ACLs applied)."""
    request = OffsetFetchRequest(
        groups=[OffsetFetchRequestGroup(group_id=f"{RESOURCE_PREFIX}-setup", topics=None)]
    )
    while True:
        try:
            async with CoordinatorClient(
                address, security=credentials.bench, client_id="bench-setup"
            ) as client:
                await client.offset_fetch(request)
            return
        except (ApiError, SaslAuthenticationFailedError) as error:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"User:{BENCH_USER} is still not let into {address}: {error}"
                ) from error
            await asyncio.sleep(0.1)


async def set_up_peer(admin_address: str, timeout_s: float = SETUP_TIMEOUT_S) -> None:
    """The tenant's ACLs on a Kafka broker, created through its PLAINTEXT listener (its own
    principal, a super user); returns once the broker's authorizer has them all."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.admin import CreateAclsRequest as KafkaCreateAcls
    from aiokafka.protocol.admin import DescribeAclsRequest as KafkaDescribeAcls

    host, port = parse_address(admin_address)
    principal = f"User:{BENCH_USER}"
    connection = await create_conn(
        host, port, client_id="bench-setup", request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        for acl in TENANT_ACLS:
            answer = await connection.send(
                KafkaCreateAcls(
                    acl.resource_type,
                    acl.name,
                    acl.pattern,
                    principal,
                    WILDCARD,
                    acl.operation,
                    AclPermissionType.ALLOW,
                )
            )
            for code, message in answer.creation_responses:
                _raise(code, message, f"ACL {acl} on {admin_address}")
        # The controller takes the ACLs; the broker's authorizer has them once its metadata
        # does, a moment later.
        deadline = time.monotonic() + timeout_s
        while True:
            described = await connection.send(
                KafkaDescribeAcls(
                    ResourceType.ANY,
                    None,
                    PatternType.ANY,
                    principal,
                    None,
                    AclOperation.ANY,
                    AclPermissionType.ANY,
                )
            )
            _raise(described.error_code, described.error_message, f"ACLs on {admin_address}")
            found = sum(len(resource[-1]) for resource in described.resources)
            if found >= len(TENANT_ACLS):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{admin_address} shows {found} of User:{BENCH_USER}'s "
                    f"{len(TENANT_ACLS)} ACLs after {timeout_s:.0f} s"
                )
            await asyncio.sleep(0.05)
    finally:
        connection.close()


def _raise(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.NONE:
        raise error_for_code(code, f"{what}: {message or ErrorCode(code).description}")
