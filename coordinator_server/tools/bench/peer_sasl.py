"""The peer's connections secured as `ClientSecurity` says, in Kafka's own protocol.

aiokafka's connections (the peer's set-up, its members' joins) take the settings as aiokafka
names them (`aiokafka_settings`). The measured loops' raw connections run Kafka's SASL
exchange themselves (`open_kafka_secured`): SaslHandshake v1 names the mechanism, then
SaslAuthenticate v1 carries the client library's SASL mechanism (the same SCRAM as our
server's connections use) until the broker is satisfied, after which the transport is handed
to the loop's protocol, so the measured path is the same as over PLAINTEXT. Like our
server's, these connections do not authenticate again during a run (Kafka's
`connections.max.reauth.ms` is 0 by default: sessions do not expire).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Callable
from typing import Any, TypeVar, cast

from coordinator_client import ClientSecurity
from coordinator_client.rpc.sasl import authenticate
from coordinator_protocol.framing import FrameDecoder
from coordinator_protocol.messages import Message
from coordinator_protocol.security import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

P = TypeVar("P", bound=asyncio.Protocol)

_INT32 = struct.Struct(">i")
CLIENT_ID = "bench"


def aiokafka_settings(security: ClientSecurity | None) -> dict[str, Any]:
    """The keyword arguments of aiokafka's `create_conn` for `security` (none: PLAINTEXT)."""
    if security is None:
        return {}
    settings: dict[str, Any] = {
        "security_protocol": security.security_protocol,
        "ssl_context": security.ssl_context(),
    }
    if security.uses_sasl:
        password = security.sasl_password
        settings.update(
            sasl_mechanism=security.sasl_mechanism,
            sasl_plain_username=security.sasl_username,
            sasl_plain_password=None if password is None else password.reveal(),
        )
    return settings


async def open_kafka_secured(
    factory: Callable[[], P], host: str, port: int, security: ClientSecurity | None
) -> P:
    """A connection to a Kafka broker for the protocol `factory` makes, over TLS and
    authenticated with Kafka's SASL exchange as `security` says (None: PLAINTEXT) before
    the protocol sees it."""
    loop = asyncio.get_running_loop()
    ssl_context = None if security is None else security.ssl_context()
    server_hostname = host if ssl_context is not None else None
    if security is None or not security.uses_sasl:
        _, protocol = await loop.create_connection(
            factory, host, port, ssl=ssl_context, server_hostname=server_hostname
        )
        return protocol
    transport, exchange = await loop.create_connection(
        _KafkaSaslExchange, host, port, ssl=ssl_context, server_hostname=server_hostname
    )
    try:
        await authenticate(exchange.send, security.sasl_client(), where=f"{host}:{port}")
    except BaseException:
        transport.close()
        raise
    protocol = factory()
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    return protocol


class _KafkaSaslExchange(asyncio.Protocol):
    """The connection's protocol while it authenticates: the client library's SASL
    messages, sent as Kafka's SaslHandshake v1 and SaslAuthenticate v1 (aiokafka's protocol
    classes, whose answers start with the correlation id alone), one at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[Any, asyncio.Future[Any]]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the broker closed the connection"))
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        for payload in self._decoder.feed(data):
            correlation_id = _INT32.unpack_from(payload, 0)[0]
            request, future = self._pending.pop(correlation_id)
            if not future.done():
                try:
                    future.set_result(request.RESPONSE_TYPE.decode(payload[4:]))
                except Exception as error:
                    future.set_exception(error)

    async def send(self, request: Message, response_type: type[Message]) -> Message:
        from aiokafka.protocol.admin import SaslAuthenticateRequest_v1, SaslHandShakeRequest_v1

        kafka_request: Any
        if isinstance(request, SaslHandshakeRequest):
            kafka_request = SaslHandShakeRequest_v1(request.mechanism)
        elif isinstance(request, SaslAuthenticateRequest):
            kafka_request = SaslAuthenticateRequest_v1(request.auth_bytes)
        else:
            raise TypeError(f"not a SASL request: {type(request).__name__}")
        correlation_id = next(self._correlation)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (kafka_request, future)
        header = kafka_request.build_request_header(
            correlation_id=correlation_id, client_id=CLIENT_ID
        )
        message = header.encode() + kafka_request.encode()
        assert self.transport is not None
        self.transport.write(_INT32.pack(len(message)) + message)
        answer = await future
        response: Message
        if isinstance(request, SaslHandshakeRequest):
            response = SaslHandshakeResponse(
                error_code=answer.error_code, mechanisms=list(answer.enabled_mechanisms or ())
            )
        else:
            response = SaslAuthenticateResponse(
                error_code=answer.error_code,
                error_message=answer.error_message,
                auth_bytes=answer.sasl_auth_bytes or b"",
                session_lifetime_ms=answer.session_lifetime_ms,
            )
        if not isinstance(response, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
        return response
