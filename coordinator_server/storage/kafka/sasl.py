"""Our own connections to Kafka (the log's produce path), secured as `KafkaSecurity` says:
TLS, then Kafka's SASL exchange (SaslHandshake v1, then SaslAuthenticate v1 with PLAIN
(RFC 4616) or SCRAM-SHA-256/512 (RFC 5802, RFC 7677)) before the connection is handed to
its protocol.

The exchange runs on a small protocol of its own; once the broker has accepted us, the
transport is handed to the caller's protocol (`set_protocol`), so the hot path reads and
writes the connection exactly as it does over PLAINTEXT: the security costs one exchange
per connection, nothing per request (TLS itself costs its encryption).

Errors that waiting does not mend (a certificate not trusted, credentials refused, a
mechanism the broker does not enable, a listener without SASL) raise KafkaSecurityError
with what to fix; others stay what they were (OSError, TimeoutError) and are retried.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
import ssl
import struct
from collections.abc import Callable, Generator
from typing import ClassVar, TypeVar, cast

from coordinator_protocol.errors import ErrorCode
from coordinator_server.storage.error_codes import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
)
from coordinator_server.storage.kafka.security import KafkaSecurity, KafkaSecurityError

__all__ = ["KafkaConnector", "ScramClient", "bootstrap_addresses"]

log = logging.getLogger(__name__)

P = TypeVar("P", bound=asyncio.BaseProtocol)
# A SASL mechanism's client: sends the broker's challenges in, takes our tokens out.
_Steps = Generator[bytes, bytes, None]

API_VERSIONS_API_KEY = 18
SASL_HANDSHAKE_API_KEY = 17
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_API_KEY = 36
SASL_AUTHENTICATE_VERSION = 1

# An exchange answers a few hundred bytes.
MAX_EXCHANGE_RESPONSE_BYTES = 1024 * 1024
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH_CODES = frozenset({62, 64})
# The broker's TLS alerts about our certificate (or its absence): OpenSSL's reasons.
_CLIENT_CERTIFICATE_REFUSED = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)

_HEADER = struct.Struct(">hhih")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class KafkaConnector:
    """Opens connections to brokers, secured as `security` says (TLS context built once)."""

    def __init__(self, security: KafkaSecurity, client_id: str) -> None:
        self.security = security
        self._client_id = client_id.encode()
        self._ssl_context = security.ssl_context()
        self._scram_cache: dict[tuple[bytes, int], bytes] = {}

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self._ssl_context

    async def connect(
        self, protocol_factory: Callable[[], P], host: str, port: int
    ) -> tuple[asyncio.Transport, P]:
        """A connection to host:port, authenticated, handed to a new `protocol_factory()`
        protocol. Raises KafkaSecurityError, or OSError / TimeoutError for what may pass."""
        loop = asyncio.get_running_loop()
        security = self.security
        try:
            if not security.uses_sasl:
                return await loop.create_connection(
                    protocol_factory, host, port, ssl=self._ssl_context
                )
            transport, exchange = await loop.create_connection(
                _Exchange, host, port, ssl=self._ssl_context
            )
            try:
                await self._authenticate(exchange, host, port)
            except BaseException:
                transport.abort()
                raise
        except ssl.SSLCertVerificationError as error:
            raise self._untrusted(host, port, error) from None
        except ssl.SSLError as error:
            raise self._refused_tls(host, port, error) from None
        protocol = protocol_factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        return transport, protocol

    async def check(self, host: str, port: int) -> None:
        """Connect and authenticate once, then close: what a start does to fail at once, with
        a clear reason, on settings that cannot work. Without SASL an ApiVersions request
        goes too: a broker that wants a client certificate may say so only then (TLS 1.3)."""
        transport, exchange = await self.connect(_Exchange, host, port)
        try:
            if not self.security.uses_sasl:
                await exchange.request(API_VERSIONS_API_KEY, 0, self._client_id, b"")
        except ssl.SSLError as error:
            raise self._refused_tls(host, port, error) from None
        finally:
            transport.close()

    async def check_bootstrap(self, bootstrap_servers: str, timeout_s: float) -> tuple[str, int]:
        """`check` the bootstrap servers in turn until one answers; its address. Raises
        KafkaSecurityError at once, or the last error when none answers."""
        unreachable: BaseException | None = None
        for host, port in bootstrap_addresses(bootstrap_servers):
            try:
                await asyncio.wait_for(self.check(host, port), timeout_s)
            except (OSError, TimeoutError) as error:
                unreachable = error
                continue
            return host, port
        assert unreachable is not None
        raise unreachable

    async def _authenticate(self, exchange: _Exchange, host: str, port: int) -> None:
        security = self.security
        mechanism = security.sasl_mechanism
        username = security.sasl_username
        password = security.sasl_password
        assert username is not None and password is not None
        where = f"the broker at {host}:{port}"
        body = _string(mechanism)
        answer = await exchange.request(
            SASL_HANDSHAKE_API_KEY, SASL_HANDSHAKE_VERSION, self._client_id, body
        )
        (error_code,) = _INT16.unpack_from(answer, 0)
        enabled = _read_strings(answer, 2)
        if error_code == UNSUPPORTED_SASL_MECHANISM:
            raise KafkaSecurityError(
                f"{where} does not enable SASL mechanism {mechanism} (it enables "
                f"{', '.join(enabled) or 'none'}): set kafka-sasl-mechanism to one of them"
            )
        if error_code == ILLEGAL_SASL_STATE:
            raise KafkaSecurityError(
                f"{where} does not take SASL on that listener: is it a PLAINTEXT or SSL "
                f"listener? (kafka-security-protocol is {security.security_protocol})"
            )
        if error_code != ErrorCode.NONE:
            raise KafkaSecurityError(f"{where} refused the SASL handshake: error {error_code}")
        if mechanism == "PLAIN":
            steps: _Steps = _plain(username, password.reveal())
        else:
            steps = ScramClient(mechanism, username, password.reveal(), self._scram_cache).steps()
        challenge: bytes | None = None
        while True:
            try:
                token = steps.send(challenge) if challenge is not None else next(steps)
            except StopIteration:
                return
            except ValueError as error:
                raise KafkaSecurityError(
                    f"{where} answered the {mechanism} exchange wrongly: {error}"
                ) from None
            answer = await exchange.request(
                SASL_AUTHENTICATE_API_KEY,
                SASL_AUTHENTICATE_VERSION,
                self._client_id,
                _INT32.pack(len(token)) + token,
            )
            error_code, message, challenge = _read_authenticate(answer)
            if error_code == SASL_AUTHENTICATION_FAILED:
                raise KafkaSecurityError(
                    f"{where} refused SASL authentication of user {username!r} with "
                    f"{mechanism}: {message or 'wrong user name or password'}"
                )
            if error_code != ErrorCode.NONE:
                raise KafkaSecurityError(
                    f"{where} refused SASL authentication of user {username!r} with "
                    f"{mechanism}: error {error_code} {message or ''}".rstrip()
                )

    def _refused_tls(self, host: str, port: int, error: ssl.SSLError) -> Exception:
        """A TLS alert about our client certificate as a KafkaSecurityError; any other TLS
        failure as it is (a broker restarting may cut a handshake short)."""
        if error.reason not in _CLIENT_CERTIFICATE_REFUSED:
            return error
        if self.security.ssl_certificate_location is None:
            hint = (
                "it may require a client certificate: give kafka-ssl-certificate-location and "
                "kafka-ssl-key-location"
            )
        else:
            certificate = self.security.ssl_certificate_location
            hint = f"it does not accept the client certificate {certificate}"
        return KafkaSecurityError(
            f"TLS: the broker at {host}:{port} refused the connection ({error.reason}): {hint}"
        )

    def _untrusted(
        self, host: str, port: int, error: ssl.SSLCertVerificationError
    ) -> KafkaSecurityError:
        reason = error.verify_message or _first_line(error)
        ca = self.security.ssl_ca_location
        if error.verify_code in _NAME_MISMATCH_CODES:
            hint = (
                f"the certificate does not name {host}; connect by a name it has, or set "
                "kafka-ssl-endpoint-identification-algorithm to none"
            )
        elif ca is None:
            hint = (
                "no kafka-ssl-ca-location is given, so only the system's CAs are trusted: "
                "give the CA that signed the broker's certificate"
            )
        else:
            hint = f"it is not signed by the CA in {ca} (kafka-ssl-ca-location)"
        return KafkaSecurityError(
            f"TLS: the certificate of the broker at {host}:{port} is not trusted: {reason}; {hint}"
        )


class _Exchange(asyncio.Protocol):
    """Requests one at a time before a connection is handed over (the SASL exchange, a
    start's check); each answer's body (after the correlation id) completes the request's
    future."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._waiting: asyncio.Future[bytes] | None = None
        self._transport: asyncio.Transport | None = None
        self._correlation_id = 0
        self._closed: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        # A TLS alert stays what it is: it may say why (a client certificate required).
        self._closed = (
            exc
            if isinstance(exc, ssl.SSLError)
            else ConnectionResetError(
                "the broker closed the connection before answering" + (f" ({exc})" if exc else "")
            )
        )
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_exception(self._closed)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) < 4:
            return
        (size,) = _INT32.unpack_from(self._buffer, 0)
        waiting = self._waiting
        if waiting is None or waiting.done():
            return
        if not 4 <= size <= MAX_EXCHANGE_RESPONSE_BYTES:
            waiting.set_exception(ConnectionError(f"an answer of {size} bytes to SASL"))
            return
        if len(self._buffer) < 4 + size:
            return
        payload = bytes(self._buffer[4 : 4 + size])
        del self._buffer[: 4 + size]
        (correlation_id,) = _INT32.unpack_from(payload, 0)
        if correlation_id != self._correlation_id:
            waiting.set_exception(
                ConnectionError(f"correlation id {correlation_id} while setting the connection up")
            )
            return
        waiting.set_result(payload[4:])

    async def request(self, api_key: int, version: int, client_id: bytes, body: bytes) -> bytes:
        if self._closed is not None:
            raise self._closed
        transport = self._transport
        assert transport is not None
        self._correlation_id += 1
        header = _HEADER.pack(api_key, version, self._correlation_id, len(client_id)) + client_id
        message = header + body
        self._waiting = asyncio.get_running_loop().create_future()
        transport.write(_INT32.pack(len(message)) + message)
        return await self._waiting


def bootstrap_addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    """The host:port pairs of a bootstrap list ("[::1]:9092" for IPv6)."""
    addresses = []
    for entry in bootstrap_servers.split(","):
        host, _, port = entry.strip().rpartition(":")
        if host and port.isdigit():
            addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError(f"no host:port in bootstrap servers {bootstrap_servers!r}")
    return addresses


def _plain(username: str, password: str) -> Generator[bytes, bytes, None]:
    # RFC 4616: authorization id (empty: the user's own), user name, password.
    yield b"\0" + username.encode() + b"\0" + password.encode()


class ScramClient:
    """The client side of SCRAM-SHA-256/512 (RFC 5802) as Kafka runs it: client-first,
    server-first, client-final, server-final (checked: the broker knew the password too).

    `cache` keeps the salted password per salt and iteration count: the broker's salt is
    fixed per credential, so reconnecting costs no second PBKDF2."""

    _HASHES: ClassVar[dict[str, str]] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        cache: dict[tuple[bytes, int], bytes] | None = None,
        nonce: str | None = None,
    ) -> None:
        self._hash = self._HASHES[mechanism]
        self._username = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._cache = {} if cache is None else cache

    def steps(self) -> Generator[bytes, bytes, None]:
        client_first_bare = f"n={self._username},r={self._nonce}"
        server_first = (yield f"n,,{client_first_bare}".encode()).decode()
        fields = _scram_fields(server_first)
        if "e" in fields:
            raise ValueError(f"error {fields['e']}")
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i")
        if not nonce.startswith(self._nonce) or salt is None or iterations is None:
            raise ValueError("a server-first message without our nonce, a salt or a count")
        client_final_bare = f"c=biws,r={nonce}"
        auth_message = f"{client_first_bare},{server_first},{client_final_bare}".encode()
        salted = self._salted(base64.b64decode(salt), int(iterations))
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_final = (
            yield f"{client_final_bare},p={base64.b64encode(proof).decode()}".encode()
        ).decode()
        fields = _scram_fields(server_final)
        if "e" in fields:
            raise ValueError(f"error {fields['e']}")
        server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        if not hmac.compare_digest(base64.b64decode(fields.get("v", "")), server_signature):
            raise ValueError("the server's signature does not match: it does not know us")

    def _salted(self, salt: bytes, iterations: int) -> bytes:
        key = (salt, iterations)
        salted = self._cache.get(key)
        if salted is None:
            salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
            self._cache[key] = salted
        return salted

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()


def _scram_fields(message: str) -> dict[str, str]:
    fields = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if sep:
            fields[name] = value
    return fields


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def _read_strings(payload: bytes, position: int) -> list[str]:
    """An array of strings (SaslHandshake's enabled mechanisms)."""
    if len(payload) < position + 4:
        return []
    (count,) = _INT32.unpack_from(payload, position)
    position += 4
    strings = []
    for _ in range(max(count, 0)):
        (length,) = _INT16.unpack_from(payload, position)
        position += 2
        strings.append(payload[position : position + length].decode(errors="replace"))
        position += length
    return strings


def _read_authenticate(payload: bytes) -> tuple[int, str | None, bytes]:
    """SaslAuthenticate v1's answer: error code, error message, auth bytes (then the
    session lifetime, unused: our connections are not re-authenticated)."""
    (error_code,) = _INT16.unpack_from(payload, 0)
    position = 2
    (length,) = _INT16.unpack_from(payload, position)
    position += 2
    message = None
    if length >= 0:
        message = payload[position : position + length].decode(errors="replace")
        position += length
    (size,) = _INT32.unpack_from(payload, position)
    position += 4
    auth_bytes = payload[position : position + max(size, 0)]
    return error_code, message, auth_bytes


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
