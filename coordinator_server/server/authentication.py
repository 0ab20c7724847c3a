"""Who a connection is: the listener's security settings and the SASL exchange of one
connection, as Kafka's `SaslServerAuthenticator` runs it.

`ListenerSecurity` is what the listener was configured with (Kafka's `security.protocol`
of the listener, `sasl.enabled.mechanisms`, `ssl.client.auth`, `connections.max.reauth.ms`,
`connection.failed.authentication.delay.ms`, `sasl.server.max.receive.size`).

`SaslExchange` is one connection's state machine, without I/O: the connection hands it the
SASL requests (and asks it whether any other request may go through) and acts on the
`SaslStep` it answers. Kafka's order:

- before authentication: ApiVersions (any number of times), then SaslHandshake naming an
  enabled mechanism, then SaslAuthenticate rounds until the mechanism is done. Anything
  else, or a SaslHandshake after the handshake, closes the connection without an answer
  (Kafka's "Unexpected Kafka request ... during SASL handshake").
- a refused handshake (UNSUPPORTED_SASL_MECHANISM) or a failed authentication
  (SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE) is answered and the connection closed,
  both after `connection.failed.authentication.delay.ms` (KIP-306): a client guessing
  passwords gets one guess per delay per connection.
- once authenticated, the session lasts `session_lifetime_ms` (the smaller of
  `connections.max.reauth.ms` and what the credential allows, an OAUTHBEARER token's
  expiry; none when `connections.max.reauth.ms` is 0, as in Kafka). A client re-authenticates
  on the same connection (KIP-368) with a new SaslHandshake of the same mechanism, and must
  come out of it as the same principal; a request after the session has expired closes the
  connection. Without re-authentication, a SaslHandshake or SaslAuthenticate after the
  exchange is answered ILLEGAL_SASL_STATE and the connection kept, as Kafka's KafkaApis
  answers them (and so are they on a listener without SASL).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cryptography import x509

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.errors import ErrorCode
from coordinator_protocol.messages import Message
from coordinator_protocol.security import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from coordinator_server.authentication.sasl_server import (
    AuthenticationFailed,
    IllegalSaslState,
    SaslServer,
)
from coordinator_server.authentication.ssl_principal_mapper import SslPrincipalMapper

__all__ = [
    "SASL_API_KEYS",
    "ListenerSecurity",
    "SaslExchange",
    "SaslStep",
    "SecurityProtocol",
    "SslClientAuth",
    "certificate_principal",
    "illegal_sasl_state",
]

SASL_API_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
"""The APIs of the exchange, which the connection answers itself (they are its state)."""


class SecurityProtocol(enum.StrEnum):
    """Kafka's `security.protocol` of a listener."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


class SslClientAuth(enum.StrEnum):
    """Kafka's `ssl.client.auth`: whether a TLS client must show a certificate."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How the listener authenticates its clients."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    mechanisms: Mapping[str, Callable[[], SaslServer]] = field(default_factory=dict)
    """The enabled SASL mechanisms, each with what starts a connection's exchange of it."""
    ssl_principal: SslPrincipalMapper | None = None
    """Maps a TLS client certificate's subject to a principal's name; None when the listener
    asks for no certificate."""
    max_reauth_ms: int = 0
    failed_authentication_delay_ms: int = 100
    max_receive_bytes: int = 524_288
    """The largest frame a client may send before it is authenticated (Kafka's
    `sasl.server.max.receive.size`): a megabyte token never gets buffered."""

    @property
    def authenticates(self) -> bool:
        """Whether clients prove who they are (SASL or a required client certificate)."""
        return self.protocol.uses_sasl or self.ssl_principal is not None


class SaslStepKind(enum.Enum):
    ANSWER = "answer"
    """Answer `response`; the exchange goes on (or has just ended, `authenticated`)."""
    REFUSE = "refuse"
    """Answer `response` after the failed-authentication delay, then close."""
    CLOSE = "close"
    """Close without an answer (a request that does not belong in the exchange)."""


@dataclass(frozen=True, slots=True)
class SaslStep:
    kind: SaslStepKind
    response: Message | None = None
    reason: str = ""
    authenticated: bool = False
    """The exchange ended with the client authenticated (or re-authenticated) just now."""


class _ExchangeState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "reauthenticate"
    FAILED = "failed"


class SaslExchange:
    """One connection's SASL exchange (see the module's order)."""

    __slots__ = (
        "_mechanism",
        "_security",
        "_server",
        "_state",
        "expires_at",
        "principal",
        "reauthentications",
    )

    def __init__(self, security: ListenerSecurity) -> None:
        self._security = security
        self._state = _ExchangeState.HANDSHAKE
        self._server: SaslServer | None = None
        self._mechanism = ""
        self.principal = ""
        """Who the client is once authenticated ("" before)."""
        self.expires_at = 0.0
        """When the session ends, in the clock of `now` (0: never)."""
        self.reauthentications = 0

    @property
    def authenticated(self) -> bool:
        return self._state in (_ExchangeState.AUTHENTICATED, _ExchangeState.REAUTHENTICATE)

    @property
    def mechanism(self) -> str:
        return self._mechanism

    @property
    def failed(self) -> bool:
        """Refused: the connection only waits to answer so and close."""
        return self._state is _ExchangeState.FAILED

    def admits(self, api_key: int) -> bool:
        """Whether a request of `api_key` other than the exchange's own may be served now:
        only ApiVersions before authentication (and before the handshake)."""
        if self.authenticated:
            return True
        return api_key == ApiKey.API_VERSIONS and self._state is _ExchangeState.HANDSHAKE

    def expired(self, now: float) -> bool:
        """Whether the session has ended and the client has not re-authenticated."""
        return bool(self.expires_at) and now >= self.expires_at

    def handshake(self, request: SaslHandshakeRequest) -> SaslStep:
        state = self._state
        if state is _ExchangeState.AUTHENTICATED:
            if not self._security.max_reauth_ms:
                # Kafka's KafkaApis: answered ILLEGAL_SASL_STATE, the connection kept.
                return SaslStep(
                    SaslStepKind.ANSWER,
                    SaslHandshakeResponse(
                        error_code=ErrorCode.ILLEGAL_SASL_STATE,
                        mechanisms=list(self._security.mechanisms),
                    ),
                )
            reauthenticating = True
        elif state is _ExchangeState.HANDSHAKE:
            reauthenticating = False
        else:
            return SaslStep(SaslStepKind.CLOSE, reason=f"unexpected SaslHandshake ({state.value})")
        enabled = list(self._security.mechanisms)
        start = self._security.mechanisms.get(request.mechanism)
        if start is None:
            self._state = _ExchangeState.FAILED
            return SaslStep(
                SaslStepKind.REFUSE,
                SaslHandshakeResponse(
                    error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled
                ),
                reason=f"mechanism {request.mechanism!r} is not enabled",
            )
        if reauthenticating and request.mechanism != self._mechanism:
            self._state = _ExchangeState.FAILED
            return SaslStep(
                SaslStepKind.REFUSE,
                SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled),
                reason="the mechanism changed during re-authentication",
            )
        self._server = start()
        self._mechanism = request.mechanism
        self._state = (
            _ExchangeState.REAUTHENTICATE if reauthenticating else _ExchangeState.AUTHENTICATE
        )
        return SaslStep(SaslStepKind.ANSWER, SaslHandshakeResponse(mechanisms=enabled))

    def authenticate(self, request: SaslAuthenticateRequest, now: float) -> SaslStep:
        server = self._server
        if self._state is _ExchangeState.AUTHENTICATED:
            # Kafka's KafkaApis: answered ILLEGAL_SASL_STATE, the connection kept.
            return SaslStep(
                SaslStepKind.ANSWER,
                SaslAuthenticateResponse(
                    error_code=ErrorCode.ILLEGAL_SASL_STATE,
                    error_message="SaslAuthenticate after the client authenticated",
                ),
            )
        if server is None or self._state not in (
            _ExchangeState.AUTHENTICATE,
            _ExchangeState.REAUTHENTICATE,
        ):
            return SaslStep(
                SaslStepKind.CLOSE, reason=f"unexpected SaslAuthenticate ({self._state.value})"
            )
        try:
            challenge = server.evaluate(request.auth_bytes)
        except AuthenticationFailed as refused:
            return self._refuse(ErrorCode.SASL_AUTHENTICATION_FAILED, str(refused))
        except IllegalSaslState as refused:
            return self._refuse(ErrorCode.ILLEGAL_SASL_STATE, str(refused))
        if not server.complete:
            return SaslStep(SaslStepKind.ANSWER, SaslAuthenticateResponse(auth_bytes=challenge))
        principal = server.principal
        if self._state is _ExchangeState.REAUTHENTICATE and principal != self.principal:
            return self._refuse(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: cannot change principals during re-authentication",
            )
        lifetime_ms = self._session_lifetime_ms(server)
        self.expires_at = now + lifetime_ms / 1000 if lifetime_ms else 0.0
        if self._state is _ExchangeState.REAUTHENTICATE:
            self.reauthentications += 1
        self.principal = principal
        self._state = _ExchangeState.AUTHENTICATED
        self._server = None
        return SaslStep(
            SaslStepKind.ANSWER,
            SaslAuthenticateResponse(auth_bytes=challenge, session_lifetime_ms=lifetime_ms),
            authenticated=True,
        )

    def _session_lifetime_ms(self, server: SaslServer) -> int:
        """Kafka's rule: no re-authentication, no end of the session (even a token's expiry
        is not enforced); else the smaller of the setting and the credential's own bound."""
        max_reauth_ms = self._security.max_reauth_ms
        if not max_reauth_ms:
            return 0
        credential_ms = server.session_lifetime_ms
        if credential_ms is None:
            return max_reauth_ms
        # A credential that has already expired still gets a session that ends at once.
        return max(1, min(max_reauth_ms, credential_ms))

    def _refuse(self, code: ErrorCode, message: str) -> SaslStep:
        self._state = _ExchangeState.FAILED
        self._server = None
        return SaslStep(
            SaslStepKind.REFUSE,
            SaslAuthenticateResponse(error_code=code, error_message=message),
            reason=message,
        )


def illegal_sasl_state(request: Message) -> Message:
    """The answer to a SaslHandshake or SaslAuthenticate where no exchange is under way:
    ILLEGAL_SASL_STATE (Kafka's KafkaApis, on a listener without SASL or after the client
    authenticated)."""
    if isinstance(request, SaslHandshakeRequest):
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="this listener does not authenticate with SASL",
    )


def certificate_principal(transport: asyncio.BaseTransport, mapper: SslPrincipalMapper) -> str:
    """The principal of the TLS client certificate the connection's client showed ("" for
    none): its subject's distinguished name in RFC 2253's form, as Java's X500Principal
    writes it, mapped by `ssl.principal.mapping.rules`.

    Raises:
        NoMatchingRuleError: no rule maps the name (Kafka refuses such a client).
    """
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return ""
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ""
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + mapper.principal_name(subject)
