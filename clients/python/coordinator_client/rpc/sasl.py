"""The client side of Kafka's SASL exchange over the wire contract (Kafka's
`SaslClientAuthenticator`): SaslHandshake (17) names the mechanism, then SaslAuthenticate (36)
carries the mechanism's bytes until the server is satisfied.

The mechanisms (each a `SaslClient`, one per exchange):

- PLAIN (RFC 4616): one message, the user name and password in the clear (so only over TLS
  where the network is not trusted).
- SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the password never travels; the
  server proves it holds the user's credential too, and a server that cannot is refused.
- OAUTHBEARER (RFC 7628): a bearer token (a JWT) in the initial response; a server that
  refuses it sends an error challenge, which is answered with %x01 (as Kafka's client
  answers it), and the server then fails the exchange.

`authenticate` runs one exchange over any `send` (a `Connection`'s, or a raw connection's)
and returns the session lifetime the server granted (KIP-368: 0 when it sets none).

`salted_password` is SCRAM's Hi() (PBKDF2 with the mechanism's hash); `scram_upsertion`
derives the credential AlterUserScramCredentials sends, so the password itself never goes on
the wire.

Only the standard library (hashlib, hmac, secrets).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from coordinator_protocol.errors import (
    ApiError,
    ErrorCode,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    error_for_code,
)
from coordinator_protocol.messages import Message
from coordinator_protocol.security import (
    AlterUserScramCredentialsRequestUpsertion,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

__all__ = [
    "MECHANISMS",
    "SCRAM_DEFAULT_ITERATIONS",
    "SCRAM_HASHES",
    "SCRAM_MAX_ITERATIONS",
    "SCRAM_MIN_ITERATIONS",
    "OAuthBearerSaslClient",
    "PlainSaslClient",
    "SaslClient",
    "ScramSaslClient",
    "authenticate",
    "new_scram_salt",
    "salted_password",
    "scram_mechanism_number",
    "scram_upsertion",
]

SCRAM_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""Each SCRAM mechanism's hash function, as hashlib names it."""
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""The SASL mechanisms the client speaks."""
# Kafka's ScramMechanism bounds: a server asking for fewer iterations would make an
# eavesdropper's guessing cheap, so Kafka's client refuses it, and so does this one.
SCRAM_MIN_ITERATIONS: Final = 4096
SCRAM_MAX_ITERATIONS: Final = 16384
SCRAM_DEFAULT_ITERATIONS: Final = 4096
"""kafka-configs' default for a new SCRAM credential."""
_SCRAM_NUMBERS: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
# RFC 7628's separator of the key/value pairs of an OAUTHBEARER message.
_KVSEP: Final = "\x01"
# base64 of the GS2 header "n,,": no channel binding, no authorization identity.
_GS2_HEADER_B64: Final = "biws"


class SaslClient(Protocol):
    """One exchange of one SASL mechanism, seen from the client (Java's `SaslClient`)."""

    @property
    def mechanism(self) -> str:
        """The mechanism's SASL name, which SaslHandshake sends."""
        ...

    def initial_response(self) -> bytes:
        """The first message, sent in the first SaslAuthenticate."""
        ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The server's answer to our last message; returns the next message to send, or
        None when the client has nothing more to say.

        Raises:
            SaslAuthenticationFailedError: the server's answer proves it wrong (a SCRAM
                server that does not know the user) or refuses us (an OAUTHBEARER error
                challenge, once answered).
            IllegalSaslStateError: an answer the exchange does not expect now.
        """
        ...

    @property
    def complete(self) -> bool:
        """Whether the exchange ended with both sides satisfied."""
        ...


class PlainSaslClient:
    """PLAIN (RFC 4616): `\\0user\\0password`, once."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = f"\0{username}\0{password}".encode()
        self._sent = False
        self._complete = False

    def initial_response(self) -> bytes:
        self._sent = True
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if not self._sent or self._complete or challenge:
            raise IllegalSaslStateError("PLAIN: the server answered what PLAIN never expects")
        self._complete = True
        return None

    @property
    def complete(self) -> bool:
        return self._complete

    def __repr__(self) -> str:
        return "PlainSaslClient()"


class ScramSaslClient:
    """SCRAM-SHA-256 or SCRAM-SHA-512 (RFC 5802, RFC 7677): client-first, server-first,
    client-final, server-final; the server's signature is checked, so a server that does not
    hold the user's credential is refused.

    `cache` keeps the salted password per (salt, iterations): a credential's salt stays the
    same, so authenticating again (a new connection, a re-authentication) costs no second
    PBKDF2."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        cache: dict[tuple[bytes, int], bytes] | None = None,
    ) -> None:
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"{mechanism!r} is not a SCRAM mechanism")
        self.mechanism = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        # RFC 5802's saslname: "=" and "," escaped.
        self._username = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._cache = {} if cache is None else cache
        self._client_first_bare = f"n={self._username},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""
        self._step = 0

    def initial_response(self) -> bytes:
        self._step = 1
        return f"n,,{self._client_first_bare}".encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._step == 1:
            self._step = 2
            return self._client_final(challenge)
        if self._step == 2:
            self._check_server_final(challenge)
            self._step = 3
            return None
        raise IllegalSaslStateError(f"{self.mechanism}: a message after the exchange ended")

    @property
    def complete(self) -> bool:
        return self._step == 3

    def _client_final(self, challenge: bytes) -> bytes:
        server_first = _decode(challenge, self.mechanism)
        fields = _scram_fields(server_first)
        if "e" in fields:
            raise SaslAuthenticationFailedError(f"{self.mechanism}: the server: {fields['e']}")
        nonce, salt, count = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationFailedError(
                f"{self.mechanism}: the server's nonce does not extend ours"
            )
        if salt is None or not count.isdigit():
            raise SaslAuthenticationFailedError(
                f"{self.mechanism}: the server's first message has no salt or iteration count"
            )
        iterations = int(count)
        if iterations < SCRAM_MIN_ITERATIONS:
            raise SaslAuthenticationFailedError(
                f"{self.mechanism}: the server asks for {iterations} iterations, fewer than "
                f"the least Kafka allows ({SCRAM_MIN_ITERATIONS})"
            )
        try:
            salt_bytes = base64.b64decode(salt, validate=True)
        except ValueError:
            raise SaslAuthenticationFailedError(
                f"{self.mechanism}: the server's salt is not base64"
            ) from None
        client_final_bare = f"c={_GS2_HEADER_B64},r={nonce}"
        self._auth_message = ",".join(
            (self._client_first_bare, server_first, client_final_bare)
        ).encode()
        key = (salt_bytes, iterations)
        salted = self._cache.get(key)
        if salted is None:
            salted = salted_password(self.mechanism, self._password, salt_bytes, iterations)
            self._cache[key] = salted
        self._salted = salted
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = self._hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{client_final_bare},p={base64.b64encode(proof).decode()}".encode()

    def _check_server_final(self, challenge: bytes) -> None:
        fields = _scram_fields(_decode(challenge, self.mechanism))
        if "e" in fields:
            raise SaslAuthenticationFailedError(f"{self.mechanism}: the server: {fields['e']}")
        expected = self._hmac(self._hmac(self._salted, b"Server Key"), self._auth_message)
        try:
            given = base64.b64decode(fields.get("v", ""), validate=True)
        except ValueError:
            given = b""
        if not hmac.compare_digest(given, expected):
            raise SaslAuthenticationFailedError(
                f"{self.mechanism}: the server's signature does not match: it does not hold "
                "this user's credential"
            )

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()

    def __repr__(self) -> str:
        return f"ScramSaslClient({self.mechanism!r})"


class OAuthBearerSaslClient:
    """OAUTHBEARER (RFC 7628) with a token given whole (a JWT the application obtained).

    The initial response is `n,,\\x01auth=Bearer <token>\\x01\\x01`. A server that accepts
    the token answers nothing more; one that refuses it answers an error challenge (JSON:
    status, scope, openid-configuration), which is answered with %x01 so that the server
    ends the exchange with its error; the challenge's text is kept for the error raised."""

    mechanism = "OAUTHBEARER"

    def __init__(self, token: str) -> None:
        if not token or any(c in token for c in f"{_KVSEP}\r\n "):
            raise SaslAuthenticationFailedError(
                "OAUTHBEARER: the token is empty or holds spaces or control characters"
            )
        self._token = token
        self._step = 0
        self.server_error: str | None = None
        """The error challenge the server answered, if it refused the token."""

    def initial_response(self) -> bytes:
        self._step = 1
        return f"n,,{_KVSEP}auth=Bearer {self._token}{_KVSEP}{_KVSEP}".encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._step == 1:
            if not challenge:
                self._step = 3
                return None
            self.server_error = challenge.decode(errors="replace")
            self._step = 2
            return _KVSEP.encode()
        if self._step == 2:
            # The server should have failed the exchange after our %x01.
            raise SaslAuthenticationFailedError(
                f"OAUTHBEARER: the server refused the token: {self.server_error}"
            )
        raise IllegalSaslStateError("OAUTHBEARER: a message after the exchange ended")

    @property
    def complete(self) -> bool:
        return self._step == 3

    def __repr__(self) -> str:
        return "OAuthBearerSaslClient()"


async def authenticate(
    send: Callable[[Message, type[Message]], Awaitable[Message]],
    client: SaslClient,
    *,
    where: str,
) -> int:
    """Run one SASL exchange with `client` over `send` (a request and its response type, to
    its response); returns the session lifetime in ms the server granted (0: none).

    `where` names the server in errors ("127.0.0.1:9092").

    Raises:
        UnsupportedSaslMechanismError: the server does not enable the mechanism (the error
            names those it does).
        SaslAuthenticationFailedError: the credentials were refused (the server's
            error_message), or the server could not prove itself (SCRAM).
        IllegalSaslStateError: the server does not authenticate over SASL (its listener is
            PLAINTEXT or SSL), or the exchange went out of step.
    """
    mechanism = client.mechanism
    enabled = "none"
    try:
        handshake = await send(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse)
    except ApiError as e:
        code = int(e.code)
    else:
        assert isinstance(handshake, SaslHandshakeResponse)
        code = int(handshake.error_code)
        enabled = ", ".join(handshake.mechanisms) or enabled
    if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise UnsupportedSaslMechanismError(
            f"{where} does not enable the SASL mechanism {mechanism} (it enables: {enabled})"
        )
    if code in (ErrorCode.ILLEGAL_SASL_STATE, ErrorCode.UNSUPPORTED_VERSION):
        # A listener without SASL: Kafka's answers ILLEGAL_SASL_STATE, a server that does
        # not serve the API at all UNSUPPORTED_VERSION.
        raise IllegalSaslStateError(
            f"{where} does not take a SASL handshake ({ErrorCode(code).name}): is its "
            "listener PLAINTEXT or SSL?"
        )
    if code != ErrorCode.NONE:
        raise error_for_code(code, f"{where}: SaslHandshake for {mechanism}")
    token: bytes | None = client.initial_response()
    lifetime_ms = 0
    while token is not None:
        answer = await send(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse)
        assert isinstance(answer, SaslAuthenticateResponse)
        if answer.error_code != ErrorCode.NONE:
            message = answer.error_message or ErrorCode(answer.error_code).description
            server_error = getattr(client, "server_error", None)
            if server_error:
                message = f"{message} ({server_error})"
            raise error_for_code(
                answer.error_code, f"authentication to {where} with {mechanism} failed: {message}"
            )
        lifetime_ms = int(answer.session_lifetime_ms)
        token = client.evaluate_challenge(answer.auth_bytes)
    if not client.complete:
        raise IllegalSaslStateError(f"{where}: the {mechanism} exchange ended unfinished")
    return max(lifetime_ms, 0)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's Hi(Normalize(password), salt, i) (RFC 5802, section 2.2): PBKDF2 with the
    mechanism's hash, as long as one digest. The password is UTF-8 as Kafka takes it (no
    SASLprep)."""
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    hash_name = SCRAM_HASHES.get(mechanism)
    if hash_name is None:
        raise ValueError(f"{mechanism!r} is not one of {', '.join(SCRAM_HASHES)}")
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def new_scram_salt() -> bytes:
    """A random salt as Kafka's admin client makes one (`UserScramCredentialUpsertion`): the
    base-36 digits of a random 130-bit number, as bytes."""
    return _base36(secrets.randbits(130)).encode()


def scram_mechanism_number(mechanism: str) -> int:
    """Kafka's ScramMechanism number of a SCRAM mechanism's name (1 SCRAM-SHA-256, 2
    SCRAM-SHA-512)."""
    number = _SCRAM_NUMBERS.get(mechanism.upper())
    if number is None:
        raise ValueError(f"{mechanism!r} is not one of {', '.join(SCRAM_HASHES)}")
    return number


def scram_upsertion(
    user: str,
    mechanism: str,
    password: str,
    *,
    iterations: int = SCRAM_DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> AlterUserScramCredentialsRequestUpsertion:
    """The AlterUserScramCredentials upsertion that gives `user` a `mechanism` credential for
    `password`: a new random salt (unless given) and the salted password derived here, so
    that the password itself never goes on the wire."""
    name = mechanism.upper()
    number = scram_mechanism_number(name)
    salt = new_scram_salt() if salt is None else salt
    return AlterUserScramCredentialsRequestUpsertion(
        name=user,
        mechanism=number,
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(name, password, salt, iterations),
    )


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, remainder = divmod(number, 36)
        text = digits[remainder] + text
        if number == 0:
            return text


def _decode(message: bytes, mechanism: str) -> str:
    try:
        return message.decode()
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError(
            f"{mechanism}: the server's message is not UTF-8"
        ) from None


def _scram_fields(message: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if sep and name not in fields:
            fields[name] = value
    return fields
