"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker serves them,
and the computations of a SCRAM credential that the rest of the server shares.

The exchange is Kafka's `ScramSaslServer`: client-first (`n,,n=user,r=nonce`, possibly
with Kafka's extensions such as `tokenauth=true`), server-first (the client's nonce with
ours after it, the user's salt and iteration count), client-final (channel binding, the
whole nonce, the proof), server-final (`v=` and the server's signature), then complete.
Any refusal ends it; a token after the end, passed or failed (a replayed client-final), is
IllegalSaslState. A stored credential of fewer than `MIN_ITERATIONS` is refused, as Kafka
refuses it.

Where this differs from Kafka (RFC 5802 says so, but for the last):
- the gs2 header may be `y,,` (the client could bind the channel but believes we cannot,
  which is so) as well as `n,,`; Kafka's parser takes `n` only. `p=` (channel binding
  required) is refused, as by Kafka.
- the channel binding of client-final must be the gs2 header the client sent (`c=biws` for
  `n,,`); Kafka does not look at it.
- the authorization id (`a=`) is decoded like the user name (`=2C`, `=3D`) before it is
  compared with it; Kafka compares it undecoded.
- the reserved `m=` attribute is refused at once (RFC 5802 says it MUST fail); Kafka skips
  it and then fails at the proof, having left it out of the message the proof signs.
- the message the proof signs is made of the messages as they were sent, extensions
  included; Kafka rebuilds it from what it parsed, which comes to the same for every
  message its own client sends.
- `tokenauth=true` (a delegation token's exchange) is refused: there are no delegation
  tokens here. Other extensions are parsed and ignored, as by Kafka.

A user without a credential: Kafka fails at client-first, before any salt is sent, with the
message it gives a wrong proof too ("Authentication failed during authentication due to
invalid credentials with SASL mechanism ..."; its internal "Invalid user credentials" never
reaches the client). That is what `ScramSaslServer` does by default, so the message cannot
tell an unknown user from a wrong password, but the step at which it comes can. Given an
`unknown_user_secret` (one per server, the same for every connection), it does what RFC 5802
(section 5.1) recommends instead: it answers with a stand-in salt derived from the secret
and the user name (the same on every attempt, shaped like the salts Kafka's tools make) and
fails at the proof, so an unknown user looks like a wrong password throughout.

What the client is told is Kafka's: its generic message for every refusal but an
authorization id other than the user's (Kafka's own message for that). The reason of a
refusal rides on the exception's `__cause__`, for the server's log only.

scramp, the SCRAM library, is not under the server: its server side refuses an
authorization id in the gs2 header, cannot parse Kafka's multi-letter extensions
(`tokenauth=`), and SASLprep-normalizes names and passwords, which Kafka does not (a
password's UTF-8 bytes go into Hi() as they are). Hi() is PBKDF2-HMAC with the hash's own
output length (RFC 5802, section 2.2), which `hashlib.pbkdf2_hmac` computes. The tests hold
this module to scramp's client and credentials where the two agree.

Pure: the randomness of a salt comes from the caller; only the server nonce is drawn here,
unless the caller gives where to draw it from.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from coordinator_server.authentication.sasl_server import (
    AuthenticationFailed,
    IllegalSaslState,
    ScramCredential,
    ScramCredentials,
)

__all__ = [
    "AUTHORIZATION_ID_MISMATCH",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "ScramSaslServer",
    "credential_from_password",
    "credential_from_salted_password",
    "salted_password",
]

SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS: Final = 4096
"""Kafka's least iteration count, for both mechanisms: a credential of fewer is refused."""
MAX_ITERATIONS: Final = 16384
"""Kafka's greatest iteration count that AlterUserScramCredentials accepts."""

AUTHORIZATION_ID_MISMATCH: Final = (
    "Authentication failed: Client requested an authorization id that is different from username"
)
"""Kafka's answer to an authorization id other than the user's own name."""

_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

# Kafka's ScramMessages: a nonce is printable ASCII but ','; an extension is letters, '=',
# a value (no ',', no NUL); a name is anything but ',' and NUL, with '=' only in =2C and =3D.
_NONCE: Final = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_EXTENSION: Final = re.compile(r"([A-Za-z]+)=([^,\x00]+)")
_SASLNAME: Final = re.compile(r"(?:[^=,\x00]|=2C|=3D)+")
_SASLNAME_ESCAPE: Final = re.compile(r"=2C|=3D")

_CLIENT_FIRST: Final = 0
_CLIENT_FINAL: Final = 1
_COMPLETE: Final = 2
_FAILED: Final = 3


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(
            f"not a SCRAM mechanism: {mechanism!r} (one of {', '.join(SCRAM_MECHANISMS)})"
        ) from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, iterations), with the mechanism's hash.

    The password goes in as its UTF-8 bytes, not SASLprep-normalized: Kafka's
    `ScramFormatter.normalize` is UTF-8 only, and a credential must match Kafka's clients.
    """
    name = _hash_name(mechanism)
    if iterations < 1:
        raise ValueError(f"an iteration count must be positive, not {iterations}")
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential to keep of a salted password (what AlterUserScramCredentials sends):
    its stored key and server key, never the salted password itself."""
    name = _hash_name(mechanism)
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(name, client_key).digest(),
        server_key=hmac.new(salted_password, b"Server Key", name).digest(),
        iterations=iterations,
    )


def credential_from_password(
    mechanism: str, password: str, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential of `password` with `salt` (random, from the caller) and `iterations`."""
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


@dataclass(frozen=True, slots=True)
class _ClientFirst:
    gs2_header: str
    authorization_id: str
    username: str
    nonce: str
    bare: str
    token_authentication: bool


@dataclass(frozen=True, slots=True)
class _ClientFinal:
    channel_binding: bytes
    nonce: str
    without_proof: str
    proof: bytes


class ScramSaslServer:
    """One connection's SCRAM exchange (a `SaslServer`), against `credentials`.

    `nonce` draws the server's nonce (printable ASCII but ','); by default 32 random URL-safe
    characters. `unknown_user_secret`, when given, makes an unknown user fail at the proof
    with a stand-in salt rather than at once, as Kafka does (see the module's docstring).
    """

    def __init__(
        self,
        mechanism: str,
        credentials: ScramCredentials,
        nonce: Callable[[], str] | None = None,
        *,
        unknown_user_secret: bytes | None = None,
    ) -> None:
        self._hash = _hash_name(mechanism)
        self._mechanism = mechanism
        self._credentials = credentials
        self._draw_nonce = nonce or _random_nonce
        if unknown_user_secret is not None and not unknown_user_secret:
            raise ValueError("unknown_user_secret must not be empty")
        self._unknown_user_secret = unknown_user_secret
        self._refusal = (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}"
        )
        self._state = _CLIENT_FIRST
        self._client_first: _ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._user_known = False
        self._username: str | None = None

    @property
    def mechanism(self) -> str:
        return self._mechanism

    @property
    def complete(self) -> bool:
        return self._state == _COMPLETE

    @property
    def principal(self) -> str:
        if self._state != _COMPLETE or self._username is None:
            raise IllegalSaslState(f"the {self._mechanism} exchange has not completed")
        return f"User:{self._username}"

    @property
    def session_lifetime_ms(self) -> int | None:
        # Only a delegation token's credential bounds a SCRAM session, and there are none.
        return None

    def evaluate(self, token: bytes) -> bytes:
        """Take client-first (answer server-first) or client-final (answer server-final).

        Raises:
            AuthenticationFailed: the message does not parse or its credentials are refused.
            IllegalSaslState: a token after the exchange ended, passed or failed.
        """
        state = self._state
        if state not in (_CLIENT_FIRST, _CLIENT_FINAL):
            raise IllegalSaslState(
                f"a {self._mechanism} token after the exchange "
                f"{'completed' if state == _COMPLETE else 'failed'}"
            )
        # Failed unless the token passes: whatever it raises ends the exchange.
        self._state = _FAILED
        try:
            if state == _CLIENT_FIRST:
                answer = self._take_client_first(token)
                self._state = _CLIENT_FINAL
            else:
                answer = self._take_client_final(token)
                self._state = _COMPLETE
        finally:
            if self._state != _CLIENT_FINAL:
                self._forget_exchange()
        return answer

    def _take_client_first(self, token: bytes) -> bytes:
        try:
            first = _parse_client_first(token)
        except ValueError as error:
            raise AuthenticationFailed(self._refusal) from ValueError(f"client-first: {error}")
        if first.token_authentication:
            raise AuthenticationFailed(self._refusal) from ValueError(
                "client-first asks for a delegation token (tokenauth=true)"
            )
        if first.authorization_id and first.authorization_id != first.username:
            raise AuthenticationFailed(AUTHORIZATION_ID_MISMATCH)
        credential = self._credentials.scram_credential(first.username, self._mechanism)
        self._user_known = credential is not None
        if credential is None:
            if self._unknown_user_secret is None:
                raise AuthenticationFailed(self._refusal) from ValueError(
                    f"no {self._mechanism} credential for {first.username!r}"
                )
            credential = _stand_in_credential(
                self._mechanism, first.username, self._unknown_user_secret
            )
        elif credential.iterations < MIN_ITERATIONS:
            raise AuthenticationFailed(self._refusal) from ValueError(
                f"the {self._mechanism} credential of {first.username!r} has "
                f"{credential.iterations} iterations, less than the minimum {MIN_ITERATIONS}"
            )
        server_nonce = self._draw_nonce()
        if _NONCE.fullmatch(server_nonce) is None:
            raise ValueError("the server nonce must be printable ASCII without ','")
        self._client_first = first
        self._credential = credential
        self._nonce = first.nonce + server_nonce
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _take_client_final(self, token: bytes) -> bytes:
        first = self._client_first
        credential = self._credential
        assert first is not None and credential is not None
        try:
            final = _parse_client_final(token)
        except ValueError as error:
            raise AuthenticationFailed(self._refusal) from ValueError(f"client-final: {error}")
        if not hmac.compare_digest(final.channel_binding, first.gs2_header.encode()):
            raise AuthenticationFailed(self._refusal) from ValueError(
                "client-final's channel binding is not the gs2 header sent"
            )
        if final.nonce != self._nonce:
            raise AuthenticationFailed(self._refusal) from ValueError(
                "client-final's nonce is not the client's and the server's"
            )
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        client_signature = hmac.new(credential.stored_key, auth_message, self._hash).digest()
        if len(final.proof) != len(client_signature):
            raise AuthenticationFailed(self._refusal) from ValueError(
                f"client-final's proof is {len(final.proof)} bytes long"
            )
        client_key = bytes(a ^ b for a, b in zip(final.proof, client_signature, strict=True))
        computed_stored_key = hashlib.new(self._hash, client_key).digest()
        proven = hmac.compare_digest(computed_stored_key, credential.stored_key)
        if not self._user_known:
            # The stand-in's check ran all the same, so that it costs what a real one does.
            raise AuthenticationFailed(self._refusal) from ValueError(
                f"no {self._mechanism} credential for {first.username!r}"
            )
        if not proven:
            raise AuthenticationFailed(self._refusal) from ValueError(
                f"a wrong proof for {first.username!r}"
            )
        server_signature = hmac.new(credential.server_key, auth_message, self._hash).digest()
        self._username = first.username
        return b"v=" + base64.b64encode(server_signature)

    def _forget_exchange(self) -> None:
        # Nothing of the credential outlives the exchange (Kafka's clearCredentials).
        self._client_first = None
        self._credential = None
        self._server_first = ""
        self._nonce = ""


def _random_nonce() -> str:
    return secrets.token_urlsafe(24)


def _stand_in_credential(mechanism: str, username: str, secret: bytes) -> ScramCredential:
    """An unknown user's credential: the same for every attempt at the name, and a salt
    shaped like those Kafka's tools draw (130 random bits in base 36, as text)."""
    seed = hmac.new(secret, f"{mechanism}\0{username}".encode(), "sha256").digest()
    salt = _base36(int.from_bytes(seed[:17], "big") >> 6).encode("ascii")
    key = hmac.new(secret, b"stored key\0" + seed, _HASHES[mechanism]).digest()
    return ScramCredential(salt=salt, stored_key=key, server_key=key, iterations=MIN_ITERATIONS)


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while True:
        number, digit = divmod(number, 36)
        out.append(digits[digit])
        if number == 0:
            return "".join(reversed(out))


def _decode_saslname(value: str, what: str) -> str:
    if _SASLNAME.fullmatch(value) is None:
        raise ValueError(f"{what} is empty or has a ',', a NUL or an '=' not in =2C or =3D")
    return _SASLNAME_ESCAPE.sub(lambda match: "," if match.group() == "=2C" else "=", value)


def _parse_client_first(token: bytes) -> _ClientFirst:
    """RFC 5802's client-first-message, raising ValueError (the reason) when it is not one
    this server takes."""
    text = token.decode("utf-8")
    flag, comma, rest = text.partition(",")
    authorization, second_comma, bare = rest.partition(",")
    if not comma or not second_comma:
        raise ValueError("no gs2 header")
    if flag.startswith("p="):
        raise ValueError("the client requires channel binding, which is not offered")
    if flag not in ("n", "y"):
        raise ValueError(f"gs2 flag {flag!r} is none of n, y and p=")
    authorization_id = ""
    if authorization:
        if not authorization.startswith("a="):
            raise ValueError("the gs2 header's second field is not a=")
        authorization_id = _decode_saslname(authorization[2:], "the authorization id")
    fields = bare.split(",")
    if fields[0].startswith("m="):
        raise ValueError("a mandatory extension (m=), which SCRAM says to refuse")
    if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r="):
        raise ValueError("not n=<user>,r=<nonce> after the gs2 header")
    username = _decode_saslname(fields[0][2:], "the user name")
    nonce = fields[1][2:]
    if _NONCE.fullmatch(nonce) is None:
        raise ValueError("the nonce is empty or not printable ASCII")
    extensions: dict[str, str] = {}
    for field in fields[2:]:
        extension = _EXTENSION.fullmatch(field)
        if extension is None:
            raise ValueError("an extension that is not <letters>=<value>")
        name, value = extension.groups()
        if name in extensions:
            raise ValueError(f"extension {name!r} twice")
        extensions[name] = value
    return _ClientFirst(
        gs2_header=f"{flag},{authorization},",
        authorization_id=authorization_id,
        username=username,
        nonce=nonce,
        bare=bare,
        # Java's Boolean.parseBoolean, as Kafka reads it: "true" in any case.
        token_authentication=extensions.get("tokenauth", "").lower() == "true",
    )


def _parse_client_final(token: bytes) -> _ClientFinal:
    """RFC 5802's client-final-message: `c=<binding>,r=<nonce>[,extensions],p=<proof>`,
    raising ValueError (the reason) when it is not one."""
    text = token.decode("utf-8")
    without_proof, separator, proof = text.rpartition(",p=")
    if not separator:
        raise ValueError("no proof (p=) at the end")
    fields = without_proof.split(",")
    if len(fields) < 2 or not fields[0].startswith("c=") or not fields[1].startswith("r="):
        raise ValueError("not c=<binding>,r=<nonce> before the proof")
    if any(_EXTENSION.fullmatch(field) is None for field in fields[2:]):
        raise ValueError("an extension that is not <letters>=<value>")
    try:
        channel_binding = base64.b64decode(fields[0][2:], validate=True)
        proof_bytes = base64.b64decode(proof, validate=True)
    except ValueError:
        raise ValueError("the channel binding or the proof is not base64") from None
    return _ClientFinal(
        channel_binding=channel_binding,
        nonce=fields[1][2:],
        without_proof=without_proof,
        proof=proof_bytes,
    )
