"""SASL OAUTHBEARER (RFC 7628), the server side, validating JWT access tokens as Kafka's
`OAuthBearerValidatorCallbackHandler` does with the settings of KIP-768.

Three parts, each usable alone:

- `Jwks` (and `load_jwks`, the one function here that reads a file): the identity
  provider's public signing keys, by `kid`, as `sasl.oauthbearer.jwks.endpoint.url` names
  them with a `file:` URL. Fetching an `https:` JWKS, and refreshing it, is the caller's.
- `OAuthBearerValidator`: one token checked against the keys and an
  `OAuthBearerValidatorConfig` at a given time: its structure, algorithm, key, signature,
  `exp`, `iat`, `nbf`, `aud`, `iss`, subject and scope claims. The time is an argument, so
  that the validator holds no clock.
- `OAuthBearerSaslServer`: one connection's exchange. It parses the client's initial
  response as Kafka's `OAuthBearerClientInitialResponse` does and answers a refused token
  the way Kafka's `OAuthBearerSaslServer` does: an RFC 7628 error challenge
  (`{"status":"invalid_token"}`), then the failure once the client acknowledges it with
  its dummy `\\x01` response.

Facts of Kafka (its jose4j consumer) that carry over:

- `exp` and `iat` are required; the clock skew widens every time check.
- without `sasl.oauthbearer.expected.audience`, a token that carries an `aud` claim is
  refused (jose4j's default audience check, which Kafka does not turn off); a token
  without one passes.
- the subject claim must be a string; it is trimmed, and must not then be empty.
- a scope claim of another type than a string or a list means no scopes; a scope that is
  empty, or a duplicate, refuses the token.
- an authorization id in the initial response must be the token's principal name.

Beyond Kafka: only public-key signature algorithms are accepted (a JWKS of public keys
cannot safely verify HMAC, and `none` verifies nothing); a scope string is split on spaces
(RFC 6749, section 3.3) where Kafka keeps it as one scope; `nbf` and `iat` in the future
beyond the skew are refused; an authorization id's `=2C` and `=3D` are decoded (RFC 5801)
before the comparison.

Every refusal is an `AuthenticationFailed` whose message goes to the client: it says which
check failed and never repeats the token or a claim's value.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

import jwt

from coordinator_server.authentication.sasl_server import AuthenticationFailed, IllegalSaslState

__all__ = [
    "DEFAULT_ALGORITHMS",
    "MECHANISM",
    "Jwks",
    "OAuthBearerClientInitialResponse",
    "OAuthBearerSaslServer",
    "OAuthBearerValidator",
    "OAuthBearerValidatorConfig",
    "ValidatedToken",
    "load_jwks",
    "parse_client_initial_response",
]

MECHANISM: Final = "OAUTHBEARER"

_RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_EC_ALGORITHMS: Final = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_OKP_CURVES: Final = frozenset({"Ed25519", "Ed448"})

DEFAULT_ALGORITHMS: Final = frozenset({*_RSA_ALGORITHMS, *_EC_ALGORITHMS.values(), "EdDSA"})
"""The JWS algorithms a token may be signed with: the public-key signatures jose4j verifies
for Kafka. These are also all that may be allowed."""

_JWS: Final = jwt.PyJWS(algorithms=sorted(DEFAULT_ALGORITHMS))
"""A JWS decoder that knows no other algorithm, so that nothing the header says can make
it verify with HMAC or with nothing at all."""

_PUBLIC_MEMBERS: Final = ("kty", "crv", "n", "e", "x", "y")
"""What of a JWK the key is made of. A private member (`d`, `p`, ...) published by mistake
is dropped, so that a key is only ever used to verify."""

_INVALID_TOKEN_CHALLENGE: Final = b'{"status":"invalid_token"}'
_CONTROL_A: Final = b"\x01"


@dataclass(frozen=True, slots=True)
class OAuthBearerValidatorConfig:
    """What a token is checked against: Kafka's `sasl.oauthbearer.*` settings of KIP-768."""

    expected_audiences: tuple[str, ...] = ()
    """`sasl.oauthbearer.expected.audience`: the token's `aud` must name one of them. Empty,
    a token must carry no `aud` at all (as in Kafka)."""
    expected_issuer: str | None = None
    """`sasl.oauthbearer.expected.issuer`: the token's `iss` must be exactly this; None, the
    issuer is not checked."""
    sub_claim_name: str = "sub"
    """`sasl.oauthbearer.sub.claim.name`: the claim whose value is the principal name."""
    scope_claim_name: str = "scope"
    """`sasl.oauthbearer.scope.claim.name`: the claim holding the token's scopes."""
    clock_skew_seconds: int = 30
    """`sasl.oauthbearer.clock.skew.seconds`: how far the provider's clock and ours may
    differ, granted to each of `exp`, `nbf` and `iat`."""
    allowed_algorithms: frozenset[str] = DEFAULT_ALGORITHMS
    """The JWS `alg` values accepted (Kafka's jose4j takes any but `none`): a subset of
    `DEFAULT_ALGORITHMS`, never `none` nor an HMAC."""

    def __post_init__(self) -> None:
        # A list given where the tuple belongs would make the value mutable and unhashable.
        object.__setattr__(self, "expected_audiences", tuple(self.expected_audiences))
        object.__setattr__(self, "allowed_algorithms", frozenset(self.allowed_algorithms))
        for name, claim in (
            ("sasl.oauthbearer.sub.claim.name", self.sub_claim_name),
            ("sasl.oauthbearer.scope.claim.name", self.scope_claim_name),
        ):
            if not claim.strip():
                raise ValueError(f"{name} must not be empty")
        if self.clock_skew_seconds < 0:
            raise ValueError("sasl.oauthbearer.clock.skew.seconds must not be negative")
        if not self.allowed_algorithms:
            raise ValueError("at least one signature algorithm must be allowed")
        refused = sorted(self.allowed_algorithms - DEFAULT_ALGORITHMS)
        if refused:
            raise ValueError(
                f"signature algorithms {refused} are not accepted: only public-key signatures"
                f" ({', '.join(sorted(DEFAULT_ALGORITHMS))}) can be verified with a JWKS"
            )


@dataclass(frozen=True, slots=True)
class _SigningKey:
    """One key of the set: what it verifies with each algorithm it fits."""

    kid: str | None
    by_algorithm: Mapping[str, jwt.PyJWK]


class Jwks:
    """A JSON Web Key Set (RFC 7517, section 5) reduced to its public signing keys, by `kid`.

    Keys of other types (`oct`), for encryption (`use` other than `sig`, `key_ops` without
    `verify`), on curves other than P-256, P-384, P-521, Ed25519 and Ed448, or declaring an
    algorithm outside `DEFAULT_ALGORITHMS` are left out, as jose4j's key selection leaves
    out what cannot verify; a key of a kept type that does not parse refuses the whole set
    (as jose4j refuses it). A key without `kid` is allowed only as the set's single
    key, which then verifies any token.
    """

    __slots__ = ("_by_kid", "_unnamed")

    def __init__(self, keys: Sequence[_SigningKey]) -> None:
        self._by_kid = {key.kid: key for key in keys if key.kid is not None}
        unnamed = [key for key in keys if key.kid is None]
        assert len(self._by_kid) + len(unnamed) == len(keys), "duplicate kid"
        assert not unnamed or len(keys) == 1, "a key without kid beside others"
        self._unnamed = unnamed[0] if unnamed else None

    @classmethod
    def from_json(cls, document: str | bytes, source: str = "JWKS") -> Jwks:
        """The set in `document` (JSON text); `source` names it in errors.

        Raises:
            ValueError: not JSON, not a key set, a malformed key, or no usable key.
        """
        try:
            parsed: object = json.loads(document)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{source}: not a JSON document ({error})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"{source}: not a JWK set (a JSON object with 'keys')")
        return cls.from_dict(parsed, source)

    @classmethod
    def from_dict(cls, document: Mapping[str, object], source: str = "JWKS") -> Jwks:
        """The set in `document`, a parsed JWK set; `source` names it in errors.

        Raises:
            ValueError: not a key set, a malformed key, or no usable key.
        """
        entries = document.get("keys")
        if not isinstance(entries, list):
            raise ValueError(f"{source}: not a JWK set (a JSON object with 'keys')")
        keys: list[_SigningKey] = []
        for index, entry in enumerate(entries):
            key = _signing_key(entry, f"{source}: key {index}")
            if key is not None:
                keys.append(key)
        if not keys:
            raise ValueError(
                f"{source}: no usable signing key (an RSA, EC or OKP public key for signatures)"
            )
        kids = [key.kid for key in keys if key.kid is not None]
        duplicates = sorted({kid for kid in kids if kids.count(kid) > 1})
        if duplicates:
            raise ValueError(f"{source}: kid {duplicates} names more than one key")
        if len(kids) < len(keys) and len(keys) > 1:
            raise ValueError(
                f"{source}: a key without 'kid' is allowed only as the set's single key"
            )
        return cls(keys)

    @property
    def key_ids(self) -> frozenset[str]:
        """The `kid` of each key (the single key without one is not among them)."""
        return frozenset(self._by_kid)

    def __len__(self) -> int:
        return len(self._by_kid) + (self._unnamed is not None)

    def _key_for(self, kid: str | None) -> _SigningKey | None:
        """The key a token's header names; a single key without `kid` fits any name, as
        jose4j matches a key without one to any token (and the only key to a token
        without one)."""
        if self._unnamed is not None:
            return self._unnamed
        if kid is None:
            return next(iter(self._by_kid.values())) if len(self._by_kid) == 1 else None
        return self._by_kid.get(kid)


def _signing_key(entry: object, where: str) -> _SigningKey | None:
    """The key of one JWK, None when it is not a public signing key this server uses."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not a JSON object")
    kty = entry.get("kty")
    if not isinstance(kty, str):
        raise ValueError(f"{where} has no 'kty'")
    kid = entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise ValueError(f"{where} has a 'kid' that is not a string")
    where = where if kid is None else f"{where} (kid {kid!r})"
    use = entry.get("use")
    key_ops = entry.get("key_ops")
    if use is not None and use != "sig":
        return None
    if isinstance(key_ops, list) and "verify" not in key_ops:
        return None
    fitting = _algorithms_of(kty, entry.get("crv"))
    declared = entry.get("alg")
    if declared is not None:
        if not isinstance(declared, str):
            raise ValueError(f"{where} has an 'alg' that is not a string")
        fitting = tuple(algorithm for algorithm in fitting if algorithm == declared)
    if not fitting:
        return None
    public = {member: entry[member] for member in _PUBLIC_MEMBERS if member in entry}
    by_algorithm: dict[str, jwt.PyJWK] = {}
    for algorithm in fitting:
        try:
            by_algorithm[algorithm] = jwt.PyJWK(public, algorithm)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as error:
            raise ValueError(f"{where} is malformed ({error})") from None
    return _SigningKey(kid, by_algorithm)


def _algorithms_of(kty: str, crv: object) -> tuple[str, ...]:
    """The signature algorithms a key of this type (and curve) verifies."""
    if kty == "RSA":
        return _RSA_ALGORITHMS
    if kty == "EC" and isinstance(crv, str) and crv in _EC_ALGORITHMS:
        return (_EC_ALGORITHMS[crv],)
    if kty == "OKP" and crv in _OKP_CURVES:
        return ("EdDSA",)
    return ()


def load_jwks(location: str | os.PathLike[str]) -> Jwks:
    """The JWKS in a file: a path, or a `file:` URL as Kafka's
    `sasl.oauthbearer.jwks.endpoint.url` takes one (`file:///etc/kafka/jwks.json`).

    Raises:
        ValueError: a URL that is not a local `file:` one, or a file that is not a usable
            JWKS (the message names the file).
        OSError: the file cannot be read.
    """
    path = _jwks_path(location)
    return Jwks.from_json(path.read_bytes(), source=str(path))


def _jwks_path(location: str | os.PathLike[str]) -> Path:
    text = os.fspath(location)
    if not text.lower().startswith("file:"):
        return Path(text)
    url = urlsplit(text)
    if url.netloc not in ("", "localhost"):
        raise ValueError(f"{text}: a file: URL of another host than this one")
    if not url.path:
        raise ValueError(f"{text}: a file: URL without a path")
    return Path(unquote(url.path))


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    """What a valid token establishes."""

    principal_name: str
    """The subject claim (`sasl.oauthbearer.sub.claim.name`), trimmed."""
    scopes: frozenset[str]
    """The scope claim's scopes (`sasl.oauthbearer.scope.claim.name`); empty without one."""
    expires_at_s: float
    """`exp`, in seconds since the epoch."""
    issued_at_s: float
    """`iat`, in seconds since the epoch."""


class OAuthBearerValidator:
    """Kafka's broker-side validation of an OAuth access token (its
    `ValidatorAccessTokenValidator` over jose4j), with the keys and settings given once."""

    __slots__ = ("config", "jwks")

    def __init__(self, config: OAuthBearerValidatorConfig, jwks: Jwks) -> None:
        self.config = config
        self.jwks = jwks

    def validate(self, token: str, now_s: float) -> ValidatedToken:
        """The token's principal, scopes and times, if it is valid at `now_s` (seconds
        since the epoch).

        Raises:
            AuthenticationFailed: the token is refused; the message says why.
        """
        token = token.strip()
        if token.count(".") != 2 or not all(token.split(".")):
            raise AuthenticationFailed("token malformed: a JWT has three parts")
        try:
            header = _JWS.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthenticationFailed("token malformed: header unreadable") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self.config.allowed_algorithms:
            raise AuthenticationFailed("token algorithm not accepted")
        key = self.jwks._key_for(header.get("kid"))
        if key is None:
            raise AuthenticationFailed("token signing key unknown")
        verifier = key.by_algorithm.get(algorithm)
        if verifier is None:
            raise AuthenticationFailed("token signing key does not fit the token's algorithm")
        try:
            decoded = _JWS.decode_complete(token, key=verifier.key, algorithms=[algorithm])
        except jwt.InvalidSignatureError:
            raise AuthenticationFailed("signature invalid") from None
        except jwt.PyJWTError:
            raise AuthenticationFailed("token malformed: not a verifiable JWS") from None
        try:
            claims: object = json.loads(decoded["payload"])
        except (ValueError, RecursionError):
            raise AuthenticationFailed("token malformed: claims unreadable") from None
        if not isinstance(claims, dict):
            raise AuthenticationFailed("token malformed: claims unreadable")
        return self._check_claims(claims, now_s)

    def _check_claims(self, claims: Mapping[str, object], now_s: float) -> ValidatedToken:
        skew = self.config.clock_skew_seconds
        expires_at = _time_claim(claims, "exp")
        if expires_at is None:
            raise AuthenticationFailed("token has no valid expiry (exp)")
        if now_s - skew >= expires_at:
            raise AuthenticationFailed("token expired")
        issued_at = _time_claim(claims, "iat")
        if issued_at is None:
            raise AuthenticationFailed("token has no valid issue time (iat)")
        if issued_at > now_s + skew:
            raise AuthenticationFailed("token issued in the future")
        if "nbf" in claims:
            not_before = _time_claim(claims, "nbf")
            if not_before is None:
                raise AuthenticationFailed("token has an invalid not-before time (nbf)")
            if not_before > now_s + skew:
                raise AuthenticationFailed("token not yet valid")
        self._check_audience(claims.get("aud"))
        self._check_issuer(claims.get("iss"))
        return ValidatedToken(
            principal_name=self._principal_name(claims),
            scopes=self._scopes(claims),
            expires_at_s=expires_at,
            issued_at_s=issued_at,
        )

    def _check_audience(self, audience: object) -> None:
        if audience is None:
            if self.config.expected_audiences:
                raise AuthenticationFailed("audience not accepted: the token has none")
            return
        named = [audience] if isinstance(audience, str) else audience
        if not isinstance(named, list) or not all(isinstance(name, str) for name in named):
            raise AuthenticationFailed("audience claim malformed")
        # With no audience expected this refuses any: jose4j's default audience check,
        # which Kafka keeps (a token for somebody is not for a server that names nobody).
        if not any(name in self.config.expected_audiences for name in named):
            raise AuthenticationFailed("audience not accepted")

    def _check_issuer(self, issuer: object) -> None:
        if issuer is not None and not isinstance(issuer, str):
            raise AuthenticationFailed("issuer claim malformed")
        expected = self.config.expected_issuer
        if expected is not None and issuer != expected:
            raise AuthenticationFailed("issuer not accepted")

    def _principal_name(self, claims: Mapping[str, object]) -> str:
        name = self.config.sub_claim_name
        subject = claims.get(name)
        if not isinstance(subject, str) or not subject.strip():
            raise AuthenticationFailed(f"subject claim ({name}) missing or empty")
        return subject.strip()

    def _scopes(self, claims: Mapping[str, object]) -> frozenset[str]:
        name = self.config.scope_claim_name
        value = claims.get(name)
        if isinstance(value, str):
            listed: list[object] = list(value.strip().split(" "))
        elif isinstance(value, list):
            listed = list(value)
        else:
            return frozenset()
        scopes: set[str] = set()
        for scope in listed:
            if not isinstance(scope, str) or not scope.strip():
                raise AuthenticationFailed(f"scope claim ({name}) has an empty scope")
            if scope.strip() in scopes:
                raise AuthenticationFailed(f"scope claim ({name}) repeats a scope")
            scopes.add(scope.strip())
        return frozenset(scopes)


def _time_claim(claims: Mapping[str, object], name: str) -> float | None:
    """A NumericDate claim (RFC 7519, section 2), None when absent or not a time."""
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return float(value)


_SASLNAME: Final = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY: Final = r"[A-Za-z]+"
_VALUE: Final = r"[\x21-\x7e \t\r\n]+"
_CLIENT_INITIAL_RESPONSE: Final = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01"
)
_AUTH: Final = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_.a-zA-Z0-9]+)")
_SASLNAME_ESCAPE: Final = re.compile(r"=(2C|3D)")


@dataclass(frozen=True, slots=True)
class OAuthBearerClientInitialResponse:
    """The client's first message (RFC 7628, section 3.1), as Kafka reads it."""

    token: str
    """The bearer token of `auth=Bearer <token>`."""
    authorization_id: str
    """The GS2 header's `a=` authorization id, decoded; "" without one."""
    extensions: Mapping[str, str] = field(default_factory=dict)
    """The key=value pairs other than `auth` (Kafka's SASL extensions)."""


def parse_client_initial_response(response: bytes) -> OAuthBearerClientInitialResponse:
    """Kafka's `OAuthBearerClientInitialResponse` parse: a GS2 header `n,` with an optional
    `a=authzid`, then `,`, then `\\x01`-terminated key=value pairs of which `auth` is
    required, then a final `\\x01`.

    Raises:
        AuthenticationFailed: not such a message.
    """
    try:
        text = response.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message") from None
    match = _CLIENT_INITIAL_RESPONSE.fullmatch(text)
    if match is None:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for pair in match.group("kvpairs").split("\x01"):
        if pair:
            key, value = pair.split("=", 1)
            # As Kafka's map of them: a repeated key keeps its last value.
            pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: 'auth' not specified")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise AuthenticationFailed(
            "Invalid OAUTHBEARER client first message: invalid 'auth' format"
        )
    if auth_match.group("scheme").lower() != "bearer":
        raise AuthenticationFailed("Invalid scheme in OAUTHBEARER client first message")
    authzid = match.group("authzid") or ""
    return OAuthBearerClientInitialResponse(
        token=auth_match.group("token"),
        authorization_id=_SASLNAME_ESCAPE.sub(
            lambda escape: "," if escape.group(1) == "2C" else "=", authzid
        ),
        extensions=pairs,
    )


class _State(enum.Enum):
    AWAITING_RESPONSE = "awaiting the client's initial response"
    ERROR_SENT = "awaiting the client's acknowledgement of the error"
    COMPLETE = "complete"
    FAILED = "failed"


class OAuthBearerSaslServer:
    """One connection's OAUTHBEARER exchange (a `SaslServer`), as Kafka's
    `OAuthBearerSaslServer` runs it.

    A valid token completes the exchange at once. A token the validator refuses is answered
    with the error challenge `{"status":"invalid_token"}` (RFC 7628, section 3.2.2); the
    client's `\\x01` acknowledgement then fails the exchange with the validator's reason,
    while any other message is read as a new initial response (Kafka's rule). A malformed
    message, or an authorization id other than the token's principal, fails at once.
    """

    __slots__ = (
        "_clock",
        "_extensions",
        "_failure",
        "_lifetime_ms",
        "_state",
        "_token",
        "_validator",
    )

    def __init__(self, validator: OAuthBearerValidator, clock: Callable[[], float]) -> None:
        """`clock` is the time in seconds since the epoch, read once per message."""
        self._validator = validator
        self._clock = clock
        self._state = _State.AWAITING_RESPONSE
        self._failure = ""
        self._token: ValidatedToken | None = None
        self._extensions: Mapping[str, str] = {}
        self._lifetime_ms = 0

    @property
    def mechanism(self) -> str:
        return MECHANISM

    def evaluate(self, token: bytes) -> bytes:
        """Take the client's message; b"" once authenticated, the error challenge once the
        token is refused.

        Raises:
            AuthenticationFailed: a malformed message, a refused token acknowledged, or an
                authorization id other than the principal.
            IllegalSaslState: a message after the exchange has ended.
        """
        if self._state in (_State.COMPLETE, _State.FAILED):
            raise IllegalSaslState(f"OAUTHBEARER exchange already {self._state.value}")
        if self._state is _State.ERROR_SENT and token == _CONTROL_A:
            self._state = _State.FAILED
            raise AuthenticationFailed(self._failure)
        self._state = _State.AWAITING_RESPONSE
        try:
            response = parse_client_initial_response(token)
        except AuthenticationFailed:
            self._state = _State.FAILED
            raise
        now_s = self._clock()
        try:
            validated = self._validator.validate(response.token, now_s)
        except AuthenticationFailed as refused:
            self._failure = str(refused)
            self._state = _State.ERROR_SENT
            return _INVALID_TOKEN_CHALLENGE
        authorization_id = response.authorization_id
        if authorization_id and authorization_id != validated.principal_name:
            self._state = _State.FAILED
            raise AuthenticationFailed(
                "Authentication failed: the authorization id is not the token's principal name"
            )
        self._token = validated
        self._extensions = response.extensions
        self._lifetime_ms = max(0, int((validated.expires_at_s - now_s) * 1000))
        self._state = _State.COMPLETE
        return b""

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str:
        return f"User:{self.token.principal_name}"

    @property
    def session_lifetime_ms(self) -> int | None:
        """The token's remaining life when it was accepted (KIP-368)."""
        self._require_complete()
        return self._lifetime_ms

    @property
    def token(self) -> ValidatedToken:
        """The accepted token; valid once `complete` (Kafka's `OAUTHBEARER.token`)."""
        return self._require_complete()

    @property
    def extensions(self) -> Mapping[str, str]:
        """The SASL extensions of the accepted initial response (all accepted, as Kafka's
        validator callback handler accepts them); valid once `complete`."""
        self._require_complete()
        return self._extensions

    def _require_complete(self) -> ValidatedToken:
        if self._token is None or self._state is not _State.COMPLETE:
            raise IllegalSaslState("OAUTHBEARER exchange has not completed")
        return self._token
