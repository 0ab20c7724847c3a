"""`coordinator-server users` against a scripted coordinator: the credential derived by the
tool (Kafka's salt, Hi() of RFC 5802), the password from a file or the terminal and never
from an option, on the wire, in the output or in an error, kafka-configs' output, and the exit
codes."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from security_tool_server import RunningServer, security_server

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request
from coordinator_server.cli import build_parser, main

pytestmark = pytest.mark.timeout(60)

PASSWORD = "Tr0ub4dor&3-unique"


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with security_server() as running:
        yield running


def users(server: RunningServer, *args: str) -> int:
    return main(["users", *args, "--bootstrap-server", server.bootstrap])


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "password"
    path.write_text(f"{PASSWORD}\nignored second line\n")
    return path


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_add_derives_the_credential_and_never_sends_the_password(
    server: RunningServer, password_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = users(
        server, "add", "alice", "--mechanism", "scram-sha-512", "--iterations", "8192",
        "--password-file", str(password_file),
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out == "Completed updating config for user alice.\n"
    (request,) = server.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    (upsertion,) = request.body["upsertions"]
    assert (upsertion["name"], upsertion["mechanism"], upsertion["iterations"]) == (
        "alice",
        2,
        8192,
    )
    salt = upsertion["salt"]
    # Kafka's salt: the base-36 digits of a random 130-bit number.
    assert salt.isalnum() and salt == salt.lower() and 20 <= len(salt) <= 26
    assert upsertion["salted_password"] == hashlib.pbkdf2_hmac(
        "sha512", PASSWORD.encode(), salt, 8192
    )
    wire = encode_request(RequestHeader(51, 0, 1, None), request.body)
    assert PASSWORD.encode() not in wire
    assert PASSWORD not in captured.out + captured.err


def test_add_asks_twice_on_a_terminal(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    typed = iter([PASSWORD, PASSWORD, PASSWORD, "a typo"])
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))
    assert users(server, "add", "bob", "--mechanism", "SCRAM-SHA-256") == 0
    (upsertion,) = server.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)[0].body["upsertions"]
    assert upsertion["iterations"] == 4096
    assert upsertion["salted_password"] == hashlib.pbkdf2_hmac(
        "sha256", PASSWORD.encode(), upsertion["salt"], 4096
    )
    capsys.readouterr()
    assert users(server, "add", "bob", "--mechanism", "SCRAM-SHA-256") == 1
    err = capsys.readouterr().err
    assert "the two passwords differ" in err
    assert PASSWORD not in err and "a typo" not in err
    assert len(server.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)) == 1


def test_add_without_a_terminal_or_a_file_is_refused(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{PASSWORD}\n"))
    assert users(server, "add", "bob", "--mechanism", "SCRAM-SHA-256") == 2
    assert "--password-file" in capsys.readouterr().err
    assert server.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS) == []


def test_no_option_takes_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    for option in ("--password", "--password=secret", "--pass"):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(
                ["users", "add", "alice", "--mechanism", "SCRAM-SHA-256", option]
            )
        assert exited.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["users", "add", "--help"])
    help_text = capsys.readouterr().out
    assert "--password-file" in help_text
    assert "--password " not in help_text


def test_an_empty_or_missing_password_file_exits_1(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    for path in (empty, tmp_path / "missing"):
        assert (
            users(server, "add", "a", "--mechanism", "SCRAM-SHA-256", "--password-file", str(path))
            == 1
        )
    assert "empty" in capsys.readouterr().err


def test_delete_and_list_speak_as_kafka_configs(
    server: RunningServer, password_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for user, mechanism in (
        ("alice", "SCRAM-SHA-256"),
        ("alice", "SCRAM-SHA-512"),
        ("bob", "SCRAM-SHA-256"),
    ):
        assert (
            users(
                server, "add", user, "--mechanism", mechanism, "--password-file", str(password_file)
            )
            == 0
        )
    capsys.readouterr()
    assert users(server, "list") == 0
    assert capsys.readouterr().out == (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=4096\n"
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096\n"
    )
    assert users(server, "delete", "alice", "--mechanism", "SCRAM-SHA-256") == 0
    assert capsys.readouterr().out == "Completed updating config for user alice.\n"
    (deletion,) = server.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)[-1].body["deletions"]
    assert deletion == {"name": "alice", "mechanism": 1}
    assert users(server, "list", "alice", "--json") == 0
    assert json.loads(capsys.readouterr().out) == [
        {"user": "alice", "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
    ]
    assert users(server, "list", "bob", "carol") == 1
    captured = capsys.readouterr()
    assert "user-principal 'bob'" in captured.out
    assert "user 'carol': RESOURCE_NOT_FOUND" in captured.err


def test_a_refused_credential_exits_1_with_the_servers_error(
    server: RunningServer, password_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.state.refuse[ApiKey.ALTER_USER_SCRAM_CREDENTIALS] = {
        "results": [
            {"user": "alice", "error_code": 93, "error_message": "Too few iterations: 1024"}
        ]
    }
    code = users(
        server, "add", "alice", "--mechanism", "SCRAM-SHA-256", "--iterations", "1024",
        "--password-file", str(password_file),
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "UNACCEPTABLE_CREDENTIAL (93): user 'alice': Too few iterations: 1024" in err
    assert PASSWORD not in err
