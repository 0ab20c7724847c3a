"""What a SASL mechanism's server side is to the listener, and the SCRAM credential every
SCRAM mechanism checks a client against.

A connection authenticating with SASL gets one `SaslServer` of the mechanism its
SaslHandshake named; each SaslAuthenticate's `auth_bytes` go to `evaluate`, whose answer is
the response's `auth_bytes`, until `complete`. Then `principal` is who the connection is
from here on, and `session_lifetime_ms` how long that may last (KIP-368).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ANONYMOUS",
    "AuthenticationFailed",
    "IllegalSaslState",
    "SaslServer",
    "ScramCredential",
    "ScramCredentials",
]

ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal of a connection nobody authenticated (a PLAINTEXT listener)."""


class AuthenticationFailed(Exception):
    """The client's credentials are refused: SASL_AUTHENTICATION_FAILED (58). The message
    goes to the client, so it says what failed without telling which part was wrong
    (never "no such user" against "wrong password")."""


class IllegalSaslState(Exception):
    """A token the exchange does not expect now (one more after the end, a first message
    where a final one belongs): ILLEGAL_SASL_STATE (34)."""


class SaslServer(Protocol):
    """One connection's exchange of one SASL mechanism."""

    @property
    def mechanism(self) -> str:
        """The mechanism's SASL name ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER")."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """Take the client's next token; return the challenge to send back (b"" for none).

        Raises:
            AuthenticationFailed: the credentials are refused.
            IllegalSaslState: the token does not belong at this step.
        """
        ...

    @property
    def complete(self) -> bool:
        """Whether the exchange has ended with the client authenticated."""
        ...

    @property
    def principal(self) -> str:
        """Who the client is, as Kafka names a principal ("User:alice"); valid once
        `complete`."""
        ...

    @property
    def session_lifetime_ms(self) -> int | None:
        """How long, at most, the credentials themselves allow this session from now (an
        OAUTHBEARER token's expiry), or None when they set no bound; valid once
        `complete`. The listener's `connections.max.reauth.ms` bounds it further."""
        ...


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of a SCRAM user (RFC 5802, section 3): never the password nor
    the salted password, only what checks a proof and proves the server."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class ScramCredentials(Protocol):
    """Where a SCRAM mechanism finds a user's credential."""

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of `user` for `mechanism` ("SCRAM-SHA-256"), None without one."""
        ...
