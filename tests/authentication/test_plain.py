"""SASL/PLAIN's server side and its users file, on the facts of Kafka's PlainSaslServer."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_server.authentication import plain
from coordinator_server.authentication.plain import (
    AUTHORIZATION_ID_MISMATCH,
    INVALID_USERNAME_OR_PASSWORD,
    PlainSaslServer,
    PlainUsers,
    PlainUsersError,
    parse_plain_users,
    read_plain_users,
)
from coordinator_server.authentication.sasl_server import (
    AuthenticationFailed,
    IllegalSaslState,
    SaslServer,
)

KAFKAS_GENERIC_REFUSAL = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism PLAIN"
)

USERS = parse_plain_users("alice:alice-secret\nbob:b:o:b\ncarol:  spaced  \nzoë:pässwörd\n")


def server() -> PlainSaslServer:
    return PlainSaslServer(USERS)


@pytest.mark.parametrize(
    ("token", "principal"),
    [
        (b"\0alice\0alice-secret", "User:alice"),
        (b"alice\0alice\0alice-secret", "User:alice"),
        (b"\0bob\0b:o:b", "User:bob"),
        (b"\0carol\0  spaced  ", "User:carol"),
        ("\0zoë\0pässwörd".encode(), "User:zoë"),
    ],
)
def test_good_credentials_complete_with_the_users_principal(token: bytes, principal: str) -> None:
    sasl: SaslServer = server()
    assert sasl.mechanism == "PLAIN"
    assert not sasl.complete
    assert sasl.evaluate(token) == b""
    assert sasl.complete
    assert sasl.principal == principal
    assert sasl.session_lifetime_ms is None


@pytest.mark.parametrize(
    "token",
    [
        b"\0alice\0wrong",
        b"\0alice\0alice-secre",
        b"\0alice\0alice-secret ",
        b"\0carol\0spaced",
        b"\0Alice\0alice-secret",
        b"\0mallory\0alice-secret",
        b"\0mallory\0x",
    ],
)
def test_a_wrong_password_and_an_unknown_user_get_kafkas_same_message(token: bytes) -> None:
    sasl = server()
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(token)
    assert str(refused.value) == INVALID_USERNAME_OR_PASSWORD
    assert str(refused.value) == "Authentication failed: Invalid username or password"
    assert not sasl.complete


def test_an_unknown_user_is_checked_like_a_known_one(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real_compare = plain.hmac.compare_digest

    def compare(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(plain.hmac, "compare_digest", compare)
    for token in (b"\0alice\0wrong", b"\0mallory\0wrong", b"\0alice\0a-much-longer-password"):
        with pytest.raises(AuthenticationFailed):
            server().evaluate(token)
    # One comparison each, always of two equally long digests: whether the user exists and
    # how long either password is do not change what is compared.
    assert len(compared) == 3
    assert {len(a) for a, _ in compared} | {len(b) for _, b in compared} == {32}


def test_an_authorization_id_other_than_the_user_is_refused() -> None:
    sasl = server()
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(b"bob\0alice\0alice-secret")
    assert str(refused.value) == AUTHORIZATION_ID_MISMATCH
    assert "authorization id that is different from username" in str(refused.value)
    assert not sasl.complete


def test_with_a_wrong_password_the_authorization_id_is_not_looked_at() -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        server().evaluate(b"bob\0alice\0wrong")
    assert str(refused.value) == INVALID_USERNAME_OR_PASSWORD


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"\0\0alice-secret", "user name is empty"),
        (b"\0alice\0", "password is empty"),
        (b"alice\0alice\0", "password is empty"),
        (b"", "1 NUL-separated fields"),
        (b"alice-secret", "1 NUL-separated fields"),
        (b"alice\0alice-secret", "2 NUL-separated fields"),
        (b"\0alice\0alice-secret\0", "4 NUL-separated fields"),
        (b"\0alice\0alice-secret\0more", "4 NUL-separated fields"),
        (b"\0alice\0\xff\xfe", "not UTF-8"),
    ],
)
def test_a_malformed_token_gets_kafkas_generic_message(token: bytes, reason: str) -> None:
    sasl = server()
    with pytest.raises(AuthenticationFailed) as refused:
        sasl.evaluate(token)
    assert str(refused.value) == KAFKAS_GENERIC_REFUSAL
    assert reason in str(refused.value.__cause__)
    assert not sasl.complete


def test_a_second_token_after_success_is_an_illegal_state() -> None:
    sasl = server()
    sasl.evaluate(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslState):
        sasl.evaluate(b"\0alice\0alice-secret")
    assert sasl.principal == "User:alice"


def test_a_second_token_after_a_refusal_is_an_illegal_state() -> None:
    sasl = server()
    with pytest.raises(AuthenticationFailed):
        sasl.evaluate(b"\0alice\0wrong")
    with pytest.raises(IllegalSaslState):
        sasl.evaluate(b"\0alice\0alice-secret")
    assert not sasl.complete


def test_the_principal_is_unknown_before_completion() -> None:
    with pytest.raises(IllegalSaslState):
        _ = server().principal


# The users file.


def test_the_users_file_skips_blank_lines_and_comments_and_keeps_passwords_as_written() -> None:
    users = parse_plain_users(
        "# the team\n"
        "\n"
        "   \n"
        "  # indented comment\n"
        "alice:pa:ss#not a comment\r\n"
        "  bob  :  with blanks \n"
        "carol:x"
    )
    assert sorted(users) == ["alice", "bob", "carol"]
    assert len(users) == 3
    assert "alice" in users and "dave" not in users
    assert users.verify("alice", b"pa:ss#not a comment")
    assert not users.verify("alice", b"pa:ss#not a comment\r")
    assert users.verify("bob", b"  with blanks ")
    assert not users.verify("bob", b"with blanks")
    assert users.verify("carol", b"x")


def test_an_empty_users_file_has_no_users() -> None:
    assert len(parse_plain_users("")) == 0
    assert len(parse_plain_users("# nobody\n\n")) == 0


def test_the_users_repr_shows_no_password() -> None:
    users = parse_plain_users("alice:hunter2\n")
    assert "hunter2" not in repr(users)
    assert "1 users" in repr(users)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("alice:one\nhunter2-without-a-name\n", 2, "no ':'"),
        ("alice:one\n\n:hunter2\n", 3, "user name is empty"),
        ("   :hunter2\n", 1, "user name is empty"),
        ("# c\nalice:\n", 2, "empty password"),
        ("alice:hunter2\n# c\n\nalice:hunter3\n", 4, "second time"),
        ("alice:hunter2\n alice :hunter3\n", 2, "second time"),
    ],
)
def test_a_users_file_error_names_the_line_and_never_the_password(
    text: str, line: int, reason: str
) -> None:
    with pytest.raises(PlainUsersError) as error:
        parse_plain_users(text)
    message = str(error.value)
    assert message.startswith(f"line {line}: ")
    assert reason in message
    assert "hunter" not in message
    assert isinstance(error.value, ValueError)


def test_read_plain_users_reads_utf8_and_prefixes_errors_with_the_path(tmp_path: Path) -> None:
    good = tmp_path / "users"
    good.write_text("zoë:pässwörd\r\nalice:one\r\n", encoding="utf-8")
    users = read_plain_users(good)
    assert isinstance(users, PlainUsers)
    assert users.verify("zoë", "pässwörd".encode())
    assert users.verify("alice", b"one")
    assert PlainSaslServer(users).evaluate("\0zoë\0pässwörd".encode()) == b""

    bad = tmp_path / "bad"
    bad.write_text("alice:hunter2\nalice:hunter3\n", encoding="utf-8")
    with pytest.raises(PlainUsersError) as error:
        read_plain_users(str(bad))
    assert str(error.value).startswith(f"{bad}: line 2: ")
    assert "hunter" not in str(error.value)

    with pytest.raises(OSError):
        read_plain_users(tmp_path / "missing")
