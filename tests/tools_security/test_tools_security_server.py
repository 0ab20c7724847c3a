"""`coordinator-server users` and `acls` as commands of their own against a real server (its
log the embedded SQLite file): credentials added, listed, kept through a restart and
deleted; a server without an authorizer refusing the ACL APIs, its words printed. Then a
server whose listener authenticates (SASL_PLAINTEXT, PLAIN for its admin, SCRAM for the users
the tool adds) and authorizes (`--authorizer acls`): the tools log in through
`--command-config`, a user the tool made logs in with SCRAM and is let in exactly where the
ACLs the tool added say, and stays connected across re-authentications (KIP-368)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import ServerProcess

from coordinator_client import ClientSecurity, CoordinatorClient
from coordinator_client.rpc.connection import Connection
from coordinator_client.rpc.security import Password
from coordinator_protocol.errors import (
    GroupAuthorizationFailedError,
    SaslAuthenticationFailedError,
)
from coordinator_protocol.messages import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)

pytestmark = pytest.mark.timeout(120)

_CLI_TIMEOUT_S = 60


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    return folder


@pytest.fixture
def server(data_dir: Path) -> Iterator[ServerProcess]:
    with ServerProcess(["--port", "0", "--data-dir", str(data_dir)]) as running:
        yield running


def tool(
    server: ServerProcess, *args: str, config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    options = ["--bootstrap-server", f"{server.host}:{server.port}", "--timeout-ms", "10000"]
    if config is not None:
        options += ["--command-config", str(config)]
    return subprocess.run(
        [sys.executable, "-m", "coordinator_server", *args, *options],
        capture_output=True, text=True, timeout=_CLI_TIMEOUT_S, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_users_are_added_listed_kept_through_a_restart_and_deleted(
    server: ServerProcess, data_dir: Path, tmp_path: Path
) -> None:
    password = "a-password-of-alice"
    password_file = tmp_path / "alice.password"
    password_file.write_text(password + "\n")
    added = tool(server, "users", "add", "alice", "--mechanism", "SCRAM-SHA-512",
                 "--iterations", "8192", "--password-file", str(password_file))  # fmt: skip
    assert (added.returncode, added.stdout) == (0, "Completed updating config for user alice.\n")
    assert password not in added.stdout + added.stderr
    assert tool(server, "users", "add", "bob", "--mechanism", "SCRAM-SHA-256",
                "--password-file", str(password_file)).returncode == 0  # fmt: skip
    # Without a terminal and without a file, nothing is asked and nothing is sent.
    unasked = tool(server, "users", "add", "carol", "--mechanism", "SCRAM-SHA-256")
    assert unasked.returncode == 2 and "--password-file" in unasked.stderr
    # Kafka's bounds on the iterations are the server's to enforce.
    refused = tool(server, "users", "add", "dave", "--mechanism", "SCRAM-SHA-256",
                   "--iterations", "1000", "--password-file", str(password_file))  # fmt: skip
    assert refused.returncode == 1
    assert "UNACCEPTABLE_CREDENTIAL (93)" in refused.stderr

    server.terminate()
    with ServerProcess(["--port", "0", "--data-dir", str(data_dir)]) as restarted:
        listed = tool(restarted, "users", "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout == (
            "SCRAM credential configs for user-principal 'alice' are "
            "SCRAM-SHA-512=iterations=8192\n"
            "SCRAM credential configs for user-principal 'bob' are "
            "SCRAM-SHA-256=iterations=4096\n"
        )
        deleted = tool(restarted, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-512")
        assert deleted.returncode == 0, deleted.stderr
        missing = tool(restarted, "users", "list", "alice")
        assert missing.returncode == 1
        assert "user 'alice': RESOURCE_NOT_FOUND" in missing.stderr


def test_acls_on_a_server_without_an_authorizer_exit_1_with_its_words(
    server: ServerProcess,
) -> None:
    for args in (
        ["--list"],
        ["--add", "--allow-principal", "User:alice", "--group", "orders", "--operation", "Read"],
        ["--remove", "--force", "--group", "orders"],
    ):
        result = tool(server, "acls", *args)
        assert result.returncode == 1, (args, result.stderr)
        assert "SECURITY_DISABLED (54)" in result.stderr
        assert result.stderr.startswith("coordinator-server acls: error: ")


# A listener that authenticates and an authorizer

ADMIN_PASSWORD = "admin-secret-e2e"
ALICE_PASSWORD = "alice-secret-e2e"
REAUTH_MS = 1500


@pytest.fixture
def secured(data_dir: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    plain_users = tmp_path / "plain-users"
    plain_users.write_text(f"admin:{ADMIN_PASSWORD}\n")
    args = [
        "--port", "0", "--data-dir", str(data_dir),
        "--listener-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "--sasl-plain-users-file", str(plain_users),
        "--authorizer", "acls", "--super-users", "User:admin",
        "--connections-max-reauth-ms", str(REAUTH_MS),
    ]  # fmt: skip
    with ServerProcess(args) as running:
        yield running


def admin_config(tmp_path: Path, password: str = ADMIN_PASSWORD) -> Path:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        f'    username="admin" password="{password}";\n'
    )
    return path


def alice(password: str = ALICE_PASSWORD) -> ClientSecurity:
    return ClientSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=Password(password),
    )


async def fetch(client: CoordinatorClient, group: str) -> OffsetFetchResponse:
    return await client.offset_fetch(
        OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, topics=None)])
    )


def test_the_tools_log_in_and_a_user_they_made_is_let_in_where_their_acls_say(
    secured: ServerProcess, tmp_path: Path
) -> None:
    config = admin_config(tmp_path)
    password_file = tmp_path / "alice.password"
    password_file.write_text(ALICE_PASSWORD + "\n")
    added = tool(secured, "users", "add", "alice", "--mechanism", "SCRAM-SHA-512",
                 "--password-file", str(password_file), config=config)  # fmt: skip
    assert added.returncode == 0, added.stderr
    granted = tool(secured, "acls", "--add", "--allow-principal", "User:alice", "--operation",
                   "Describe", "--group", "orders", config=config)  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    listed = tool(secured, "acls", "--list", "--group", "orders", config=config)
    assert listed.stdout == (
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=orders, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n"
    )

    async def as_alice() -> None:
        async with CoordinatorClient(
            f"{secured.host}:{secured.port}", security=alice(), request_timeout_ms=10_000
        ) as client:
            assert (await fetch(client, "orders")).groups[0].error_code == 0
            with pytest.raises(GroupAuthorizationFailedError):
                await fetch(client, "payments")
        async with CoordinatorClient(
            f"{secured.host}:{secured.port}", security=alice("wrong"), request_timeout_ms=10_000
        ) as refused:
            with pytest.raises(SaslAuthenticationFailedError):
                await fetch(refused, "orders")

    asyncio.run(as_alice())

    # Alice is no administrator: the ACL APIs need the cluster's ALTER and DESCRIBE.
    alice_config = tmp_path / "alice.properties"
    alice_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username=alice\nsasl.password={ALICE_PASSWORD}\n"
    )
    denied = tool(secured, "acls", "--list", config=alice_config)
    assert denied.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED (31)" in denied.stderr
    assert ALICE_PASSWORD not in denied.stderr

    removed = tool(secured, "acls", "--remove", "--force", "--group", "orders", config=config)
    assert removed.returncode == 0, removed.stderr

    async def revoked() -> None:
        async with CoordinatorClient(
            f"{secured.host}:{secured.port}", security=alice(), request_timeout_ms=10_000
        ) as client:
            with pytest.raises(GroupAuthorizationFailedError):
                await fetch(client, "orders")

    asyncio.run(revoked())


def test_the_tools_without_or_with_wrong_credentials_are_refused(
    secured: ServerProcess, tmp_path: Path
) -> None:
    mistyped = "not-the-admin-password-42"
    wrong = tool(secured, "acls", "--list", config=admin_config(tmp_path, mistyped))
    assert wrong.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED (58)" in wrong.stderr
    assert mistyped not in wrong.stderr
    started = time.monotonic()
    anonymous = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "acls", "--list",
         "--bootstrap-server", f"{secured.host}:{secured.port}", "--timeout-ms", "3000"],
        capture_output=True, text=True, timeout=_CLI_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert anonymous.returncode == 1
    assert time.monotonic() - started < _CLI_TIMEOUT_S
    assert "does its listener require authentication" in anonymous.stderr


def test_a_session_is_authenticated_again_on_the_same_connection(
    secured: ServerProcess, tmp_path: Path
) -> None:
    config = admin_config(tmp_path)
    password_file = tmp_path / "alice.password"
    password_file.write_text(ALICE_PASSWORD)
    assert tool(secured, "users", "add", "alice", "--mechanism", "SCRAM-SHA-512",
                "--password-file", str(password_file), config=config).returncode == 0  # fmt: skip
    assert tool(secured, "acls", "--add", "--allow-principal", "User:alice", "--operation",
                "Describe", "--group", "orders", config=config).returncode == 0  # fmt: skip

    async def for_three_lifetimes() -> Connection:
        connection = await Connection.open(secured.host, secured.port, sasl=alice().sasl_client)
        try:
            deadline = time.monotonic() + 3 * REAUTH_MS / 1000
            while time.monotonic() < deadline:
                answer = await connection.send(
                    OffsetFetchRequest(
                        groups=[OffsetFetchRequestGroup(group_id="orders", topics=None)]
                    ),
                    OffsetFetchResponse,
                    timeout_s=5,
                )
                assert answer.groups[0].error_code == 0
                await asyncio.sleep(0.02)
            assert not connection.closed
            return connection
        finally:
            connection.close()
            await connection.wait_closed()

    connection = asyncio.run(for_three_lifetimes())
    assert 0 < connection.session_lifetime_ms <= REAUTH_MS
    assert connection.authentications >= 3
