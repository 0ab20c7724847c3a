"""`--command-config FILE` (Kafka tools' option) on every admin command, the bench and the
pipeline: the tools authenticate to a SASL listener as the file says, a refusal exits 1 with
the server's words, and a file that cannot be used exits 2 naming the property, never a
secret."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from client_fake_server import FakeSasl
from security_tool_server import RunningServer, security_server

from coordinator_protocol.api_keys import ApiKey
from coordinator_server.cli import build_parser, main

pytestmark = pytest.mark.timeout(60)

PASSWORD = "n0t-in-argv-Pa55"


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with security_server(FakeSasl(users={"admin": PASSWORD})) as running:
        yield running


def command_config(tmp_path: Path, password: str = PASSWORD, **extra: str) -> Path:
    path = tmp_path / "admin.properties"
    lines = [
        "# as kafka-acls.sh --command-config takes it",
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\",
        f'    username="admin" password="{password}";',
        *(f"{name}={value}" for name, value in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def sessions(server: RunningServer) -> list[str | None]:
    assert server.fake.sasl is not None
    return [session.principal for session in server.fake.sasl.sessions.values()]


def test_acls_and_users_authenticate_as_the_file_says(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(command_config(tmp_path))
    bootstrap = ["--bootstrap-server", server.bootstrap, "--command-config", config]
    assert main(["acls", "--list", *bootstrap]) == 0
    assert main(["users", "list", *bootstrap]) == 0
    assert sessions(server) == ["User:admin", "User:admin"]
    assert server.fake.sasl is not None and server.fake.sasl.violations == []
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err


def test_groups_authenticate_as_the_file_says(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(command_config(tmp_path))
    code = main(
        ["groups", "list", "--bootstrap-server", server.bootstrap, "--command-config", config]
    )
    assert code == 0
    assert "orders" in capsys.readouterr().out
    assert sessions(server) == ["User:admin"]
    assert server.requests(ApiKey.LIST_GROUPS)


def test_a_refused_login_exits_1_with_the_servers_words_and_not_the_password(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(command_config(tmp_path, password="wrong-" + PASSWORD))
    assert main(["acls", "--list", "--bootstrap-server", server.bootstrap,
                 "--command-config", config]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "SASL_AUTHENTICATION_FAILED (58)" in err
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err
    assert PASSWORD not in err
    assert server.requests(ApiKey.DESCRIBE_ACLS) == []


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"ssl.truststore.password": PASSWORD}, "ssl.truststore.password"),
        ({"sasl.mechanism": "GSSAPI"}, "'GSSAPI' is not one of"),
    ],
)
def test_a_file_that_cannot_be_used_exits_2_naming_the_property(
    server: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: dict[str, str],
    complaint: str,
) -> None:
    config = str(command_config(tmp_path, **extra))
    for command in (["acls", "--list"], ["users", "list"], ["groups", "list"],
                    ["transactions", "list"]):  # fmt: skip
        code = main([*command, "--bootstrap-server", server.bootstrap, "--command-config", config])
        assert code == 2, command
        err = capsys.readouterr().err
        assert complaint in err and "--command-config" in err
        assert PASSWORD not in err
    assert server.fake.connections == 0


def test_a_missing_file_and_tls_given_twice_are_usage_errors(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing.properties")
    assert main(["acls", "--list", "--bootstrap-server", server.bootstrap,
                 "--command-config", missing]) == 2  # fmt: skip
    assert "cannot read" in capsys.readouterr().err
    config = str(command_config(tmp_path))
    assert main(["acls", "--list", "--bootstrap-server", server.bootstrap,
                 "--command-config", config, "--tls"]) == 2  # fmt: skip
    assert "not both" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ["groups", "describe", "g"],
        ["groups", "reset-offsets", "--group", "g", "--to-earliest"],
        ["transactions", "describe", "--transactional-id", "t"],
        ["acls", "--list"],
        ["users", "delete", "u", "--mechanism", "SCRAM-SHA-256"],
        ["bench", "commits"],
        ["analyze", "audit", "--data-dir", "d", "--server", "h:1"],
    ],
)
def test_every_tool_takes_command_config(command: list[str]) -> None:
    args = build_parser().parse_args([*command, "--command-config", "client.properties"])
    assert args.command_config == "client.properties"
