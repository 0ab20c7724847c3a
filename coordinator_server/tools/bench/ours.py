"""Our server, driven over the wire contract with raw pipelined frames.

The load loops send pre-encoded frames: an envelope whose correlation id is patched into a
fixed-width slot, so sending a request costs a bytes join, not a msgpack encoding. Every
response a read brings in is matched, and the requests that replace them go out in one write.

With `--command-config` every connection to our server is secured as it says
(`open_secured`): TLS, then the client library's SASL exchange on a small protocol of its
own, after which the transport is handed to the bench's protocol, so the measured path is the
same as over PLAINTEXT. These raw connections do not authenticate again: a server granting
sessions a lifetime (KIP-368) must grant one longer than a run.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import msgpack

from coordinator_client import ClientSecurity
from coordinator_client.rpc.sasl import authenticate
from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request, split_response
from coordinator_protocol.framing import FrameDecoder, encode_frame
from coordinator_protocol.messages import Message, parse_response
from coordinator_server.tools.bench.stats import LoadResult

P = TypeVar("P", bound=asyncio.Protocol)

_CORRELATION = struct.Struct(">i")
_LENGTH = struct.Struct(">I")
CLIENT_ID = "bench"


class RequestTemplate:
    """A request frame with room for any correlation id: the bytes before and after it.

    msgpack accepts an int32 encoding of any int32, so the correlation id always takes the
    same five bytes (0xd2 and four bytes) and the frame length never changes.
    """

    __slots__ = ("head", "tail")

    def __init__(self, api_key: int, body: dict[str, Any], client_id: str = CLIENT_ID) -> None:
        packer = msgpack.Packer(use_bin_type=True)
        payload: bytes = (
            b"\x95"
            + packer.pack(api_key)
            + packer.pack(0)
            + b"\xd2\x00\x00\x00\x00"
            + packer.pack(client_id)
            + packer.pack(body)
        )
        split = payload.index(b"\xd2\x00\x00\x00\x00") + 1
        self.head = _LENGTH.pack(len(payload)) + payload[:split]
        self.tail = payload[split + 4 :]

    def frame(self, correlation_id: int) -> bytes:
        correlation: bytes = _CORRELATION.pack(correlation_id)
        return self.head + correlation + self.tail


def first_error(body: dict[str, Any]) -> int:
    """The response's top-level error code, or the first non-zero one of its partitions."""
    code = body.get("error_code", 0)
    if code:
        return int(code)
    for topic in body.get("topics") or ():
        for partition in topic.get("partitions") or ():
            if partition.get("error_code"):
                return int(partition["error_code"])
    return 0


class WireConnection(asyncio.Protocol):
    """One connection; requests either wait for their answer (setup) or run in a loop."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._correlation = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(
        cls, host: str, port: int, security: ClientSecurity | None = None
    ) -> WireConnection:
        return await open_secured(cls, host, port, security)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("connection closed"))
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        for payload in self._decoder.feed(data):
            correlation_id, body = msgpack.unpackb(payload, raw=False)
            future = self._pending.pop(correlation_id, None)
            if future is not None and not future.done():
                future.set_result(body)

    def request(self, api_key: int, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        correlation_id = next(self._correlation)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        header = RequestHeader(api_key, 0, correlation_id, CLIENT_ID)
        assert self.transport is not None
        self.transport.write(encode_frame(encode_request(header, body)))
        return future

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


Parser = Callable[[bytes], tuple[int, Any]]
"""A response payload -> (correlation id, the answer for the checker)."""

Checker = Callable[[Any, int], int]
"""(answer, index of the request's template) -> error code (0: none)."""


def parse_ours(payload: bytes) -> tuple[int, Any]:
    correlation_id, body = msgpack.unpackb(payload, raw=False)
    return correlation_id, body


def check_ours(body: Any, template: int) -> int:
    return first_error(body)


class Template(Protocol):
    head: bytes
    tail: bytes


class Opener(Protocol):
    """Opens a loop's connection for the protocol `factory` makes, secured as `security`
    says before the protocol sees it: `open_secured` for our server, the peer's own for a
    Kafka broker."""

    async def __call__(
        self, factory: Callable[[], P], host: str, port: int, security: ClientSecurity | None
    ) -> P: ...


class ClosedLoop(asyncio.Protocol):
    """Keeps `inflight` requests outstanding on one connection of its own for a while.

    Each answer is timed and checked, and a new request replaces it at once (all those of one
    read in one write), until the loop stops; answers that arrive while `measuring` is off
    (warm-up) are not counted. Works for any protocol whose frames are a 4-byte length and a
    payload, with a 4-byte correlation id slot in the request templates.
    """

    def __init__(
        self,
        templates: list[Template],
        inflight: int,
        result: LoadResult,
        parse: Parser,
        check: Checker,
    ) -> None:
        self.templates = templates
        self.inflight = inflight
        self.result = result
        self.parse = parse
        self.check = check
        self.measuring = False
        self.stopping = False
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._sent: dict[int, tuple[float, int]] = {}
        self._next_index = itertools.cycle(range(len(templates))).__next__
        self._correlation = itertools.count(1).__next__

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        templates: list[Template],
        inflight: int,
        result: LoadResult,
        parse: Parser,
        check: Checker,
        security: ClientSecurity | None = None,
        opener: Opener | None = None,
    ) -> ClosedLoop:
        return await (opener or open_secured)(
            lambda: cls(templates, inflight, result, parse, check), host, port, security
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            if self.stopping:
                self.done.set_result(None)
            else:
                self.done.set_exception(ConnectionError("the connection closed mid-run"))

    def start(self) -> None:
        now = time.perf_counter()
        frames = [self._next_frame(now) for _ in range(self.inflight)]
        assert self.transport is not None
        self.transport.write(b"".join(frames))

    def _next_frame(self, now: float) -> bytes:
        correlation_id = self._correlation()
        index = self._next_index()
        self._sent[correlation_id] = (now, index)
        template = self.templates[index]
        return template.head + _CORRELATION.pack(correlation_id) + template.tail

    def data_received(self, data: bytes) -> None:
        payloads = self._decoder.feed(data)
        now = time.perf_counter()
        sent = self._sent
        result = self.result
        measuring = self.measuring
        check = self.check
        frames: list[bytes] = []
        parse = self.parse
        for payload in payloads:
            correlation_id, answer = parse(payload)
            started, index = sent.pop(correlation_id)
            if measuring:
                code = check(answer, index)
                result.latencies.append(now - started)
                result.requests += 1
                if code:
                    result.errors += 1
                    result.error_codes[code] = result.error_codes.get(code, 0) + 1
            if not self.stopping:
                frames.append(self._next_frame(now))
        if frames:
            assert self.transport is not None
            self.transport.write(b"".join(frames))
        if self.stopping and not sent and not self.done.done():
            self.done.set_result(None)

    def stop(self) -> None:
        self.stopping = True
        if not self._sent and not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def api_key_of(name: str) -> int:
    return int(ApiKey[name])


async def open_secured(
    factory: Callable[[], P], host: str, port: int, security: ClientSecurity | None
) -> P:
    """A connection to our server for the protocol `factory` makes, secured as `security`
    says (None: PLAINTEXT): over TLS, and authenticated before the protocol sees it."""
    loop = asyncio.get_running_loop()
    ssl_context = None if security is None else security.ssl_context()
    server_hostname = host if ssl_context is not None else None
    if security is None or not security.uses_sasl:
        _, protocol = await loop.create_connection(
            factory, host, port, ssl=ssl_context, server_hostname=server_hostname
        )
        return protocol
    transport, exchange = await loop.create_connection(
        _SaslExchange, host, port, ssl=ssl_context, server_hostname=server_hostname
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


class _SaslExchange(asyncio.Protocol):
    """The connection's protocol while it authenticates: one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[int, asyncio.Future[Message]]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the server closed the connection"))
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        for payload in self._decoder.feed(data):
            correlation_id, body = split_response(payload)
            api_key, future = self._pending.pop(correlation_id)
            if not future.done():
                try:
                    future.set_result(parse_response(api_key, 0, body))
                except Exception as error:
                    future.set_exception(error)

    async def send(self, request: Message, response_type: type[Message]) -> Message:
        correlation_id = next(self._correlation)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        api_key = int(request.API_KEY)
        self._pending[correlation_id] = (api_key, future)
        header = RequestHeader(api_key, request.API_VERSION, correlation_id, CLIENT_ID)
        assert self.transport is not None
        self.transport.write(encode_frame(encode_request(header, request)))
        response = await future
        if not isinstance(response, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
        return response
