"""SASL/PLAIN (RFC 4616) as Kafka's broker serves it, against the users of a users file.

The client sends one token, `authzid NUL authcid NUL passwd` in UTF-8, and the exchange
ends there. As Kafka's `PlainSaslServer`: an authorization id, when given, must be the user
name itself; an empty user name or password is refused; the principal is `User:<name>`.

The users come from the `--sasl-plain-users-file` (one `name:password` line per user). The
passwords stay in memory as the file gives them, as Kafka keeps PLAIN's passwords in its
JAAS configuration: PLAIN sends the password itself, so a hash kept instead would protect
the file at rest but not the exchange. Parsing (`parse_plain_users`) is apart from reading
(`read_plain_users`) so that everything but that one read is pure.

What the client is told follows what Kafka's broker tells it: "Invalid username or
password" both for a user the file lacks and for a wrong password (the two take the same
time: an unknown user is checked against a stand-in password), the authorization id's own
message when only that is wrong, and Kafka's generic message for a token that does not
parse, with the reason on the exception's `__cause__` for the server's log only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from coordinator_server.authentication.sasl_server import AuthenticationFailed, IllegalSaslState

__all__ = [
    "AUTHORIZATION_ID_MISMATCH",
    "INVALID_USERNAME_OR_PASSWORD",
    "PLAIN",
    "PlainSaslServer",
    "PlainUsers",
    "PlainUsersError",
    "parse_plain_users",
    "read_plain_users",
]

PLAIN: Final = "PLAIN"

INVALID_USERNAME_OR_PASSWORD: Final = "Authentication failed: Invalid username or password"
"""Kafka's answer to a PLAIN user it does not know and to a wrong password alike."""

AUTHORIZATION_ID_MISMATCH: Final = (
    "Authentication failed: Client requested an authorization id that is different from username"
)
"""Kafka's answer to an authorization id other than the user's own name."""

# Kafka answers a token its mechanism cannot make sense of with this message only, so that
# nothing of the token (or of the users) goes back to an unauthenticated client.
_INVALID_TOKEN: Final = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    f"mechanism {PLAIN}"
)

# What an unknown user's password is checked against, so that the check costs what a known
# user's does; no password digests to it.
_NO_PASSWORD_DIGEST: Final = bytes(32)


class PlainUsersError(ValueError):
    """A users file that does not parse. The message names the line, never its password."""


class PlainUsers:
    """The PLAIN users and their passwords, as a users file gives them."""

    __slots__ = ("_passwords",)

    def __init__(self, passwords: Mapping[str, str]) -> None:
        self._passwords: dict[str, bytes] = {
            name: password.encode() for name, password in passwords.items()
        }

    def __len__(self) -> int:
        return len(self._passwords)

    def __contains__(self, name: object) -> bool:
        return name in self._passwords

    def __iter__(self) -> Iterator[str]:
        return iter(self._passwords)

    def __repr__(self) -> str:
        # Never the passwords: a repr ends up in logs and tracebacks.
        return f"PlainUsers({len(self._passwords)} users)"

    def verify(self, name: str, password: bytes) -> bool:
        """Whether `name` is a user whose password is `password` (UTF-8). Takes the same
        time for a name the file lacks, and whatever the passwords' lengths: the digests of
        the two are what is compared, in constant time."""
        expected = self._passwords.get(name)
        given_digest = hashlib.sha256(password).digest()
        if expected is None:
            hmac.compare_digest(given_digest, _NO_PASSWORD_DIGEST)
            return False
        return hmac.compare_digest(given_digest, hashlib.sha256(expected).digest())


def parse_plain_users(text: str) -> PlainUsers:
    """The users of a `--sasl-plain-users-file`'s text: one `name:password` line per user.

    Blank lines and lines whose first non-blank character is `#` are skipped. The name is
    what comes before the first `:` (blanks around it dropped); the password is everything
    after it, to the end of the line, blanks included (a `\\r` ending the line is not part
    of it). Raises PlainUsersError, naming the line, for a line without `:`, an empty name,
    an empty password or a name given twice.
    """
    passwords: dict[str, str] = {}
    for number, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.removesuffix("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, colon, password = line.partition(":")
        name = name.strip()
        # The line itself is never quoted: it may hold a password.
        if not colon:
            raise PlainUsersError(f"line {number}: expected name:password, found no ':'")
        if not name:
            raise PlainUsersError(f"line {number}: the user name is empty")
        if not password:
            raise PlainUsersError(f"line {number}: user {name!r} has an empty password")
        if name in passwords:
            raise PlainUsersError(f"line {number}: user {name!r} is given a second time")
        passwords[name] = password
    return PlainUsers(passwords)


def read_plain_users(path: str | os.PathLike[str]) -> PlainUsers:
    """The users of the users file at `path` (UTF-8). Raises OSError when it cannot be read,
    PlainUsersError (its message beginning with the path) when it does not parse."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return parse_plain_users(text)
    except PlainUsersError as error:
        raise PlainUsersError(f"{os.fspath(path)}: {error}") from None


class PlainSaslServer:
    """One connection's SASL/PLAIN exchange: one token, then complete (a `SaslServer`)."""

    def __init__(self, users: PlainUsers) -> None:
        self._users = users
        self._username: str | None = None
        self._ended = False

    @property
    def mechanism(self) -> str:
        return PLAIN

    @property
    def complete(self) -> bool:
        return self._username is not None

    @property
    def principal(self) -> str:
        if self._username is None:
            raise IllegalSaslState("the PLAIN exchange has not completed")
        return f"User:{self._username}"

    @property
    def session_lifetime_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes) -> bytes:
        """Check the client's one token; b"" (PLAIN has no challenge) once it passes.

        Raises:
            AuthenticationFailed: the token does not parse, or its credentials are refused.
            IllegalSaslState: a token after the exchange ended (passed or failed).
        """
        if self._ended:
            raise IllegalSaslState("a SASL/PLAIN token after the exchange ended")
        self._ended = True
        authzid, username, password = _parse_token(token)
        if not self._users.verify(username, password.encode()):
            raise AuthenticationFailed(INVALID_USERNAME_OR_PASSWORD)
        # Checked after the password, as Kafka does: only the user learns of a mismatch.
        if authzid and authzid != username:
            raise AuthenticationFailed(AUTHORIZATION_ID_MISMATCH)
        self._username = username
        return b""


def _parse_token(token: bytes) -> tuple[str, str, str]:
    """authzid, authcid and password of RFC 4616's `[authzid] NUL authcid NUL passwd`."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed(_INVALID_TOKEN) from ValueError(
            "the SASL/PLAIN token is not UTF-8"
        )
    fields = text.split("\0")
    if len(fields) != 3:
        raise AuthenticationFailed(_INVALID_TOKEN) from ValueError(
            f"the SASL/PLAIN token has {len(fields)} NUL-separated fields, not 3"
        )
    authzid, username, password = fields
    if not username:
        raise AuthenticationFailed(_INVALID_TOKEN) from ValueError(
            "the SASL/PLAIN token's user name is empty"
        )
    if not password:
        raise AuthenticationFailed(_INVALID_TOKEN) from ValueError(
            "the SASL/PLAIN token's password is empty"
        )
    return authzid, username, password
