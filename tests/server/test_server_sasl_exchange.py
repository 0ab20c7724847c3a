"""One connection's SASL exchange (`SaslExchange`) in Kafka's order, without sockets: what
may come before authentication, refusals, sessions and re-authentication (KIP-368)."""

from __future__ import annotations

import os

import pytest

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.security import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from coordinator_server.authentication.plain import PlainSaslServer, parse_plain_users
from coordinator_server.authentication.sasl_server import ScramCredential
from coordinator_server.authentication.scram import (
    ScramSaslServer,
    credential_from_password,
)
from coordinator_server.server.authentication import (
    ListenerSecurity,
    SaslExchange,
    SaslStepKind,
    SecurityProtocol,
)
from coordinator_server.storage.kafka.sasl import ScramClient

USERS = parse_plain_users("alice:alice-secret\nbob:bob-secret\n")


class Credentials:
    def __init__(self) -> None:
        self.by_user: dict[tuple[str, str], ScramCredential] = {}

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.by_user.get((user, mechanism))


def security(max_reauth_ms: int = 0, credentials: Credentials | None = None) -> ListenerSecurity:
    scram = credentials or Credentials()
    return ListenerSecurity(
        protocol=SecurityProtocol.SASL_PLAINTEXT,
        mechanisms={
            "PLAIN": lambda: PlainSaslServer(USERS),
            "SCRAM-SHA-256": lambda: ScramSaslServer("SCRAM-SHA-256", scram),
        },
        max_reauth_ms=max_reauth_ms,
    )


def plain(user: str, password: str) -> SaslAuthenticateRequest:
    return SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode())


def test_only_api_versions_before_the_handshake_and_nothing_but_sasl_after_it() -> None:
    exchange = SaslExchange(security())
    assert exchange.admits(ApiKey.API_VERSIONS)
    assert not exchange.admits(ApiKey.OFFSET_FETCH)
    assert not exchange.admits(ApiKey.JOIN_GROUP)
    step = exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    assert step.kind is SaslStepKind.ANSWER
    assert step.response == SaslHandshakeResponse(mechanisms=["PLAIN", "SCRAM-SHA-256"])
    # Kafka: after the handshake, only SaslAuthenticate.
    assert not exchange.admits(ApiKey.API_VERSIONS)
    assert exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN")).kind is SaslStepKind.CLOSE


def test_plain_authenticates_and_the_principal_is_the_user() -> None:
    exchange = SaslExchange(security())
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    step = exchange.authenticate(plain("alice", "alice-secret"), now=100.0)
    assert step.kind is SaslStepKind.ANSWER and step.authenticated
    assert step.response == SaslAuthenticateResponse(auth_bytes=b"", session_lifetime_ms=0)
    assert exchange.principal == "User:alice"
    assert exchange.admits(ApiKey.OFFSET_COMMIT)
    assert not exchange.expired(10**9)


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret"), ("alice", "")]
)
def test_a_wrong_password_or_unknown_user_is_refused_alike(user: str, password: str) -> None:
    exchange = SaslExchange(security())
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    step = exchange.authenticate(plain(user, password), now=0.0)
    assert step.kind is SaslStepKind.REFUSE
    assert isinstance(step.response, SaslAuthenticateResponse)
    assert step.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "alice-secret" not in (step.response.error_message or "")
    assert exchange.failed and not exchange.authenticated
    # Nothing more is taken from a refused client.
    assert exchange.authenticate(plain("alice", "alice-secret"), now=0.0).kind is (
        SaslStepKind.CLOSE
    )


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones() -> None:
    exchange = SaslExchange(security())
    step = exchange.handshake(SaslHandshakeRequest(mechanism="GSSAPI"))
    assert step.kind is SaslStepKind.REFUSE
    assert step.response == SaslHandshakeResponse(
        error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=["PLAIN", "SCRAM-SHA-256"]
    )


def test_authenticate_before_the_handshake_closes() -> None:
    exchange = SaslExchange(security())
    assert exchange.authenticate(plain("alice", "alice-secret"), now=0).kind is SaslStepKind.CLOSE


def test_scram_against_a_credential_of_the_log() -> None:
    credentials = Credentials()
    salt = os.urandom(16)
    credentials.by_user["carol", "SCRAM-SHA-256"] = credential_from_password(
        "SCRAM-SHA-256", "carol-secret", salt, 4096
    )
    exchange = SaslExchange(security(credentials=credentials))
    exchange.handshake(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    client = ScramClient("SCRAM-SHA-256", "carol", "carol-secret").steps()
    token = next(client)
    step = exchange.authenticate(SaslAuthenticateRequest(auth_bytes=token), now=0)
    assert step.kind is SaslStepKind.ANSWER and not step.authenticated
    assert isinstance(step.response, SaslAuthenticateResponse)
    token = client.send(step.response.auth_bytes)
    step = exchange.authenticate(SaslAuthenticateRequest(auth_bytes=token), now=0)
    assert step.authenticated
    assert exchange.principal == "User:carol"
    assert isinstance(step.response, SaslAuthenticateResponse)
    # The client checks the server's signature: the server knew the credential too.
    with pytest.raises(StopIteration):
        client.send(step.response.auth_bytes)


def test_sessions_end_after_connections_max_reauth_ms_and_a_reauthentication_renews_them() -> None:
    exchange = SaslExchange(security(max_reauth_ms=60_000))
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    step = exchange.authenticate(plain("alice", "alice-secret"), now=1000.0)
    assert isinstance(step.response, SaslAuthenticateResponse)
    assert step.response.session_lifetime_ms == 60_000
    assert not exchange.expired(1059.9)
    assert exchange.expired(1060.0)
    # KIP-368: the same mechanism, the same principal, on the same connection.
    assert exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN")).kind is SaslStepKind.ANSWER
    # Requests keep flowing while the client re-authenticates.
    assert exchange.admits(ApiKey.OFFSET_COMMIT)
    step = exchange.authenticate(plain("alice", "alice-secret"), now=1050.0)
    assert step.authenticated
    assert exchange.reauthentications == 1
    assert not exchange.expired(1100.0)
    assert exchange.expired(1110.0)


def test_a_reauthentication_may_not_change_the_principal_nor_the_mechanism() -> None:
    exchange = SaslExchange(security(max_reauth_ms=60_000))
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    exchange.authenticate(plain("alice", "alice-secret"), now=0)
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    step = exchange.authenticate(plain("bob", "bob-secret"), now=1)
    assert step.kind is SaslStepKind.REFUSE
    assert exchange.principal == "User:alice"

    exchange = SaslExchange(security(max_reauth_ms=60_000))
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    exchange.authenticate(plain("alice", "alice-secret"), now=0)
    step = exchange.handshake(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    assert step.kind is SaslStepKind.REFUSE


def test_without_connections_max_reauth_ms_the_exchange_is_over_once_authenticated() -> None:
    """Kafka's KafkaApis answers a SaslHandshake or SaslAuthenticate after the exchange
    ILLEGAL_SASL_STATE and keeps the connection; the client stays who it was."""
    exchange = SaslExchange(security(max_reauth_ms=0))
    exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    exchange.authenticate(plain("alice", "alice-secret"), now=0)
    step = exchange.handshake(SaslHandshakeRequest(mechanism="PLAIN"))
    assert step.kind is SaslStepKind.ANSWER
    assert isinstance(step.response, SaslHandshakeResponse)
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    step = exchange.authenticate(plain("bob", "bob-secret"), now=0)
    assert step.kind is SaslStepKind.ANSWER and not step.authenticated
    assert isinstance(step.response, SaslAuthenticateResponse)
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert exchange.principal == "User:alice" and exchange.authenticated
