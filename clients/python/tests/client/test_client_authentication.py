"""The RPC client authenticating against a scripted listener: each mechanism's exchange
before any request goes out, re-authentication (KIP-368) on the same connection without a
request lost, reordered or written during it, refusals raised at once and never retried, the
group member and TLS with a client certificate."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from client_fake_server import FakeCoordinator, FakeSasl, Received

from coordinator_client import (
    ClientSecurity,
    ConnectionClosedError,
    CoordinatorClient,
    GroupMember,
    GroupMemberError,
)
from coordinator_client.rpc.connection import Connection
from coordinator_client.rpc.sasl import SCRAM_MIN_ITERATIONS, ScramSaslClient, authenticate
from coordinator_client.rpc.security import Password
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from coordinator_protocol.messages import HeartbeatRequest, HeartbeatResponse

pytestmark = pytest.mark.timeout(60)

GROUP = "orders-service"
USERS = {"alice": "alice-secret", "bob": "bob,=secret"}


def heartbeat(member: str = "m-1") -> HeartbeatRequest:
    return HeartbeatRequest(group_id=GROUP, generation_id=1, member_id=member)


def answer_heartbeats(received: Received) -> dict[str, Any] | None:
    if received.api_key == ApiKey.HEARTBEAT:
        return {"error_code": 0, "error_message": None}
    return None


def sasl_security(
    mechanism: str, user: str = "alice", password: str | None = None
) -> ClientSecurity:
    return ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_username=user,
        sasl_password=Password(USERS[user] if password is None else password),
    )


def client_for(
    server: FakeCoordinator, security: ClientSecurity, **options: Any
) -> CoordinatorClient:
    options.setdefault("retry_backoff_ms", 20)
    options.setdefault("request_timeout_ms", 5000)
    return CoordinatorClient(server.bootstrap, security=security, **options)


@pytest.fixture
async def sasl_server() -> AsyncIterator[FakeCoordinator]:
    async with FakeCoordinator(answer_heartbeats, sasl=FakeSasl(users=USERS)) as fake:
        yield fake


def sasl_of(server: FakeCoordinator) -> FakeSasl:
    assert server.sasl is not None
    return server.sasl


# Each mechanism, before any request


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "bob"])
async def test_a_connection_authenticates_before_its_first_request(
    sasl_server: FakeCoordinator, mechanism: str, user: str
) -> None:
    async with client_for(sasl_server, sasl_security(mechanism, user)) as client:
        # Sent at once, together: they wait for the exchange and none goes out before it.
        answers = await asyncio.gather(*(client.heartbeat(heartbeat()) for _ in range(5)))
    assert answers == [HeartbeatResponse(error_code=0)] * 5
    sasl = sasl_of(sasl_server)
    assert sasl.violations == []
    (session,) = sasl.sessions.values()
    assert (session.mechanism, session.principal, session.authentications) == (
        mechanism,
        f"User:{user}",
        1,
    )
    apis = [r.api_key for r in sasl_server.received]
    assert apis[:2] == [ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE]


async def test_oauthbearer_sends_the_token_its_file_holds_at_each_authentication(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("eyJ.first.token\n")
    sasl = FakeSasl(tokens={"eyJ.first.token": "svc-a", "eyJ.second.token": "svc-a"})
    sasl.session_lifetime_ms = 300
    security = ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_file=token,
    )
    async with (
        FakeCoordinator(answer_heartbeats, sasl=sasl) as server,
        client_for(server, security) as client,
    ):
        await client.heartbeat(heartbeat())
        token.write_text("eyJ.second.token")
        await wait_for(lambda: sasl.sessions[1].authentications >= 2)
        await client.heartbeat(heartbeat())
    assert sasl.sessions[1].tokens[:2] == ["eyJ.first.token", "eyJ.second.token"]
    assert sasl.sessions[1].principal == "User:svc-a"
    assert server.connections == 1


async def test_a_refused_token_is_answered_with_x01_and_raised_with_the_servers_reasons(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("eyJ.expired.token")
    security = ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_file=token,
    )
    sasl = FakeSasl(tokens={})
    async with (
        FakeCoordinator(answer_heartbeats, sasl=sasl) as server,
        client_for(server, security) as client,
    ):
        with pytest.raises(SaslAuthenticationFailedError) as caught:
            await client.heartbeat(heartbeat())
    message = str(caught.value)
    assert "invalid_token" in message
    assert "OAUTHBEARER" in message
    authentications = server.requests(ApiKey.SASL_AUTHENTICATE)
    assert [r.body["auth_bytes"] for r in authentications][-1] == b"\x01"


# Refusals: raised at once, never retried


async def test_a_wrong_password_is_raised_at_once_with_the_servers_message(
    sasl_server: FakeCoordinator,
) -> None:
    security = sasl_security("SCRAM-SHA-256", password="wrong")
    async with client_for(sasl_server, security, request_timeout_ms=30_000) as client:
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationFailedError) as caught:
            await client.heartbeat(heartbeat())
        assert time.monotonic() - started < 5
        # The next call tries once more, on a new connection, and fails the same way.
        with pytest.raises(SaslAuthenticationFailedError):
            await client.heartbeat(heartbeat())
    message = str(caught.value)
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in message
    assert sasl_server.host in message
    assert "wrong" not in message
    assert sasl_server.connections == 2
    assert sasl_server.requests(ApiKey.HEARTBEAT) == []
    assert "authentication failed" in (client.problems.last_cause or "")


async def test_a_mechanism_the_listener_does_not_enable_names_those_it_does() -> None:
    sasl = FakeSasl(users=USERS, mechanisms=("SCRAM-SHA-512",))
    async with (
        FakeCoordinator(answer_heartbeats, sasl=sasl) as server,
        client_for(server, sasl_security("PLAIN")) as client,
    ):
        with pytest.raises(UnsupportedSaslMechanismError, match="enables: SCRAM-SHA-512"):
            await client.heartbeat(heartbeat())
    assert server.connections == 1


async def test_a_listener_without_sasl_is_named_as_such() -> None:
    def unsupported(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.SASL_HANDSHAKE:
            return {"error_code": 35, "error_message": "SaslHandshake is not served"}
        return answer_heartbeats(received)

    async with (
        FakeCoordinator(unsupported) as server,
        client_for(server, sasl_security("PLAIN")) as client,
    ):
        with pytest.raises(IllegalSaslStateError, match="PLAINTEXT or SSL"):
            await client.heartbeat(heartbeat())


async def test_a_scram_server_that_cannot_prove_it_holds_the_credential_is_refused(
    sasl_server: FakeCoordinator,
) -> None:
    sasl_of(sasl_server).forge_server_signature = True
    async with client_for(sasl_server, sasl_security("SCRAM-SHA-512")) as client:
        with pytest.raises(SaslAuthenticationFailedError, match="does not hold this user's"):
            await client.heartbeat(heartbeat())
    assert sasl_server.requests(ApiKey.HEARTBEAT) == []


async def test_a_scram_server_asking_for_too_few_iterations_is_refused() -> None:
    sasl = FakeSasl(users=USERS, iterations=SCRAM_MIN_ITERATIONS - 1)
    async with (
        FakeCoordinator(answer_heartbeats, sasl=sasl) as server,
        client_for(server, sasl_security("SCRAM-SHA-256")) as client,
    ):
        with pytest.raises(SaslAuthenticationFailedError, match="fewer than"):
            await client.heartbeat(heartbeat())


async def test_a_group_member_refused_ends_its_membership_with_the_cause(
    sasl_server: FakeCoordinator,
) -> None:
    member = GroupMember(
        sasl_server.bootstrap,
        GROUP,
        ["orders"],
        partitions_for_topics={"orders": 1},
        security=sasl_security("SCRAM-SHA-256", password="wrong"),
        session_timeout_ms=6000,
    )
    async with member:
        with pytest.raises(GroupMemberError, match="SASL_AUTHENTICATION_FAILED") as caught:
            await member.wait_for_assignment(10)
    assert isinstance(caught.value.__cause__, SaslAuthenticationFailedError)
    assert member.client.closed
    assert sasl_server.requests(ApiKey.JOIN_GROUP) == []


def test_a_shared_client_keeps_its_own_security() -> None:
    client = CoordinatorClient("127.0.0.1:1")
    with pytest.raises(ValueError, match="its own security"):
        GroupMember(client, GROUP, ["t"], partitions_for_topics={}, security=sasl_security("PLAIN"))
    with pytest.raises(ValueError, match="not both"):
        CoordinatorClient("127.0.0.1:1", security=sasl_security("PLAIN"), ssl_cafile="ca.pem")


# Re-authentication (KIP-368)


async def wait_for(condition: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_a_session_with_a_lifetime_is_authenticated_again_on_the_same_connection(
    sasl_server: FakeCoordinator,
) -> None:
    sasl = sasl_of(sasl_server)
    sasl.session_lifetime_ms = 400
    async with client_for(sasl_server, sasl_security("SCRAM-SHA-256")) as client:
        started = time.monotonic()
        await client.heartbeat(heartbeat())
        await wait_for(lambda: sasl.sessions[1].authentications >= 3)
        elapsed = time.monotonic() - started
        await client.heartbeat(heartbeat())
    # Two re-authentications, each between 85 % and 95 % of the 400 ms lifetime.
    assert 0.68 <= elapsed < 2.0
    assert sasl_server.connections == 1
    assert sasl.violations == []


async def test_requests_during_a_reauthentication_are_held_and_none_is_lost_or_reordered(
    sasl_server: FakeCoordinator,
) -> None:
    sasl = sasl_of(sasl_server)
    sasl.session_lifetime_ms = 300
    release = asyncio.Event()

    async def handle(received: Received) -> dict[str, Any] | None:
        if received.api_key == ApiKey.HEARTBEAT and received.body["member_id"] == "parked":
            # In flight across the re-authentication: answered after it.
            await release.wait()
        return answer_heartbeats(received)

    sasl_server.handler = handle
    async with client_for(sasl_server, sasl_security("SCRAM-SHA-512")) as client:
        await client.heartbeat(heartbeat("first"))
        parked = asyncio.create_task(client.heartbeat(heartbeat("parked")))
        await sasl_server.wait_for_requests(ApiKey.HEARTBEAT, 2)
        # Hold the re-authentication's answer, so that requests pile up behind it.
        sasl.delay_s = 0.3
        await wait_for(lambda: sasl.sessions[1].exchanging)
        sent = [asyncio.create_task(client.heartbeat(heartbeat(f"m-{i}"))) for i in range(50)]
        await asyncio.sleep(0.1)
        assert not any(task.done() for task in sent)
        answers = await asyncio.gather(*sent)
        sasl.delay_s = 0
        release.set()
        assert (await parked).error_code == 0
    assert answers == [HeartbeatResponse(error_code=0)] * 50
    assert sasl.violations == []
    assert sasl_server.connections == 1
    assert sasl.sessions[1].authentications >= 2
    order = [
        r.body["member_id"]
        for r in sasl_server.requests(ApiKey.HEARTBEAT)
        if r.body["member_id"].startswith("m-")
    ]
    assert order == [f"m-{i}" for i in range(50)]


async def test_a_refused_reauthentication_closes_the_connection_and_the_next_call_raises_it(
    sasl_server: FakeCoordinator,
) -> None:
    sasl = sasl_of(sasl_server)
    sasl.session_lifetime_ms = 300
    async with client_for(sasl_server, sasl_security("PLAIN")) as client:
        await client.heartbeat(heartbeat())
        # The password changes while the session lasts.
        sasl.users["alice"] = "rotated"
        await wait_for(lambda: bool(sasl.failures))
        with pytest.raises(SaslAuthenticationFailedError):
            await client.heartbeat(heartbeat())
    assert sasl.violations == []


async def test_the_exchange_runs_over_any_send() -> None:
    """`authenticate` is the exchange alone: the bench drives it over raw connections."""
    sasl = FakeSasl(users=USERS, session_lifetime_ms=1234)
    async with FakeCoordinator(sasl=sasl) as server:
        connection = await Connection.open(server.host, server.port)
        try:

            async def send(request: Any, response_type: Any) -> Any:
                return await connection.send(request, response_type, timeout_s=5)

            lifetime = await authenticate(
                send, ScramSaslClient("SCRAM-SHA-256", "bob", USERS["bob"]), where="here"
            )
        finally:
            connection.close()
            await connection.wait_closed()
    assert lifetime == 1234
    assert sasl.sessions[1].principal == "User:bob"


# TLS


@pytest.fixture
def certificates(tmp_path: Path) -> Any:
    from tls_certificates import make_certificates

    return make_certificates(tmp_path)


def server_tls(certificates: Any, *, require_client_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.server_certificate, certificates.server_key)
    if require_client_certificate:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certificates.ca)
    return context


async def test_mutual_tls_presents_the_client_certificate(certificates: Any) -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(certificates.ca),
            "ssl.certificate.location": str(certificates.client_certificate),
            "ssl.key.location": str(certificates.client_key),
            "ssl.key.password": certificates.client_key_password,
        }
    )
    context = server_tls(certificates, require_client_certificate=True)
    async with (
        FakeCoordinator(answer_heartbeats, ssl=context) as server,
        client_for(server, security) as client,
    ):
        assert (await client.heartbeat(heartbeat())).error_code == 0
    (peer,) = server.peer_certificates
    assert peer is not None
    assert (("commonName", "alice"),) in peer["subject"]


async def test_sasl_ssl_with_a_pem_key_store_and_scram(certificates: Any) -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="alice" password="{USERS["alice"]}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certificates.ca),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certificates.client_bundle),
        }
    )
    context = server_tls(certificates, require_client_certificate=True)
    sasl = FakeSasl(users=USERS)
    async with (
        FakeCoordinator(answer_heartbeats, sasl=sasl, ssl=context) as server,
        client_for(server, security) as client,
    ):
        assert (await client.heartbeat(heartbeat())).error_code == 0
    assert sasl.sessions[1].principal == "User:alice"
    assert server.peer_certificates[0] is not None


async def test_a_server_certificate_for_another_name_is_refused_unless_not_checked(
    certificates: Any,
) -> None:
    context = server_tls(certificates, require_client_certificate=False)

    def security(algorithm: str) -> ClientSecurity:
        return ClientSecurity.from_properties(
            {
                "security.protocol": "SSL",
                "ssl.ca.location": str(certificates.ca),
                "ssl.endpoint.identification.algorithm": algorithm,
            }
        )

    async with FakeCoordinator(answer_heartbeats, ssl=context) as server:
        # The certificate names 127.0.0.1 and localhost, not the name verified here.
        checked = client_for(server, security("https"), ssl_server_hostname="other.example")
        async with checked:
            with pytest.raises((ssl.SSLError, ConnectionClosedError)):
                await checked.heartbeat(heartbeat())
        async with client_for(server, security(""), ssl_server_hostname="other.example") as ok:
            assert (await ok.heartbeat(heartbeat())).error_code == 0


async def test_the_consumer_and_the_producer_hand_security_to_their_coordinator_client() -> None:
    from coordinator_client import CoordinatedConsumer, TransactionalProducer

    security = sasl_security("SCRAM-SHA-256")
    consumer = CoordinatedConsumer(
        "orders",
        bootstrap_servers="127.0.0.1:1",
        coordinator_bootstrap_servers="127.0.0.1:2",
        group_id=GROUP,
        security=security,
    )
    producer = TransactionalProducer(
        bootstrap_servers="127.0.0.1:1",
        coordinator_bootstrap_servers="127.0.0.1:2",
        transactional_id="tx",
        security=security,
    )
    assert consumer.coordinator_client.security is security
    assert producer.coordinator_client.security is security
    await consumer.stop()
    await producer.stop()
    assert consumer.coordinator_client.closed and producer.coordinator_client.closed
    shared = CoordinatorClient("127.0.0.1:2")
    with pytest.raises(ValueError, match="its own security"):
        CoordinatedConsumer(
            "orders", bootstrap_servers="127.0.0.1:1", coordinator_client=shared,
            group_id=GROUP, security=security,
        )  # fmt: skip
    with pytest.raises(ValueError, match="its own security"):
        TransactionalProducer(
            bootstrap_servers="127.0.0.1:1", coordinator_client=shared, transactional_id="tx",
            security=security,
        )  # fmt: skip
