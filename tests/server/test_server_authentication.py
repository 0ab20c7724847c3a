"""Authentication on the listener, over real sockets, in process on an in-memory log: the
SASL mechanisms through the client library, Kafka's order of the exchange on the wire, the
failed-authentication delay, the token size limit, re-authentication (KIP-368), TLS client
certificates and the warning of a listener open to anyone."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import struct
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jwt
import msgpack
import pytest
from aiokafka.structs import TopicPartition
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client.parser import text_string_to_metric_families
from tls_certificates import make_certificates
from wire_client import WireClient

from coordinator_client import CoordinatorClient
from coordinator_client.rpc.sasl import scram_upsertion
from coordinator_client.rpc.security import ClientSecurity
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import (
    ApiError,
    ErrorCode,
    GroupAuthorizationFailedError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreateAclsRequestCreation,
)
from coordinator_server.app import CoordinatorApp
from coordinator_server.config import CoordinatorConfig
from coordinator_server.storage.memory import InMemoryLog

PARTITIONS = 4
USERS = "admin:admin-secret\nalice:alice-secret\n"


@asynccontextmanager
async def serve(tmp_path: Path, **settings: Any) -> AsyncIterator[CoordinatorApp]:
    users = tmp_path / "users"
    users.write_text(USERS)
    settings.setdefault("metrics_port", -1)
    settings.setdefault("listener_security_protocol", "SASL_PLAINTEXT")
    if settings["listener_security_protocol"].startswith("SASL"):
        settings.setdefault("sasl_plain_users_file", users)
    config = CoordinatorConfig(port=0, offsets_topic_partitions=PARTITIONS, **settings)
    app = CoordinatorApp(config, log=InMemoryLog(PARTITIONS))
    await app.start()
    try:
        yield app
    finally:
        await app.shutdown()


def bootstrap(app: CoordinatorApp) -> str:
    assert app.address is not None
    return f"{app.address[0]}:{app.address[1]}"


def sasl(mechanism: str, user: str, password: str, **extra: str) -> ClientSecurity:
    return ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            **extra,
        }
    )


async def commit_and_fetch(client: CoordinatorClient, group: str) -> dict[Any, Any]:
    await client.commit_offsets(group, {TopicPartition("orders", 0): 42})
    return await client.fetch_offsets(group)


async def scrape(app: CoordinatorApp) -> dict[str, float]:
    """Every sample of the node's /metrics as 'name{labels}' -> value."""

    def get() -> str:
        url = f"http://127.0.0.1:{app.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body: bytes = reply.read()
            return body.decode()

    text = await asyncio.get_running_loop().run_in_executor(None, get)
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def frame(api_key: int, body: dict[str, Any], correlation_id: int = 1) -> bytes:
    payload = msgpack.packb([api_key, 0, correlation_id, "raw", body])
    return struct.pack(">I", len(payload)) + payload


async def test_plain_users_commit_and_a_wrong_password_is_refused_after_the_delay(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, connection_failed_authentication_delay_ms=300) as app:
        async with CoordinatorClient(
            bootstrap(app), security=sasl("PLAIN", "alice", "alice-secret")
        ) as client:
            offsets = await commit_and_fetch(client, "billing")
            assert [o.offset for o in offsets.values()] == [42]
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationFailedError, match="Invalid username or password"):
            async with CoordinatorClient(
                bootstrap(app), security=sasl("PLAIN", "alice", "wrong"), request_timeout_ms=3000
            ) as client:
                await client.api_versions()
                await client.fetch_offsets("billing")
        # Kafka's connection.failed.authentication.delay.ms: one guess per delay.
        assert time.monotonic() - started >= 0.3
        counts = app.server_metrics.authentications
        assert counts["PLAIN", "success"] >= 1
        assert counts["PLAIN", "failure"] >= 1


async def test_an_unknown_mechanism_is_refused_naming_the_enabled_ones(tmp_path: Path) -> None:
    async with serve(tmp_path, sasl_enabled_mechanisms="PLAIN") as app:
        with pytest.raises(UnsupportedSaslMechanismError, match="PLAIN"):
            async with CoordinatorClient(
                bootstrap(app),
                security=sasl("SCRAM-SHA-512", "alice", "alice-secret"),
                request_timeout_ms=3000,
            ) as client:
                await client.fetch_offsets("billing")


async def test_only_api_versions_and_the_exchange_before_authentication(tmp_path: Path) -> None:
    async with serve(tmp_path) as app:
        assert app.address is not None
        client = await WireClient.connect(*app.address)
        try:
            versions = await client.call(ApiKey.API_VERSIONS, {})
            assert versions["error_code"] == 0
            # Anything else before the exchange closes the connection without an answer.
            refused = client.send(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": "g"}]})
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(refused, 5)
        finally:
            await client.close()
        assert app.server_metrics.connections_closed["not_authenticated"] == 1


async def test_a_token_over_the_receive_limit_closes_the_connection(tmp_path: Path) -> None:
    async with serve(tmp_path, sasl_server_max_receive_size=4096) as app:
        assert app.address is not None
        client = await WireClient.connect(*app.address)
        try:
            handshake = await client.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
            assert handshake["error_code"] == 0
            # A megabyte token: closed at its length, never buffered.
            token = b"\0alice\0" + b"x" * (1024 * 1024)
            refused = client.send(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(refused, 5)
        finally:
            await client.close()
        assert app.server_metrics.malformed_frames == 1


async def test_scram_users_added_by_an_admin_log_in_and_acls_decide(tmp_path: Path) -> None:
    async with serve(
        tmp_path,
        metrics_port=0,
        authorizer="acls",
        super_users="User:admin",
        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    ) as app:
        admin = CoordinatorClient(bootstrap(app), security=sasl("PLAIN", "admin", "admin-secret"))
        async with admin:
            altered = await admin.alter_user_scram_credentials(
                AlterUserScramCredentialsRequest(
                    upsertions=[scram_upsertion("carol", "SCRAM-SHA-512", "carol-secret")]
                )
            )
            assert [r.error_code for r in altered.results] == [0]
            created = await admin.create_acls(
                CreateAclsRequest(
                    creations=[
                        CreateAclsRequestCreation(
                            resource_type=3,
                            resource_name="billing",
                            resource_pattern_type=3,
                            principal="User:carol",
                            host="*",
                            operation=3,
                            permission_type=3,
                        ),
                        CreateAclsRequestCreation(
                            resource_type=2,
                            resource_name="orders",
                            resource_pattern_type=3,
                            principal="User:carol",
                            host="*",
                            operation=3,
                            permission_type=3,
                        ),
                    ]
                )
            )
            assert [r.error_code for r in created.results] == [0, 0]
        carol = sasl("SCRAM-SHA-512", "carol", "carol-secret")
        async with CoordinatorClient(bootstrap(app), security=carol) as client:
            offsets = await commit_and_fetch(client, "billing")
            assert [o.offset for o in offsets.values()] == [42]
            with pytest.raises(GroupAuthorizationFailedError):
                await client.fetch_offsets("payroll")
        with pytest.raises(SaslAuthenticationFailedError):
            async with CoordinatorClient(
                bootstrap(app),
                security=sasl("SCRAM-SHA-512", "carol", "not-hers"),
                request_timeout_ms=3000,
            ) as client:
                await client.fetch_offsets("billing")
        assert app.server_metrics.authentications["SCRAM-SHA-512", "success"] == 1
        assert app.security.authorizer is not None
        # The client asked for payroll's coordinator first: FindCoordinator needs DESCRIBE.
        assert app.security.authorizer.denials["FindCoordinator"] >= 1
        samples = await scrape(app)
        assert samples["coordinator_authorization_denials_total{api=FindCoordinator}"] >= 1
        assert (
            samples["coordinator_authentications_total{mechanism=SCRAM-SHA-512,outcome=success}"]
            == 1
        )
        assert (
            samples["coordinator_authentications_total{mechanism=SCRAM-SHA-512,outcome=failure}"]
            == 1
        )


async def test_sessions_are_renewed_by_reauthentication_without_losing_requests(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, connections_max_reauth_ms=1000) as app:
        async with CoordinatorClient(
            bootstrap(app), security=sasl("PLAIN", "alice", "alice-secret")
        ) as client:
            deadline = time.monotonic() + 3.5
            calls = 0
            while time.monotonic() < deadline:
                await commit_and_fetch(client, "billing")
                calls += 1
                await asyncio.sleep(0.05)
            assert calls > 20
        counts = app.server_metrics.authentications
        assert counts["PLAIN", "success"] == 1
        assert counts["PLAIN", "reauthentication"] >= 2
        assert app.server_metrics.connections_closed["not_authenticated"] == 0


async def test_a_request_after_the_session_expired_closes_the_connection(tmp_path: Path) -> None:
    async with serve(tmp_path, connections_max_reauth_ms=300) as app:
        assert app.address is not None
        client = await WireClient.connect(*app.address)
        try:
            await client.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
            answer = await client.call(
                ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"\0alice\0alice-secret"}
            )
            assert answer["error_code"] == 0
            assert answer["session_lifetime_ms"] == 300
            fetched = await client.call(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": "g"}]})
            assert fetched["groups"][0]["error_code"] == 0
            await asyncio.sleep(0.4)
            refused = client.send(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": "g"}]})
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(refused, 5)
        finally:
            await client.close()


def _jwks(tmp_path: Path) -> tuple[rsa.RSAPrivateKey, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public["kid"] = "k1"
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public]}))
    return key, path


def _token(key: rsa.RSAPrivateKey, subject: str, lifetime_s: float) -> str:
    now = time.time()
    claims = {"sub": subject, "iat": int(now), "exp": int(now + lifetime_s), "aud": "coord"}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


async def test_oauthbearer_tokens_are_checked_and_bound_the_session(tmp_path: Path) -> None:
    key, jwks = _jwks(tmp_path)
    token_file = tmp_path / "token"
    async with serve(
        tmp_path,
        sasl_enabled_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_endpoint_url=f"file://{jwks}",
        sasl_oauthbearer_expected_audience="coord",
        connections_max_reauth_ms=3_600_000,
    ) as app:
        assert app.address is not None
        token_file.write_text(_token(key, "dave", 120))
        security = ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.file": str(token_file),
            }
        )
        async with CoordinatorClient(bootstrap(app), security=security) as client:
            await commit_and_fetch(client, "billing")
        # The token's expiry bounds the session below connections.max.reauth.ms.
        client_raw = await WireClient.connect(*app.address)
        try:
            await client_raw.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "OAUTHBEARER"})
            initial = f"n,,\x01auth=Bearer {_token(key, 'dave', 60)}\x01\x01".encode()
            answer = await client_raw.call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": initial})
            assert answer["error_code"] == 0
            assert 50_000 < answer["session_lifetime_ms"] <= 60_000
        finally:
            await client_raw.close()
        token_file.write_text(_token(key, "dave", -120))
        with pytest.raises(SaslAuthenticationFailedError):
            async with CoordinatorClient(
                bootstrap(app), security=security, request_timeout_ms=3000
            ) as client:
                await client.fetch_offsets("billing")


async def test_client_certificates_name_the_principal_and_other_cas_are_refused(
    tmp_path: Path,
) -> None:
    ours = make_certificates(tmp_path)
    (tmp_path / "other").mkdir()
    theirs = make_certificates(tmp_path / "other")
    async with serve(
        tmp_path,
        listener_security_protocol="SSL",
        tls_certfile=ours.server_certificate,
        tls_keyfile=ours.server_key,
        ssl_client_auth="required",
        ssl_truststore_location=ours.ca,
        ssl_principal_mapping_rules="RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        authorizer="acls",
        super_users="User:alice",
    ) as app:

        def tls(certificates: Any) -> ClientSecurity:
            return ClientSecurity.from_properties(
                {
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(ours.ca),
                    "ssl.certificate.location": str(certificates.client_bundle),
                }
            )

        async with CoordinatorClient(bootstrap(app), security=tls(ours)) as client:
            # User:alice, a super user, from the certificate's CN.
            await commit_and_fetch(client, "billing")
        assert app.server_metrics.authentications["SSL", "success"] == 1
        with pytest.raises((ApiError, OSError, ssl.SSLError, TimeoutError)):
            async with CoordinatorClient(
                bootstrap(app), security=tls(theirs), request_timeout_ms=2000
            ) as client:
                await client.fetch_offsets("billing")
        # Without a certificate the handshake fails: nothing is served.
        assert app.address is not None
        context = ssl.create_default_context(cafile=str(ours.ca))
        # TLS 1.3 ends the client's handshake before the server checks the certificate:
        # the refusal is the connection ending unanswered.
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection(*app.address, ssl=context)
            writer.write(frame(ApiKey.API_VERSIONS, {}))
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(4), 5)


async def test_a_listener_beyond_the_loopback_without_authentication_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator_server")
    async with serve(tmp_path, host="0.0.0.0", listener_security_protocol="PLAINTEXT") as app:
        warning = app.status()["security"]
        assert isinstance(warning, dict)
        assert "does not authenticate" in str(warning["warning"])
    assert any("does not authenticate its clients" in r.getMessage() for r in caplog.records)
    async with serve(tmp_path, host="127.0.0.1", listener_security_protocol="PLAINTEXT") as app:
        status = app.status()["security"]
        assert isinstance(status, dict) and status["warning"] is None


async def authenticated(app: CoordinatorApp, user: str, password: str) -> WireClient:
    """A raw connection that has run the PLAIN exchange."""
    assert app.address is not None
    client = await WireClient.connect(*app.address)
    await client.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    answer = await client.call(
        ApiKey.SASL_AUTHENTICATE, {"auth_bytes": f"\0{user}\0{password}".encode()}
    )
    assert answer["error_code"] == 0, answer
    return client


async def test_acls_removed_while_a_member_is_in_its_group_refuse_its_next_heartbeat(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, authorizer="acls", super_users="User:admin") as app:
        admin = await authenticated(app, "admin", "admin-secret")
        alice = await authenticated(app, "alice", "alice-secret")
        try:
            read_group = {
                "resource_type": 3,
                "resource_name": "billing",
                "resource_pattern_type": 3,
                "principal": "User:alice",
                "host": "*",
                "operation": 3,
                "permission_type": 3,
            }
            created = await admin.call(ApiKey.CREATE_ACLS, {"creations": [read_group]})
            assert created["results"][0]["error_code"] == 0
            join = {
                "group_id": "billing",
                "session_timeout_ms": 6000,
                "rebalance_timeout_ms": 1000,
                "member_id": "",
                "group_instance_id": "alice-1",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            }
            joined = await alice.call(ApiKey.JOIN_GROUP, join)
            assert joined["error_code"] == 0, joined
            heartbeat = {
                "group_id": "billing",
                "generation_id": joined["generation_id"],
                "member_id": joined["member_id"],
                "group_instance_id": "alice-1",
            }
            synced = await alice.call(ApiKey.SYNC_GROUP, {**heartbeat, "assignments": []})
            assert synced["error_code"] == 0, synced
            assert (await alice.call(ApiKey.HEARTBEAT, heartbeat))["error_code"] == 0

            deleted = await admin.call(
                ApiKey.DELETE_ACLS,
                {
                    "filters": [
                        {
                            "resource_type_filter": 3,
                            "resource_name_filter": "billing",
                            "pattern_type_filter": 3,
                            "operation": 1,
                            "permission_type": 1,
                        }
                    ]
                },
            )
            assert len(deleted["filter_results"][0]["matching_acls"]) == 1
            removed = time.monotonic()
            while (await alice.call(ApiKey.HEARTBEAT, heartbeat))["error_code"] == 0:
                assert time.monotonic() - removed < 1.0, "the ACL's removal never applied"
                await asyncio.sleep(0.02)
            answer = await alice.call(ApiKey.HEARTBEAT, heartbeat)
            assert answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
            # The member stays until its session times out, then the group is empty; the
            # admin (a super user) still sees it.
            deadline = time.monotonic() + 15
            while True:
                described = await admin.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["billing"]})
                if described["groups"][0]["group_state"] == "Empty":
                    break
                assert time.monotonic() < deadline, described
                await asyncio.sleep(0.2)
        finally:
            await admin.close()
            await alice.close()


async def test_a_listener_without_sasl_answers_the_exchange_illegal_sasl_state(
    tmp_path: Path,
) -> None:
    """As Kafka's brokers answer a SASL exchange on a PLAINTEXT listener: ILLEGAL_SASL_STATE,
    the connection kept."""
    async with serve(tmp_path, listener_security_protocol="PLAINTEXT") as app:
        assert app.address is not None
        client = await WireClient.connect(*app.address)
        try:
            handshake = await client.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
            assert handshake["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
            answer = await client.call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"\0a\0b"})
            assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
            assert (await client.call(ApiKey.API_VERSIONS, {}))["error_code"] == 0
        finally:
            await client.close()
        with pytest.raises(Exception, match="PLAINTEXT or SSL"):
            async with CoordinatorClient(
                bootstrap(app),
                security=sasl("PLAIN", "alice", "alice-secret"),
                request_timeout_ms=3000,
            ) as sasl_client:
                await sasl_client.fetch_offsets("billing")
