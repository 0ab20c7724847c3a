"""The bench's raw connections to our server, secured by `--command-config`: SASL (and TLS)
run on a protocol of their own before the bench's protocol takes the transport, so the
measured loops send nothing before the exchange ends; the pipeline's audit reads the same
file."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest
from client_fake_server import FakeCoordinator, FakeSasl, Received

from coordinator_client import ClientSecurity, ClientSecurityError
from coordinator_client.rpc.security import Password
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import SaslAuthenticationFailedError
from coordinator_server.tools.bench import main as bench_main
from coordinator_server.tools.bench.ours import (
    ClosedLoop,
    RequestTemplate,
    WireConnection,
    check_ours,
    parse_ours,
)
from coordinator_server.tools.bench.stats import LoadResult
from coordinator_server.tools.bench.targets import OursTarget
from coordinator_server.tools.pipeline.cli import _coordinator_security

pytestmark = pytest.mark.timeout(60)

USERS = {"bench": "bench-secret"}


def scram(password: str = USERS["bench"]) -> ClientSecurity:
    return ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="bench",
        sasl_password=Password(password),
    )


def answer(received: Received) -> dict[str, Any] | None:
    if received.api_key == ApiKey.HEARTBEAT:
        return {"error_code": 0, "error_message": None}
    return None


async def test_the_setup_connections_and_the_loops_authenticate_first() -> None:
    sasl = FakeSasl(users=USERS)
    async with FakeCoordinator(answer, sasl=sasl) as server:
        target = await OursTarget.connect(server.bootstrap, connections=2, security=scram())
        try:
            assert await target.heartbeat(0, "g", 1, "m") == 0
        finally:
            await target.close()
        result = LoadResult()
        loop = await ClosedLoop.open(
            server.host,
            server.port,
            [RequestTemplate(12, {"group_id": "g", "generation_id": 1, "member_id": "m"})],
            4,
            result,
            parse_ours,
            check_ours,
            scram(),
        )
        loop.measuring = True
        loop.start()
        await asyncio.sleep(0.2)
        loop.stop()
        await asyncio.wait_for(loop.done, 5)
        loop.close()
    assert result.requests > 0 and result.errors == 0
    assert len(sasl.sessions) == 3
    assert {session.principal for session in sasl.sessions.values()} == {"User:bench"}
    assert sasl.violations == []


async def test_a_refused_login_fails_the_connection() -> None:
    async with FakeCoordinator(answer, sasl=FakeSasl(users=USERS)) as server:
        with pytest.raises(SaslAuthenticationFailedError):
            await WireConnection.open(server.host, server.port, scram("wrong"))
    assert server.requests(ApiKey.HEARTBEAT) == []


def test_a_command_config_that_cannot_be_used_stops_the_bench_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bench.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    assert bench_main(argparse.Namespace(command_config=str(config))) == 2
    assert "GSSAPI" in capsys.readouterr().err


def test_the_audit_reads_the_command_config(tmp_path: Path) -> None:
    config = tmp_path / "audit.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=auditor\nsasl.password=audit-secret\n"
    )
    security = _coordinator_security(argparse.Namespace(command_config=str(config)))
    assert security is not None and security.sasl_username == "auditor"
    assert _coordinator_security(argparse.Namespace(command_config=None)) is None
    config.write_text("ssl.keystore.password=audit-secret\n")
    with pytest.raises(ValueError, match=r"ssl\.keystore\.password") as caught:
        _coordinator_security(argparse.Namespace(command_config=str(config)))
    assert "audit-secret" not in str(caught.value)
    assert isinstance(caught.value, ValueError) and not isinstance(
        caught.value, ClientSecurityError
    )
